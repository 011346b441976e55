//! The crate's one error type.
//!
//! Every variant is structured: it names the operation (`op`), the argument (`arg`) and carries the
//! expected and the actual value, so callers can match on fields and people can read the message.

use core::fmt;

use crate::element::DType;

/// The operation of an error raised below the operation layer (the kernels, the mask codec),
/// where no function knows which operation it serves: the plan names it ([`Error::named`], from
/// the descriptor's `NAME`) before a caller sees it.
pub(crate) const UNNAMED: &str = "";

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can go wrong in `poolgrad`.
///
/// Shape and parameter errors are reported by phase 1 ([`Plan::new`](crate::Plan::new)), which,
/// like `aclnnXxxGetWorkspaceSize`, reads no tensor data. Index values are data: the CPU checks
/// each one as it uses it, so [`Error::IndexOutOfRange`] comes from phase 2
/// ([`Executor::run`](crate::Executor::run)), with the output zeroed. Otherwise phase 2 fails only for
/// device reasons.
///
/// Match on a variant to react to it, or print it: the message says the same as the fields.
///
/// ```
/// use ndarray::{Array3, array};
/// use poolgrad::Error;
/// let x = Array3::<f32>::zeros((1, 3, 3));
/// let g = Array3::<f32>::ones((1, 2, 2));
/// let idx = array![[[0i64, 1], [9, 4]]]; // 9 is outside the 3x3 plane
/// match poolgrad::adaptive_max_pool2d_backward(&g, &x, &idx) {
///     Err(Error::IndexOutOfRange { arg, position, value, plane, .. }) => {
///         assert_eq!((arg, position, value, plane), ("indices", vec![0, 1, 0], 9, 9));
///     }
///     other => panic!("expected an index error, got {other:?}"),
/// }
/// let e = poolgrad::adaptive_max_pool2d(&x, [0, 2]).unwrap_err();
/// assert!(matches!(e, Error::InvalidParameter { arg: "output_size", .. }));
/// println!("{e}"); // adaptive_max_pool2d: `output_size` ...
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor has a rank the operation does not accept.
    #[error("{op}: `{arg}` must have {expected} dimensions, got {got} (shape {shape:?})")]
    Rank {
        /// Operation or constructor that rejected the tensor.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// What ranks are accepted, in words.
        expected: &'static str,
        /// The rank given.
        got: usize,
        /// The shape given.
        shape: Vec<usize>,
    },

    /// A tensor's shape differs from the one the other arguments imply.
    #[error("{op}: `{arg}` has shape {got:?}, expected {expected:?}")]
    ShapeMismatch {
        /// Operation that rejected the tensor.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// The shape the other arguments imply.
        expected: Vec<usize>,
        /// The shape given.
        got: Vec<usize>,
    },

    /// A dimension that must be non-empty is zero.
    #[error("{op}: `{arg}` has shape {shape:?}, but its {axis} dimension must not be empty")]
    EmptyDimension {
        /// Operation that rejected the tensor.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// The axis that is empty (`"C"`, `"H"`, `"W"`, or `"Ho"`, `"Wo"` of a gradient).
        axis: &'static str,
        /// The shape given.
        shape: Vec<usize>,
    },

    /// A scalar or small-array parameter is out of range.
    #[error("{op}: `{arg}` is {got}, expected {expected}")]
    InvalidParameter {
        /// Operation that rejected the parameter.
        op: &'static str,
        /// Parameter name.
        arg: &'static str,
        /// The accepted range, in words.
        expected: String,
        /// The value given.
        got: String,
    },

    /// Max-pooling parameters leave no window on an input this small: along `axis`, a window
    /// spans more inputs than the padded input has.
    #[error("{op}: `{arg}` is {got}, expected {expected}: the output would be empty")]
    OutputTooSmall {
        /// Operation.
        op: &'static str,
        /// The parameter at fault: `"kernel"`, or `"dilation"` when the kernel alone would fit.
        arg: &'static str,
        /// The axis with no window: `"H"` or `"W"`.
        axis: &'static str,
        /// The input's spatial sizes, `[H, W]`.
        input: Vec<usize>,
        /// How many inputs a window may span along `axis`, and why (the padded input).
        expected: String,
        /// The parameter's value and how many inputs a window spans with it.
        got: String,
    },

    /// An arg-max index does not point into its `H * W` plane.
    #[error("{op}: `{arg}` holds {value} at position {position:?}, expected a flat index in [0, {plane})")]
    IndexOutOfRange {
        /// Operation that rejected the index.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// Position of the bad index, in the argument's own rank (`[n, c, oh, ow]` or `[c, oh, ow]`).
        position: Vec<usize>,
        /// The value found there.
        value: i64,
        /// The plane size `H * W`: valid indices are `0..plane`.
        plane: usize,
    },

    /// An arg-max index lies in its plane but outside its pooling window, so a window-relative
    /// mask cannot encode it.
    #[error(
        "{op}: `{arg}` holds {value} at position {position:?}, which is outside that output's pooling window"
    )]
    IndexNotInWindow {
        /// Operation.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// Position of the index (caller's rank).
        position: Vec<usize>,
        /// The index.
        value: i64,
    },

    /// A mask's bytes do not describe one arg-max per output position.
    #[error("{op}: `{arg}` at output position {position:?}: {reason}")]
    MaskContent {
        /// Operation.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// The output position (caller's rank).
        position: Vec<usize>,
        /// What is wrong.
        reason: String,
    },

    /// The index type cannot represent every position of an `H * W` plane.
    #[error("{op}: `{arg}` has dtype {dtype}, which holds plane indices below {max}, but H*W = {plane}")]
    IndexTypeTooNarrow {
        /// Operation that rejected the index type.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// The index dtype.
        dtype: DType,
        /// One past the largest index the dtype holds.
        max: u64,
        /// The plane size needed.
        plane: usize,
    },

    /// Shape and strides do not describe a usable view of the data.
    #[error("{op}: `{arg}` {reason}")]
    Layout {
        /// Operation or constructor that rejected the view.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// What is wrong, in words.
        reason: String,
    },

    /// A size computation does not fit in `usize` (or `isize` bytes).
    #[error("{op}: the size of `{arg}` overflows: {what}")]
    Overflow {
        /// Operation whose sizes overflow.
        op: &'static str,
        /// Argument or buffer name.
        arg: &'static str,
        /// The computation that overflowed.
        what: String,
    },

    /// The allocator could not provide a buffer.
    #[error("{op}: could not allocate {bytes} bytes for `{arg}`")]
    Allocation {
        /// Operation that allocated.
        op: &'static str,
        /// Buffer name.
        arg: &'static str,
        /// Bytes requested.
        bytes: usize,
    },

    /// The input is valid in general but beyond what the chosen device supports.
    #[error("{op} on {device}: {about} is {got}, but the device supports {limit}")]
    DeviceLimit {
        /// The device.
        device: &'static str,
        /// Operation.
        op: &'static str,
        /// What the limit is about.
        about: DeviceLimitKind,
        /// The device's limit, in words.
        limit: String,
        /// The value given.
        got: String,
    },

    /// The workspace bound to an executor is smaller than the plan needs.
    #[error("{op}: the workspace has {got} bytes, the plan needs {expected}")]
    WorkspaceTooSmall {
        /// Operation.
        op: &'static str,
        /// Bytes the plan reported.
        expected: usize,
        /// Bytes in the workspace given.
        got: usize,
    },

    /// The Ascend backend failed: CANN returned an error or could not be loaded (feature
    /// `ascend`).
    #[cfg(feature = "ascend")]
    #[error(transparent)]
    Ascend(AscendError),

    /// A rayon thread pool could not be built (feature `rayon`).
    #[cfg(feature = "rayon")]
    #[error("could not build a thread pool with {threads} threads: {reason}")]
    ThreadPool {
        /// Threads requested.
        threads: usize,
        /// The reason rayon gave.
        reason: String,
    },
}

