//! [`MaxPoolParams`]: kernel, stride, padding, dilation and ceil mode of max pooling over `N`
//! spatial axes ([`MaxPool1dParams`], [`MaxPool2dParams`], [`MaxPool3dParams`]), and their checks
//! (each returning a structured [`Error`]). Every axis follows the same rules, so one definition
//! serves every rank.

use crate::error::{Error, Result};
use crate::geometry::{pool_output_len, pool_window_taps};

/// Parameters of max pooling over `N` spatial axes, one value per axis each (`[D, H, W]` for
/// 3-D, `[H, W]` for 2-D, `[L]` for 1-D).
///
/// The stride defaults to the kernel, padding to 0, dilation to 1, ceil mode to off.
///
/// ```
/// use poolgrad::{MaxPool2dParams, MaxPool3dParams};
/// let p = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
/// assert_eq!(p.output_size([112, 112])?, [56, 56]);
/// assert_eq!(MaxPool2dParams::new([2, 2]).stride(), [2, 2]);
/// let v = MaxPool3dParams::new([3, 3, 3]).with_stride([2, 2, 2]).with_padding([1, 1, 1]);
/// assert_eq!(v.output_size([16, 56, 56])?, [8, 28, 28]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaxPoolParams<const N: usize> {
    kernel: [usize; N],
    stride: [usize; N],
    padding: [usize; N],
    dilation: [usize; N],
    ceil_mode: bool,
}

/// Parameters of 1-D max pooling, `[length]` each.
pub type MaxPool1dParams = MaxPoolParams<1>;
/// Parameters of 2-D max pooling, `[height, width]` each.
pub type MaxPool2dParams = MaxPoolParams<2>;
/// Parameters of 3-D max pooling, `[depth, height, width]` each.
pub type MaxPool3dParams = MaxPoolParams<3>;

/// The names of the spatial axes of an `N`-axis pooling, as errors give them.
pub(crate) const fn axis_names(n: usize) -> &'static [&'static str] {
    match n {
        1 => &["L"],
        2 => &["H", "W"],
        _ => &["D", "H", "W"],
    }
}

impl<const N: usize> MaxPoolParams<N> {
    /// A window of `kernel` with stride equal to the kernel, no padding, no dilation, floor mode.
    pub fn new(kernel: [usize; N]) -> Self {
        Self { kernel, stride: kernel, padding: [0; N], dilation: [1; N], ceil_mode: false }
    }

    /// Sets the stride (each at least 1).
    #[must_use]
    pub fn with_stride(mut self, stride: [usize; N]) -> Self {
        self.stride = stride;
        self
    }

    /// Sets the implicit padding on each side (each at most half the kernel); padding is never
    /// selected as a maximum.
    #[must_use]
    pub fn with_padding(mut self, padding: [usize; N]) -> Self {
        self.padding = padding;
        self
    }

