//! The first-reach API: forms without annotations, the prelude, infallible conversions, a
//! workspace that grows, mask layout conversion. Expected values come from hand-worked examples
//! and from `poolgrad::testing::reference` (plain loops), never from the forms under test.

use ndarray::{Array3, Array4, ArrayD, IxDyn, array};
use poolgrad::prelude::*;
use poolgrad::testing::reference;
use poolgrad::testing::{ParamBounds, Shapes, Values, mask_cases};
use proptest::prelude::*;

/// A 1x2x6x6 input with distinct values in each plane: `(c * 37 + h * 6 + w * 5) % 36` (checked
/// by the next test), so no window has a tie.
fn input() -> Array4<f32> {
    Array4::from_shape_fn((1, 2, 6, 6), |(_, c, h, w)| ((c * 37 + h * 6 + w * 5) % 36) as f32)
}

#[test]
fn the_input_has_distinct_values_per_plane() {
    let x = input();
    for plane in x.outer_iter().next().unwrap().outer_iter() {
        let mut v: Vec<i32> = plane.iter().map(|&v| v as i32).collect();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), 36);
    }
}

/// The forms of the snippet, each against the reference.
#[test]
fn first_reach_forms_agree_with_the_reference() -> Result<(), Error> {
    let x = input();
    let g7 = Array4::from_shape_fn((1, 2, 4, 4), |(_, c, h, w)| (c + 2 * h + 3 * w) as f32 - 4.0);

    let p = adaptive_max_pool2d(&x, [4, 4])?;
    let (want_v, want_i) = reference::adaptive_max_pool2d(&x, [4, 4])?;
    assert_eq!((&p.output, &p.indices), (&want_v, &want_i));
    let gx = adaptive_max_pool2d_backward(&g7, &x, &p.indices)?;
    assert_eq!(gx, reference::adaptive_max_pool2d_backward(&g7, &x, &want_i)?);

    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let q = max_pool2d_with_indices(&x, &params)?;
    let (want_v, want_i) = reference::max_pool2d_with_indices(&x, &params)?;
    assert_eq!((&q.output, &q.indices), (&want_v, &want_i));
    let g3 = Array4::from_shape_fn((1, 2, 3, 3), |(_, c, h, w)| (1 + c + h * 3 + w) as f32);
    let want_gx = reference::max_pool2d_with_indices_backward(&g3, &x, &want_i, &params)?;
    assert_eq!(max_pool2d_with_indices_backward(&g3, &x, &q.indices, &params)?, want_gx);

    let m = max_pool2d_with_mask(&x, &params, I32Argmax)?;
    assert_eq!(m.output, want_v);
    assert_eq!(max_pool2d_with_mask_backward(&g3, &x, &m.mask)?, want_gx);
    let legacy: Mask<Bitmask, _> = m.mask.convert()?;
    assert_eq!(legacy.to_indices::<i64>()?, want_i);
    assert_eq!(max_pool2d_with_mask_backward(&g3, &x, &legacy)?, want_gx);

    let cpu = Cpu::with_threads(2)?;
    assert_eq!(poolgrad::on(&cpu).max_pool2d_with_indices(&x, &params)?.indices, want_i);
    assert_eq!(poolgrad::on(&cpu).adaptive_max_pool2d(&x, [4, 4])?.output, p.output);
    Ok(())
}

/// The `i32` twins give the same positions as `i64`, in `i32`, on every device form.
#[test]
fn i32_twins_give_the_same_positions() -> Result<(), Error> {
    let x = input();
    let cpu = Cpu::sequential();
    let params = MaxPool2dParams::new([2, 3]).with_stride([1, 2]).with_dilation([2, 1]);
    let (_, want) = reference::max_pool2d_with_indices(&x, &params)?;
    let want32 = want.mapv(|i| i32::try_from(i).unwrap());
    assert_eq!(max_pool2d_with_indices_i32(&x, &params)?.indices, want32);
    assert_eq!(poolgrad::on(&cpu).max_pool2d_with_indices_i32(&x, &params)?.indices, want32);
    let (_, want) = reference::adaptive_max_pool2d(&x, [5, 3])?;
    let want32 = want.mapv(|i| i32::try_from(i).unwrap());
    assert_eq!(adaptive_max_pool2d_i32(&x, [5, 3])?.indices, want32);
    assert_eq!(poolgrad::on(&cpu).adaptive_max_pool2d_i32(&x, [5, 3])?.indices, want32);
    Ok(())
}

