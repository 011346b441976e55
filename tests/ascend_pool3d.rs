//! The 3-D operators on the Ascend backend (`aclnnMaxPool3dWithArgmax`, `aclnnAdaptiveMaxPool3d`
//! and their backwards), end to end against the CPU backend: through the CANN test double, whose
//! loops share no code with poolgrad's kernels, and through a real NPU when one is present.
//! Also what each SoC refuses, by poolgrad and, under `cann_decides`, by CANN's own phase 1.
#![cfg(feature = "ascend")]

mod ascend;

use ascend::{Double, on_every_device};
use half::{bf16, f16};
use ndarray::{Array, Array4, Array5, Dimension, ShapeBuilder, s};
use poolgrad::device::ascend::Ascend;
use poolgrad::device::cpu::Cpu;
use poolgrad::{ArgmaxIndex, AscendError, DeviceLimitKind, Error, MaxPool3dParams, PoolFloat};

fn bits<T: bytemuck::Pod, D: Dimension>(a: &Array<T, D>) -> Vec<u8> {
    bytemuck::cast_slice(a.as_standard_layout().as_slice().unwrap()).to_vec()
}

/// A xorshift stream of values: ties (`kind` 0), distinct (1), or with NaN and -inf (2); all
/// exact in every half type.
fn values(len: usize, seed: u64, kind: u8) -> Vec<f64> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match (kind, s % 8) {
                (0, r) => (r % 3) as f64,
                (1, _) => (s % 512) as f64 - 256.0,
                (_, 0) => f64::NAN,
                (_, 1) => f64::NEG_INFINITY,
                (_, r) => r as f64,
            }
        })
        .collect()
}

fn volume<T: PoolFloat, D: Dimension>(dims: D, seed: u64, kind: u8) -> Array<T, D> {
    let v = values(dims.size(), seed, kind);
    Array::from_shape_vec(dims, v.into_iter().map(T::round_from_f64).collect()).unwrap()
}

/// The cases: shapes, and parameters inside what every SoC's op_api takes (padding at most half
/// the kernel, dilation 1), with ceil mode on and off.
fn cases() -> Vec<([usize; 5], MaxPool3dParams, [usize; 3])> {
    let mut out = Vec::new();
    let mut s = 0x5eed_u64;
    let mut next = |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n) as usize
    };
    for _ in 0..32 {
        let dims = [1 + next(2), 1 + next(3), 2 + next(4), 3 + next(5), 3 + next(5)];
        let kernel = [1 + next(3), 1 + next(3), 1 + next(3)];
        let stride = [1 + next(2), 1 + next(2), 1 + next(3)];
        let padding = kernel.map(|k| if k >= 2 { next(k as u64 / 2 + 1) } else { 0 });
        let params = MaxPool3dParams::new(kernel)
            .with_stride(stride)
            .with_padding(padding)
            .with_ceil_mode(next(2) == 1);
        let output_size = [1 + next(4), 1 + next(5), 1 + next(5)];
        out.push((dims, params, output_size));
    }
    out
}

