//! A property-based testing kit for downstream models (feature `proptest`).
//!
//! Add it for tests only: `cargo add --dev poolgrad --features proptest` (proptest comes with
//! it, re-exported as [`testing::proptest`](proptest)).
//!
//! - [`reference`](mod@reference): plain implementations of the six 2-D operations and the 3-D
//!   poolings (obvious loops, `f64` sums): the definition of the semantics.
//! - Strategies ([`adaptive_cases`], [`max_pool_cases`], [`mask_cases`]; for volumes
//!   [`adaptive3d_cases`] and [`max_pool3d_cases`] within [`VolumeShapes`]; for lines
//!   [`adaptive1d_cases`] and [`max_pool1d_cases`] within [`LineShapes`]; for max unpooling
//!   and the double backwards [`unpool1d_cases`], [`unpool2d_cases`] and [`unpool3d_cases`])
//!   that generate valid cases within the [`Shapes`], [`ParamBounds`] and [`Values`] you give,
//!   typed by rank (`Ix4` for a model on `Array4`, `Ix5` on `Array5`), each carrying its
//!   reference forward results and a gradient, so a backward can be tested directly. The default
//!   shapes cross a 16-channel block; failing cases shrink to small ones (each size shrinks on
//!   its own and the remaining values stay put).
//! - One-line checks on each case (`case.check_forward(..)`, `case.check_backward(..)`) that
//!   compare with the reference at the dtype's [`Tolerance`], check the gradient invariants (sum
//!   conserved, gradient only at arg-max positions) and linearity in `grad_output`, and return the
//!   first [`Mismatch`] (position, expected, actual) as a readable report. A `Mismatch` converts
//!   into proptest's `TestCaseError`, so `?` works inside `proptest!`.
//! - [`check_gradient`]: a finite-difference check of a whole user function (input to scalar
//!   loss) in `f32` or `f64`; [`finite_difference_check`]: the same for one pooling.
//!
//! Checking a hand-written pooling backward on 4-D cases in one line:
//!
//! ```
//! use ndarray::{Array4, Ix4};
//! use poolgrad::testing::proptest::prelude::*;
//! use poolgrad::testing::{max_pool_cases, ParamBounds, Shapes, Values};
//!
//! /// A user's backward: scatter the gradient to the arg-max positions.
//! fn my_backward(g: &Array4<f32>, input: &Array4<f32>, idx: &Array4<i64>) -> Array4<f32> {
//!     let mut gx = Array4::zeros(input.raw_dim());
//!     let w = input.dim().3;
//!     for ((n, c, oh, ow), &i) in idx.indexed_iter() {
//!         gx[[n, c, i as usize / w, i as usize % w]] += g[[n, c, oh, ow]];
//!     }
//!     gx
//! }
//!
//! proptest!(|(case in max_pool_cases::<f32, i64, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
//!     case.check_backward(|g| my_backward(g, &case.input, &case.indices))?;
//! });
//! ```

mod check;
mod gradcheck;
mod lines;
pub mod reference;
mod strategy;
mod unpooling;
mod volumes;

pub use check::{Mismatch, Tolerance, check_gradient_invariants, check_linearity, compare, compare_indices};
pub use gradcheck::{FiniteDifference, GradCheck, check_gradient, finite_difference_check};

pub use lines::{LineCase, LineShapes, adaptive1d_cases, max_pool1d_cases};
/// The proptest this kit is built on, so that `poolgrad` as a dev-dependency is all a test
/// needs: `use poolgrad::testing::proptest::prelude::*;`.
pub use proptest;
pub use strategy::{
    AdaptiveCase, MaskCase, MaxPoolCase, ParamBounds, Shapes, Values, adaptive_cases, mask_cases,
    max_pool_cases,
};
pub use unpooling::{UnpoolCase, unpool1d_cases, unpool2d_cases, unpool3d_cases};
pub use volumes::{Adaptive3dCase, MaxPool3dCase, VolumeShapes, adaptive3d_cases, max_pool3d_cases};
