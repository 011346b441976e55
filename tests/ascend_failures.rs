//! CANN failures reach the user as typed errors, and nothing leaks on any failure path: every
//! documented status injected into every call the backend makes, missing libraries and symbols,
//! bad device ids, exhausted device memory. Runs against the CANN test double only (a real NPU
//! cannot be made to fail on demand).
#![cfg(feature = "ascend")]

mod ascend;

use ascend::{Double, Session};
use half::f16;
use ndarray::Array4;
use poolgrad::device::ascend::Ascend;
use poolgrad::{AscendError, DeviceLimitKind, Error, I32Argmax, MaxPool2dParams, Workspace};

/// An f16 adaptive backward (workspace, two uploads, one download) on `npu`.
fn backward(npu: &Ascend) -> poolgrad::Result<Array4<f16>> {
    let x = Array4::<f16>::zeros((1, 2, 5, 5));
    let g = Array4::from_elem((1, 2, 3, 3), f16::ONE);
    let idx = Array4::from_shape_fn((1, 2, 3, 3), |(_, _, i, j)| (i * 5 + j * 2) as i64);
    poolgrad::on(npu).adaptive_max_pool2d_backward(&g, &x, &idx)
}

/// A mask forward (int arrays and a memset) on `npu`.
fn mask_forward(npu: &Ascend) -> poolgrad::Result<()> {
    let x = Array4::from_shape_fn((1, 3, 6, 6), |(_, c, h, w)| (c + h * w) as f32);
    poolgrad::on(npu).max_pool2d_with_mask(&x, &MaxPool2dParams::new([2, 2]), I32Argmax).map(|_| ())
}

/// `aclrtMalloc` refused for want of device memory (`ACL_ERROR_RT_MEMORY_ALLOCATION`).
fn expect_out_of_device_memory(e: &Error) {
    assert!(
        matches!(e, Error::Ascend(AscendError::Cann { function: "aclrtMalloc", status: Some(207_001), .. })),
        "{e}"
    );
}

fn expect_cann(e: Error, function: &str, status: Option<i32>, name: &str) {
    match &e {
        Error::Ascend(AscendError::Cann { function: f, status: s, name: n, meaning, message }) => {
            assert_eq!((*f, *s), (function, status), "{e}");
            assert_eq!(*n, name, "{e}");
            assert!(!meaning.is_empty(), "every CANN error says what its status means: {e}");
            assert!(message.contains("injected failure"), "aclGetRecentErrMsg is reported: {e}");
        }
        other => panic!("expected a CANN error from {function}, got {other:?}"),
    }
}

/// Injects `status` into the `(skip + 1)`-th call of `function` during `call`, checks the error
/// and that every handle is released afterwards.
fn inject_into(
    function: &'static str,
    status: i32,
    skip: u32,
    null_handle: bool,
    call: impl Fn(&Ascend) -> poolgrad::Result<()>,
    name: &str,
) {
    let session = Double::session();
    let npu = session.open();
    let calls_before = session.calls(function);
    session.inject(function, status, skip);
    let e = call(&npu).expect_err(function);
    assert!(session.calls(function) > calls_before + u64::from(skip), "{function} was called");
    expect_cann(e, function, (!null_handle).then_some(status), name);
    // The device still works after the failure.
    call(&npu).unwrap_or_else(|e| panic!("after a failed {function}: {e}"));
    drop(npu);
    session.assert_clean();
}

