//! A property-based testing kit for downstream models (feature `proptest`).
//!
//! - [`reference`](mod@reference): plain implementations of all six operations (obvious loops, `f64` sums):
//!   the definition of the semantics.
//! - Strategies ([`adaptive_cases`], [`max_pool_cases`], [`mask_cases`]) that generate valid
//!   cases within the [`Shapes`], [`ParamBounds`] and [`Values`] you give, each carrying its
//!   reference forward results and a gradient, so a backward can be tested directly.
//! - One-line checks on each case (`case.check_forward(..)`, `case.check_backward(..)`) that
//!   compare with the reference at the dtype's [`Tolerance`], check the gradient invariants (sum
//!   conserved, gradient only at arg-max positions) and linearity in `grad_output`, and return the
//!   first [`Mismatch`] (position, expected, actual) as a readable report. A `Mismatch` converts
//!   into proptest's `TestCaseError`, so `?` works inside `proptest!`.
//! - [`finite_difference_check`]: a gradient check for max pooling that is valid away from ties.
//!
//! Checking a hand-written pooling backward in one line:
//!
//! ```
//! use ndarray::ArrayD;
//! use poolgrad::testing::{max_pool_cases, ParamBounds, Shapes, Values};
//! use proptest::prelude::*;
//!
//! /// A user's backward: scatter the gradient to the arg-max positions.
//! fn my_backward(g: &ArrayD<f32>, input: &ArrayD<f32>, idx: &ArrayD<i64>) -> ArrayD<f32> {
//!     let mut gx = ArrayD::zeros(input.raw_dim());
//!     let s = input.shape();
//!     let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
//!     let outputs = g.len() / (gx.len() / (h * w));
//!     let gx_flat = gx.as_slice_mut().unwrap();
//!     for (e, (&gv, &i)) in g.iter().zip(idx.iter()).enumerate() {
//!         gx_flat[(e / outputs) * h * w + i as usize] += gv;
//!     }
//!     gx
//! }
//!
//! proptest!(|(case in max_pool_cases::<f32, i64>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
//!     case.check_backward(|g| my_backward(g, &case.input, &case.indices))?;
//! });
//! ```

mod check;
mod gradcheck;
pub mod reference;
mod strategy;

pub use check::{Mismatch, Tolerance, check_gradient_invariants, check_linearity, compare, compare_indices};
pub use gradcheck::{FiniteDifference, GradCheck, finite_difference_check};
pub use strategy::{
    AdaptiveCase, MaskCase, MaxPoolCase, ParamBounds, Shapes, Values, adaptive_cases, mask_cases,
    max_pool_cases,
};
