//! A deterministic xorshift stream for the kernels' unit tests, which compare a fast path with
//! its reference on many drawn cases: the same draws on every run, so a failure repeats.

/// Marsaglia's xorshift64 (shifts 13, 7, 17) from a nonzero seed.
pub(super) struct Draws(u64);

impl Draws {
    /// A stream from `seed` (nonzero: zero would stay zero).
    pub(super) fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "an xorshift seed must not be zero");
        Draws(seed)
    }

    /// The next state, all 64 bits.
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// The next draw in `0..below` (`below > 0`), from the state's high bits.
    pub(super) fn below(&mut self, below: usize) -> usize {
        (self.next_u64() >> 11) as usize % below
    }
}