/// How the Ascend backend failed ([`Error::Ascend`], feature `ascend`).
#[cfg(feature = "ascend")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AscendError {
    /// A CANN function returned a failure status or a null handle.
    #[error("{function} failed: {}{}", status_text(*.status, .name, .meaning), message_text(.message))]
    Cann {
        /// The C function, e.g. `"aclrtMalloc"`.
        function: &'static str,
        /// The `aclError` / `aclnnStatus` it returned; `None` when it returned a null handle.
        status: Option<i32>,
        /// The status's name in the CANN headers (`"ACL_ERROR_RT_MEMORY_ALLOCATION"`),
        /// `"unknown"` for a status the headers do not list, or `"null handle"`.
        name: &'static str,
        /// Its documented meaning.
        meaning: &'static str,
        /// What `aclGetRecentErrMsg` said (may be empty).
        message: String,
    },

    /// The CANN libraries could not be loaded, or lack a symbol.
    #[error("cannot use CANN: {reason}; tried: {}", .tried.join("; "))]
    Unavailable {
        /// What is missing.
        reason: String,
        /// Every library path tried, with the loader's answer.
        tried: Vec<String>,
    },
}

/// What an [`Error::DeviceLimit`] is about: callers that fall back to another device, or to
/// another mask layout, branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceLimitKind {
    /// The device has no kernel for the operation.
    Operator,
    /// The device's kernel does not take the element type.
    DType,
    /// The device writes and reads the other mask layout for this kernel size.
    MaskLayout,
    /// A pooling parameter, named here, is outside what the device's kernel takes.
    Parameter(&'static str),
    /// The input plane (`H * W`) is larger than the device's kernel takes.
    PlaneSize,
    /// The operation's tensors together need more memory than the device has.
    Memory,
}

