//! Max unpooling, its backward and the max poolings' double backwards on the Ascend backend
//! (`aclnnMaxUnpool2d` / `3d` and their backwards), end to end against the CPU backend: through
//! the CANN test double (whose ScatterElements lets the *first* of repeated indices win, the
//! opposite of poolgrad's rule, so that only poolgrad's own handling of repeats can make the
//! results equal) and through a real NPU when one is present.
#![cfg(feature = "ascend")]

mod ascend;

use ascend::{Double, on_every_device};
use half::f16;
use ndarray::{Array, Array2, Array3, Array4, Array5, ArrayD, Dimension, IxDyn, s};
use poolgrad::device::ascend::Ascend;
use poolgrad::device::cpu::Cpu;
use poolgrad::{
    ArgmaxIndex, AscendError, DeviceLimitKind, Error, MaxPool2dParams, MaxPool3dParams, PoolFloat,
};

fn bits<T: bytemuck::Pod, D: Dimension>(a: &Array<T, D>) -> Vec<u8> {
    bytemuck::cast_slice(a.as_standard_layout().as_slice().unwrap()).to_vec()
}

/// Small integers from a xorshift stream, exact in every type.
fn values<T: PoolFloat, D: Dimension>(dims: D, seed: u64) -> Array<T, D> {
    let mut s = seed | 1;
    let v = (0..dims.size()).map(|_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        T::round_from_f64((s % 61) as f64 - 30.0)
    });
    Array::from_shape_vec(dims, v.collect()).unwrap()
}

/// Indices in `0..full` with many repeats (and distinct values at them), from a xorshift stream.
fn crowded<I: ArgmaxIndex, D: Dimension>(dims: D, full: usize, seed: u64) -> Array<I, D> {
    let mut s = seed | 1;
    let v = (0..dims.size()).map(|_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        I::try_from_flat((s % full as u64) as usize).unwrap()
    });
    Array::from_shape_vec(dims, v.collect()).unwrap()
}

