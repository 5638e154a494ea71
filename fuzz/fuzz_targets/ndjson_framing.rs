#![no_main]
//! See `corral_fuzz_checks::framing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz_checks::framing::check(data));
