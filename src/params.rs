//! [`MaxPool2dParams`]: kernel, stride, padding, dilation and ceil mode of 2-D max pooling, and
//! their checks (each returning a structured [`Error`]).

use crate::error::{Error, Result};
use crate::geometry::{pool_output_len, pool_window_taps};

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

// The checks, used by every operation that takes the parameters (phase 1).
impl MaxPool2dParams {
    /// The pooled size `[Ho, Wo]` of an `[H, W]` input, after checking the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a zero kernel, stride or dilation, or padding above half
    /// the kernel; [`Error::OutputTooSmall`] when no window fits; [`Error::InvalidParameter`]
    /// (`dilation`) when a dilated window would read no input element at all.
    pub fn output_size(&self, input: [usize; 2]) -> Result<[usize; 2]> {
        self.output_size_for("MaxPool2dParams::output_size", "input", input)
    }

    /// [`MaxPool2dParams::output_size`] for operation `op`, whose input is argument `arg`.
    pub(crate) fn output_size_for(
        &self,
        op: &'static str,
        arg: &'static str,
        [h, w]: [usize; 2],
    ) -> Result<[usize; 2]> {
        self.check(op)?;
        let len = |axis: usize, n: usize| {
            pool_output_len(
                n,
                self.kernel()[axis],
                self.stride()[axis],
                self.padding()[axis],
                self.dilation()[axis],
                self.ceil_mode(),
            )
        };
        let (ho, wo) = match (len(0, h), len(1, w)) {
            (Some(ho), Some(wo)) => (ho, wo),
            (ho, _) => {
                let (axis, n) = if ho.is_none() { (0, h) } else { (1, w) };
                return Err(self.no_output(op, arg, axis, n, [h, w]));
            }
        };
        for (axis, n, out, name) in [(0, h, ho, "H"), (1, w, wo, "W")] {
            let [k, s, p, d] =
                [self.kernel()[axis], self.stride()[axis], self.padding()[axis], self.dilation()[axis]];
            // With d <= n every window reads an input: its first tap at or past 0 lies below n.
            // With d > n a window can jump over the input, but then only kernels of 1 or 2 have
            // any output, so the windows are few. (`d >= n` would search in vain at d = n: an
            // equivalent mutant.)
            if d > n
                && let Some(o) = (0..out).find(|&o| pool_window_taps(o, n, k, s, p, d).1 == 0)
            {
                return Err(Error::InvalidParameter {
                    op,
                    arg: "dilation",
                    expected: "every window to read at least one input element".into(),
                    got: format!(
                        "{:?}, whose window {o} along {name} = {n} reads only padding",
                        self.dilation()
                    ),
                });
            }
        }
        Ok([ho, wo])
    }

    /// Why axis `axis` (of length `n`) has no output: its (dilated) window is longer than the
    /// padded input, or the output length does not fit in `usize`.
    fn no_output(
        &self,
        op: &'static str,
        arg: &'static str,
        axis: usize,
        n: usize,
        input: [usize; 2],
    ) -> Error {
        let window = self.window_span(axis);
        if window <= self.longest_window(axis, n) {
            return Error::Overflow {
                op,
                arg,
                what: format!(
                    "the output length along {} = {n} with {self:?} exceeds usize::MAX",
                    ["H", "W"][axis]
                ),
            };
        }
        // Blame the dilation when the kernel alone would fit (then the dilation is above 1, or
        // the window would be the kernel and fit too).
        let undilated_fits = self.kernel()[axis] as u128 <= self.longest_window(axis, n);
        let (arg, value) = if undilated_fits { ("dilation", self.dilation) } else { ("kernel", self.kernel) };
        let name = ["H", "W"][axis];
        let (k, d, p) = (self.kernel[axis], self.dilation[axis], self.padding[axis]);
        let formula = if d > 1 { format!(" = {d}·({k} − 1) + 1") } else { String::new() };
        let ceil = match self.ceil_mode {
            true => format!(", plus stride − 1 = {} in ceil mode", self.stride[axis].saturating_sub(1)),
            false => String::new(),
        };
        Error::OutputTooSmall {
            op,
            arg,
            axis: name,
            input: input.to_vec(),
            expected: format!(
                "at most {} ({name} = {n} plus padding {p} on each side{ceil})",
                self.longest_window(axis, n)
            ),
            got: format!("{value:?}, so a window spans {window}{formula} inputs along {name}"),
        }
    }

    /// Checks the parameters themselves: kernel, stride and dilation of at least 1, padding
    /// at most half the kernel.
    fn check(&self, op: &'static str) -> Result<()> {
        for (arg, v) in [("kernel", self.kernel()), ("stride", self.stride()), ("dilation", self.dilation())]
        {
            if v.contains(&0) {
                return Err(Error::InvalidParameter {
                    op,
                    arg,
                    expected: "two values, each at least 1".into(),
                    got: format!("{v:?}"),
                });
            }
        }
        let half = [self.kernel()[0] / 2, self.kernel()[1] / 2];
        if self.padding()[0] > half[0] || self.padding()[1] > half[1] {
            return Err(Error::InvalidParameter {
                op,
                arg: "padding",
                expected: format!("at most half the kernel {:?}, i.e. at most {half:?}", self.kernel()),
                got: format!("{:?}", self.padding()),
            });
        }
        Ok(())
    }

    /// The Ascend mask operations also need dilation 1.
    pub(crate) fn check_mask_op(&self, op: &'static str) -> Result<()> {
        if self.dilation() != [1, 1] {
            return Err(Error::InvalidParameter {
                op,
                arg: "dilation",
                expected: "[1, 1] (the Ascend mask operations do not support dilation)".into(),
                got: format!("{:?}", self.dilation()),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_mode_example_of_the_ascend_notes() {
        // H=4, k=2, s=3, p=1: floor 2; ceil raw 3, but (3-1)*3 = 6 >= 4+1, so 2.
        let p = MaxPool2dParams::new([2, 2]).with_stride([3, 3]).with_padding([1, 1]);
        assert_eq!(p.output_size([4, 4]).unwrap(), [2, 2]);
        assert_eq!(p.with_ceil_mode(true).output_size([4, 4]).unwrap(), [2, 2]);
        // ceil mode adding a window: H=5, k=2, s=2 → floor 2, ceil 3.
        let p = MaxPool2dParams::new([2, 2]);
        assert_eq!(p.output_size([5, 5]).unwrap(), [2, 2]);
        assert_eq!(p.with_ceil_mode(true).output_size([5, 5]).unwrap(), [3, 3]);
    }

    #[test]
    fn dilated_windows_that_read_only_padding_are_rejected() {
        // k=2, d=4, p=1 on H=3: one window (3 + 2 - 5 + 1), whose taps -1 and 3 are both
        // outside 0..3. PyTorch accepts this and returns an index outside the plane.
        let p = MaxPool2dParams::new([2, 1]).with_stride([1, 1]).with_dilation([4, 1]).with_padding([1, 0]);
        let e = p.output_size([3, 4]).unwrap_err();
        assert!(matches!(e, Error::InvalidParameter { arg: "dilation", .. }), "{e:?}");
        assert!(e.to_string().contains("window 0 along H = 3 reads only padding"), "{e}");
        // H=4: taps -1, 3 and 0, 4: each window reads one element.
        assert_eq!(p.output_size([4, 4]).unwrap(), [2, 4]);
    }
}