#[test]
fn every_call_of_a_run_can_fail_cleanly() {
    let bwd = |npu: &Ascend| backward(npu).map(|_| ());
    let cases: [(&'static str, i32, u32, &str); 10] = [
        ("aclrtMalloc", 207_001, 0, "ACL_ERROR_RT_MEMORY_ALLOCATION"),
        ("aclrtMalloc", 207_001, 3, "ACL_ERROR_RT_MEMORY_ALLOCATION"),
        ("aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize", 161_002, 0, "ACLNN_ERR_PARAM_INVALID"),
        ("aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize", 561_003, 0, "ACLNN_ERR_INNER_FIND_KERNEL_ERROR"),
        ("aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize", 561_107, 0, "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND"),
        ("aclnnAdaptiveMaxPool2dBackward", 561_000, 0, "ACLNN_ERR_INNER"),
        ("aclrtMemcpy", 500_003, 0, "ACL_ERROR_RT_FAILURE"),
        ("aclrtMemcpy", 500_003, 2, "ACL_ERROR_RT_FAILURE"),
        ("aclnnAdaptiveMaxPool2dBackward", 361_001, 0, "ACLNN_ERR_RUNTIME_ERROR"),
        ("aclrtSynchronizeStream", 500_003, 0, "ACL_ERROR_RT_FAILURE"),
    ];
    for (function, status, skip, name) in cases {
        inject_into(function, status, skip, false, bwd, name);
    }
    inject_into("aclCreateTensor", 0, 2, true, bwd, "null handle");
    inject_into("aclCreateIntArray", 0, 1, true, mask_forward, "null handle");
    inject_into("aclrtMemset", 500_003, 0, false, mask_forward, "ACL_ERROR_RT_FAILURE");
    inject_into(
        "aclnnMaxPool2dWithMaskGetWorkspaceSize",
        161_001,
        0,
        false,
        mask_forward,
        "ACLNN_ERR_PARAM_NULLPTR",
    );
    inject_into("aclnnMaxPool2dWithMask", 561_000, 0, false, mask_forward, "ACLNN_ERR_INNER");
}

#[test]
fn a_failed_wait_frees_nothing_a_kernel_may_still_use() {
    // A wait that times out leaves the kernel running (the double keeps it queued, as CANN's
    // `StreamSynchronize` does): its buffers are freed only after a later wait succeeds.
    let session = Double::session();
    let npu = session.open();
    session.inject("aclrtSynchronizeStream", 507_046, 0);
    let e = backward(&npu).unwrap_err();
    expect_cann(e, "aclrtSynchronizeStream", Some(507_046), "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT");
    assert_eq!(session.calls("aclrtSynchronizeStream"), 2, "waited again before freeing");
    assert_eq!(session.violations(), Vec::<String>::new());
    backward(&npu).unwrap();
    drop(npu);
    session.assert_clean();

    // A wait that keeps failing: nothing the kernel uses is freed, and the stream and the device
    // reference are left for the process's end.
    let npu = session.open();
    for _ in 0..64 {
        session.inject("aclrtSynchronizeStream", 507_046, 0);
    }
    backward(&npu).unwrap_err();
    drop(npu);
    assert_eq!(session.violations(), Vec::<String>::new());
    assert_eq!(session.live("allocations"), 5, "the four tensors and the workspace");
    assert_eq!((session.live("streams"), session.live("devices")), (1, 1));
}

#[test]
fn every_documented_status_is_named() {
    // ascend-semantics.md section C (acl_base.h, aclnn_return_code.md).
    let documented: [(i32, &str); 17] = [
        (100_000, "ACL_ERROR_INVALID_PARAM"),
        (100_002, "ACL_ERROR_REPEAT_INITIALIZE"),
        (100_037, "ACL_ERROR_REPEAT_FINALIZE"),
        (207_001, "ACL_ERROR_RT_MEMORY_ALLOCATION"),
        (500_003, "ACL_ERROR_RT_FAILURE"),
        (161_001, "ACLNN_ERR_PARAM_NULLPTR"),
        (161_002, "ACLNN_ERR_PARAM_INVALID"),
        (361_001, "ACLNN_ERR_RUNTIME_ERROR"),
        (561_000, "ACLNN_ERR_INNER"),
        (561_001, "ACLNN_ERR_INNER_INFERSHAPE_ERROR"),
        (561_002, "ACLNN_ERR_INNER_TILING_ERROR"),
        (561_003, "ACLNN_ERR_INNER_FIND_KERNEL_ERROR"),
        (561_101, "ACLNN_ERR_INNER_CREATE_EXECUTOR"),
        (561_102, "ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR"),
        (561_103, "ACLNN_ERR_INNER_NULLPTR"),
        (561_107, "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND"),
        (561_108, "ACLNN_ERR_INNER_LOAD_JSON_FAILED"),
    ];
    let session = Double::session();
    let npu = session.open();
    for (code, name) in documented {
        session.inject("aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize", code, 0);
        let e = backward(&npu).unwrap_err();
        expect_cann(e.clone(), "aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize", Some(code), name);
        let text = e.to_string();
        assert!(text.contains(&code.to_string()) && text.contains(name), "{text}");
    }
    // An undocumented code still reaches the user, as "unknown".
    session.inject("aclrtMalloc", 123_456, 0);
    let e = backward(&npu).unwrap_err();
    assert!(
        matches!(e, Error::Ascend(AscendError::Cann { status: Some(123_456), name: "unknown", .. })),
        "{e}"
    );
    drop(npu);
    session.assert_clean();
}

#[test]
fn opening_a_device_can_fail_cleanly() {
    // (The first aclrtGetCurrentContext only records the thread's context; the second reads the
    // primary context aclrtSetDevice bound.)
    let cases: [(&'static str, i32, u32, &str); 3] = [
        ("aclrtSetDevice", 207_004, 0, "ACL_ERROR_RT_NO_DEVICE"),
        ("aclrtGetCurrentContext", 107_002, 1, "ACL_ERROR_RT_CONTEXT_NULL"),
        ("aclrtCreateStream", 207_005, 0, "ACL_ERROR_RT_RESOURCE_ALLOC_FAIL"),
    ];
    for (function, status, skip, name) in cases {
        let session = Double::session();
        session.inject(function, status, skip);
        let e = Ascend::with_library_dir(session.root(), 0).unwrap_err();
        expect_cann(e, function, Some(status), name);
        session.assert_clean();
    }
    let session = Double::session();
    session.inject("aclrtGetSocName", 0, 0);
    let e = Ascend::with_library_dir(session.root(), 0).unwrap_err();
    expect_cann(e, "aclrtGetSocName", None, "null handle");
    // Deterministic mode can fail too; the device is then released.
    session.inject("aclrtCtxSetSysParamOpt", 100_000, 0);
    let e = session.open().deterministic(true).unwrap_err();
    expect_cann(e, "aclrtCtxSetSysParamOpt", Some(100_000), "ACL_ERROR_INVALID_PARAM");
    session.assert_clean();
}

#[test]
fn a_device_that_does_not_exist_is_an_error() {
    let session = Double::session();
    let e = Ascend::with_library_dir(session.root(), 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Ascend(AscendError::Cann {
                function: "aclrtSetDevice",
                name: "ACL_ERROR_INVALID_DEVICE",
                ..
            })
        ),
        "{e}"
    );
    session.set_devices(4, 1 << 30);
    let npu = Ascend::with_library_dir(session.root(), 3).unwrap();
    assert_eq!(npu.device_id(), 3);
    drop(npu);
    session.assert_clean();
}

#[test]
fn exhausted_device_memory_is_an_error() {
    // 1 MiB in all; a workspace holds all but 300 bytes, the backward's tensors need 380 (below).
    let session = Double::session();
    session.set_devices(1, 1 << 20);
    let npu = session.open();
    let held = Workspace::new(&npu, (1 << 20) - 300).unwrap();
    let e = backward(&npu).unwrap_err();
    expect_out_of_device_memory(&e);
    drop(held);
    backward(&npu).expect("the memory is free again");
    drop(npu);
    session.assert_clean();
}

#[test]
fn tensors_larger_than_the_device_are_refused_before_any_device_call() {
    // The f16 backward of `backward`: grad_output 1*2*3*3 f16 (36 bytes), self_ 1*2*5*5 f16 (100),
    // i64 indices 1*2*3*3 (144), grad_input 1*2*5*5 f16 (100): 380 bytes on a 300-byte device.
    let session = Double::session();
    session.set_devices(1, 300);
    let npu = session.open();
    assert_eq!(npu.memory_total(), Some(300));
    let before = session.calls("*");
    let e = backward(&npu).unwrap_err();
    assert_eq!(session.calls("*"), before, "no device call");
    assert_eq!(
        e,
        Error::DeviceLimit {
            device: "ascend",
            op: "adaptive_max_pool2d_backward",
            about: DeviceLimitKind::Memory,
            limit: "300 bytes in all (aclrtGetMemInfo)".to_string(),
            got: "380 bytes for grad_output, self_, indices, grad_input".to_string(),
        }
    );
    drop(npu);
    session.assert_clean();
    // Exactly 380 bytes: the tensors fit and are allocated, so the refusal is not at the boundary.
    session.set_devices(1, 380);
    let npu = session.open();
    let before = session.calls("aclrtMalloc");
    let result = backward(&npu);
    assert!(session.calls("aclrtMalloc") >= before + 4, "the four tensors are allocated: {result:?}");
    // CANN's phase 1 then asks for a workspace that no longer fits: the run fails in aclrtMalloc.
    let e = result.unwrap_err();
    assert!(matches!(&e, Error::Ascend(AscendError::Cann { function: "aclrtMalloc", .. })), "{e:?}");
    drop(npu);
    // The executor phase 1 made is left to CANN, which documents no release for an executor
    // that is not launched; everything poolgrad owns is released.
    assert_eq!(session.live("executors"), 1);
    assert_eq!(session.calls("aclDestroyAclOpExecutor"), 0);
    session.assert_clean_but_executors(1);
}

#[test]
fn without_an_answer_on_memory_the_allocation_decides() {
    // aclrtGetMemInfo fails at open: no pre-check, and aclrtMalloc reports the shortage.
    let session = Double::session();
    session.set_devices(1, 300);
    session.inject("aclrtGetMemInfo", 100_000, 0);
    let npu = session.open();
    assert_eq!(npu.memory_total(), None);
    let e = backward(&npu).unwrap_err();
    expect_out_of_device_memory(&e);
    drop(npu);
    session.assert_clean();
    // A total of 0 (CANN's answer for a memory kind the hardware lacks) is no answer either.
    session.set_devices(1, 0);
    let npu = session.open();
    assert_eq!(npu.memory_total(), None);
    expect_out_of_device_memory(&backward(&npu).unwrap_err());
    drop(npu);
    session.assert_clean();
}

fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("lib64")).unwrap();
    dir
}

