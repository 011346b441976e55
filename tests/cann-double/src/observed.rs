//! The double against what CANN's own phase-1 code answered (`facts/phase1.json`): for every
//! recorded call, the same status; on success a workspace at least CANN's (whose recorded sizes
//! are lower bounds: kernel tiling was faked when they were taken) and the same answer from
//! `aclSetAclOpExecutorRepeatable`.

use core::ffi::c_void;

use serde_json::Value;

use super::*;

/// The double's dtype enum for a recorded dtype name.
fn dtype(name: &str) -> i32 {
    match name {
        "f32" => ACL_FLOAT,
        "f16" => ACL_FLOAT16,
        "bf16" => ACL_BF16,
        "f64" => ACL_DOUBLE,
        "i8" => ACL_INT8,
        "i32" => ACL_INT32,
        "i64" => ACL_INT64,
        other => panic!("unrecorded dtype {other}"),
    }
}

fn format(name: &str) -> i32 {
    match name {
        "NCHW" => ACL_FORMAT_NCHW,
        "ND" => ACL_FORMAT_ND,
        "NCL" => ACL_FORMAT_NCL,
        other => panic!("unrecorded format {other}"),
    }
}

/// Tensors larger than this are not made (the double backs device memory with host memory).
const LARGEST: usize = 64 << 20;

/// A contiguous tensor over fresh device memory, or `None` if it is too large to make here.
///
/// The recorded calls passed the tensors as poolgrad describes them (the facts' provenance): 4-D
/// NCHW, a 3-D tensor with N = 1; the adaptive forward's indices INT64, the with-indices
/// operators' INT32. `index` is that dtype for the operator's index tensor, `None` for the others.
fn tensor(v: &Value, index: Option<i32>) -> Option<*mut c_void> {
    let mut dims: Vec<i64> = v["shape"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
    if dims.len() == 3 {
        dims.insert(0, 1);
    }
    let dt = index.unwrap_or_else(|| dtype(v["dtype"].as_str().unwrap()));
    let numel: i64 = dims.iter().product();
    let bytes = numel as usize * state::itemsize(dt);
    if bytes > LARGEST {
        return None;
    }
    let mut ptr = core::ptr::null_mut();
    if bytes > 0 {
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { aclrtMalloc(&mut ptr, bytes, 0) }, 0);
    }
    let mut strides = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1].max(1);
    }
    // SAFETY: the arrays live across the call, with the lengths passed.
    let t = unsafe {
        aclCreateTensor(
            dims.as_ptr(),
            dims.len() as u64,
            dt,
            strides.as_ptr(),
            0,
            if dims.len() == 4 { ACL_FORMAT_NCHW } else { format(v["format"].as_str().unwrap()) },
            [numel].as_ptr(),
            1,
            ptr,
        )
    };
    assert!(!t.is_null());
    Some(t)
}

fn ints(v: &Value) -> *mut c_void {
    let values: Vec<i64> = v.as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
    // SAFETY: `values` lives across the call.
    unsafe { aclCreateIntArray(values.as_ptr(), values.len() as u64) }
}

