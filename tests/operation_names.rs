//! Every error names the operation the user called, including the errors raised while a device
//! plans its kernels (phase 1 after the checks), not only the checks' own.
//!
//! The heap of this test binary is capped (`cap`): each case asks for a plan whose window tables
//! need more memory than it is given, so planning fails at a named table with
//! [`Error::Allocation`]. A table named after another operation (the adaptive forward's on the
//! adaptive backward's path, or a generic `"max_pool2d"` or `"pooling"`) fails these tests.
#![cfg(target_pointer_width = "64")]

mod capped_heap;

use capped_heap::{MIB, serial, within};
use ndarray::{Array4, ArrayView4, ShapeBuilder};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{
    AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, MaxPool2dWithIndices, MaxPool2dWithIndicesBackward,
    MaxPool2dWithMask, MaxPool2dWithMaskBackward,
};
use poolgrad::{
    Bitmask, Error, I32Argmax, MaskLayout, MaskMut, MaskRef, MaxPool2dParams, Plan, TensorMut, TensorRef,
};

/// Output rows or columns: a table of one 24-byte window per output position takes 24 MiB.
const LONG: usize = 1 << 20;

/// Budgets: the first fits no table of `LONG` windows; the second fits one (the columns'
/// windows of a forward) but not the column groups planned from it as well.
const NO_TABLE: usize = 4 * MIB;
const ONE_TABLE: usize = 36 * MIB;

