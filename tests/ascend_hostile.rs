//! The hostile inputs of the fuzzing harness (its whole corpus, every past finding included, and
//! random byte strings) through the Ascend backend on the CANN test double, next to the CPU: the
//! NPU returns the CPU's result bit for bit, or an error raised in phase 1, before any device call.
//! Index values and `I32Argmax` mask values are data a device would trust: they are checked on the
//! host before anything reaches it.
#![cfg(feature = "ascend")]

mod ascend;
mod hostile;

use ascend::Double;
use hostile::npu::{Hook, Stats};
use ndarray::{Array4, ArrayView4, ShapeBuilder};
use poolgrad::{DeviceLimitKind, Error, I32Argmax, MaxPool2dParams};
use proptest::prelude::*;

/// Runs `inputs` through the harness with the double's device installed; returns what it did.
fn with_npu(inputs: impl FnOnce()) -> Stats {
    let session = Double::session();
    let npu = session.open();
    // The double's call counter (the double is a process-wide library).
    let counter = Box::new(|| Double::get().calls("*"));
    hostile::npu::install(Hook { npu, device_calls: counter, stats: Stats::default() });
    inputs();
    let hook = hostile::npu::uninstall().expect("installed above");
    let stats = hook.stats;
    drop(hook);
    session.assert_clean();
    stats
}

#[test]
fn the_fuzz_corpus_through_the_npu() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus");
    let ops = [
        "aclnnMaxPool3dWithArgmax",
        "aclnnAdaptiveMaxPool3d",
        "aclnnMaxUnpool2d",
        "aclnnMaxUnpool3dBackward",
    ];
    let mut launched = [0; 4];
    let stats = with_npu(|| {
        for target in hostile::TARGETS {
            let mut files: Vec<_> = std::fs::read_dir(root.join(target)).unwrap().flatten().collect();
            files.sort_by_key(|e| e.file_name());
            for file in files {
                hostile::run_target(target, &std::fs::read(file.path()).unwrap());
            }
        }
        // The session counts from 0 (`Double::session` resets the double).
        launched = ops.map(|op| Double::get().calls(op));
    });
    println!("corpus on the NPU: {stats:?}");
    assert!(stats.ran > 50 && stats.rejected > 50 && stats.refused > 10, "{stats:?}");
    // The `volumes` target's corpus reaches the 3-D and unpooling operators on the device.
    for (op, launched) in ops.iter().zip(launched) {
        println!("{op}: {launched} launches");
        assert!(launched > 0, "the corpus never launched {op}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_bytes_through_the_npu(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        with_npu(|| hostile::run(&data));
    }
}