    /// Sets the dilation (each at least 1; the mask operations need 1).
    #[must_use]
    pub fn with_dilation(mut self, dilation: [usize; N]) -> Self {
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

    /// The kernel, one value per axis.
    pub fn kernel(&self) -> [usize; N] {
        self.kernel
    }

    /// The stride, one value per axis.
    pub fn stride(&self) -> [usize; N] {
        self.stride
    }

    /// The padding on each side, one value per axis.
    pub fn padding(&self) -> [usize; N] {
        self.padding
    }

    /// The dilation, one value per axis.
    pub fn dilation(&self) -> [usize; N] {
        self.dilation
    }

    /// Whether the output size is rounded up.
    pub fn ceil_mode(&self) -> bool {
        self.ceil_mode
    }

    /// The parameters of axes `first..first + M` alone (the plane of a 3-D pooling is its last
    /// two axes).
    pub(crate) fn axes<const M: usize>(&self, first: usize) -> MaxPoolParams<M> {
        let take = |v: [usize; N]| core::array::from_fn(|i| v[first + i]);
        MaxPoolParams {
            kernel: take(self.kernel),
            stride: take(self.stride),
            padding: take(self.padding),
            dilation: take(self.dilation),
            ceil_mode: self.ceil_mode,
        }
    }

    /// Inputs a window spans along `axis`: `dilation·(kernel − 1) + 1`.
    pub(crate) fn window_span(&self, axis: usize) -> u128 {
        self.dilation[axis] as u128 * (self.kernel[axis] as u128).saturating_sub(1) + 1
    }

    /// Whether no two windows share an input: on every axis each window starts at least a span
    /// after the one before. (Two outputs differ on some axis, where their windows are then
    /// apart; padding and ceil mode only clip windows.)
    #[cfg_attr(not(feature = "ascend"), allow(dead_code))] // the device's unpooling
    pub(crate) fn windows_disjoint(&self) -> bool {
        (0..N).all(|axis| self.stride[axis] as u128 >= self.window_span(axis))
    }

    /// The longest window that still gives one output along `axis` of length `n`: the input
    /// with its padding on both sides, plus `stride − 1` in ceil mode.
    pub(crate) fn longest_window(&self, axis: usize, n: usize) -> u128 {
        let ceil = if self.ceil_mode { (self.stride[axis] as u128).saturating_sub(1) } else { 0 };
        n as u128 + 2 * self.padding[axis] as u128 + ceil
    }
}

// The checks, used by every operation that takes the parameters (phase 1).
impl<const N: usize> MaxPoolParams<N> {
    /// The pooled size of an input of spatial size `input` (`[H, W]` for 2-D), after checking
    /// the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a zero kernel, stride or dilation, or padding above half
    /// the kernel; [`Error::OutputTooSmall`] when no window fits; [`Error::InvalidParameter`]
    /// (`dilation`) when a dilated window would read no input element at all.
    pub fn output_size(&self, input: [usize; N]) -> Result<[usize; N]> {
        // Named as the caller spells the type.
        let op =
            ["MaxPool1dParams::output_size", "MaxPool2dParams::output_size", "MaxPool3dParams::output_size"]
                [N.clamp(1, 3) - 1];
        self.output_size_for(op, "input", input)
    }

    /// [`MaxPoolParams::output_size`] for operation `op`, whose input is argument `arg`.
    pub(crate) fn output_size_for(
        &self,
        op: &'static str,
        arg: &'static str,
        input: [usize; N],
    ) -> Result<[usize; N]> {
        self.check(op)?;
        let mut out = [0; N];
        for (axis, &n) in input.iter().enumerate() {
            let len = pool_output_len(
                n,
                self.kernel[axis],
                self.stride[axis],
                self.padding[axis],
                self.dilation[axis],
                self.ceil_mode,
            );
            match len {
                Some(len) => out[axis] = len,
                None => return Err(self.no_output(op, arg, axis, n, &input)),
            }
        }
        for (axis, (&n, &len)) in input.iter().zip(&out).enumerate() {
            let [k, s, p, d] =
                [self.kernel[axis], self.stride[axis], self.padding[axis], self.dilation[axis]];
            // With d <= n every window reads an input: its first tap at or past 0 lies below n.
            // With d > n a window can jump over the input, but then only kernels of 1 or 2 have
            // any output, so the windows are few. (`d >= n` would search in vain at d = n: an
            // equivalent mutant.)
            if d > n
                && let Some(o) = (0..len).find(|&o| pool_window_taps(o, n, k, s, p, d).1 == 0)
            {
                return Err(Error::InvalidParameter {
                    op,
                    arg: "dilation",
                    expected: "every window to read at least one input element".into(),
                    got: format!(
                        "{:?}, whose window {o} along {} = {n} reads only padding",
                        self.dilation,
                        axis_names(N)[axis]
                    ),
                });
            }
        }
        Ok(out)
    }

