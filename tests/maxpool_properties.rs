//! Property tests of max pooling (indices and both mask layouts) against the independent
//! reference in `common`.

mod common;

use common::{arr_f64, arr_to, same_bits};
use ndarray::{Array4, s};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{MaxPool2dWithMask, MaxPool2dWithMaskBackward};
use poolgrad::{
    ArgmaxIndex, Bitmask, Error, I32Argmax, Mask, MaskLayout, MaskMut, MaskRef, MaxPool2dParams, Plan,
    PoolFloat, TensorMut, TensorRef,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    x: Array4<f64>,
    params: MaxPool2dParams,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    ceil: bool,
}

impl Case {
    /// The pooled size by the reference count, if every window fits.
    fn out(&self) -> Option<[usize; 2]> {
        let (_, _, h, w) = self.x.dim();
        let ho = common::pool_len(h, self.k[0], self.s[0], self.p[0], self.d[0], self.ceil);
        let wo = common::pool_len(w, self.k[1], self.s[1], self.p[1], self.d[1], self.ceil);
        (ho > 0 && wo > 0).then_some([ho, wo])
    }

    fn grad(&self, out: [usize; 2]) -> Array4<f64> {
        let (n, c, _, _) = self.x.dim();
        Array4::from_shape_fn((n, c, out[0], out[1]), |(b, ch, i, j)| {
            ((b * 7 + ch * 5 + i * 3 + j) % 13) as f64 - 6.0
        })
    }
}

/// Random cases; `max_dilation` 1 for the mask operations. Channels up to 20 cover a second
/// 16-channel block of the bit mask.
fn case(max_dilation: usize) -> impl Strategy<Value = Case> {
    let axis = (1usize..=4, 1usize..=3, 1..=max_dilation)
        .prop_flat_map(|(k, s, d)| (Just(k), Just(s), 0..=k / 2, Just(d)));
    (1usize..=2, 1usize..=20, 1usize..=9, 1usize..=9, axis.clone(), axis, any::<bool>(), any::<bool>())
        .prop_flat_map(|(n, c, h, w, (kh, sh, ph, dh), (kw, sw, pw, dw), ceil, ties)| {
            let value = if ties {
                (-2i32..2).prop_map(f64::from).boxed()
            } else {
                (-500i32..500).prop_map(|v| f64::from(v) / 4.0).boxed()
            };
            proptest::collection::vec(value, n * c * h * w).prop_map(move |xs| {
                let (k, s, p, d) = ([kh, kw], [sh, sw], [ph, pw], [dh, dw]);
                Case {
                    x: Array4::from_shape_vec((n, c, h, w), xs).unwrap(),
                    params: MaxPool2dParams::new(k)
                        .with_stride(s)
                        .with_padding(p)
                        .with_dilation(d)
                        .with_ceil_mode(ceil),
                    k,
                    s,
                    p,
                    d,
                    ceil,
                }
            })
        })
}

/// Windows of a valid pooling that read only padding exist only with dilation; the crate
/// rejects them (PyTorch returns an index outside the plane for them).
fn reads_only_padding(case: &Case, out: [usize; 2]) -> bool {
    let (_, _, h, w) = case.x.dim();
    let empty = |a: usize, n: usize, o: usize| {
        (0..case.k[a]).all(|i| {
            let t = (o * case.s[a] + i * case.d[a]) as i64 - case.p[a] as i64;
            t < 0 || t >= n as i64
        })
    };
    (0..out[0]).any(|o| empty(0, h, o)) || (0..out[1]).any(|o| empty(1, w, o))
}

