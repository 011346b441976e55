//! Property tests of max pooling (indices and both mask layouts) on the cases of the crate's own
//! testing kit (`poolgrad::testing`), plus what the kit does not check: output sizes counted
//! window by window, the exact `f32` summation order, mask round trips, mask vs indices
//! backwards, strided views and thread counts.

mod common;

use common::{arr_f64, same_bits};
use ndarray::{Array4, ArrayD, ArrayViewMut4, Axis, s};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{MaxPool2dWithMask, MaxPool2dWithMaskBackward};
use poolgrad::testing::{MaskCase, MaxPoolCase, ParamBounds, Shapes, Values, mask_cases, max_pool_cases};
use poolgrad::{
    ArgmaxIndex, Bitmask, I32Argmax, Mask, MaskLayout, MaskMut, MaskRef, Plan, PoolFloat, TensorMut,
    TensorRef,
};
use proptest::prelude::*;

fn shapes() -> Shapes {
    // Up to 20 channels: a second, partial 16-channel block of the bit mask.
    Shapes { batch: 1..=2, channels: 1..=20, height: 1..=9, width: 1..=9 }
}

fn values() -> impl Strategy<Value = Values> {
    prop_oneof![Just(Values::Ties), Just(Values::Distinct), Just(Values::WithNan)]
}

fn index_cases<T: PoolFloat, I: ArgmaxIndex>() -> impl Strategy<Value = MaxPoolCase<T, I>> {
    values().prop_flat_map(|v| {
        max_pool_cases(shapes(), ParamBounds { dilation: 1..=3, ..ParamBounds::default() }, v)
    })
}

/// Rows wide enough for the forward to pool 8 output columns at a time (columns 1 or 2 apart),
/// with dilation, which the narrow shapes above rarely reach.
fn wide_cases<T: PoolFloat, I: ArgmaxIndex>() -> impl Strategy<Value = MaxPoolCase<T, I>> {
    let shapes = Shapes { batch: 1..=2, channels: 1..=3, height: 1..=7, width: 16..=48 };
    let bounds = ParamBounds { stride: 1..=2, dilation: 1..=3, ..ParamBounds::default() };
    values().prop_flat_map(move |v| max_pool_cases(shapes.clone(), bounds.clone(), v))
}

fn layout_cases<T: PoolFloat, L: MaskLayout>() -> impl Strategy<Value = MaskCase<T, L>> {
    values().prop_flat_map(|v| mask_cases(shapes(), ParamBounds::default(), v))
}

fn as4<E: Clone>(a: &ArrayD<E>) -> Array4<E> {
    let v = if a.ndim() == 3 { a.view().insert_axis(Axis(0)) } else { a.view() };
    v.into_dimensionality().expect("3-D or 4-D").to_owned()
}

fn check_indices<T: PoolFloat, I: ArgmaxIndex>(case: &MaxPoolCase<T, I>) -> Result<(), TestCaseError> {
    // Output sizes: the formula against windows counted one by one.
    let x = as4(&case.input);
    let (_, _, h, w) = x.dim();
    let p = &case.params;
    let counted = [0, 1].map(|a| {
        common::pool_len(
            [h, w][a],
            p.kernel()[a],
            p.stride()[a],
            p.padding()[a],
            p.dilation()[a],
            p.ceil_mode(),
        )
    });
    prop_assert_eq!(p.output_size([h, w]).unwrap(), counted);

    let mine = common::max_pool::<T, I, _>(&case.input, &case.params).unwrap();
    case.check_forward(&mine.output, &mine.indices)?;
    case.check_backward(|g| {
        poolgrad::max_pool2d_with_indices_backward(g, &case.input, &case.indices, &case.params).unwrap()
    })?;

    // f32: PyTorch's row-major f32 sums bit for bit; the half types: that sum rounded once.
    let gi = poolgrad::max_pool2d_with_indices_backward(
        &case.grad_output,
        &case.input,
        &case.indices,
        &case.params,
    )
    .unwrap();
    let (go, idx) = (arr_f64(as4(&case.grad_output).view()), as4(&case.indices).mapv(|i| i.to_i64()));
    if T::DTYPE != poolgrad::DType::F64 {
        let want = common::backward_rounded_once::<T>(go.view(), idx.view(), h, w);
        prop_assert!(same_bits(&arr_f64(as4(&gi).view()), &want), "not the row-major f32 sum rounded once");
    }
    Ok(())
}