/// Owned arrays, views, sliced views and mutable views all pass to the same forms as they are
/// (`&ArrayRef`), on the default device and through `on`. The expected gradient is worked by
/// hand: each 2x2 window of the column-reversed input selects its largest value.
#[test]
fn arrays_views_and_mutable_views_pass_as_they_are() -> Result<(), Error> {
    let x: Array3<f32> = array![[[1.0, 0.0, 9.0, 4.0], [2.0, 3.0, 5.0, 8.0]]];
    let reversed = x.slice(ndarray::s![.., .., ..;-1]); // [[4, 9, 0, 1], [8, 5, 3, 2]]
    let params = MaxPool2dParams::new([2, 2]);
    let p = max_pool2d_with_indices(&reversed, &params)?;
    assert_eq!(p.output, array![[[9.0, 3.0]]]);
    assert_eq!(p.indices, array![[[1, 6]]]);
    let g = array![[[1.5f32, -2.0]]];
    let want = array![[[0.0, 1.5, 0.0, 0.0], [0.0, 0.0, -2.0, 0.0]]];
    assert_eq!(max_pool2d_with_indices_backward(&g.view(), &reversed, &p.indices.view(), &params)?, want);
    let mut buffer = Array3::<f32>::from_elem((1, 2, 8), 7.0);
    let mut every_other = buffer.slice_mut(ndarray::s![.., .., ..;2]);
    let cpu = Cpu::sequential();
    poolgrad::on(&cpu).max_pool2d_with_indices_backward_into(
        &g,
        &reversed,
        &p.indices,
        &params,
        &mut every_other,
    )?;
    assert_eq!(every_other, want);
    assert!(buffer.slice(ndarray::s![.., .., 1..;2]).iter().all(|&v| v == 7.0)); // untouched
    Ok(())
}

/// A hand-worked 3-D case: ranks are kept, `Array3` compiles, and the mask layout is chosen by
/// value.
#[test]
fn three_d_arrays_and_layout_values() -> Result<(), Error> {
    let x: Array3<f64> = array![[[1.0, 4.0, 2.0], [3.0, 0.0, 5.0], [6.0, 8.0, 7.0]]];
    let params = MaxPool2dParams::new([2, 2]).with_stride([1, 1]);
    let m = max_pool2d_with_mask(&x, &params, Bitmask)?;
    // Windows (row-major): {1,4,3,0} -> 4 at 1; {4,2,0,5} -> 5 at 5; {3,0,6,8} -> 8 at 7; {0,5,8,7} -> 8 at 7.
    assert_eq!(m.output, array![[[4.0, 5.0], [8.0, 8.0]]]);
    assert_eq!(m.mask.to_indices::<i64>()?, array![[[1, 5], [7, 7]]]);
    let g = array![[[1.0, 2.0], [3.0, 4.0]]];
    let gx = max_pool2d_with_mask_backward(&g, &x, &m.mask)?;
    assert_eq!(gx, array![[[0.0, 1.0, 0.0], [0.0, 0.0, 2.0], [0.0, 7.0, 0.0]]]);
    Ok(())
}

