//! The CANN C ABI: loading the libraries, the function table, and RAII handles.
//!
//! This is the only module of the crate with `unsafe` code. Every C signature below was copied from
//! the CANN headers (`acl/acl.h`, `acl/acl_rt.h`, `aclnn/acl_meta.h` of CANN 8.1.RC1) and the
//! hicann/ops-nn operator docs (`aclnnAdaptiveMaxPool2d.md`, `aclnnAdaptiveMaxPool2dBackward.md`,
//! `aclnnMaxPool2dWithMask.md`, `aclnnMaxPool2dWithMaskBackward.md`, `aclnnMaxPool2dWithIndices.md`,
//! `aclnnMaxPool2dWithIndicesBackward.md`); C enums are `int`.
//!
//! Three layers, bottom up, one file each (as cudarc's `sys`, `result` and `safe`); `unsafe` code
//! lives in these three files only:
//! - [`sys`]: the C types, constants and signatures, and [`sys::Api`], the resolved function
//!   pointers with the libraries that keep them valid;
//! - [`result`]: [`Runtime`], a loaded, initialised CANN (`aclInit` once per process;
//!   `aclFinalize` only when the user asks for it through [`finalize`], see the `ascend` module
//!   docs), which turns status codes and null handles into typed errors;
//! - [`safe`]: RAII handles ([`Session`] = device reference + stream, [`DeviceBuffer`],
//!   [`AclTensor`], [`IntArray`]), each releasing what it owns in `Drop` without panicking, in
//!   CANN's teardown order (tensors and arrays, buffers, then stream and device), and the
//!   operators' two phases ([`StreamGuard::execute`]).
//!
//! **Executors live within one call.** CANN documents one life for an executor that is not
//! repeatable: `aclnnXxxGetWorkspaceSize` creates it and `aclnnXxx` releases it, successful or not
//! (hicann/opbase `docs/zh/api/nnopbase/aclnn/aclDestroyAclOpExecutor.md`; the implementation:
//! `op_executor.cpp`, `CommonOpExecutorRun`, `delete executor` or `DeleteExecutorForError`).
//! `aclDestroyAclOpExecutor` is documented only together with `aclSetAclOpExecutorRepeatable`.
//! So the two phases run back to back, on the thread that runs the plan, when it runs: no
//! executor is kept in a plan, dropped unlaunched, moved to another thread, or left waiting in
//! nnopbase's per-thread executor cache (`op_cache.cpp`, a `thread_local` manager whose entries
//! are evicted beyond `ACLNN_CACHE_LIMIT`). No executor is made repeatable either:
//! `aclSetAclOpExecutorRepeatable` fails with `ACLNN_ERR_INNER` for the mask operators, whose
//! op_api points internal views at the caller's mask buffer (`SetStorageAddr` +
//! `SetFromWorkspace(false)`), which nnopbase's `LauncherRepeatableChecker::CheckLaunchArg`
//! rejects, and for any executor served from the cache. torch_npu does the same (Ascend/op-plugin
//! `op_api_common.h`, `EXEC_NPU_CMD`: phase 1, then the launch at once).

mod result;
mod safe;
mod sys;

pub(crate) use result::{Runtime, finalize};
pub(crate) use safe::{
    AclTensor, Call, DeviceAddr, DeviceBuffer, IntArray, PoolParams, Queue, RawStream, Session, StreamGuard,
};
pub(crate) use sys::{default_roots, dtype};
