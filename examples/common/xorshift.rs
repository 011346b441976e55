//! A deterministic xorshift generator, so that every run of the bridge examples and tests sees
//! the same values. Shared by `examples/*.rs` and `tests/common/bridge_cases.rs` through
//! `#[path]` (a directory without `main.rs` is not an example of its own).

/// `len` xorshift draws from `seed`, each mapped to a value by `to_value`.
pub fn draws(len: usize, seed: u64, to_value: impl Fn(u64) -> f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            to_value(s)
        })
        .collect()
}

/// Deterministic values in [-1, 1).
#[allow(dead_code)] // the bridge tests use only `draws`
pub fn noise(len: usize, seed: u64) -> Vec<f64> {
    draws(len, seed, |s| (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0)
}
