//! The [`I32Argmax`] layout (Atlas A2/A3, kernels other than 1x1): little-endian `i32` flat
//! arg-max values `ih·W + iw`, packed in `N, C, Ho, Wo` order from byte 0; the rest of the
//! buffer is not read (the forward writes zeros there).

use core::ops::Range;

use ndarray::ArrayView4;

use super::layout::internal::{LayoutImpl, Run, Visitor};
use super::layout::{MaskBytes, MaskLayout};
use crate::element::sealed::Sealed;
use crate::error::{Error, Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::shape::MaxPoolGeometry;

/// The layout Atlas A2/A3 write for kernels other than 1x1: `i32` flat arg-max values packed from
/// byte 0. A marker type, and its one value, which chooses the layout where one is passed (as in
/// [`max_pool2d_with_mask`](crate::max_pool2d_with_mask)`(&x, &params, I32Argmax)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct I32Argmax;

impl Sealed for I32Argmax {}

impl MaskLayout for I32Argmax {
    const NAME: &'static str = "I32Argmax";
}

/// Values per part of an encoding: the parts are runs of values.
const RUN: usize = 1 << 16;

impl LayoutImpl for I32Argmax {
    const I32_VALUES: bool = true;
    const CHANNEL_BLOCKS: bool = false;

    /// The mask must hold `4·N·C·Ho·Wo` bytes, and the planes must be addressable by `i32`.
    fn check(g: &MaxPoolGeometry) -> Result<()> {
        let plane = g.h * g.w;
        if plane as u64 > <i32 as ArgmaxIndex>::MAX_PLANE {
            return Err(Error::IndexTypeTooNarrow {
                op: UNNAMED,
                arg: "mask",
                dtype: crate::DType::I32,
                max: <i32 as ArgmaxIndex>::MAX_PLANE,
                plane,
            });
        }
        let need = g.planes().saturating_mul(g.positions()).saturating_mul(4);
        let have = g.bytes().unwrap_or(0);
        if need > have {
            return Err(Error::InvalidParameter {
                op: UNNAMED,
                arg: "mask",
                expected: format!(
                    "an I32Argmax mask of {have} bytes to hold 4 * N*C*Ho*Wo = {need} bytes \
                     (on Ascend, 1x1 kernels use the Bitmask layout)"
                ),
                got: format!("kernel {:?}", g.params.kernel()),
            });
        }
        Ok(())
    }

    fn part_count(_: &MaxPoolGeometry, values: usize) -> usize {
        values.div_ceil(RUN)
    }

    fn part_indices(_: &MaxPoolGeometry, values: usize, part: usize) -> Range<usize> {
        part * RUN..((part + 1) * RUN).min(values)
    }

    fn part_bytes(g: &MaxPoolGeometry, values: usize, part: usize) -> Range<usize> {
        let values = Self::part_indices(g, values, part);
        4 * values.start..4 * values.end
    }

    fn encode_in_order<I: ArgmaxIndex>(
        run: Run<'_>,
        values: impl Iterator<Item = I>,
        out: &mut [i8],
    ) -> Result<()> {
        let Run { g, arg, first, .. } = run;
        let plane = g.h * g.w;
        for ((e, v), dst) in (first..).zip(values).zip(out.chunks_exact_mut(4)) {
            let flat = v.flat_in(plane).ok_or_else(|| g.index_error(UNNAMED, arg, e, v.to_i64()))?;
            for (d, b) in dst.iter_mut().zip((flat as i32).to_le_bytes()) {
                *d = b as i8;
            }
        }
        Ok(())
    }

    /// Errors: a value outside the plane.
    fn decode<I: ArgmaxIndex>(g: &MaxPoolGeometry, bytes: &MaskBytes<'_>, out: &mut [I]) -> Result<()> {
        for (e, dst) in out.iter_mut().enumerate() {
            let v = bytes.value(e);
            *dst = flat_value(g, v)
                .and_then(I::try_from_flat)
                .ok_or_else(|| g.index_error(UNNAMED, "mask", e, v.into()))?;
        }
        Ok(())
    }

    /// One position per output element; the first value outside the plane is the error.
    fn visit_selected(g: &MaxPoolGeometry, bytes: &MaskBytes<'_>, f: Visitor<'_>) -> Result<()> {
        for e in 0..g.planes() * g.positions() {
            let v = bytes.value(e);
            let flat = flat_value(g, v).ok_or_else(|| g.index_error(UNNAMED, "mask", e, v.into()))?;
            f(e, flat);
        }
        Ok(())
    }
}

/// Value `v` as a flat position of the plane of `g`, if it is one.
fn flat_value(g: &MaxPoolGeometry, v: i32) -> Option<usize> {
    usize::try_from(v).ok().filter(|&flat| flat < g.h * g.w)
}

/// The `I32Argmax` values as `i32` without copying, when the bytes allow it (a little-endian host
/// and a 4-byte aligned buffer).
pub(crate) fn i32_prefix(bytes: &[i8], count: usize) -> Option<&[i32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    bytemuck::try_cast_slice(bytes.get(..count.checked_mul(4)?)?).ok()
}

/// Whether `I32Argmax` values can be seen as `i32` in `bytes` (given enough of them): on a
/// little-endian host, from a 4-byte boundary. What [`i32_prefix`] and [`i32_prefix_mut`] ask of
/// a buffer besides its length, for deciding in phase 1.
pub(crate) fn i32_in_place(bytes: &[i8]) -> bool {
    cfg!(target_endian = "little") && bytes.as_ptr().addr().is_multiple_of(align_of::<i32>())
}

/// The first `count` `I32Argmax` values of `bytes` as `i32` to write, when the bytes allow it (a
/// little-endian host and a 4-byte aligned buffer): a forward can pool its indices straight
/// into them.
pub(crate) fn i32_prefix_mut(bytes: &mut [i8], count: usize) -> Option<&mut [i32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    bytemuck::try_cast_slice_mut(bytes.get_mut(..count.checked_mul(4)?)?).ok()
}

/// Copies the `I32Argmax` values of any mask view (logical row-major byte order) into `out`.
pub(crate) fn read_i32_prefix(view: ArrayView4<'_, i8>, out: &mut [i32]) {
    let mut bytes = view.iter().map(|&b| b as u8);
    for v in out {
        let mut b = [0u8; 4];
        for x in &mut b {
            *x = bytes.next().unwrap_or(0);
        }
        *v = i32::from_le_bytes(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::MaxPool2dParams;

    /// `i32` values address planes of up to 2^31 elements (indices 0 to 2^31 - 1): a plane of
    /// 2^31 takes the layout, one of 2^31 + 2^15 does not. (Geometry only: no tensor is made.)
    #[test]
    fn planes_past_2_pow_31_are_too_wide_for_i32_values() {
        let check = |h: usize, w: usize| {
            let g = MaxPoolGeometry::for_mask("test", "input", &MaxPool2dParams::new([2, 2]), &[1, 1, h, w])
                .expect("a 2x2 pooling of a plane this size");
            I32Argmax::check(&g)
        };
        assert_eq!(check(1 << 16, 1 << 15), Ok(()));
        let e = check((1 << 16) + 2, 1 << 15).unwrap_err();
        assert!(
            matches!(e, Error::IndexTypeTooNarrow { arg: "mask", plane, max, .. } if plane == (1 << 31) + (1 << 16) && max == 1 << 31),
            "{e:?}"
        );
    }
}