    /// Why axis `axis` (of length `n`) has no output: its (dilated) window is longer than the
    /// padded input, or the output length does not fit in `usize`.
    fn no_output(
        &self,
        op: &'static str,
        arg: &'static str,
        axis: usize,
        n: usize,
        input: &[usize],
    ) -> Error {
        let name = axis_names(N)[axis];
        let window = self.window_span(axis);
        if window <= self.longest_window(axis, n) {
            return Error::Overflow {
                op,
                arg,
                what: format!("the output length along {name} = {n} with {self:?} exceeds usize::MAX"),
            };
        }
        // Blame the dilation when the kernel alone would fit (then the dilation is above 1, or
        // the window would be the kernel and fit too).
        let undilated_fits = self.kernel[axis] as u128 <= self.longest_window(axis, n);
        let (arg, value) = if undilated_fits { ("dilation", self.dilation) } else { ("kernel", self.kernel) };
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
        for (arg, v) in [("kernel", self.kernel), ("stride", self.stride), ("dilation", self.dilation)] {
            if v.contains(&0) {
                let count = ["one value", "two values", "three values"][N.clamp(1, 3) - 1];
                return Err(Error::InvalidParameter {
                    op,
                    arg,
                    expected: format!("{count}, each at least 1"),
                    got: format!("{v:?}"),
                });
            }
        }
        let half = self.kernel.map(|k| k / 2);
        if self.padding.iter().zip(&half).any(|(p, h)| p > h) {
            return Err(Error::InvalidParameter {
                op,
                arg: "padding",
                expected: format!("at most half the kernel {:?}, i.e. at most {half:?}", self.kernel),
                got: format!("{:?}", self.padding),
            });
        }
        Ok(())
    }
}

impl MaxPool1dParams {
    /// The same pooling of a plane one row high: a kernel of one row, no padding along it.
    pub(crate) fn as_plane(&self) -> MaxPool2dParams {
        let ([k], [s], [p], [d]) = (self.kernel, self.stride, self.padding, self.dilation);
        MaxPool2dParams {
            kernel: [1, k],
            stride: [1, s],
            padding: [0, p],
            dilation: [1, d],
            ceil_mode: self.ceil_mode,
        }
    }
}

impl MaxPool2dParams {
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

    /// `windows_disjoint` against the windows themselves: when it holds, no input is read by
    /// two windows (taps `o·s − p + j·d` inside the input, every output of lengths 1 to 12), for
    /// every 1-D pooling of kernel, stride and dilation 1 to 4; and it fails for windows that do
    /// share one.
    #[test]
    fn disjoint_windows_share_no_input() {
        for (k, s, d) in (1..=4).flat_map(|k| (1..=4).flat_map(move |s| (1..=4).map(move |d| (k, s, d)))) {
            for pad in 0..=k / 2 {
                let p = MaxPoolParams::new([k]).with_stride([s]).with_padding([pad]).with_dilation([d]);
                for len in 1..=12usize {
                    let Ok([outputs]) = p.output_size([len]) else { continue };
                    let mut readers = vec![0; len];
                    for o in 0..outputs {
                        for j in 0..k {
                            let tap = (o * s + j * d) as isize - pad as isize;
                            if (0..len as isize).contains(&tap) {
                                readers[tap as usize] += 1;
                            }
                        }
                    }
                    if p.windows_disjoint() {
                        assert!(readers.iter().all(|&r| r <= 1), "k {k} s {s} d {d} p {pad} len {len}");
                    }
                }
            }
        }
        // Kernel 3, stride 2 (the ResNet stem): windows share their edge.
        assert!(!MaxPool2dParams::new([3, 3]).with_stride([2, 2]).windows_disjoint());
        // Kernel 2 dilated by 2 spans 3: a stride of 3 keeps windows apart, 2 does not.
        assert!(MaxPoolParams::new([2]).with_stride([3]).with_dilation([2]).windows_disjoint());
        assert!(!MaxPoolParams::new([2]).with_stride([2]).with_dilation([2]).windows_disjoint());
        // Every axis must keep its windows apart.
        assert!(!MaxPool3dParams::new([2, 2, 2]).with_stride([2, 1, 2]).windows_disjoint());
    }

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
