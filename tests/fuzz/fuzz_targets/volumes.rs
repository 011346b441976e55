//! Fuzz target `volumes`: see tests/hostile for the decoding and the property.
#![no_main]

#[path = "../../hostile/mod.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::run_target("volumes", data));