#[test]
fn missing_libraries_are_errors_that_list_what_was_tried() {
    let e = Ascend::with_library_dir("/nonexistent/cann", 0).unwrap_err();
    let Error::Ascend(AscendError::Unavailable { reason, tried }) = &e else { panic!("{e:?}") };
    assert!(reason.contains("libascendcl.so"), "{e}");
    assert!(tried.iter().any(|t| t == "/nonexistent/cann/lib64/libascendcl.so (not found)"), "{tried:?}");
    assert!(
        tried.iter().all(|t| !t.contains("loader path")),
        "an explicit directory is the only place searched"
    );

    // A file that is not a shared library.
    let dir = scratch_dir("cann-garbage");
    std::fs::write(dir.join("lib64/libascendcl.so"), b"not an ELF file").unwrap();
    let e = Ascend::with_library_dir(&dir, 0).unwrap_err();
    let Error::Ascend(AscendError::Unavailable { tried, .. }) = &e else { panic!("{e:?}") };
    assert!(tried.iter().any(|t| t.contains("libascendcl.so (") && !t.contains("not found")), "{tried:?}");
}

#[test]
fn a_library_without_the_cann_symbols_is_an_error() {
    // Any shared library that is not CANN: the C math library.
    let libm = [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
    ]
    .iter()
    .map(|d| std::path::Path::new(d).join("libm.so.6"))
    .find(|p| p.exists());
    let Some(libm) = libm else {
        println!("note: no libm.so.6 found; skipped");
        return;
    };
    let dir = scratch_dir("cann-libm");
    std::os::unix::fs::symlink(&libm, dir.join("lib64/libascendcl.so")).unwrap();
    let e = Ascend::with_library_dir(&dir, 0).unwrap_err();
    let Error::Ascend(AscendError::Unavailable { reason, tried }) = &e else { panic!("{e:?}") };
    assert!(reason.contains("`aclInit`"), "{e}");
    assert!(tried.iter().any(|t| t.ends_with("libascendcl.so (loaded)")), "{tried:?}");
}

