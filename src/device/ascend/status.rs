//! CANN status codes: names and documented meanings, for error messages.
//!
//! Sources: `acl/acl_base.h` and `acl/error_codes/rt_error_codes.h` of CANN 8.1.RC1 (runtime), and
//! hicann/ops-nn `docs/zh/context/aclnn_return_code.md` (operators).

/// `(code, name, meaning)` for every status this crate can name.
const STATUSES: &[(i32, &str, &str)] = &[
    (100_000, "ACL_ERROR_INVALID_PARAM", "a parameter is invalid"),
    (100_002, "ACL_ERROR_REPEAT_INITIALIZE", "aclInit was called twice in this process"),
    (
        100_003,
        "ACL_ERROR_INVALID_FILE",
        "a file CANN reads (a configuration or version record) is missing or invalid",
    ),
    (100_037, "ACL_ERROR_REPEAT_FINALIZE", "aclFinalize was called twice in this process"),
    (200_000, "ACL_ERROR_BAD_ALLOC", "memory allocation failed"),
    (200_001, "ACL_ERROR_API_NOT_SUPPORT", "the API is not supported"),
    (200_002, "ACL_ERROR_INVALID_DEVICE", "the device is invalid"),
    (107_002, "ACL_ERROR_RT_CONTEXT_NULL", "the calling thread has no current context"),
    (107_003, "ACL_ERROR_RT_STREAM_CONTEXT", "the stream does not belong to the current context"),
    (207_000, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT", "the feature is not supported"),
    (207_001, "ACL_ERROR_RT_MEMORY_ALLOCATION", "device memory allocation failed"),
    (207_002, "ACL_ERROR_RT_MEMORY_FREE", "device memory release failed"),
    (207_004, "ACL_ERROR_RT_NO_DEVICE", "the device is not available"),
    (
        207_005,
        "ACL_ERROR_RT_RESOURCE_ALLOC_FAIL",
        "a runtime resource (stream, event) could not be allocated",
    ),
    (
        507_046,
        "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT",
        "waiting for the stream timed out; its task may still be running",
    ),
    (500_000, "ACL_ERROR_INTERNAL_ERROR", "internal error"),
    (500_001, "ACL_ERROR_FAILURE", "failure"),
    (500_002, "ACL_ERROR_GE_FAILURE", "graph engine failure"),
    (500_003, "ACL_ERROR_RT_FAILURE", "runtime failure"),
    (500_004, "ACL_ERROR_DRV_FAILURE", "driver failure"),
    (161_001, "ACLNN_ERR_PARAM_NULLPTR", "a required pointer argument is null"),
    (161_002, "ACLNN_ERR_PARAM_INVALID", "a parameter is invalid (dtype, format, shape or value)"),
    (361_001, "ACLNN_ERR_RUNTIME_ERROR", "a runtime call inside the operator failed"),
    (561_000, "ACLNN_ERR_INNER", "internal operator error"),
    (561_001, "ACLNN_ERR_INNER_INFERSHAPE_ERROR", "shape inference failed"),
    (561_002, "ACLNN_ERR_INNER_TILING_ERROR", "tiling failed"),
    (561_003, "ACLNN_ERR_INNER_FIND_KERNEL_ERROR", "no kernel for this SoC, dtype or shape"),
    (561_101, "ACLNN_ERR_INNER_CREATE_EXECUTOR", "the executor could not be created"),
    (561_102, "ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR", "the executor was not transferred"),
    (561_103, "ACLNN_ERR_INNER_NULLPTR", "an internal pointer is null"),
    (
        561_107,
        "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND",
        "the operator package was not found (is ASCEND_OPP_PATH set? source set_env.sh)",
    ),
    (561_108, "ACLNN_ERR_INNER_LOAD_JSON_FAILED", "an operator's JSON description could not be loaded"),
    (561_112, "ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND", "the operator kernel package was not found"),
];

/// The name and meaning of `code`, or `("unknown", ...)`.
pub(crate) fn describe(code: i32) -> (&'static str, &'static str) {
    STATUSES.iter().find(|(c, _, _)| *c == code).map_or(
        ("unknown", "not a status this crate knows; see the CANN error-code reference"),
        |&(_, n, m)| (n, m),
    )
}

/// Every status this crate names (for tests).
#[cfg(test)]
pub(crate) fn all() -> impl Iterator<Item = i32> {
    STATUSES.iter().map(|&(c, _, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_described() {
        let mut codes: Vec<i32> = all().collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), STATUSES.len());
        assert_eq!(describe(207_001).0, "ACL_ERROR_RT_MEMORY_ALLOCATION");
        assert_eq!(describe(161_002).0, "ACLNN_ERR_PARAM_INVALID");
        assert_eq!(describe(42).0, "unknown");
    }
}