/// Phase 1 of `row`'s operator on its tensors: `None` if a tensor is too large to make here.
fn phase1(row: &Value, ws: &mut u64, ex: &mut *mut c_void) -> Option<i32> {
    let a = &row["args"];
    let t = |name: &str| tensor(&a[name], None);
    let operator = row["operator"].as_str().unwrap();
    let index = |name: &str| {
        let dt = match operator {
            "aclnnAdaptiveMaxPool2d" => Some(ACL_INT64),
            "aclnnMaxPool2dWithIndices" | "aclnnMaxPool2dWithIndicesBackward" => Some(ACL_INT32),
            _ => None,
        };
        tensor(&a[name], dt)
    };
    // Kernel, stride, padding and dilation as int arrays, and the ceil mode, of a max pooling.
    let pool = || {
        let p = [&a["kernelSize"], &a["stride"], &a["padding"], &a["dilation"]].map(ints);
        (p, a["ceilMode"].as_bool().unwrap())
    };
    Some(match operator {
        "aclnnAdaptiveMaxPool2d" => {
            let (x, o, i) = (t("self")?, t("outputOut")?, index("indicesOut")?);
            aclnnAdaptiveMaxPool2dGetWorkspaceSize(x, ints(&a["outputSize"]), o, i, ws, ex)
        }
        "aclnnAdaptiveMaxPool2dBackward" => {
            let (g, x, i, gi) = (t("gradOutput")?, t("self")?, t("indices")?, t("gradInput")?);
            aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize(g, x, i, gi, ws, ex)
        }
        op @ ("aclnnMaxPool2dWithMask" | "aclnnMaxPool2dWithIndices") => {
            let (x, o, i) = (t("self")?, t("out")?, index("indices")?);
            let (p, ceil) = pool();
            let f = if op == "aclnnMaxPool2dWithMask" {
                aclnnMaxPool2dWithMaskGetWorkspaceSize
            } else {
                aclnnMaxPool2dWithIndicesGetWorkspaceSize
            };
            f(x, p[0], p[1], p[2], p[3], ceil, o, i, ws, ex)
        }
        op @ ("aclnnMaxPool2dWithMaskBackward" | "aclnnMaxPool2dWithIndicesBackward") => {
            let (g, x, i, gi) = (t("gradOutput")?, t("self")?, index("indices")?, t("gradInput")?);
            let (p, ceil) = pool();
            let f = if op == "aclnnMaxPool2dWithMaskBackward" {
                aclnnMaxPool2dWithMaskBackwardGetWorkspaceSize
            } else {
                aclnnMaxPool2dWithIndicesBackwardGetWorkspaceSize
            };
            f(g, x, i, p[0], p[1], p[2], p[3], ceil, gi, ws, ex)
        }
        other => panic!("unrecorded operator {other}"),
    })
}

#[test]
fn phase_one_answers_as_cann_did() {
    let _serial = tests::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let facts: Value = serde_json::from_str(include_str!("../facts/phase1.json")).unwrap();
    let rows = facts["rows"].as_array().unwrap();
    let (mut checked, mut skipped, mut wrong) = (0, Vec::new(), Vec::new());
    for row in rows {
        tests::open_device();
        cann_double_set_devices(1, 1 << 40);
        let soc = std::ffi::CString::new(row["soc"].as_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated string.
        unsafe { cann_double_set_soc(soc.as_ptr()) };
        let id = row["id"].as_str().unwrap();
        let (mut ws, mut ex) = (0u64, core::ptr::null_mut());
        let Some(status) = phase1(row, &mut ws, &mut ex) else {
            skipped.push(id);
            continue;
        };
        checked += 1;
        let expected = row["status"].as_i64().unwrap() as i32;
        let soc = row["soc"].as_str().unwrap();
        if status != expected {
            // SAFETY: the double's recent error is a NUL-terminated string.
            let why =
                unsafe { std::ffi::CStr::from_ptr(aclGetRecentErrMsg()) }.to_string_lossy().into_owned();
            wrong.push(format!("{id} on {soc}: status {status} ({why}), CANN {expected}"));
            continue;
        }
        if status == 0 {
            let least = row["workspace_at_least"].as_u64().unwrap();
            if ws < least {
                wrong.push(format!("{id} on {soc}: workspace {ws}, CANN at least {least}"));
            }
            let repeatable = aclSetAclOpExecutorRepeatable(ex);
            let expected = row["repeatable_status"].as_i64().unwrap() as i32;
            if repeatable != expected {
                wrong.push(format!("{id} on {soc}: repeatable {repeatable}, CANN {expected}"));
            }
        }
    }
    // Every recorded row but those too large for host memory was checked.
    assert!(skipped.len() * 20 < rows.len(), "{} of {} rows skipped: {skipped:?}", skipped.len(), rows.len());
    assert!(checked > 300, "{checked} rows checked");
    assert!(wrong.is_empty(), "{} of {checked} rows differ from CANN:\n{}", wrong.len(), wrong.join("\n"));
}