/// The unpooling pair and the double backward on `npu` equal the CPU's bit for bit, 1-D, 2-D and 3-D,
/// with indices from overlapping max poolings (repeats of equal values) and crowded ones
/// (repeats of different values).
fn matches_cpu<T: PoolFloat, I: ArgmaxIndex>(npu: &Ascend, backward: bool) {
    let cpu = Cpu::sequential();
    let (dev, host) = (poolgrad::on(npu), poolgrad::on(&cpu));
    for seed in 1..6u64 {
        // 2-D: a k3 s2 p1 pooling of [2, 3, 7, 8] (overlapping windows: repeated indices), and
        // crowded indices.
        let x = values::<T, _>(ndarray::Dim([2, 3, 7, 8]), seed);
        let p = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
        let pooled = host.max_pool2d_with_indices(&x, &p).unwrap();
        let idx: Array4<I> = pooled.indices.mapv(|i| I::try_from_flat(i as usize).unwrap());
        let crowded2: Array4<I> = crowded(pooled.indices.raw_dim(), 9, seed);
        for idx in [&idx, &crowded2] {
            let want = host.max_unpool2d(&pooled.output, idx, [7, 8]).unwrap();
            let got = dev.max_unpool2d(&pooled.output, idx, [7, 8]).unwrap();
            assert_eq!(bits(&got), bits(&want), "unpool2d, seed {seed}");
            if backward {
                let g = values::<T, _>(want.raw_dim(), seed + 50);
                let want = host.max_unpool2d_backward(&g, idx).unwrap();
                let got = dev.max_unpool2d_backward(&g, idx).unwrap();
                assert_eq!(bits(&got), bits(&want), "unpool2d backward, seed {seed}");
                let want = host.max_pool2d_double_backward(&g, idx).unwrap();
                let got = dev.max_pool2d_double_backward(&g, idx).unwrap();
                assert_eq!(bits(&got), bits(&want), "double backward 2-D, seed {seed}");
            }
        }
        // 3-D: a k2 s1 pooling of [1, 2, 3, 4, 5] (overlapping), and unbatched crowded indices.
        let x = values::<T, _>(ndarray::Dim([1, 2, 3, 4, 5]), seed + 9);
        let p = MaxPool3dParams::new([2, 2, 2]).with_stride([1, 1, 1]);
        let pooled = host.max_pool3d_with_indices(&x, &p).unwrap();
        let idx: Array5<I> = pooled.indices.mapv(|i| I::try_from_flat(i as usize).unwrap());
        let want = host.max_unpool3d(&pooled.output, &idx, [3, 4, 5]).unwrap();
        let got = dev.max_unpool3d(&pooled.output, &idx, [3, 4, 5]).unwrap();
        assert_eq!(bits(&got), bits(&want), "unpool3d, seed {seed}");
        let unbatched = pooled.output.slice(s![0, .., .., .., ..]).to_owned();
        // 24 values per volume to the first 12 of 60 positions.
        let crowded3: Array4<I> = crowded(unbatched.raw_dim(), 12, seed);
        let want = host.max_unpool3d(&unbatched, &crowded3, [3, 4, 5]).unwrap();
        let got = dev.max_unpool3d(&unbatched, &crowded3, [3, 4, 5]).unwrap();
        assert_eq!(bits(&got), bits(&want), "unpool3d crowded, seed {seed}");
        if backward {
            let g = values::<T, _>(x.raw_dim(), seed + 70);
            let want = host.max_unpool3d_backward(&g, &idx).unwrap();
            let got = dev.max_unpool3d_backward(&g, &idx).unwrap();
            assert_eq!(bits(&got), bits(&want), "unpool3d backward, seed {seed}");
            let want = host.max_pool3d_double_backward(&g, &idx).unwrap();
            let got = dev.max_pool3d_double_backward(&g, &idx).unwrap();
            assert_eq!(bits(&got), bits(&want), "double backward 3-D, seed {seed}");
        }
        // 1-D (the 2-D operators on lines one row high): a k3 s2 p1 pooling of [2, 3, 11]
        // (overlapping), and unbatched crowded indices.
        let x = values::<T, _>(ndarray::Dim([2, 3, 11]), seed + 17);
        let p = poolgrad::MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]);
        let pooled = host.max_pool1d_with_indices(&x, &p).unwrap();
        let idx: Array3<I> = pooled.indices.mapv(|i| I::try_from_flat(i as usize).unwrap());
        let want = host.max_unpool1d(&pooled.output, &idx, 11).unwrap();
        let got = dev.max_unpool1d(&pooled.output, &idx, 11).unwrap();
        assert_eq!(bits(&got), bits(&want), "unpool1d, seed {seed}");
        let unbatched = pooled.output.slice(s![0, .., ..]).to_owned();
        let crowded1: Array2<I> = crowded(unbatched.raw_dim(), 4, seed);
        let want = host.max_unpool1d(&unbatched, &crowded1, 11).unwrap();
        let got = dev.max_unpool1d(&unbatched, &crowded1, 11).unwrap();
        assert_eq!(bits(&got), bits(&want), "unpool1d crowded, seed {seed}");
        if backward {
            let g = values::<T, _>(x.raw_dim(), seed + 90);
            let want = host.max_unpool1d_backward(&g, &idx).unwrap();
            let got = dev.max_unpool1d_backward(&g, &idx).unwrap();
            assert_eq!(bits(&got), bits(&want), "unpool1d backward, seed {seed}");
            let want = host.max_pool1d_double_backward(&g, &idx).unwrap();
            let got = dev.max_pool1d_double_backward(&g, &idx).unwrap();
            assert_eq!(bits(&got), bits(&want), "double backward 1-D, seed {seed}");
        }
    }
}

#[test]
fn unpooling_and_double_backwards_match_the_cpu() {
    on_every_device("unpooling_and_double_backwards_match_the_cpu", |npu| {
        matches_cpu::<f32, i64>(npu, true);
        matches_cpu::<f16, i32>(npu, true);
        // f64: the forwards and the 3-D backward take it, the 2-D backward does not (below).
        matches_cpu::<f64, i64>(npu, false);
    });
}

