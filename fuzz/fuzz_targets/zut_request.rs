#![no_main]
//! See `corral_fuzz_checks::dialects`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz_checks::dialects::zut(data));
