//! Checks shared by every operation's phase 1, each returning a structured [`Error`]. The sizes
//! they establish are in [`shape`](crate::shape).

use crate::element::Element;
use crate::error::{Error, Result};
use crate::geometry::{pool_output_len, pool_window_taps};
use crate::index::ArgmaxIndex;
use crate::params::MaxPool2dParams;
use crate::tensor::{Memory, TensorMut, TensorRef, position};

/// The 4-D shape `[N, C, H, W]` of a pooling input given in the caller's rank (3 or 4), whose C,
/// H and W must be non-empty (N may be 0).
pub(crate) fn pooling_dims(op: &'static str, arg: &'static str, dims: &[usize]) -> Result<[usize; 4]> {
    let shape = match *dims {
        [c, h, w] => [1, c, h, w],
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Rank {
                op,
                arg,
                expected: crate::tensor::RANKS,
                got: dims.len(),
                shape: dims.to_vec(),
            });
        }
    };
    for (axis, name) in [(1, "C"), (2, "H"), (3, "W")] {
        if shape[axis] == 0 {
            return Err(Error::EmptyDimension { op, arg, axis: name, shape: dims.to_vec() });
        }
    }
    Ok(shape)
}

/// [`pooling_dims`] of a view.
pub(crate) fn pooling_input<E: Element, M: Memory>(
    op: &'static str,
    arg: &'static str,
    t: &TensorRef<'_, E, M>,
) -> Result<[usize; 4]> {
    pooling_dims(op, arg, &t.dims())
}

/// `[ho, wo]` with both entries at least 1.
pub(crate) fn output_size(op: &'static str, arg: &'static str, size: [usize; 2]) -> Result<()> {
    if size.contains(&0) {
        return Err(Error::InvalidParameter {
            op,
            arg,
            expected: "[Ho, Wo] with Ho >= 1 and Wo >= 1".into(),
            got: format!("{size:?}"),
        });
    }
    Ok(())
}

/// `got` must equal `expected` (both in the caller's rank).
pub(crate) fn same_shape(
    op: &'static str,
    arg: &'static str,
    got: &[usize],
    expected: &[usize],
) -> Result<()> {
    if got == expected {
        Ok(())
    } else {
        Err(Error::ShapeMismatch { op, arg, expected: expected.to_vec(), got: got.to_vec() })
    }
}

/// Shape check for an input view.
pub(crate) fn input_shape<E: Element, M: Memory>(
    op: &'static str,
    arg: &'static str,
    t: &TensorRef<'_, E, M>,
    expected: &[usize],
) -> Result<()> {
    same_shape(op, arg, t.user_shape(), expected)
}

/// Shape check for an output view.
pub(crate) fn output_shape<E: Element, M: Memory>(
    op: &'static str,
    arg: &'static str,
    t: &TensorMut<'_, E, M>,
    expected: &[usize],
) -> Result<()> {
    same_shape(op, arg, t.user_shape(), expected)
}

/// The index type `I` must hold every flat position of an `h * w` plane.
pub(crate) fn index_width<I: ArgmaxIndex>(op: &'static str, arg: &'static str, plane: usize) -> Result<()> {
    if (plane as u64) <= I::MAX_PLANE {
        Ok(())
    } else {
        Err(Error::IndexTypeTooNarrow { op, arg, dtype: I::DTYPE, max: I::MAX_PLANE, plane })
    }
}

/// `h * w` without overflow.
pub(crate) fn plane_size(op: &'static str, arg: &'static str, h: usize, w: usize) -> Result<usize> {
    h.checked_mul(w).ok_or_else(|| Error::Overflow { op, arg, what: format!("H * W = {h} * {w}") })
}

/// The error for index `value` found at element `e` of a `[n, c, ho, wo]` index tensor.
pub(crate) fn index_error(
    op: &'static str,
    arg: &'static str,
    e: usize,
    value: i64,
    pooled: [usize; 4],
    ndim: usize,
    plane: usize,
) -> Error {
    Error::IndexOutOfRange { op, arg, position: position(e, pooled, ndim), value, plane }
}

/// The checks of max-pooling parameters, used by every operation that takes them (phase 1).
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
        let arg = if undilated_fits { "dilation" } else { "kernel" };
        Error::OutputTooSmall { op, arg, axis: ["H", "W"][axis], input, params: Box::new(*self) }
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
