#![no_main]
//! See `corral_fuzz_checks::envelope`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz_checks::envelope::check(data));
