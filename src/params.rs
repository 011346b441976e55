//! [`MaxPool2dParams`]: kernel, stride, padding, dilation and ceil mode of 2-D max pooling.

/// Parameters of 2-D max pooling, `[height, width]` each.
///
/// The stride defaults to the kernel, padding to 0, dilation to 1, ceil mode to off.
///
/// ```
/// use poolgrad::MaxPool2dParams;
/// let p = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
/// assert_eq!(p.output_size([112, 112])?, [56, 56]);
/// assert_eq!(MaxPool2dParams::new([2, 2]).stride(), [2, 2]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaxPool2dParams {
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
}

impl MaxPool2dParams {
    /// A `kh x kw` window with stride equal to the kernel, no padding, no dilation, floor mode.
    pub fn new(kernel: [usize; 2]) -> Self {
        Self { kernel, stride: kernel, padding: [0, 0], dilation: [1, 1], ceil_mode: false }
    }

    /// Sets the stride (each at least 1).
    #[must_use]
    pub fn with_stride(mut self, stride: [usize; 2]) -> Self {
        self.stride = stride;
        self
    }

    /// Sets the implicit padding on each side (each at most half the kernel); padding is never
    /// selected as a maximum.
    #[must_use]
    pub fn with_padding(mut self, padding: [usize; 2]) -> Self {
        self.padding = padding;
        self
    }

    /// Sets the dilation (each at least 1; the mask operations need 1).
    #[must_use]
    pub fn with_dilation(mut self, dilation: [usize; 2]) -> Self {
        self.dilation = dilation;
        self
    }

    /// Rounds the output size up instead of down (a last window may start in the input and end
    /// past it, never start in the right padding).
    #[must_use]
    pub fn with_ceil_mode(mut self, ceil_mode: bool) -> Self {
        self.ceil_mode = ceil_mode;
        self
    }

    /// `[kh, kw]`.
    pub fn kernel(&self) -> [usize; 2] {
        self.kernel
    }

    /// `[sh, sw]`.
    pub fn stride(&self) -> [usize; 2] {
        self.stride
    }

    /// `[ph, pw]`.
    pub fn padding(&self) -> [usize; 2] {
        self.padding
    }

    /// `[dh, dw]`.
    pub fn dilation(&self) -> [usize; 2] {
        self.dilation
    }

    /// Whether the output size is rounded up.
    pub fn ceil_mode(&self) -> bool {
        self.ceil_mode
    }

    /// Inputs a window spans along `axis`: `dilation·(kernel − 1) + 1`.
    pub(crate) fn window_span(&self, axis: usize) -> u128 {
        self.dilation[axis] as u128 * (self.kernel[axis] as u128).saturating_sub(1) + 1
    }

    /// The longest window that still gives one output along `axis` of length `n`: the input
    /// with its padding on both sides, plus `stride − 1` in ceil mode.
    pub(crate) fn longest_window(&self, axis: usize, n: usize) -> u128 {
        let ceil = if self.ceil_mode { (self.stride[axis] as u128).saturating_sub(1) } else { 0 };
        n as u128 + 2 * self.padding[axis] as u128 + ceil
    }
}
