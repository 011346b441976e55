//! Equality of results as the tests mean it where NaNs are involved: the same bits, or a NaN for
//! a NaN. poolgrad keeps a selected NaN's bits, but sums of NaNs, PyTorch's `bf16` kernels and
//! the f64 reference loops may each give another NaN, so a NaN's payload is not compared.
//! Shared by the tests' helpers, the hostile-input tests and the bridge tests.

/// `a` and `b` have the same bits, or both are NaN.
pub fn same_or_both_nan(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}
