//! `finalize` and `is_available` on the CANN test double. Finalising is once per process and
//! cannot be undone, so each case runs in a child process of its own: the test re-runs this
//! binary with `POOLGRAD_FINALIZE_CASE` naming the case (and, for the default search,
//! `ASCEND_HOME_PATH` pointing at an install of the double).
#![cfg(feature = "ascend")]

mod ascend;

use std::path::{Path, PathBuf};
use std::process::Command;

use ascend::{Double, cann81_calls, cann81_root};
use poolgrad::device::ascend::{Ascend, CannRelease, finalize};
use poolgrad::{AscendError, Error};

const CASE: &str = "POOLGRAD_FINALIZE_CASE";

/// Runs `case` in a child process (this binary, this test) with `env`; true if this process is
/// the child and should run it.
fn in_child(test: &str, case: &str, env: &[(&str, &Path)]) -> bool {
    if std::env::var(CASE).as_deref() == Ok(case) {
        return true;
    }
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args(["--exact", test, "--nocapture", "--test-threads=1"]).env(CASE, case);
    for (k, v) in env {
        child.env(k, v);
    }
    let out = child.output().unwrap();
    assert!(
        out.status.success(),
        "case {case} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// An install of the double of its own, with the toolkit's install record beside it.
fn install_with_record() -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cann-finalize").join("install");
    let lib64 = root.join("lib64");
    std::fs::create_dir_all(&lib64).unwrap();
    std::fs::create_dir_all(root.join("x86_64-linux")).unwrap();
    let double = Double::get().root().join("lib64").join("libascendcl.so").canonicalize().unwrap();
    ascend::link(&double, &lib64.join("libascendcl.so"));
    let record = "package_name=Ascend-cann-toolkit\nversion=8.3.RC1.alpha002\narch=x86_64\n";
    std::fs::write(root.join("x86_64-linux/ascend_toolkit_install.info"), record).unwrap();
    root
}

fn is_finalised(e: Error) -> bool {
    matches!(e, Error::Ascend(AscendError::Unavailable { reason, .. }) if reason.contains("finalize() was called"))
}

#[test]
fn finalize_releases_only_poolgrads_reference_and_is_final() {
    const TEST: &str = "finalize_releases_only_poolgrads_reference_and_is_final";
    let root = install_with_record();
    if !in_child(TEST, "reference", &[("ASCEND_HOME_PATH", &root)]) {
        return;
    }
    let session = Double::session();
    // Asking whether CANN is there initialises nothing; CANN with no device is not available.
    let inits = session.calls("aclInit");
    session.set_devices(0, 1 << 30);
    assert!(!Ascend::is_available());
    session.set_devices(1, 1 << 30);
    assert!(Ascend::is_available());
    assert_eq!((session.calls("aclInit"), session.init_refs()), (inits, 0));

    // Another user of the process (torch_npu) initialised CANN first; poolgrad's aclInit counts a
    // second reference.
    let _foreign = session.foreign();
    let npu = Ascend::new(0).unwrap();
    assert_eq!(session.init_refs(), 2);

    // The release, from aclsysGetCANNVersion, else from the install record under the search root.
    let from_call = CannRelease { version: "8.3.RC1".into(), source: "aclsysGetCANNVersion".into() };
    assert_eq!(npu.cann_release(), Some(from_call));
    session.set_release(None);
    let record = root.join("x86_64-linux/ascend_toolkit_install.info").display().to_string();
    assert_eq!(npu.cann_release(), Some(CannRelease { version: "8.3.RC1.alpha002".into(), source: record }));

    // Not while a device is alive.
    assert!(matches!(finalize(), Err(Error::InvalidParameter { arg: "devices", .. })));
    drop(npu);
    finalize().unwrap();
    // Only poolgrad's reference is released: the other user's CANN stays initialised.
    assert_eq!(session.calls("aclFinalizeReference"), 1);
    assert_eq!(session.calls("aclFinalize"), 0);
    assert_eq!(session.init_refs(), 1);

    // Final for the process, whatever library directory is asked for.
    assert!(is_finalised(Ascend::new(0).unwrap_err()));
    assert!(is_finalised(Ascend::with_library_dir(session.root(), 0).unwrap_err()));
    assert!(!Ascend::is_available());
    finalize().unwrap();
    assert_eq!(session.calls("aclFinalizeReference"), 1, "a second finalize does nothing");
    session.assert_clean();
}

#[test]
fn finalize_without_reference_counting_calls_acl_finalize_when_poolgrad_initialised() {
    const TEST: &str = "finalize_without_reference_counting_calls_acl_finalize_when_poolgrad_initialised";
    if !in_child(TEST, "cann81", &[]) {
        return;
    }
    // CANN 8.1 exports no aclFinalizeReference; poolgrad's aclInit is this process's first.
    let npu = Ascend::with_library_dir(cann81_root(), 0).unwrap();
    assert_eq!(
        npu.cann_release(),
        Some(CannRelease { version: "8.1.RC1".into(), source: "aclsysGetCANNVersion".into() })
    );
    drop(npu);
    finalize().unwrap();
    assert_eq!((cann81_calls("aclFinalize"), cann81_calls("aclFinalizeReference")), (1, 0));
    assert!(is_finalised(Ascend::with_library_dir(cann81_root(), 0).unwrap_err()));
}