/// Forwards (values and indices) and backwards on `npu` equal the CPU's bit for bit.
fn matches_cpu<T: PoolFloat, I: ArgmaxIndex>(npu: &Ascend, kind: u8) {
    let cpu = Cpu::sequential();
    let (dev, host) = (poolgrad::on(npu), poolgrad::on(&cpu));
    let mut pooled = 0;
    for (seed, (dims, params, output_size)) in cases().into_iter().enumerate() {
        let x = volume::<T, _>(ndarray::Dim(dims), seed as u64 + 1, kind);
        // Parameters whose windows do not fit the input are the CPU's error too.
        let Ok(want) = host.max_pool3d_with_indices::<T, _>(&x, &params) else { continue };
        pooled += 1;
        let got = dev.max_pool3d_with_indices(&x, &params).unwrap();
        assert_eq!(bits(&got.output), bits(&want.output), "{dims:?} {params:?}: values");
        assert_eq!(got.indices, want.indices, "{dims:?} {params:?}: indices");
        let idx: Array5<I> = want.indices.mapv(|i| I::try_from_flat(i as usize).unwrap());
        let go = volume::<T, _>(want.output.raw_dim(), seed as u64 + 99, 1);
        let gi = dev.max_pool3d_with_indices_backward(&go, &x, &idx, &params).unwrap();
        let gc = host.max_pool3d_with_indices_backward(&go, &x, &idx, &params).unwrap();
        assert_eq!(bits(&gi), bits(&gc), "{dims:?} {params:?}: backward");

        let want = host.adaptive_max_pool3d(&x, output_size).unwrap();
        let got = dev.adaptive_max_pool3d(&x, output_size).unwrap();
        assert_eq!(bits(&got.output), bits(&want.output), "{dims:?} to {output_size:?}: values");
        assert_eq!(got.indices, want.indices, "{dims:?} to {output_size:?}: indices");
        let idx: Array5<I> = want.indices.mapv(|i| I::try_from_flat(i as usize).unwrap());
        let go = volume::<T, _>(want.output.raw_dim(), seed as u64 + 7, 1);
        let gi = dev.adaptive_max_pool3d_backward(&go, &x, &idx).unwrap();
        let gc = host.adaptive_max_pool3d_backward(&go, &x, &idx).unwrap();
        assert_eq!(bits(&gi), bits(&gc), "{dims:?} to {output_size:?}: backward");
    }
    assert!(pooled >= 24, "only {pooled} of the cases pool");
}

#[test]
fn volumes_match_the_cpu_in_every_supported_dtype() {
    on_every_device("volumes_match_the_cpu_in_every_supported_dtype", |npu| {
        matches_cpu::<f32, i64>(npu, 2);
        matches_cpu::<f32, i32>(npu, 1);
        matches_cpu::<f16, i32>(npu, 0);
        matches_cpu::<bf16, i64>(npu, 2);
    });
}

/// `[C, D, H, W]` inputs, strided views and empty batches, as on the CPU.
#[test]
fn unbatched_strided_and_empty_volumes_match_the_cpu() {
    on_every_device("unbatched_strided_and_empty_volumes_match_the_cpu", |npu| {
        let cpu = Cpu::sequential();
        let (dev, host) = (poolgrad::on(npu), poolgrad::on(&cpu));
        let p = MaxPool3dParams::new([2, 3, 2]).with_stride([1, 2, 2]).with_padding([1, 1, 0]);
        let x = volume::<f32, _>(ndarray::Dim([2, 3, 5, 6, 7]), 3, 2);
        let unbatched: Array4<f32> = x.slice(s![1, .., .., .., ..]).to_owned();
        let (a, b) = (
            dev.max_pool3d_with_indices(&unbatched, &p).unwrap(),
            host.max_pool3d_with_indices(&unbatched, &p).unwrap(),
        );
        assert_eq!((bits(&a.output), &a.indices), (bits(&b.output), &b.indices));
        let g = volume::<f32, _>(a.output.raw_dim(), 5, 1);
        let (ga, gb) = (
            dev.max_pool3d_with_indices_backward(&g, &unbatched, &a.indices, &p).unwrap(),
            host.max_pool3d_with_indices_backward(&g, &unbatched, &b.indices, &p).unwrap(),
        );
        assert_eq!(bits(&ga), bits(&gb));
        // Channels-last memory: a 5-D view whose D and H do not merge is copied first.
        let mut cl = Array5::<f32>::zeros((2, 3, 5, 6, 7).f());
        cl.assign(&x);
        let (a, b) = (
            dev.adaptive_max_pool3d(&cl, [2, 4, 3]).unwrap(),
            host.adaptive_max_pool3d(&x, [2, 4, 3]).unwrap(),
        );
        assert_eq!((bits(&a.output), &a.indices), (bits(&b.output), &b.indices));
        // An empty batch runs nothing on the device.
        let empty = Array5::<f32>::zeros((0, 3, 5, 6, 7));
        let a = dev.max_pool3d_with_indices(&empty, &p).unwrap();
        assert_eq!(a.output.shape(), &[0, 3, 6, 3, 3]);
    });
}

