//! Fuzz target `mask_conversions`: see tests/hostile for the decoding and the property. Run it
//! with an allocation limit, so that a copy of an input or an oversized reservation is a finding:
//! `cargo fuzz run --fuzz-dir tests/fuzz mask_conversions tests/fuzz/corpus/mask_conversions --
//! -malloc_limit_mb=64 -rss_limit_mb=1024`.
#![no_main]

#[path = "../../hostile/mod.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::run_target("mask_conversions", data));
