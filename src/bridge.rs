//! What the framework bridges ([`candle`](crate::candle) and [`burn`](crate::burn)) share: which
//! pooling a recorded forward ran, and its backward, both on ndarray views of the framework's
//! buffers through the public free functions.

use ndarray::{ArrayD, ArrayViewD, IxDyn};

use crate::{ArgmaxIndex, MaxPool1dParams, MaxPool2dParams, MaxPool3dParams, PoolFloat, Pooled};

/// `mod name` of a bridge: one constant per public function, its full path (`$prefix` and the
/// function's name), with which every error of that function begins.
macro_rules! function_names {
    ($prefix:literal: $($f:ident),+ $(,)?) => {
        #[allow(non_upper_case_globals)]
        mod name {
            $(pub const $f: &str = concat!($prefix, stringify!($f));)+
        }
    };
}
pub(crate) use function_names;

/// A forward with flat indices, with its parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pooling {
    MaxPool(MaxPool2dParams),
    Adaptive([usize; 2]),
    MaxPool3d(MaxPool3dParams),
    Adaptive3d([usize; 3]),
    MaxPool1d(MaxPool1dParams),
    Adaptive1d(usize),
}

/// The backward of a [`Pooling`] (the indices carry the adaptive windows' sizes).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unpooling {
    MaxPool(MaxPool2dParams),
    Adaptive,
    MaxPool3d(MaxPool3dParams),
    Adaptive3d,
    MaxPool1d(MaxPool1dParams),
    Adaptive1d,
}

/// How a bridge's functions name the free functions' tensor arguments: the tensor pooled is
/// `x`, in the forwards (`input`) and the backwards (`self_`) alike.
pub(crate) const ARGUMENTS: [(&str, &str); 2] = [("input", "x"), ("self_", "x")];

/// An error of a free function called by the bridge function `op`, in `op`'s terms.
pub(crate) fn in_terms_of(op: &'static str) -> impl Fn(crate::Error) -> crate::Error {
    move |e| e.in_terms_of(op, &ARGUMENTS)
}

impl Pooling {
    /// The pooled values and `i64` indices of `x`, errors named for the bridge function `op`.
    pub(crate) fn forward<T: PoolFloat>(
        self,
        op: &'static str,
        x: &ArrayViewD<'_, T>,
    ) -> crate::Result<Pooled<T, i64, IxDyn>> {
        match self {
            Pooling::MaxPool(params) => crate::max_pool2d_with_indices(x, &params),
            Pooling::Adaptive(size) => crate::adaptive_max_pool2d(x, size),
            Pooling::MaxPool3d(params) => crate::max_pool3d_with_indices(x, &params),
            Pooling::Adaptive3d(size) => crate::adaptive_max_pool3d(x, size),
            Pooling::MaxPool1d(params) => crate::max_pool1d_with_indices(x, &params),
            Pooling::Adaptive1d(size) => crate::adaptive_max_pool1d(x, size),
        }
        .map_err(in_terms_of(op))
    }

    pub(crate) fn backward(self) -> Unpooling {
        match self {
            Pooling::MaxPool(params) => Unpooling::MaxPool(params),
            Pooling::Adaptive(_) => Unpooling::Adaptive,
            Pooling::MaxPool3d(params) => Unpooling::MaxPool3d(params),
            Pooling::Adaptive3d(_) => Unpooling::Adaptive3d,
            Pooling::MaxPool1d(params) => Unpooling::MaxPool1d(params),
            Pooling::Adaptive1d(_) => Unpooling::Adaptive1d,
        }
    }
}

impl Unpooling {
    /// The gradient of a backward with respect to its `grad_output`, given the gradient `gg` of
    /// its result (shaped as `x`): `gg` read at each output's arg-max (the double backwards).
    /// Errors named for the bridge function `op`. Only candle records it: burn's autodiff has no
    /// second order.
    #[cfg(feature = "candle")]
    pub(crate) fn double_backward<T: PoolFloat, I: ArgmaxIndex>(
        self,
        op: &'static str,
        gg: &ArrayViewD<'_, T>,
        indices: &ArrayViewD<'_, I>,
    ) -> crate::Result<ArrayD<T>> {
        match self {
            Unpooling::MaxPool(_) | Unpooling::Adaptive => crate::max_pool2d_double_backward(gg, indices),
            Unpooling::MaxPool3d(_) | Unpooling::Adaptive3d => crate::max_pool3d_double_backward(gg, indices),
            Unpooling::MaxPool1d(_) | Unpooling::Adaptive1d => crate::max_pool1d_double_backward(gg, indices),
        }
        .map_err(in_terms_of(op))
    }