/// A view of `dims` whose every element is `value`, without memory behind it.
fn broadcast<E>(value: &'static [E; 1], dims: [usize; 4]) -> ArrayView4<'static, E> {
    ArrayView4::from_shape(dims.strides([0; 4]), &value[..]).unwrap()
}

/// Asserts that `result` failed to allocate the table `arg` of operation `op`.
fn assert_table_error<T: std::fmt::Debug>(result: poolgrad::Result<T>, op: &str, arg: &str) {
    match result {
        Err(Error::Allocation { op: named, arg: table, .. }) => {
            assert_eq!((named, table), (op, arg), "the error names another operation or table")
        }
        other => panic!("{op}: expected the allocation of {arg} to fail, got {other:?}"),
    }
}

fn pooling_1x1() -> MaxPool2dParams {
    MaxPool2dParams::new([1, 1])
}

/// The forwards' window tables: one column per output column, then the column groups.
#[test]
fn adaptive_forward_names_itself() {
    let _serial = serial();
    let x = Array4::<f32>::zeros((1, 1, 1, 1));
    let (mut out, mut idx) = (Array4::<f32>::zeros((1, 1, 1, LONG)), Array4::<i64>::zeros((1, 1, 1, LONG)));
    for (budget, table) in [(NO_TABLE, "windows"), (ONE_TABLE, "column groups")] {
        let op = AdaptiveMaxPool2d {
            input: TensorRef::from_array(&x).unwrap(),
            output_size: [1, LONG],
            output: TensorMut::from_array(&mut out).unwrap(),
            indices: TensorMut::from_array(&mut idx).unwrap(),
        };
        assert_table_error(
            within(budget, || Plan::new(&Cpu::sequential(), op).map(|p| p.workspace_size())),
            "adaptive_max_pool2d",
            table,
        );
    }
}

#[test]
fn max_pool_with_indices_names_itself() {
    let _serial = serial();
    let (mut out, mut idx) = (Array4::<f32>::zeros((1, 1, 1, LONG)), Array4::<i64>::zeros((1, 1, 1, LONG)));
    for (budget, table) in [(NO_TABLE, "windows"), (ONE_TABLE, "column groups")] {
        let op = MaxPool2dWithIndices {
            input: TensorRef::from_view(broadcast(&[0.0f32], [1, 1, 1, LONG])).unwrap(),
            params: pooling_1x1(),
            output: TensorMut::from_array(&mut out).unwrap(),
            indices: TensorMut::from_array(&mut idx).unwrap(),
        };
        let plan = within(budget, || Plan::new(&Cpu::sequential(), op).map(|p| p.workspace_size()));
        assert_table_error(plan, "max_pool2d_with_indices", table);
    }
}

/// A mask forward over `LONG` output columns. The kernel has two taps, so that an `I32Argmax`
/// mask (4 bytes per output position) fits the mask shape.
fn mask_forward_names_itself<L: MaskLayout>() {
    let _serial = serial();
    let shape = poolgrad::geometry::mask_shape(1, 1, [1, 2], [1, LONG]).unwrap();
    let (mut out, mut bytes) = (Array4::<f32>::zeros((1, 1, 1, LONG)), Array4::<i8>::zeros(shape));
    for (budget, table) in [(NO_TABLE, "windows"), (ONE_TABLE, "column groups")] {
        let op = MaxPool2dWithMask {
            input: TensorRef::from_view(broadcast(&[0.0f32], [1, 1, 1, LONG + 1])).unwrap(),
            params: MaxPool2dParams::new([1, 2]).with_stride([1, 1]),
            output: TensorMut::from_array(&mut out).unwrap(),
            mask: MaskMut::new(TensorMut::from_array(&mut bytes).unwrap(), L::default()),
        };
        let plan = within(budget, || Plan::new(&Cpu::sequential(), op).map(|p| p.workspace_size()));
        assert_table_error(plan, "max_pool2d_with_mask", table);
    }
}

#[test]
fn mask_forward_names_itself_i32_argmax() {
    mask_forward_names_itself::<I32Argmax>();
}

#[test]
fn mask_forward_names_itself_bitmask() {
    mask_forward_names_itself::<Bitmask>();
}

/// The backwards' window tables: one row per output row.
#[test]
fn adaptive_backward_names_itself() {
    let _serial = serial();
    // One input pooled to `LONG` rows (adaptive windows may overlap): every index is 0.
    let mut gi = Array4::<f32>::zeros((1, 1, 1, 1));
    let op = AdaptiveMaxPool2dBackward {
        grad_output: TensorRef::from_view(broadcast(&[1.0f32], [1, 1, LONG, 1])).unwrap(),
        self_: TensorRef::from_view(broadcast(&[0.0f32], [1, 1, 1, 1])).unwrap(),
        indices: TensorRef::from_view(broadcast(&[0i64], [1, 1, LONG, 1])).unwrap(),
        grad_input: TensorMut::from_array(&mut gi).unwrap(),
    };
    let plan = within(NO_TABLE, || Plan::new(&Cpu::sequential(), op).map(|p| p.workspace_size()));
    assert_table_error(plan, "adaptive_max_pool2d_backward", "windows");
}

#[test]
fn max_pool_with_indices_backward_names_itself() {
    let _serial = serial();
    let mut gi = Array4::<f32>::zeros((1, 1, LONG, 1));
    let op = MaxPool2dWithIndicesBackward {
        grad_output: TensorRef::from_view(broadcast(&[1.0f32], [1, 1, LONG, 1])).unwrap(),
        self_: TensorRef::from_view(broadcast(&[0.0f32], [1, 1, LONG, 1])).unwrap(),
        indices: TensorRef::from_view(broadcast(&[0i64], [1, 1, LONG, 1])).unwrap(),
        params: pooling_1x1(),
        grad_input: TensorMut::from_array(&mut gi).unwrap(),
    };
    let plan = within(NO_TABLE, || Plan::new(&Cpu::sequential(), op).map(|p| p.workspace_size()));
    assert_table_error(plan, "max_pool2d_with_indices_backward", "windows");
}

/// A mask backward over `LONG` output rows, with a kernel of two taps (see the forward).
fn mask_backward_names_itself<L: MaskLayout>() {
    let _serial = serial();
    let shape = poolgrad::geometry::mask_shape(1, 1, [2, 1], [LONG, 1]).unwrap();
    let mut gi = Array4::<f32>::zeros((1, 1, LONG + 1, 1));
    let op = MaxPool2dWithMaskBackward {
        grad_output: TensorRef::from_view(broadcast(&[1.0f32], [1, 1, LONG, 1])).unwrap(),
        self_: TensorRef::from_view(broadcast(&[0.0f32], [1, 1, LONG + 1, 1])).unwrap(),
        mask: MaskRef::new(TensorRef::from_view(broadcast(&[0i8], shape)).unwrap(), L::default()),
        params: MaxPool2dParams::new([2, 1]).with_stride([1, 1]),
        grad_input: TensorMut::from_array(&mut gi).unwrap(),
    };
    let plan = within(NO_TABLE, || Plan::new(&Cpu::sequential(), op).map(|p| p.workspace_size()));
    assert_table_error(plan, "max_pool2d_with_mask_backward", "windows");
}

#[test]
fn mask_backward_names_itself_i32_argmax() {
    mask_backward_names_itself::<I32Argmax>();
}

#[test]
fn mask_backward_names_itself_bitmask() {
    mask_backward_names_itself::<Bitmask>();
}
