//! The largest inputs: sizes that overflow, planes too large for `i32` indices, allocations that
//! cannot be satisfied. Each is an error naming what is wrong, never a truncation or an abort.
//! The sizes are those of a 64-bit target (2^30 to 2^62): on narrower ones, these tests are left
//! out.
#![cfg(target_pointer_width = "64")]

use ndarray::{Array4, ArrayViewD, IxDyn, ShapeBuilder};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::AdaptiveMaxPool2d;
use poolgrad::{DType, Error, I32Argmax, Mask, MaxPool2dParams, Plan, TensorMut, TensorRef, Workspace};

fn broadcast(dims: &[usize]) -> ArrayViewD<'static, f32> {
    static ONE: [f32; 1] = [1.0];
    ArrayViewD::from_shape(IxDyn(dims).strides(IxDyn(&vec![0; dims.len()])), &ONE[..]).unwrap()
}

#[test]
fn i32_indices_refuse_planes_beyond_i32() {
    let plane = (1usize << 16) * ((1 << 15) + 1);
    let x = broadcast(&[1, 1, 1 << 16, (1 << 15) + 1]);
    let p = MaxPool2dParams::new([1 << 15, 1 << 15]);
    let e = poolgrad::max_pool2d_with_indices::<f32, i32, _, _>(&x, &p).unwrap_err();
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
    // The I32Argmax mask stores i32 values: the same limit.
    let e = poolgrad::max_pool2d_with_mask::<f32, I32Argmax, _, _>(&x, &p).unwrap_err();
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
    let (mut out, mut idx) = (Array4::<f32>::zeros((1, 1, 1, 1)), Array4::<i64>::zeros((1, 1, 1, 1)));
    let cpu = Cpu::sequential();
    let plan = Plan::new(
        &cpu,
        AdaptiveMaxPool2d {
            input: TensorRef::from_view(x).unwrap(),
            output_size: [1, 1],
            output: TensorMut::from_array(&mut out).unwrap(),
            indices: TensorMut::from_array(&mut idx).unwrap(),
        },
    )
    .unwrap();
    assert_eq!(plan.workspace_size(), 1 << 62);
    let e = plan.run().unwrap_err();
    assert_eq!(e, Error::Allocation { op: "Workspace::new", arg: "workspace", bytes: 1 << 62 });
}