/// Mask forward and backward in layout `L` against the kit and against the indices path.
fn check_mask<T: PoolFloat, L: MaskLayout>(case: &MaskCase<T, L>) -> Result<(), TestCaseError> {
    let mine = poolgrad::max_pool2d_with_mask(&case.input, &case.params, L::default()).unwrap();
    case.check_forward(&mine.output, &mine.mask)?;
    case.check_backward(|g| poolgrad::max_pool2d_with_mask_backward(g, &case.input, &case.mask).unwrap())?;

    // mask -> indices -> mask round trips, from i64 and from i32 indices.
    let indices = mine.mask.to_indices::<i64>().unwrap();
    let again = Mask::<L, _>::from_indices(&indices, &case.params, case.input.shape()).unwrap();
    prop_assert_eq!(&again, &mine.mask);
    let again32 =
        Mask::<L, _>::from_indices(&indices.mapv(|v| v as i32), &case.params, case.input.shape()).unwrap();
    prop_assert_eq!(&again32, &mine.mask);

    // Backward through the mask equals backward through its indices, bit for bit.
    let via_mask =
        poolgrad::max_pool2d_with_mask_backward(&case.grad_output, &case.input, &case.mask).unwrap();
    let via_idx =
        poolgrad::max_pool2d_with_indices_backward(&case.grad_output, &case.input, &indices, &case.params)
            .unwrap();
    prop_assert!(same_bits(&arr_f64(as4(&via_mask).view()), &arr_f64(as4(&via_idx).view())));
    Ok(())
}

/// Where the mask forward of [`check_views_and_threads`] writes its bytes. Each starts as
/// garbage (77), which the forward must overwrite.
#[derive(Clone, Copy, Debug)]
enum MaskBuffer {
    /// An owned array: contiguous, on the allocator's alignment (`I32Argmax` values are pooled
    /// straight into it).
    Owned,
    /// A contiguous view that starts one byte into its allocation (`I32Argmax` values cannot be
    /// seen as `i32` there).
    Misaligned,
    /// Every other byte of an array twice as wide (computed in the workspace, copied out).
    Strided,
}