/// Named hostile inputs: each is rejected with a clear error and no device call.
#[test]
fn hostile_inputs_are_rejected_before_any_device_call() {
    let session = Double::session();
    let npu = session.open();
    let calls = || session.calls("*");
    let x = Array4::<f32>::zeros((1, 2, 4, 4));
    let g = Array4::<f32>::ones((1, 2, 2, 2));
    let before = calls();
    for bad in [16i64, -1, i64::MAX, i64::MIN] {
        let mut idx = Array4::<i64>::zeros((1, 2, 2, 2));
        idx[[0, 1, 1, 0]] = bad;
        let e = poolgrad::on(&npu).adaptive_max_pool2d_backward(&g, &x, &idx).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange {
                op: "adaptive_max_pool2d_backward",
                arg: "indices",
                position: vec![0, 1, 1, 0],
                value: bad,
                plane: 16
            }
        );
    }
    // An I32Argmax mask with a value outside the plane.
    let p = MaxPool2dParams::new([2, 2]);
    let mut mask = poolgrad::max_pool2d_with_mask(&x, &p, I32Argmax).unwrap().mask.into_array();
    mask[[0, 0, 0, 20]] = 100; // bytes 20..24: i32 element 5 of the prefix (c 1, position 1)
    let mask = poolgrad::Mask::<I32Argmax, _>::from_raw(mask, &p, &[1, 2, 4, 4]).unwrap();
    let e = poolgrad::on(&npu).max_pool2d_with_mask_backward(&g, &x, &mask).unwrap_err();
    assert!(matches!(&e, Error::IndexOutOfRange { arg: "mask", value: 100, .. }), "{e}");
    // The last value of the prefix is checked too (element 7 = 2 planes x 4 positions - 1).
    let mut mask = poolgrad::max_pool2d_with_mask(&x, &p, I32Argmax).unwrap().mask.into_array();
    mask[[0, 0, 0, 28]] = 101;
    let mask = poolgrad::Mask::<I32Argmax, _>::from_raw(mask, &p, &[1, 2, 4, 4]).unwrap();
    let e = poolgrad::on(&npu).max_pool2d_with_mask_backward(&g, &x, &mask).unwrap_err();
    assert!(matches!(&e, Error::IndexOutOfRange { arg: "mask", value: 101, .. }), "{e}");
    // Shapes and parameters.
    let e = poolgrad::on(&npu)
        .adaptive_max_pool2d_backward(&g, &x, &Array4::<i64>::zeros((1, 2, 2, 3)))
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { arg: "indices", .. }), "{e}");
    let e = poolgrad::on(&npu).max_pool2d_with_mask(&x, &p.with_dilation([2, 2]), I32Argmax).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { arg: "dilation", .. }), "{e}");
    let e = poolgrad::on(&npu).max_pool2d_with_mask(&x, &p.with_padding([2, 2]), I32Argmax).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { arg: "padding", .. }), "{e}");
    // The device's own limits: f64, the other mask layout, a plane past i32::MAX, and the 2^24
    // limit of non-divisible adaptive shapes (broadcast views: no memory behind them).
    let e = poolgrad::on(&npu)
        .adaptive_max_pool2d_backward(
            &g.mapv(f64::from),
            &x.mapv(f64::from),
            &Array4::<i64>::zeros((1, 2, 2, 2)),
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::DeviceLimit { about: DeviceLimitKind::DType, got, .. } if got == "f64"),
        "{e}"
    );
    let e = poolgrad::on(&npu).max_pool2d_with_mask(&x, &p, poolgrad::Bitmask).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, Error::DeviceLimit { about: DeviceLimitKind::MaskLayout, .. })
            && text.contains("I32Argmax")
            && text.contains("Bitmask"),
        "{text}"
    );
    let one = [0.0f32];
    let huge = ArrayView4::from_shape((1, 1, 1 << 16, 1 << 15).strides((0, 0, 0, 0)), &one[..]).unwrap();
    let e = poolgrad::on(&npu).adaptive_max_pool2d(&huge, [1, 1]).unwrap_err();
    assert!(
        matches!(&e, Error::DeviceLimit { device: "ascend", about: DeviceLimitKind::PlaneSize, limit, .. } if limit.contains("2147483647")),
        "{e}"
    );
    let big = ArrayView4::from_shape((1, 1, 4097, 4097).strides((0, 0, 0, 0)), &one[..]).unwrap();
    let g7 = Array4::<f32>::ones((1, 1, 7, 7));
    let e = poolgrad::on(&npu)
        .adaptive_max_pool2d_backward(&g7, &big, &Array4::<i64>::zeros((1, 1, 7, 7)))
        .unwrap_err();
    assert!(
        matches!(&e, Error::DeviceLimit { device: "ascend", about: DeviceLimitKind::PlaneSize, limit, .. } if limit.contains("16777216")),
        "{e}"
    );
    assert_eq!(calls(), before, "no device call for any of them");
    drop(npu);
    session.assert_clean();
}

#[test]
fn the_950_plans_adaptive_planes_of_2_31_and_more() {
    // CANN's phase 1 on the 950 accepts a 32768 x 65536 adaptive plane (INT64 indices; the op_api
    // skips its INT32 plane check there), so poolgrad's only refusal is the double's 1 GiB of
    // memory; the with-indices operators keep the INT32 plane limit (their device indices are
    // INT32), as every operator on A2/A3 does.
    let session = Double::session();
    session.set_soc("Ascend950PR_9599");
    let npu = session.open();
    let one = [0.0f32];
    let huge = ArrayView4::from_shape((1, 1, 1 << 15, 1 << 16).strides((0, 0, 0, 0)), &one[..]).unwrap();
    let before = session.calls("*");
    let e = poolgrad::on(&npu).adaptive_max_pool2d(&huge, [2, 2]).unwrap_err();
    assert!(matches!(e, Error::DeviceLimit { device: "ascend", about: DeviceLimitKind::Memory, .. }), "{e}");
    let p = MaxPool2dParams::new([2, 2]);
    let e = poolgrad::on(&npu).max_pool2d_with_indices(&huge, &p).unwrap_err();
    assert!(
        matches!(&e, Error::DeviceLimit { device: "ascend", about: DeviceLimitKind::PlaneSize, limit, .. } if limit.contains("2147483647")),
        "{e}"
    );
    assert_eq!(session.calls("*"), before, "no device call for either");
    drop(npu);
    session.assert_clean();
}
