#![no_main]
//! See `corral_fuzz::framing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz::framing::check(data));