fn device_limit(e: Error) -> (DeviceLimitKind, String) {
    match e {
        Error::DeviceLimit { about, limit, .. } => (about, limit),
        other => panic!("expected a device limit, got {other:?}"),
    }
}

/// What poolgrad refuses, read from the op_api sources: the operators outside A2/A3 and the 950,
/// f64, a forward dilation other than 1 except on the 950. The backward takes a dilation on
/// every SoC (its `CheckParamsValid` asks only for values above 0).
#[test]
fn each_soc_gets_what_its_op_api_takes() {
    let session = Double::session();
    let x = volume::<f32, _>(ndarray::Dim([1, 2, 5, 5, 5]), 11, 1);
    let dilated = MaxPool3dParams::new([2, 2, 2]).with_dilation([2, 1, 1]);
    for soc in ["Ascend910B", "Ascend310P3"] {
        session.set_soc(soc);
        let npu = session.open();
        let e = poolgrad::on(&npu).max_pool3d_with_indices(&x, &MaxPool3dParams::new([2, 2, 2])).unwrap_err();
        let (about, limit) = device_limit(e);
        assert_eq!(about, DeviceLimitKind::Operator, "{soc}");
        assert!(limit.contains("aclnnMaxPool3dWithArgmax"), "{limit}");
        let e = poolgrad::on(&npu).adaptive_max_pool3d(&x, [2, 2, 2]).unwrap_err();
        assert_eq!(device_limit(e).0, DeviceLimitKind::Operator);
    }
    session.set_soc("Ascend910B2");
    let npu = session.open();
    let xd = volume::<f64, _>(ndarray::Dim([1, 2, 5, 5, 5]), 11, 1);
    let e = poolgrad::on(&npu).adaptive_max_pool3d(&xd, [2, 2, 2]).unwrap_err();
    assert_eq!(device_limit(e).0, DeviceLimitKind::DType);
    let e = poolgrad::on(&npu).max_pool3d_with_indices(&x, &dilated).unwrap_err();
    assert_eq!(device_limit(e).0, DeviceLimitKind::Parameter("dilation"));
    // The backward of a dilated pooling runs on A2 and equals the CPU's.
    let cpu = Cpu::sequential();
    let pooled = poolgrad::on(&cpu).max_pool3d_with_indices(&x, &dilated).unwrap();
    let g = volume::<f32, _>(pooled.output.raw_dim(), 12, 1);
    let on_npu =
        poolgrad::on(&npu).max_pool3d_with_indices_backward(&g, &x, &pooled.indices, &dilated).unwrap();
    let on_cpu =
        poolgrad::on(&cpu).max_pool3d_with_indices_backward(&g, &x, &pooled.indices, &dilated).unwrap();
    assert_eq!(bits(&on_npu), bits(&on_cpu));
    drop(npu);
    // The 950 takes the dilated forward.
    session.set_soc("Ascend950PR_9599");
    let npu = session.open();
    let launched = session.calls("aclnnMaxPool3dWithArgmax");
    let a = poolgrad::on(&npu).max_pool3d_with_indices(&x, &dilated).unwrap();
    let b = poolgrad::on(&cpu).max_pool3d_with_indices(&x, &dilated).unwrap();
    assert_eq!((bits(&a.output), &a.indices), (bits(&b.output), &b.indices));
    assert_eq!(session.calls("aclnnMaxPool3dWithArgmax"), launched + 1, "the device ran it");
    drop(npu);
    session.assert_clean();
}

