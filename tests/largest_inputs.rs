//! The largest inputs: sizes that overflow, planes too large for `i32` indices, allocations that
//! cannot be satisfied. Each is an error naming what is wrong, never a truncation or an abort.
//! The sizes are those of a 64-bit target (2^30 to 2^62): on narrower ones, these tests are left
//! out.
#![cfg(target_pointer_width = "64")]

mod common;

use common::{plan_adaptive_i32_indices, with_global_pool_plan};
use ndarray::{Array4, ArrayViewD, IxDyn, ShapeBuilder};
use poolgrad::device::cpu::Cpu;
use poolgrad::{DType, Error, I32Argmax, Mask, MaxPool2dParams, Plan, TensorMut, TensorRef, Workspace};

fn broadcast(dims: &[usize]) -> ArrayViewD<'static, f32> {
    static ONE: [f32; 1] = [1.0];
    ArrayViewD::from_shape(IxDyn(dims).strides(IxDyn(&vec![0; dims.len()])), &ONE[..]).unwrap()
}

/// Phase 1 of a max pooling of `x` with `p` into `i32` indices of shape `[1, 1, 2, 1]`: the
/// check stops here, so a missing one fails this test at once instead of pooling 2^31 elements.
fn plan_i32_indices(x: ArrayViewD<'_, f32>, p: MaxPool2dParams) -> poolgrad::Result<usize> {
    let (mut out, mut idx) = (Array4::<f32>::zeros((1, 1, 2, 1)), Array4::<i32>::zeros((1, 1, 2, 1)));
    let op = poolgrad::op::MaxPool2dWithIndices {
        input: TensorRef::from_view(x).unwrap(),
        params: p,
        output: TensorMut::from_array(&mut out).unwrap(),
        indices: TensorMut::from_array(&mut idx).unwrap(),
    };
    Plan::new(&Cpu::sequential(), op).map(|plan| plan.workspace_size())
}

/// `i32` indices address planes of up to 2^31 elements: exactly 2^31 passes phase 1, one row
/// more does not.
#[test]
fn i32_indices_stop_at_2_pow_31_in_phase_1() {
    let p = MaxPool2dParams::new([1 << 15, 1 << 15]);
    // H = 2^16, W = 2^15: the plane is 2^31, pooled to 2 x 1.
    assert!(plan_i32_indices(broadcast(&[1, 1, 1 << 16, 1 << 15]), p).is_ok());
    let e = plan_i32_indices(broadcast(&[1, 1, (1 << 16) + 1, 1 << 15]), p).unwrap_err();
    let plane = ((1usize << 16) + 1) << 15;
    assert_eq!(
        e,
        Error::IndexTypeTooNarrow {
            op: "max_pool2d_with_indices",
            arg: "indices",
            dtype: DType::I32,
            max: 1 << 31,
            plane
        }
    );
    // The adaptive forward's phase 1 alike.
    for (h, ok) in [(1usize << 16, true), ((1 << 16) + 1, false)] {
        let result = plan_adaptive_i32_indices(broadcast(&[1, 1, h, 1 << 15]));
        assert_eq!(result.is_ok(), ok, "H = {h}: {result:?}");
    }
}

/// An `I32Argmax` mask stores `i32` values: a plane of exactly 2^31 elements fits, one more row
/// does not (a 1x1 kernel with strides as large as the plane: a 64-byte mask).
#[test]
fn i32argmax_masks_stop_at_2_pow_31() {
    let p = MaxPool2dParams::new([1, 1]).with_stride([1 << 16, 1 << 15]);
    let raw = Array4::<i8>::zeros((1, 1, 1, 64));
    assert!(Mask::<I32Argmax, _>::from_raw(raw.clone(), &p, &[1, 1, 1 << 16, 1 << 15]).is_ok());
    let e = Mask::<I32Argmax, _>::from_raw(raw, &p, &[1, 1, (1 << 16) + 1, 1 << 15]).unwrap_err();
    assert!(
        matches!(e, Error::IndexTypeTooNarrow { arg: "mask", plane, .. } if plane == ((1 << 16) + 1) << 15),
        "{e:?}"
    );
}

/// A 1x1-kernel `I32Argmax` mask holds `(⌈Ho·Wo/16⌉ + 1)·32` bytes per plane, and its values
/// need `4·Ho·Wo`: 16 and 24 positions fill it exactly (64 and 96 bytes), 25 do not fit in 96.
#[test]
fn i32argmax_masks_may_be_exactly_full() {
    let p = MaxPool2dParams::new([1, 1]);
    for (h, w, bytes, fits) in [(4, 4, 64, true), (4, 6, 96, true), (5, 5, 96, false), (1, 17, 96, true)] {
        let raw = Array4::<i8>::zeros((1, 1, 1, bytes));
        let result = Mask::<I32Argmax, _>::from_raw(raw, &p, &[1, 1, h, w]);
        assert_eq!(result.is_ok(), fits, "{h}x{w}: {result:?}");
        if !fits {
            let e = result.unwrap_err();
            assert_eq!(
                e.to_string(),
                "Mask::from_raw: `mask` is kernel [1, 1], expected an I32Argmax mask of 96 bytes to hold \
                 4 * N*C*Ho*Wo = 100 bytes (on Ascend, 1x1 kernels use the Bitmask layout)"
            );
        }
    }
}