/// Mask forward and backward through the plan API: masks in place, misaligned and strided, inputs
/// strided and contiguous, on 1, 2 and 7 threads, all agree bit for bit, and with the kit's
/// reference.
fn check_views_and_threads<T: PoolFloat, L: MaskLayout>(case: &MaskCase<T, L>) -> Result<(), TestCaseError> {
    let (x, grad) = (as4(&case.input), as4(&case.grad_output));
    let (n, c, h, w) = x.dim();
    let out = [grad.dim().2, grad.dim().3];
    let mshape = poolgrad::geometry::mask_shape(n, c, case.params.kernel(), out).unwrap();
    let mlen: usize = mshape.iter().product();
    let run = |cpu: &Cpu, buffer: MaskBuffer| {
        // Forward: input as every other column of a wider array (with the strided mask).
        let strided = matches!(buffer, MaskBuffer::Strided);
        let mut wide = Array4::<T>::from_elem((n, c, h, 2 * w), T::round_from_f64(f64::NAN));
        wide.slice_mut(s![.., .., .., ..;2]).assign(&x);
        let mut output = Array4::<T>::zeros((n, c, out[0], out[1]));
        let mut owned = Array4::<i8>::from_elem(mshape, 77);
        // Words of 4 bytes, so that the view from byte 1 on is misaligned for `i32`.
        let mut words = vec![i32::from_ne_bytes([77; 4]); (mlen + 1).div_ceil(4)];
        let shifted: &mut [i8] = bytemuck::cast_slice_mut(&mut words);
        let mut mask_wide = Array4::<i8>::from_elem((mshape[0], mshape[1], mshape[2], 2 * mshape[3]), 77);
        {
            let input = if strided { wide.slice(s![.., .., .., ..;2]) } else { x.view() };
            let bytes = match buffer {
                MaskBuffer::Owned => owned.view_mut(),
                MaskBuffer::Misaligned => ArrayViewMut4::from_shape(mshape, &mut shifted[1..=mlen]).unwrap(),
                MaskBuffer::Strided => mask_wide.slice_mut(s![.., .., .., ..;2]),
            };
            let op = MaxPool2dWithMask {
                input: TensorRef::from_view(input).unwrap(),
                params: case.params,
                output: TensorMut::from_array(&mut output).unwrap(),
                mask: MaskMut::new(TensorMut::from_view(bytes).unwrap(), L::default()),
            };
            Plan::new(cpu, op).unwrap().run().unwrap();
        }
        assert!(shifted[0] == 77 && shifted[mlen + 1..].iter().all(|&b| b == 77), "wrote outside the view");
        let mask = match buffer {
            MaskBuffer::Owned => owned,
            MaskBuffer::Misaligned => Array4::from_shape_vec(mshape, shifted[1..=mlen].to_vec()).unwrap(),
            MaskBuffer::Strided => mask_wide.slice(s![.., .., .., ..;2]).to_owned(),
        };
        // Backward: grad_input as every other channel.
        let mut gi_wide = Array4::<T>::zeros((n, 2 * c, h, w));
        let channels = |strided: bool| if strided { s![.., ..;2, .., ..] } else { s![.., ..c, .., ..] };
        {
            let op = MaxPool2dWithMaskBackward {
                grad_output: TensorRef::from_array(&grad).unwrap(),
                self_: TensorRef::from_array(&x).unwrap(),
                mask: MaskRef::new(TensorRef::from_array(&mask).unwrap(), L::default()),
                params: case.params,
                grad_input: TensorMut::from_view(gi_wide.slice_mut(channels(strided))).unwrap(),
            };
            Plan::new(cpu, op).unwrap().run().unwrap();
        }
        (arr_f64(output.view()), mask, arr_f64(gi_wide.slice(channels(strided))))
    };
    let base = run(&Cpu::sequential(), MaskBuffer::Owned);
    let reference = case.mask.as_array().view().into_shape_with_order(mshape).unwrap();
    prop_assert_eq!(&base.1.view(), &reference, "the mask bytes differ from the reference");
    for (cpu, buffer) in [
        (&Cpu::sequential(), MaskBuffer::Strided),
        (&Cpu::sequential(), MaskBuffer::Misaligned),
        (common::cpu_with_threads(2), MaskBuffer::Owned),
        (common::cpu_with_threads(2), MaskBuffer::Misaligned),
        (common::cpu_with_threads(7), MaskBuffer::Strided),
        (common::cpu_with_threads(7), MaskBuffer::Owned),
    ] {
        let other = run(cpu, buffer);
        prop_assert!(same_bits(&base.0, &other.0), "forward values differ ({:?})", buffer);
        prop_assert_eq!(&base.1, &other.1, "mask bytes differ ({:?})", buffer);
        prop_assert!(same_bits(&base.2, &other.2), "backward differs ({:?})", buffer);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test] fn indices_f32_i64(c in index_cases::<f32, i64>()) { check_indices(&c)?; }
    #[test] fn indices_f64_i32(c in index_cases::<f64, i32>()) { check_indices(&c)?; }
    #[test] fn indices_f16_i64(c in index_cases::<half::f16, i64>()) { check_indices(&c)?; }
    #[test] fn indices_bf16_i32(c in index_cases::<half::bf16, i32>()) { check_indices(&c)?; }
    #[test] fn wide_rows_f32_i64(c in wide_cases::<f32, i64>()) { check_indices(&c)?; }
    #[test] fn wide_rows_bf16_i32(c in wide_cases::<half::bf16, i32>()) { check_indices(&c)?; }
    #[test] fn i32argmax_f32(c in layout_cases::<f32, I32Argmax>()) { check_mask(&c)?; }
    #[test] fn i32argmax_bf16(c in layout_cases::<half::bf16, I32Argmax>()) { check_mask(&c)?; }
    #[test] fn bitmask_f32(c in layout_cases::<f32, Bitmask>()) { check_mask(&c)?; }
    #[test] fn bitmask_f16(c in layout_cases::<half::f16, Bitmask>()) { check_mask(&c)?; }
    #[test] fn bitmask_f64(c in layout_cases::<f64, Bitmask>()) { check_mask(&c)?; }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test] fn views_threads_i32argmax_f32(c in layout_cases::<f32, I32Argmax>()) { check_views_and_threads(&c)?; }
    #[test] fn views_threads_bitmask_f32(c in layout_cases::<f32, Bitmask>()) { check_views_and_threads(&c)?; }
    #[test] fn views_threads_bitmask_bf16(c in layout_cases::<half::bf16, Bitmask>()) { check_views_and_threads(&c)?; }
}

