#![no_main]
//! See `corral_fuzz::dialects`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| corral_fuzz::dialects::letscode(data));
