#![no_main]
//! See `corral_fuzz::envelope`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz::envelope::check(data));
