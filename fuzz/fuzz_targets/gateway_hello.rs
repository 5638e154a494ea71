#![no_main]
//! See `corral_fuzz_checks::hello`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz_checks::hello::check(data));