/// The crowded case by hand: three values to one position; poolgrad's rule gives the last,
/// though the double's scatter writes the first, and the backward's gradient goes to the last.
#[test]
fn the_last_of_repeated_indices_wins_on_the_device_too() {
    let session = Double::session();
    let npu = session.open();
    let x = Array4::from_shape_vec((1, 1, 1, 3), vec![1.0f32, 2.0, 3.0]).unwrap();
    let idx = Array4::from_shape_vec((1, 1, 1, 3), vec![4i64, 4, 4]).unwrap();
    let y = poolgrad::on(&npu).max_unpool2d(&x, &idx, [2, 3]).unwrap();
    assert_eq!(y.as_slice().unwrap(), &[0.0, 0.0, 0.0, 0.0, 3.0, 0.0]);
    let g = Array4::from_shape_vec((1, 1, 2, 3), vec![0.0f32, 0.0, 0.0, 0.0, 7.0, 0.0]).unwrap();
    let gx = poolgrad::on(&npu).max_unpool2d_backward(&g, &idx).unwrap();
    assert_eq!(gx.as_slice().unwrap(), &[0.0, 0.0, 7.0]);
    // The double backward is a plain gather: every repeat reads it.
    let gg = poolgrad::on(&npu).max_pool2d_double_backward(&g, &idx).unwrap();
    assert_eq!(gg.as_slice().unwrap(), &[7.0, 7.0, 7.0]);
    assert_eq!(session.calls("aclnnMaxUnpool2d"), 1);
    assert_eq!(session.calls("aclnnMaxUnpool2dBackward"), 2);
    drop(npu);
    session.assert_clean();
}

fn device_limit(e: Error) -> DeviceLimitKind {
    match e {
        Error::DeviceLimit { about, .. } => about,
        other => panic!("expected a device limit, got {other:?}"),
    }
}

/// What poolgrad refuses, from the op_apis and their documents: bf16 (no operator takes it), f64
/// in the 2-D backward, SoCs the documents leave out, an unpooled plane smaller than the pooled
/// one; and an index outside its plane, before any device call.
#[test]
fn refusals_follow_the_op_apis() {
    let session = Double::session();
    let npu = session.open();
    let on = poolgrad::on(&npu);
    let xb = ArrayD::<half::bf16>::zeros(IxDyn(&[1, 1, 2, 2]));
    let idx = ArrayD::<i64>::zeros(IxDyn(&[1, 1, 2, 2]));
    assert_eq!(device_limit(on.max_unpool2d(&xb, &idx, [2, 2]).unwrap_err()), DeviceLimitKind::DType);
    let g64 = ArrayD::<f64>::zeros(IxDyn(&[1, 1, 2, 2]));
    assert_eq!(device_limit(on.max_unpool2d_backward(&g64, &idx).unwrap_err()), DeviceLimitKind::DType);
    assert!(on.max_unpool2d(&g64, &idx, [2, 2]).is_ok(), "the 2-D forward takes f64");
    // An adaptive pooling up-samples: its indices address a plane smaller than theirs. The 3-D
    // gather checks the sizes (level2_base.h `CheckIntArrayShapeMaxUnPool3D`); the 2-D one does not.
    let small = ndarray::Array5::<f32>::zeros((1, 1, 1, 1, 1));
    let idx5 = ndarray::Array5::<i32>::zeros((1, 1, 1, 1, 2));
    let e = on.max_pool3d_double_backward(&small, &idx5).unwrap_err();
    assert_eq!(device_limit(e), DeviceLimitKind::PlaneSize);
    let bad = ArrayD::<i64>::from_elem(IxDyn(&[1, 1, 2, 2]), 9);
    let x = ArrayD::<f32>::zeros(IxDyn(&[1, 1, 2, 2]));
    let e = on.max_unpool2d(&x, &bad, [3, 3]).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { value: 9, plane: 9, .. }), "{e:?}");
    assert_eq!(session.calls("aclnnMaxUnpool2dGetWorkspaceSize"), 1, "only the f64 forward reached CANN");
    drop(npu);
    session.set_soc("Ascend310P3");
    let npu = session.open();
    let e = poolgrad::on(&npu).max_unpool2d(&x, &idx, [2, 2]).unwrap_err();
    assert_eq!(device_limit(e), DeviceLimitKind::Operator);
    drop(npu);
    // Under `cann_decides`, bf16 reaches CANN's phase 1, which refuses it (`DTYPE_SUPPORT_LIST`).
    session.set_soc("Ascend910B2");
    let npu = session.open().cann_decides();
    match poolgrad::on(&npu).max_unpool2d(&xb, &idx, [2, 2]).unwrap_err() {
        Error::Ascend(AscendError::Cann { function, status, .. }) => {
            assert_eq!((function, status), ("aclnnMaxUnpool2dGetWorkspaceSize", Some(161_002)))
        }
        other => panic!("expected CANN's refusal, got {other:?}"),
    }
    drop(npu);
    session.assert_clean();
}
