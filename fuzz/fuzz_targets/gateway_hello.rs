#![no_main]
//! See `corral_fuzz::hello`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz::hello::check(data));