/// Under `cann_decides` the refusals reach CANN, and the double answers as its op_api does:
/// `ACLNN_ERR_PARAM_INVALID` (161002) for a dilated forward on A2 and for the operators on
/// Atlas training.
#[test]
fn cann_refuses_what_poolgrad_refuses() {
    let session = Double::session();
    let x = volume::<f32, _>(ndarray::Dim([1, 2, 5, 5, 5]), 11, 1);
    let dilated = MaxPool3dParams::new([2, 2, 2]).with_dilation([1, 2, 1]);
    for (soc, params) in [("Ascend910B2", dilated), ("Ascend910B", MaxPool3dParams::new([2, 2, 2]))] {
        session.set_soc(soc);
        let npu = session.open().cann_decides();
        let e = poolgrad::on(&npu).max_pool3d_with_indices(&x, &params).unwrap_err();
        match e {
            Error::Ascend(AscendError::Cann { function, status, .. }) => {
                assert_eq!((function, status), ("aclnnMaxPool3dWithArgmaxGetWorkspaceSize", Some(161_002)))
            }
            other => panic!("{soc}: expected CANN's refusal, got {other:?}"),
        }
    }
    session.assert_clean();
}

/// An index outside its volume is refused before any device call: the kernels do not check
/// them and would write outside `grad_input`.
#[test]
fn indices_outside_the_volume_never_reach_the_device() {
    let session = Double::session();
    let npu = session.open();
    let x = volume::<f32, _>(ndarray::Dim([1, 1, 2, 2, 2]), 1, 1);
    let g = Array5::<f32>::ones((1, 1, 1, 1, 1));
    let idx = Array5::<i32>::from_elem((1, 1, 1, 1, 1), 8);
    let e = poolgrad::on(&npu).adaptive_max_pool3d_backward(&g, &x, &idx).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { value: 8, plane: 8, .. }), "{e:?}");
    let p = MaxPool3dParams::new([2, 2, 2]);
    let idx = Array5::<i64>::from_elem((1, 1, 1, 1, 1), -1);
    let e = poolgrad::on(&npu).max_pool3d_with_indices_backward(&g, &x, &idx, &p).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { value: -1, .. }), "{e:?}");
    assert_eq!(session.calls("aclnnAdaptiveMaxPool3dBackwardGetWorkspaceSize"), 0);
    assert_eq!(session.calls("aclnnMaxPool3dWithArgmaxBackwardGetWorkspaceSize"), 0);
    drop(npu);
    session.assert_clean();
}

/// The 1-D poolings run on the NPU through the 2-D operators on planes one row high, as on the
/// CPU: forwards and backwards equal the CPU's, `[N, C, L]` and `[C, L]`, f32 and f16.
#[test]
fn lines_match_the_cpu_through_the_2d_operators() {
    on_every_device("lines_match_the_cpu_through_the_2d_operators", |npu| {
        let cpu = Cpu::sequential();
        let (dev, host) = (poolgrad::on(npu), poolgrad::on(&cpu));
        let p = poolgrad::MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]).with_ceil_mode(true);
        let x = volume::<f32, _>(ndarray::Dim([2, 3, 17]), 11, 2);
        let (a, b) = (
            dev.max_pool1d_with_indices_i32(&x, &p).unwrap(),
            host.max_pool1d_with_indices_i32(&x, &p).unwrap(),
        );
        assert_eq!((bits(&a.output), &a.indices), (bits(&b.output), &b.indices));
        let g = volume::<f32, _>(a.output.raw_dim(), 13, 1);
        let (ga, gb) = (
            dev.max_pool1d_with_indices_backward(&g, &x, &a.indices, &p).unwrap(),
            host.max_pool1d_with_indices_backward(&g, &x, &b.indices, &p).unwrap(),
        );
        assert_eq!(bits(&ga), bits(&gb));
        let unbatched = x.slice(s![1, .., ..]).mapv(f16::from_f32);
        let (a, b) = (
            dev.adaptive_max_pool1d(&unbatched, 5).unwrap(),
            host.adaptive_max_pool1d(&unbatched, 5).unwrap(),
        );
        assert_eq!((bits(&a.output), &a.indices), (bits(&b.output), &b.indices));
        let g = volume::<f16, _>(a.output.raw_dim(), 17, 1);
        let (ga, gb) = (
            dev.adaptive_max_pool1d_backward(&g, &unbatched, &a.indices).unwrap(),
            host.adaptive_max_pool1d_backward(&g, &unbatched, &b.indices).unwrap(),
        );
        assert_eq!(bits(&ga), bits(&gb));
    });
}