/// A bit mask as no forward writes it: a few bytes of a forward's mask changed, so that some
/// positions of some 16-channel blocks have a channel with no bit, with several, or with a bit at
/// an offset in padding, while the other blocks stay as written. Every set bit at an offset inside
/// the input adds its gradient; checked against a loop over the documented layout
/// (`ascend-semantics.md` A.3), summed in `f32` in row-major output order and rounded once.
fn check_any_bitmask<T: PoolFloat>(case: &MaskCase<T, Bitmask>, edits: &[Edit]) -> Result<(), TestCaseError> {
    let mut bytes = case.mask.as_array().clone();
    // Bytes past the blocks' words are ignored: edit the words.
    let (x, pooled) = (as4(&case.input), as4(&case.output));
    let [kh, kw] = case.params.kernel();
    let words_per_row = ((pooled.dim().2 * pooled.dim().3).div_ceil(16) + 1) * 16;
    let used = 2 * x.dim().0 * x.dim().1.div_ceil(16) * kh * kw * words_per_row;
    for e in edits {
        let byte = &mut bytes.as_slice_mut().unwrap()[e.at % used];
        *byte = if e.clear { *byte & !(e.bits as i8) } else { *byte ^ e.bits as i8 };
    }
    let input_shape = case.input.shape().to_vec();
    let mask = Mask::<Bitmask, _>::from_raw(bytes, &case.params, &input_shape).unwrap();
    // Non-integer gradients, so that the order of the sums shows.
    let grad = case.grad_output.mapv(|g| T::round_from_f64(g.to_f64_exact() * 0.371 + 0.093));
    let gi = poolgrad::max_pool2d_with_mask_backward(&grad, &case.input, &mask).unwrap();

    let go = arr_f64(as4(&grad).view());
    let (n, c, h, w) = x.dim();
    let (ho, wo) = (go.dim().2, go.dim().3);
    let ([sh, sw], [ph, pw]) = (case.params.stride(), case.params.padding());
    let raw = mask.as_array().as_slice().unwrap();
    let mut want = Array4::<f32>::zeros((n, c, h, w));
    for (ni, ci) in (0..n).flat_map(|ni| (0..c).map(move |ci| (ni, ci))) {
        for (oh, ow) in (0..ho).flat_map(|oh| (0..wo).map(move |ow| (oh, ow))) {
            for (i, j) in (0..kh).flat_map(|i| (0..kw).map(move |j| (i, j))) {
                let word =
                    (((ni * c.div_ceil(16) + ci / 16) * kh * kw + i * kw + j) * words_per_row) + oh * wo + ow;
                let value = u16::from_le_bytes([raw[2 * word] as u8, raw[2 * word + 1] as u8]);
                let (ih, iw) = ((oh * sh + i) as isize - ph as isize, (ow * sw + j) as isize - pw as isize);
                let inside = (0..h as isize).contains(&ih) && (0..w as isize).contains(&iw);
                if value >> (ci % 16) & 1 == 1 && inside {
                    want[[ni, ci, ih as usize, iw as usize]] += go[[ni, ci, oh, ow]] as f32;
                }
            }
        }
    }
    let want = want.mapv(|v| T::from_acc(num_traits::cast(v).unwrap()).to_f64_exact());
    prop_assert!(same_bits(&arr_f64(as4(&gi).view()), &want), "not every set bit, in row-major order");
    Ok(())
}

/// Clears or flips `bits` of byte `at` (modulo the bytes in use).
#[derive(Debug, Clone)]
struct Edit {
    at: usize,
    bits: u8,
    clear: bool,
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit =
        (any::<usize>(), 1..=255u8, any::<bool>()).prop_map(|(at, bits, clear)| Edit { at, bits, clear });
    proptest::collection::vec(edit, 0..=4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test] fn any_bitmask_f32(c in layout_cases::<f32, Bitmask>(), e in edits()) { check_any_bitmask(&c, &e)?; }
    #[test] fn any_bitmask_bf16(c in layout_cases::<half::bf16, Bitmask>(), e in edits()) { check_any_bitmask(&c, &e)?; }
}