/// `H * W` itself overflowing is an error naming both, before anything else is sized. (No
/// tensor can have such a shape, ndarray refuses it first; a mask's `input_shape` can.)
#[test]
fn plane_size_overflow_is_pinned() {
    let p = MaxPool2dParams::new([1 << 32, 1 << 32]);
    let e = Mask::<I32Argmax, _>::from_raw(Array4::zeros((1, 1, 1, 64)), &p, &[1, 1, 1 << 32, 1 << 32])
        .unwrap_err();
    assert!(
        matches!(&e, Error::Overflow { arg: "input_shape", what, .. } if what == "H * W = 4294967296 * 4294967296"),
        "{e:?}"
    );
}

#[test]
fn i32_indices_refuse_planes_beyond_i32() {
    let plane = (1usize << 16) * ((1 << 15) + 1);
    let x = broadcast(&[1, 1, 1 << 16, (1 << 15) + 1]);
    let p = MaxPool2dParams::new([1 << 15, 1 << 15]);
    let expected = Error::IndexTypeTooNarrow {
        op: "max_pool2d_with_indices",
        arg: "indices",
        dtype: DType::I32,
        max: 1 << 31,
        plane,
    };
    // Phase 1 first, so that a missing check fails here instead of pooling 2^31 elements below.
    assert_eq!(plan_i32_indices(x.clone(), p), Err(expected.clone()));
    let e = poolgrad::max_pool2d_with_indices_i32(&x, &p).unwrap_err();
    assert_eq!(e, expected);
    // The I32Argmax mask stores i32 values: the same limit (its own check, in phase 1 as well).
    let raw = Array4::<i8>::zeros((1, 1, 1, 64));
    let mask_check = Mask::<I32Argmax, _>::from_raw(raw, &p, &[1, 1, 1 << 16, (1 << 15) + 1]).map(|_| ());
    assert!(matches!(mask_check, Err(Error::IndexTypeTooNarrow { arg: "mask", .. })), "{mask_check:?}");
    let e = poolgrad::max_pool2d_with_mask(&x, &p, I32Argmax).unwrap_err();
    assert!(matches!(e, Error::IndexTypeTooNarrow { arg: "mask", dtype: DType::I32, .. }), "{e:?}");
    // i64 indices pass phase 1 (running would stage the 2^31-element broadcast input: 8 GB).
    let (mut out, mut idx) = (Array4::<f32>::zeros((1, 1, 2, 1)), Array4::<i64>::zeros((1, 1, 2, 1)));
    let op = poolgrad::op::MaxPool2dWithIndices {
        input: TensorRef::from_view(x).unwrap(),
        params: p,
        output: TensorMut::from_array(&mut out).unwrap(),
        indices: TensorMut::from_array(&mut idx).unwrap(),
    };
    let cpu = Cpu::sequential();
    assert_eq!(Plan::new(&cpu, op).unwrap().workspace_size(), plane * 4);
}

#[test]
fn mask_shapes_that_overflow_are_errors() {
    let p = MaxPool2dParams::new([1 << 31, 1 << 31]).with_padding([1 << 30, 1 << 30]);
    let raw = ndarray::Array3::<i8>::zeros((1, 1, 1));
    let e = Mask::<I32Argmax, _>::from_raw(raw, &p, &[1, 1 << 31, 1 << 31]).unwrap_err();
    // 2^31 · 2^31 window offsets of 64 bytes at least each: the kernel alone overflows.
    assert!(matches!(e, Error::Overflow { arg: "kernel", .. }), "{e:?}");
    assert!(e.to_string().contains("kernel [2147483648, 2147483648] and output 2x2"), "{e}");
}

#[test]
fn workspaces_that_cannot_exist_are_errors() {
    let cpu = Cpu::sequential();
    let e = Workspace::new(&cpu, usize::MAX).unwrap_err();
    assert!(matches!(e, Error::Overflow { .. } | Error::Allocation { .. }), "{e:?}");
    let e = Workspace::new(&cpu, 1 << 62).unwrap_err();
    assert!(matches!(e, Error::Allocation { .. }), "{e:?}");
}

/// A broadcast input must be staged into the workspace; 2^60 elements cannot be.
#[test]
fn staging_that_cannot_be_allocated_is_an_error() {
    let x = broadcast(&[1, 1, 1 << 30, 1 << 30]);
    with_global_pool_plan::<i64, _, _>(x, |plan, _| {
        let plan = plan.unwrap();
        assert_eq!(plan.workspace_size(), 1 << 62);
        let e = plan.run().unwrap_err();
        assert_eq!(e, Error::Allocation { op: "Workspace::new", arg: "workspace", bytes: 1 << 62 });
    });
}