    /// The gradient of `x`: `grad` added at `indices` of each plane, errors named for the bridge
    /// function `op`.
    pub(crate) fn backward<T: PoolFloat, I: ArgmaxIndex>(
        self,
        op: &'static str,
        grad: &ArrayViewD<'_, T>,
        x: &ArrayViewD<'_, T>,
        indices: &ArrayViewD<'_, I>,
    ) -> crate::Result<ArrayD<T>> {
        match self {
            Unpooling::MaxPool(params) => crate::max_pool2d_with_indices_backward(grad, x, indices, &params),
            Unpooling::Adaptive => crate::adaptive_max_pool2d_backward(grad, x, indices),
            Unpooling::MaxPool3d(params) => {
                crate::max_pool3d_with_indices_backward(grad, x, indices, &params)
            }
            Unpooling::Adaptive3d => crate::adaptive_max_pool3d_backward(grad, x, indices),
            Unpooling::MaxPool1d(params) => {
                crate::max_pool1d_with_indices_backward(grad, x, indices, &params)
            }
            Unpooling::Adaptive1d => crate::adaptive_max_pool1d_backward(grad, x, indices),
        }
        .map_err(in_terms_of(op))
    }
}

/// A max unpooling over 1, 2 or 3 axes, to its output's spatial size: what a bridge's recorded
/// unpooling runs forward, and whose transpose, the unpooling's backward, is its gradient (and
/// the other way round: both are linear, each the other's transpose).
#[cfg(any(feature = "candle", feature = "burn"))]
#[derive(Debug, Clone, Copy)]
pub(crate) enum MaxUnpool {
    Line(usize),
    Plane([usize; 2]),
    Volume([usize; 3]),
}

/// The spatial size of a tensor of shape `dims` for an operation over `N` axes: its last `N`
/// axes (0 for axes it lacks; the operation itself then reports the rank). What the unpoolings'
/// explicit backwards give as the size of the unpooling whose gradient they are.
#[cfg(any(feature = "candle", feature = "burn"))]
pub(crate) fn spatial<const N: usize>(dims: &[usize]) -> [usize; N] {
    let mut size = [0; N];
    let n = N.min(dims.len());
    size[N - n..].copy_from_slice(&dims[dims.len() - n..]);
    size
}

#[cfg(any(feature = "candle", feature = "burn"))]
impl MaxUnpool {
    /// `x` written at `indices` in an output of this size, errors named for the bridge
    /// function `op`.
    pub(crate) fn forward<T: PoolFloat, I: ArgmaxIndex>(
        self,
        op: &'static str,
        x: &ArrayViewD<'_, T>,
        indices: &ArrayViewD<'_, I>,
    ) -> crate::Result<ArrayD<T>> {
        match self {
            MaxUnpool::Line(size) => crate::max_unpool1d(x, indices, size),
            MaxUnpool::Plane(size) => crate::max_unpool2d(x, indices, size),
            MaxUnpool::Volume(size) => crate::max_unpool3d(x, indices, size),
        }
        .map_err(in_terms_of(op))
    }

    /// `grad` read at `indices` for the last of equal indices (the forward's transpose), errors
    /// named for the bridge function `op`.
    pub(crate) fn backward<T: PoolFloat, I: ArgmaxIndex>(
        self,
        op: &'static str,
        grad: &ArrayViewD<'_, T>,
        indices: &ArrayViewD<'_, I>,
    ) -> crate::Result<ArrayD<T>> {
        match self {
            MaxUnpool::Line(_) => crate::max_unpool1d_backward(grad, indices),
            MaxUnpool::Plane(_) => crate::max_unpool2d_backward(grad, indices),
            MaxUnpool::Volume(_) => crate::max_unpool3d_backward(grad, indices),
        }
        .map_err(in_terms_of(op))
    }
}
