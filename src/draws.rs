//! A deterministic xorshift stream for the unit tests of the kernels and the mask codec, which
//! compare a fast path with its reference on many drawn cases: the same draws on every run, so
//! a failure repeats.

/// Marsaglia's xorshift64 (shifts 13, 7, 17) from a nonzero seed.
pub(crate) struct Draws(u64);

impl Draws {
    /// A stream from `seed` (nonzero: zero would stay zero).
    pub(crate) fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "an xorshift seed must not be zero");
        Draws(seed)
    }

    /// The next state, all 64 bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// The next draw in `0..below` (`below > 0`), from the state's high bits.
    pub(crate) fn below(&mut self, below: usize) -> usize {
        (self.next_u64() >> 11) as usize % below
    }
}