#[test]
fn a_device_says_what_it_is() {
    // The double reports what CANN's headers say: ACL interface 1.17.0 in the current runtime,
    // 1.13.0 in CANN 8.1.RC1 (`aclrtGetVersion`).
    let session = Double::session();
    let npu = session.open();
    // The libraries are loaded and initialised once per search: a second device adds no aclInit.
    let inits = session.calls("aclInit");
    drop(session.open());
    assert_eq!(session.calls("aclInit"), inits);
    assert_eq!(npu.acl_interface_version().as_deref(), Some("1.17.0"));
    assert_eq!(npu.device_id(), 0);
    assert_eq!(npu.soc_family().to_string(), "Atlas A2/A3");
    let shown = format!("{npu:?}");
    assert!(shown.contains("Ascend910B1") && shown.contains("device_id: 0"), "{shown}");
    assert!(shown.contains(&session.root().display().to_string()), "the libraries' origin: {shown}");
    drop(npu);
    session.assert_clean();
    let old = Ascend::with_library_dir(ascend::cann81_root(), 0).unwrap();
    assert_eq!(old.acl_interface_version().as_deref(), Some("1.13.0"));
}

/// The double's own bookkeeping catches protocol errors (a check that the checks can fail).
#[test]
fn the_double_reports_protocol_violations() {
    let session: Session = Double::session();
    let npu = session.open();
    // Fail the destruction of the stream: the session's drop then leaves it alive.
    session.inject("aclrtDestroyStream", 500_003, 0);
    drop(npu);
    assert_eq!(session.live("streams"), 1);
    assert!(!session.violations().is_empty(), "destroying the context before its stream is reported");
}