impl fmt::Display for DeviceLimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceLimitKind::Operator => f.write_str("the operator"),
            DeviceLimitKind::DType => f.write_str("the element type"),
            DeviceLimitKind::MaskLayout => f.write_str("the mask layout"),
            DeviceLimitKind::Parameter(name) => write!(f, "`{name}`"),
            DeviceLimitKind::PlaneSize => f.write_str("H * W"),
            DeviceLimitKind::Memory => f.write_str("the device memory its tensors need"),
        }
    }
}

#[cfg(feature = "ascend")]
fn status_text(status: Option<i32>, name: &str, meaning: &str) -> String {
    match status {
        Some(code) => format!("status {code} ({name}: {meaning})"),
        None => "returned a null handle".to_string(),
    }
}

#[cfg(feature = "ascend")]
fn message_text(message: &str) -> String {
    if message.is_empty() { String::new() } else { format!("; CANN says: {message}") }
}

impl Error {
    /// The same error in the terms of a caller that wraps an operation: `op` as the operation's
    /// name, and the argument renamed when `args` lists it as `(poolgrad's name, the caller's
    /// name)`. An error that names no operation is returned as it is. A library that wraps
    /// poolgrad's functions under its own names uses it so that a message names what its user
    /// called and passed (the candle and burn bridges do).
    ///
    /// ```
    /// let x = ndarray::Array4::<f32>::zeros((1, 0, 4, 4));
    /// let e = poolgrad::adaptive_max_pool2d(&x, [2, 2]).unwrap_err();
    /// let e = e.in_terms_of("mylib::pool", &[("input", "x")]);
    /// assert_eq!(e.to_string(), "mylib::pool: `x` has shape [1, 0, 4, 4], but its C dimension must not be empty");
    /// ```
    #[must_use]
    pub fn in_terms_of(mut self, op: &'static str, args: &[(&str, &'static str)]) -> Self {
        let (named_op, named_arg) = match &mut self {
            Error::Rank { op, arg, .. }
            | Error::ShapeMismatch { op, arg, .. }
            | Error::EmptyDimension { op, arg, .. }
            | Error::InvalidParameter { op, arg, .. }
            | Error::OutputTooSmall { op, arg, .. }
            | Error::IndexOutOfRange { op, arg, .. }
            | Error::IndexNotInWindow { op, arg, .. }
            | Error::MaskContent { op, arg, .. }
            | Error::IndexTypeTooNarrow { op, arg, .. }
            | Error::Layout { op, arg, .. }
            | Error::Overflow { op, arg, .. }
            | Error::Allocation { op, arg, .. } => (op, Some(arg)),
            Error::DeviceLimit { op, .. } | Error::WorkspaceTooSmall { op, .. } => (op, None),
            #[cfg(feature = "ascend")]
            Error::Ascend(_) => return self,
            #[cfg(feature = "rayon")]
            Error::ThreadPool { .. } => return self,
        };
        *named_op = op;
        if let Some(arg) = named_arg
            && let Some(&(_, callers)) = args.iter().find(|(ours, _)| ours == arg)
        {
            *arg = callers;
        }
        self
    }

    /// This error as raised by operation `op`: what the plan attaches to the errors of code below
    /// the operation layer, which does not know the operation it serves.
    pub(crate) fn named(self, op: &'static str) -> Self {
        self.in_terms_of(op, &[])
    }

    /// Wraps an ndarray shape error raised while building a view of `arg`.
    pub(crate) fn from_shape(op: &'static str, arg: &'static str, e: ndarray::ShapeError) -> Self {
        use ndarray::ErrorKind;
        let reason = match e.kind() {
            ErrorKind::OutOfBounds => {
                "does not fit in the data: the shape and strides reach past the end of the slice".to_string()
            }
            ErrorKind::IncompatibleShape => "does not match the length of the data".to_string(),
            ErrorKind::Overflow => {
                return Error::Overflow {
                    op,
                    arg,
                    what: "the element count or the span of the strides exceeds isize::MAX".to_string(),
                };
            }
            ErrorKind::Unsupported => {
                "has strides that make elements alias, which an output must not do".to_string()
            }
            other => format!("is not a valid view: {other:?}"),
        };
        Error::Layout { op, arg, reason }
    }
}
