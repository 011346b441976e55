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
//! - [`safe`]: RAII handles ([`Session`] = device + context + stream, [`DeviceBuffer`],
//!   [`AclTensor`], [`IntArray`], [`OpExecutor`]), each releasing what it owns in `Drop` without
//!   panicking, in CANN's teardown order (tensors and arrays, executor, buffers, then stream,
//!   context, device).
//!
//! **Executors are one-shot.** An executor from `aclnnXxxGetWorkspaceSize` belongs to this crate
//! until it is passed to `aclnnXxx`; from that call on it belongs to CANN, which deletes it when the
//! launch returns, successful or not (hicann/opbase `op_executor.cpp`, `CommonOpExecutorRun`:
//! `delete executor`, or `DeleteExecutorForError`). [`OpExecutor`] models exactly that: launching
//! consumes it, and dropping one that was never launched destroys it with
//! `aclDestroyAclOpExecutor` (`acl_op_api.cpp` deletes ordinary executors and cache wrappers).
//! No executor is made repeatable: `aclSetAclOpExecutorRepeatable` fails with `ACLNN_ERR_INNER`
//! for the mask operators, whose op_api points internal views at the caller's mask buffer
//! (`SetStorageAddr` + `SetFromWorkspace(false)`), which nnopbase's
//! `LauncherRepeatableChecker::CheckLaunchArg` rejects, and for any executor served from the aclnn
//! cache; and a [`Plan`](crate::Plan) runs at most once by construction, so repeatability would buy
//! nothing. torch_npu does the same (`EXEC_NPU_CMD`: phase 1, then the launch at once).

mod result;
mod safe;
mod sys;

pub(crate) use result::{Runtime, finalize};
pub(crate) use safe::{AclTensor, DeviceBuffer, IntArray, OpExecutor, PoolParams, Session, StreamGuard};
pub(crate) use sys::{default_roots, dtype};