fn check_forward<T: PoolFloat, I: ArgmaxIndex>(case: &Case) -> Result<(), TestCaseError> {
    let x = arr_to::<T>(&case.x);
    let result = poolgrad::max_pool2d_with_indices::<T, I, _, _>(&x, &case.params);
    let Some(out) = case.out() else {
        prop_assert!(matches!(result, Err(Error::OutputTooSmall { .. })), "{result:?}");
        return Ok(());
    };
    if reads_only_padding(case, out) {
        prop_assert!(matches!(result, Err(Error::InvalidParameter { arg: "dilation", .. })), "{result:?}");
        return Ok(());
    }
    let pooled = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(case.params.output_size([case.x.dim().2, case.x.dim().3]).unwrap(), out);
    let (vals, idx) = common::max_pool_forward(arr_f64(x.view()).view(), case.k, case.s, case.p, case.d, out);
    prop_assert!(same_bits(&arr_f64(pooled.output.view()), &vals));
    prop_assert_eq!(pooled.indices.mapv(|v| v.to_i64()), idx.clone());

    let grad = case.grad(out);
    let gi =
        poolgrad::max_pool2d_with_indices_backward(&arr_to::<T>(&grad), &x, &pooled.indices, &case.params)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    common::check_scatter::<T>(&arr_f64(gi.view()), &grad, &idx)
}

/// Mask forward and backward in layout `L` against the indices path.
fn check_mask<T: PoolFloat, L: MaskLayout>(case: &Case) -> Result<(), TestCaseError> {
    let x = arr_to::<T>(&case.x);
    let Some(out) = case.out() else { return Ok(()) };
    let dims = case.x.shape().to_vec();
    let result = poolgrad::max_pool2d_with_mask::<T, L, _, _>(&x, &case.params);
    let capacity = case.k[0] * case.k[1] * (out[0] * out[1]).div_ceil(16).saturating_add(1) * 32;
    if L::NAME == "I32Argmax" && capacity < 4 * out[0] * out[1] {
        prop_assert!(matches!(result, Err(Error::InvalidParameter { arg: "mask", .. })), "{result:?}");
        return Ok(());
    }
    let pooled = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
    let reference = poolgrad::max_pool2d_with_indices::<T, i64, _, _>(&x, &case.params).unwrap();
    prop_assert!(same_bits(&arr_f64(pooled.output.view()), &arr_f64(reference.output.view())));

    // mask -> indices -> mask round trip, and the forward's mask equals the encoder's.
    let decoded = pooled.mask.to_indices::<i64>().map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&decoded, &reference.indices);
    let encoded = Mask::<L, _>::from_indices(&reference.indices, &case.params, &dims).unwrap();
    prop_assert_eq!(encoded.as_array(), pooled.mask.as_array());
    let encoded32 =
        Mask::<L, _>::from_indices(&reference.indices.mapv(|v| v as i32), &case.params, &dims).unwrap();
    prop_assert_eq!(encoded32, encoded);

    // Backward through the mask equals backward through the indices, bit for bit.
    let grad = arr_to::<T>(&case.grad(out));
    let via_mask = poolgrad::max_pool2d_with_mask_backward(&grad, &x, &pooled.mask, &case.params).unwrap();
    let via_idx =
        poolgrad::max_pool2d_with_indices_backward(&grad, &x, &reference.indices, &case.params).unwrap();
    prop_assert!(same_bits(&arr_f64(via_mask.view()), &arr_f64(via_idx.view())));
    Ok(())
}