/// `IxDyn` arrays still work, and their rank is checked at run time.
#[test]
fn dynamic_rank_is_checked_at_run_time() {
    let x = ArrayD::<f32>::zeros(IxDyn(&[2, 3, 4, 4]));
    let p = adaptive_max_pool2d(&x, [2, 2]).unwrap();
    assert_eq!(p.indices.shape(), &[2, 3, 2, 2]);
    let x5 = ArrayD::<f32>::zeros(IxDyn(&[1, 2, 3, 4, 4]));
    let e = adaptive_max_pool2d(&x5, [2, 2]).unwrap_err();
    assert!(matches!(e, Error::Rank { arg: "input", got: 5, .. }), "{e:?}");
    // A view of rank 5 is a 3-D pooling's: the views take it, the 2-D operations do not.
    assert_eq!(TensorRef::from_array(&x5).unwrap().dims(), [1, 2, 3, 4, 4]);
    let x6 = ArrayD::<f32>::zeros(IxDyn(&[1, 1, 2, 3, 4, 4]));
    let e = TensorRef::from_array(&x6).unwrap_err();
    assert!(matches!(e, Error::Rank { got: 6, .. }), "{e:?}");
}

#[test]
fn cpu_with_zero_threads_is_an_error_naming_the_argument() {
    let e = Cpu::with_threads(0).unwrap_err();
    assert_eq!(e.to_string(), "Cpu::with_threads: `threads` is 0, expected at least 1");
    #[cfg(feature = "rayon")]
    assert_eq!(Cpu::with_threads(3).unwrap().threads(), 3);
}

/// Infallible conversions view the same elements as the fallible constructors.
#[test]
fn conversions_view_the_same_elements() {
    let x = input();
    let from = TensorRef::from(&x);
    let checked = TensorRef::from_array(&x).unwrap();
    assert_eq!((from.shape(), from.ndim()), (checked.shape(), checked.ndim()));
    assert_eq!(from.view(), checked.view());
    let y = Array3::from_shape_fn((2, 3, 4), |(c, h, w)| (c * 12 + h * 4 + w) as i64);
    let t: TensorRef<'_, i64> = y.view().into();
    assert_eq!((t.dims(), t.view()[[0, 1, 2, 3]]), (vec![2, 3, 4], 23));
    let mut z = Array4::<f32>::zeros((1, 1, 2, 2));
    {
        let mut m: TensorMut<'_, f32> = (&mut z).into();
        m.view_mut()[[0, 0, 1, 0]] = 5.0;
    }
    assert_eq!(z[[0, 0, 1, 0]], 5.0);
}

/// One workspace, grown on demand, reused by plans of different sizes; results equal the
/// reference each time. (bf16 gradients are summed in an f32 scratch plane per thread, so these
/// plans need a workspace.)
#[test]
fn a_workspace_grows_on_demand() -> Result<(), Error> {
    use half::bf16;
    use poolgrad::op::MaxPool2dWithIndicesBackward;
    let cpu = Cpu::sequential();
    let mut ws = Workspace::new(&cpu, 0)?;
    let params = MaxPool2dParams::new([2, 2]);
    let mut sizes = Vec::new();
    for side in [4usize, 16, 8, 32] {
        let x = Array4::from_shape_fn((1, 20, side, side), |(_, c, h, w)| {
            bf16::from_f32(((c * 7 + h * 3 + w * 5) % 13) as f32)
        });
        let (_, idx) = reference::max_pool2d_with_indices(&x, &params)?;
        let g = Array4::from_shape_fn(idx.raw_dim(), |(_, c, h, w)| bf16::from_f32((c + h + w) as f32));
        let mut gi = Array4::<bf16>::zeros(x.raw_dim());
        let op = MaxPool2dWithIndicesBackward {
            grad_output: (&g).into(),
            self_: (&x).into(),
            indices: (&idx).into(),
            params,
            grad_input: (&mut gi).into(),
        };
        let plan = Plan::new(&cpu, op)?;
        let need = plan.workspace_size();
        assert!(need > 0, "a bf16 backward sums in a scratch plane");
        plan.run_in(&mut ws)?;
        assert!(ws.len() >= need, "{} < {need}", ws.len());
        sizes.push(ws.len());
        assert_eq!(gi, reference::max_pool2d_with_indices_backward(&g, &x, &idx, &params)?);
    }
    // Grown for the larger planes, never shrunk for the smaller one.
    assert!(sizes[1] > sizes[0] && sizes[2] == sizes[1] && sizes[3] > sizes[2], "{sizes:?}");
    Ok(())
}

