//! poolgrad shares the NPU with other CANN users of the process: every call leaves the calling
//! thread's current context as it found it, and dropping an [`Ascend`] destroys nothing another
//! library uses. Another library is played by direct calls into the CANN test double, which models
//! the runtime's per-thread binding (a current context, or the primary context `aclrtSetDevice`
//! bound) and refuses a launch on a stream of another context, as CANN's runtime does.
#![cfg(feature = "ascend")]

mod ascend;

use ascend::{Double, Foreign};
use ndarray::Array4;
use poolgrad::device::ascend::Ascend;
use poolgrad::op::AdaptiveMaxPool2dBackward;
use poolgrad::{I32Argmax, MaxPool2dParams, Plan, TensorMut, TensorRef};

/// `aclrtGetCurrentContext`'s status for a thread with no context (`ACL_ERROR_RT_CONTEXT_NULL`).
const CONTEXT_NULL: i32 = 107_002;

/// Every kind of work poolgrad does on `npu` from the calling thread: plans run (a backward with a
/// workspace, a mask forward with a memset), a plan dropped unrun, a workspace allocated and freed.
fn work(npu: &Ascend) {
    let x = Array4::from_shape_fn((1, 2, 5, 5), |(_, c, h, w)| (c * 25 + h * 5 + w) as f32);
    let g = Array4::from_elem((1, 2, 3, 3), 1.0f32);
    let idx = Array4::from_shape_fn((1, 2, 3, 3), |(_, _, i, j)| (i * 5 + j * 2) as i64);
    let gi = poolgrad::on(npu).adaptive_max_pool2d_backward(&g, &x, &idx).expect("an adaptive backward");
    assert_eq!(gi.sum(), 18.0);
    poolgrad::on(npu)
        .max_pool2d_with_mask(&x, &MaxPool2dParams::new([2, 2]), I32Argmax)
        .expect("a mask forward");
    let mut gi = vec![0.0f32; 50];
    let plan = Plan::new(
        npu,
        AdaptiveMaxPool2dBackward {
            grad_output: TensorRef::from_slice(g.as_slice().unwrap(), &[1, 2, 3, 3]).unwrap(),
            self_: TensorRef::from_slice(x.as_slice().unwrap(), &[1, 2, 5, 5]).unwrap(),
            indices: TensorRef::from_slice(idx.as_slice().unwrap(), &[1, 2, 3, 3]).unwrap(),
            grad_input: TensorMut::from_slice(&mut gi, &[1, 2, 5, 5]).unwrap(),
        },
    )
    .expect("a plan");
    drop(plan);
}

/// The thread's context is `expected` (`what` says after what).
fn assert_context(foreign: &Foreign<'_>, expected: Result<usize, i32>, what: &str) {
    assert_eq!(foreign.current_context(), expected, "the thread's current context {what}");
}

#[test]
fn a_thread_bound_by_another_library_keeps_its_context_and_stream() {
    let session = Double::session();
    let foreign = session.foreign();
    // As torch_npu does on each thread: aclrtSetDevice once, then kernels on its own streams.
    assert_eq!(foreign.set_device(0), 0);
    let ctx = foreign.current_context().expect("aclrtSetDevice binds the primary context");
    let stream = foreign.create_stream();
    assert_eq!(foreign.launch_on(stream), 0, "the foreign launch before poolgrad");

    let npu = session.open();
    assert_context(&foreign, Ok(ctx), "after Ascend::with_library_dir");
    work(&npu);
    assert_context(&foreign, Ok(ctx), "after poolgrad's plans, runs and workspace");
    assert_eq!(foreign.launch_on(stream), 0, "the foreign launch after poolgrad's work");

    // poolgrad from another thread, then its device dropped there.
    std::thread::scope(|s| {
        s.spawn(|| work(&npu));
    });
    assert_context(&foreign, Ok(ctx), "after poolgrad ran on another thread");
    std::thread::scope(|s| {
        s.spawn(move || drop(npu));
    });
    assert_context(&foreign, Ok(ctx), "after the Ascend was dropped");
    assert_eq!(foreign.launch_on(stream), 0, "the foreign launch after the Ascend was dropped");

    assert_eq!(foreign.destroy_stream(stream), 0);
    assert_eq!(foreign.reset_device(0), 0);
    session.assert_clean();
}

#[test]
fn a_context_another_library_created_stays_current() {
    let session = Double::session();
    let foreign = session.foreign();
    let ctx = foreign.create_context(0);
    let stream = foreign.create_stream();

    let npu = session.open();
    assert_context(&foreign, Ok(ctx), "after Ascend::with_library_dir");
    work(&npu);
    assert_context(&foreign, Ok(ctx), "after poolgrad's work");
    drop(npu);
    assert_context(&foreign, Ok(ctx), "after the Ascend was dropped");
    assert_eq!(foreign.launch_on(stream), 0, "the foreign launch in its own context");

    assert_eq!(foreign.destroy_stream(stream), 0);
    assert_eq!(foreign.destroy_context(ctx), 0);
    session.assert_clean();
}

#[test]
fn a_thread_with_no_context_is_left_with_the_devices_primary_context() {
    // ACL has no call that unbinds a thread (aclrtSetCurrentContext refuses NULL), so a thread
    // that had no context keeps the one poolgrad needed: the device's primary context, which is
    // what aclrtSetDevice itself leaves. Once the last user resets the device, it has none again.
    let session = Double::session();
    std::thread::scope(|s| {
        s.spawn(|| {
            let foreign = session.foreign();
            assert_context(&foreign, Err(CONTEXT_NULL), "before poolgrad");
            let npu = session.open();
            work(&npu);
            let primary = foreign.current_context().expect("the device's primary context");
            // The same context another library gets from aclrtSetDevice on this device.
            assert_eq!(foreign.set_device(0), 0);
            assert_context(&foreign, Ok(primary), "after another library's aclrtSetDevice");
            assert_eq!(foreign.reset_device(0), 0);
            drop(npu);
            assert_context(&foreign, Err(CONTEXT_NULL), "after the last reset of the device");
        });
    });
    session.assert_clean();
}

#[test]
fn a_failed_switch_is_an_error_and_leaves_the_thread_as_it_was() {
    let session = Double::session();
    let npu = session.open();
    let foreign = session.foreign();
    // Another library's context on this thread: poolgrad must switch to run, and switch back.
    let ctx = foreign.create_context(0);
    let stream = foreign.create_stream();
    session.inject("aclrtSetCurrentContext", 100_000, 0);
    let x = Array4::<f32>::zeros((1, 1, 4, 4));
    let e =
        poolgrad::on(&npu).max_pool2d_with_mask(&x, &MaxPool2dParams::new([2, 2]), I32Argmax).unwrap_err();
    assert!(e.to_string().contains("aclrtSetCurrentContext"), "{e}");
    assert_context(&foreign, Ok(ctx), "after a failed switch");
    work(&npu);
    assert_context(&foreign, Ok(ctx), "after poolgrad's work");
    assert_eq!(foreign.launch_on(stream), 0);
    drop(npu);
    assert_eq!(foreign.destroy_stream(stream), 0);
    assert_eq!(foreign.destroy_context(ctx), 0);
    session.assert_clean();
}