#[test]
fn an_operator_missing_from_an_older_cann_is_an_error_when_planned() {
    // CANN 8.1 has the forwards but not aclnnAdaptiveMaxPool2dBackward.
    let npu = Ascend::with_library_dir(ascend::cann81_root(), 0).unwrap();
    let x = Array4::from_shape_fn((1, 2, 4, 4), |(_, c, h, w)| (c + h * w) as f32);
    let pooled = poolgrad::on(&npu).adaptive_max_pool2d(&x, [2, 2]).unwrap();
    let g = pooled.output.mapv(|_| 1.0f32);
    let e = poolgrad::on(&npu).adaptive_max_pool2d_backward(&g, &x, &pooled.indices).unwrap_err();
    let Error::Ascend(AscendError::Unavailable { reason, .. }) = &e else { panic!("{e:?}") };
    assert!(reason.contains("aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize"), "{e}");
    // By `Plan::new` itself, before anything is staged on the device.
    let mut gi = Array4::<f32>::zeros(x.raw_dim());
    let op = poolgrad::op::AdaptiveMaxPool2dBackward {
        grad_output: poolgrad::TensorRef::from_array(&g).unwrap(),
        self_: poolgrad::TensorRef::from_array(&x).unwrap(),
        indices: poolgrad::TensorRef::from_array(&pooled.indices).unwrap(),
        grad_input: poolgrad::TensorMut::from_array(&mut gi).unwrap(),
    };
    let planned = poolgrad::Plan::new(&npu, op);
    assert!(matches!(planned, Err(Error::Ascend(AscendError::Unavailable { .. }))), "{planned:?}");
}

#[test]
fn an_install_without_a_runtime_library_is_refused() {
    // The operator libraries alone (here the double, which would answer every symbol) are not
    // CANN: `libacl_rt.so` or `libascendcl.so` must be among the libraries found.
    let session = Double::session();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-runtime");
    let lib64 = dir.join("lib64");
    std::fs::create_dir_all(&lib64).unwrap();
    let double = session.root().join("lib64/libascendcl.so");
    for name in ["libnnopbase.so", "libopapi_nn.so"] {
        ascend::link(&double, &lib64.join(name));
    }
    let e = Ascend::with_library_dir(&dir, 0).unwrap_err();
    let Error::Ascend(AscendError::Unavailable { reason, .. }) = &e else { panic!("{e:?}") };
    assert!(reason.contains("neither libacl_rt.so nor libascendcl.so found"), "{e}");
}

#[test]
fn the_runtime_is_found_as_libacl_rt_without_libascendcl() {
    // CANN's runtime documents `libacl_rt.so` as the home of the `aclrt*` functions; an install
    // without `libascendcl.so` still opens.
    let session = Double::session();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("acl-rt-only");
    let lib64 = dir.join("lib64");
    std::fs::create_dir_all(&lib64).unwrap();
    let double = session.root().join("lib64/libascendcl.so");
    for name in ["libacl_rt.so", "libnnopbase.so", "libopapi_nn.so"] {
        ascend::link(&double, &lib64.join(name));
    }
    let npu = Ascend::with_library_dir(&dir, 0).expect("libacl_rt.so serves the runtime");
    assert!(npu.library_origin().contains("acl-rt-only"));
    backward(&npu).expect("a backward through libacl_rt.so");
    drop(npu);
    session.assert_clean();
}