#[test]
fn ensure_grows_a_workspace_and_never_shrinks_it() -> Result<(), Error> {
    let cpu = Cpu::sequential();
    let mut ws = Workspace::new(&cpu, 0)?;
    assert_eq!(ws.len(), 0);
    ws.ensure(&cpu, 1000)?;
    assert!((1000..1000 + 64).contains(&ws.len()), "{}", ws.len()); // whole 64-byte lines
    let grown = ws.len();
    ws.ensure(&cpu, 10)?;
    ws.ensure(&cpu, grown)?;
    assert_eq!(ws.len(), grown);
    ws.ensure(&cpu, grown + 1)?;
    assert!(ws.len() > grown);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Converting a mask between layouts keeps every selection, and back again gives the same
    /// bytes.
    #[test]
    fn mask_conversion_round_trips(
        case in mask_cases::<f32, I32Argmax, ndarray::IxDyn>(Shapes { channels: 1..=20, ..Shapes::default() }, ParamBounds::default(), Values::Ties),
    ) {
        let legacy: Mask<Bitmask, _> = case.mask.convert().unwrap();
        prop_assert_eq!(legacy.to_indices::<i64>().unwrap(), case.mask.to_indices::<i64>().unwrap());
        prop_assert_eq!(legacy.params(), case.mask.params());
        prop_assert_eq!(legacy.convert::<I32Argmax>().unwrap(), case.mask.clone());
    }
}

/// A 1x1 kernel over a 16x16 plane: the mask has (256 / 16 + 1) * 32 = 544 bytes, too few for
/// 256 `I32Argmax` values (1024 bytes). Converting a `Bitmask` to that layout is refused as making
/// one is.
#[test]
fn a_mask_that_cannot_hold_the_layout_is_refused() {
    let x = Array3::<f32>::zeros((1, 16, 16));
    let params = MaxPool2dParams::new([1, 1]);
    let m = max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
    let e = m.mask.convert::<I32Argmax>().unwrap_err();
    let made = max_pool2d_with_mask(&x, &params, I32Argmax).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { op: "Mask::convert", .. }), "{e:?}");
    assert_eq!(e.to_string().split_once(": ").unwrap().1, made.to_string().split_once(": ").unwrap().1);
}

/// Raw `I32Argmax` bytes may hold a value outside its window (no forward writes one): a
/// `Bitmask` cannot encode it, and the conversion says where.
#[test]
fn a_raw_value_outside_its_window_cannot_become_a_bitmask() {
    let params = MaxPool2dParams::new([2, 2]);
    // Input [1, 4, 4] pooled to 2x2; output (0, 0) reads positions 0, 1, 4, 5. Value 15 is in
    // the plane but in the last window.
    let shape = poolgrad::geometry::mask_shape(1, 1, [2, 2], [2, 2]).unwrap();
    let mut bytes = ndarray::Array::<i8, _>::zeros((shape[1], shape[2], shape[3]));
    let values: [i32; 4] = [15, 2, 8, 10];
    for (k, v) in values.iter().enumerate() {
        for (b, byte) in v.to_le_bytes().iter().enumerate() {
            bytes[[0, 0, 4 * k + b]] = *byte as i8;
        }
    }
    let raw = Mask::<I32Argmax, _>::from_raw(bytes, &params, &[1, 4, 4]).unwrap();
    assert_eq!(raw.to_indices::<i64>().unwrap(), array![[[15, 2], [8, 10]]]);
    let e = raw.convert::<Bitmask>().unwrap_err();
    // The value is the mask's: the caller passed no `indices`.
    assert!(matches!(e, Error::IndexNotInWindow { op: "Mask::convert", arg: "mask", .. }), "{e:?}");
    assert!(e.to_string().starts_with("Mask::convert: `mask` holds 15 at position [0, 0, 0]"), "{e}");
}