/// Mask forward and backward through the plan API: strided and permuted views equal contiguous
/// ones, and 1, 2 and 7 threads agree bit for bit.
fn check_views_and_threads<T: PoolFloat, L: MaskLayout>(case: &Case) -> Result<(), TestCaseError> {
    let Some(out) = case.out() else { return Ok(()) };
    let capacity = case.k[0] * case.k[1] * ((out[0] * out[1]).div_ceil(16) + 1) * 32;
    if L::NAME == "I32Argmax" && capacity < 4 * out[0] * out[1] {
        return Ok(());
    }
    let (n, c, h, w) = case.x.dim();
    let x = arr_to::<T>(&case.x);
    let grad = arr_to::<T>(&case.grad(out));
    let mshape = poolgrad::geometry::mask_shape(n, c, case.k, out).unwrap();
    let run = |cpu: &Cpu, strided: bool| {
        // Forward: input as every other column of a wider array, mask as every other byte.
        let mut wide = Array4::<T>::from_elem((n, c, h, 2 * w), T::nan());
        wide.slice_mut(s![.., .., .., ..;2]).assign(&x);
        let mut output = Array4::<T>::zeros((n, c, out[0], out[1]));
        let mut mask_wide = Array4::<i8>::from_elem((mshape[0], mshape[1], mshape[2], 2 * mshape[3]), 77);
        {
            let input = if strided { wide.slice(s![.., .., .., ..;2]) } else { x.view() };
            let bytes = if strided {
                mask_wide.slice_mut(s![.., .., .., ..;2])
            } else {
                mask_wide.slice_mut(s![.., .., .., ..mshape[3]])
            };
            let op = MaxPool2dWithMask {
                input: TensorRef::from_view(input).unwrap(),
                params: case.params,
                output: TensorMut::from_array(&mut output).unwrap(),
                mask: MaskMut::<L>::new(TensorMut::from_view(bytes).unwrap()),
            };
            Plan::new(cpu, op).unwrap().run().unwrap();
        }
        let mask = if strided {
            mask_wide.slice(s![.., .., .., ..;2]).to_owned()
        } else {
            mask_wide.slice(s![.., .., .., ..mshape[3]]).to_owned()
        };
        // Backward: grad_input as every other channel.
        let mut gi_wide = Array4::<T>::zeros((n, 2 * c, h, w));
        {
            let target = if strided {
                gi_wide.slice_mut(s![.., ..;2, .., ..])
            } else {
                gi_wide.slice_mut(s![.., ..c, .., ..])
            };
            let op = MaxPool2dWithMaskBackward {
                grad_output: TensorRef::from_array(&grad).unwrap(),
                self_: TensorRef::from_array(&x).unwrap(),
                mask: MaskRef::<L>::new(TensorRef::from_array(&mask).unwrap()),
                params: case.params,
                grad_input: TensorMut::from_view(target).unwrap(),
            };
            Plan::new(cpu, op).unwrap().run().unwrap();
        }
        let gi = if strided {
            gi_wide.slice(s![.., ..;2, .., ..]).to_owned()
        } else {
            gi_wide.slice(s![.., ..c, .., ..]).to_owned()
        };
        (arr_f64(output.view()), mask, arr_f64(gi.view()))
    };
    let base = run(&Cpu::sequential(), false);
    for (cpu, strided) in [
        (&Cpu::sequential(), true),
        (common::cpu_with_threads(2), false),
        (common::cpu_with_threads(7), true),
    ] {
        let other = run(cpu, strided);
        prop_assert!(same_bits(&base.0, &other.0), "forward values differ");
        prop_assert_eq!(&base.1, &other.1);
        prop_assert!(same_bits(&base.2, &other.2), "backward differs");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test] fn indices_f32_i64(c in case(3)) { check_forward::<f32, i64>(&c)?; }
    #[test] fn indices_f64_i32(c in case(3)) { check_forward::<f64, i32>(&c)?; }
    #[test] fn indices_f16_i64(c in case(3)) { check_forward::<half::f16, i64>(&c)?; }
    #[test] fn indices_bf16_i32(c in case(3)) { check_forward::<half::bf16, i32>(&c)?; }
    #[test] fn i32argmax_f32(c in case(1)) { check_mask::<f32, I32Argmax>(&c)?; }
    #[test] fn i32argmax_bf16(c in case(1)) { check_mask::<half::bf16, I32Argmax>(&c)?; }
    #[test] fn bitmask_f32(c in case(1)) { check_mask::<f32, Bitmask>(&c)?; }
    #[test] fn bitmask_f16(c in case(1)) { check_mask::<half::f16, Bitmask>(&c)?; }
    #[test] fn bitmask_f64(c in case(1)) { check_mask::<f64, Bitmask>(&c)?; }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test] fn views_threads_i32argmax_f32(c in case(1)) { check_views_and_threads::<f32, I32Argmax>(&c)?; }
    #[test] fn views_threads_bitmask_f32(c in case(1)) { check_views_and_threads::<f32, Bitmask>(&c)?; }
    #[test] fn views_threads_bitmask_bf16(c in case(1)) { check_views_and_threads::<half::bf16, Bitmask>(&c)?; }
}
