//! Test support for the Ascend backend: lays the CANN test double (`tests/cann-double`, built as a
//! workspace member) out like a CANN install (`lib64/libascendcl.so`, `libnnopbase.so`, `libopapi_nn.so`), and
//! drives its control functions. Also finds a real NPU when one is present.
//!
//! The double keeps process-wide state, so tests that use it take [`Double::session`], which
//! serialises them and resets the double.

#![allow(dead_code, unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use poolgrad::device::ascend::Ascend;

/// The double, built and installed under the test target directory.
pub struct Double {
    root: PathBuf,
    lib: libloading::Library,
}

static DOUBLE: OnceLock<Double> = OnceLock::new();
static SERIAL: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread holds the session (a second one would deadlock).
    static HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The libraries a CANN install provides, all served by the one double.
const NAMES: [&str; 3] = ["libascendcl.so", "libnnopbase.so", "libopapi_nn.so"];

/// Lays the double's library `file` (built by `cargo build -p cann-double -p cann-double-81`, a
/// workspace member: no test runs cargo) out as a CANN install under `target/tmp/<name>`;
/// returns the install root.
fn install(name: &str, file: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    // `target/tmp` is inside the target directory, whose `debug` holds the workspace's libraries.
    let so =
        tmp.parent().expect("CARGO_TARGET_TMPDIR is inside the target directory").join("debug").join(file);
    assert!(
        so.exists(),
        "the CANN test double is not built ({} is missing): run `cargo build -p cann-double -p cann-double-81` \
         before the Ascend tests (.ci/run does)",
        so.display()
    );
    let root = tmp.join(name).join("install");
    let lib64 = root.join("lib64");
    std::fs::create_dir_all(&lib64).unwrap();
    for name in NAMES {
        let link = lib64.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&so, &link).unwrap();
    }
    root
}

fn build() -> Double {
    let root = install("cann-double", "libcann_double.so");
    // SAFETY: loads the double (the same file the backend will open through the symlinks); its
    // initialisers only set up Rust statics.
    let lib =
        unsafe { libloading::Library::new(root.join("lib64").join(NAMES[0])) }.expect("load the CANN double");
    Double { root, lib }
}

/// The install root of a double that exports what CANN 8.1.RC1 exports (no
/// `aclnnAdaptiveMaxPool2dBackward`). It keeps its own state; tests use it without controls.
pub fn cann81_root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| install("cann-double-81", "libcann_double_81.so")).clone()
}

impl Double {
    pub fn get() -> &'static Double {
        DOUBLE.get_or_init(build)
    }

    /// Exclusive use of the double, freshly reset (SoC "Ascend910B1", one device, 1 GiB).
    pub fn session() -> Session {
        assert!(!HELD.get(), "this thread already holds a double session (drop it first)");
        let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        HELD.set(true);
        let double = Double::get();
        double.call0("cann_double_reset");
        Session { double, _guard: guard }
    }

    /// The directory to point `Ascend::with_library_dir` at.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Calls of `function` since the last reset ("*" for all).
    pub fn calls(&self, function: &str) -> u64 {
        let f = cstr(function);
        type Calls = unsafe extern "C" fn(*const std::ffi::c_char) -> u64;
        // SAFETY: `cann_double_calls(const char*) -> uint64_t`; `f` outlives the call.
        unsafe { (self.lib.get::<Calls>("cann_double_calls").unwrap())(f.as_ptr()) }
    }

    fn call0(&self, name: &str) {
        // SAFETY: `cann_double_reset` is `extern "C" fn()`.
        unsafe { (self.lib.get::<unsafe extern "C" fn()>(name).unwrap())() }
    }
}

/// A reset double, held exclusively.
pub struct Session {
    double: &'static Double,
    _guard: MutexGuard<'static, ()>,
}

fn cstr(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap()
}

impl Drop for Session {
    fn drop(&mut self) {
        HELD.set(false);
    }
}

impl Session {
    /// Device 0 of the double.
    pub fn open(&self) -> Ascend {
        Ascend::with_library_dir(self.double.root(), 0).expect("open the double's device 0")
    }

    pub fn root(&self) -> &Path {
        self.double.root()
    }

    pub fn set_soc(&self, name: &str) {
        let name = cstr(name);
        // SAFETY: `cann_double_set_soc(const char*)`; `name` is NUL-terminated and outlives the call.
        unsafe {
            (self
                .double
                .lib
                .get::<unsafe extern "C" fn(*const std::ffi::c_char)>("cann_double_set_soc")
                .unwrap())(name.as_ptr())
        }
    }

    pub fn set_devices(&self, count: u32, memory_limit: u64) {
        // SAFETY: `cann_double_set_devices(uint32_t, uint64_t)`.
        unsafe {
            (self.double.lib.get::<unsafe extern "C" fn(u32, u64)>("cann_double_set_devices").unwrap())(
                count,
                memory_limit,
            )
        }
    }

    /// Makes the `(skip + 1)`-th next call of `function` return `status`.
    pub fn inject(&self, function: &str, status: i32, skip: u32) {
        let f = cstr(function);
        type Inject = unsafe extern "C" fn(*const std::ffi::c_char, i32, u32);
        // SAFETY: `cann_double_inject(const char*, int32_t, uint32_t)`; `f` outlives the call.
        unsafe { (self.double.lib.get::<Inject>("cann_double_inject").unwrap())(f.as_ptr(), status, skip) }
    }

    /// Live handles of a kind ("tensors", "int_arrays", "executors", "allocations", "streams",
    /// "contexts", "devices").
    pub fn live(&self, what: &str) -> i64 {
        let w = cstr(what);
        type Live = unsafe extern "C" fn(*const std::ffi::c_char) -> i64;
        // SAFETY: `cann_double_live(const char*) -> int64_t`; `w` outlives the call.
        unsafe { (self.double.lib.get::<Live>("cann_double_live").unwrap())(w.as_ptr()) }
    }

    /// Calls of `function` since the reset ("*" for all).
    pub fn calls(&self, function: &str) -> u64 {
        self.double.calls(function)
    }

    pub fn last_deterministic(&self) -> i64 {
        // SAFETY: `cann_double_last_deterministic() -> int64_t`.
        unsafe {
            (self.double.lib.get::<unsafe extern "C" fn() -> i64>("cann_double_last_deterministic").unwrap())(
            )
        }
    }

    pub fn violations(&self) -> Vec<String> {
        type Violations = unsafe extern "C" fn(*mut std::ffi::c_char, usize) -> usize;
        // SAFETY: `cann_double_violations(char*, size_t) -> size_t` writes at most `len` bytes.
        let f = unsafe { self.double.lib.get::<Violations>("cann_double_violations").unwrap() };
        // SAFETY: a null buffer asks for the length only.
        let len = unsafe { f(std::ptr::null_mut(), 0) };
        let mut buf = vec![0u8; len + 1];
        // SAFETY: `buf` holds `len + 1` writable bytes.
        unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
        let text = String::from_utf8_lossy(&buf[..len]).into_owned();
        text.lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
    }

    /// Every handle the double counts is released and no protocol violation was seen.
    pub fn assert_clean(&self) {
        assert_eq!(self.violations(), Vec::<String>::new(), "CANN protocol violations");
        for what in ["tensors", "int_arrays", "executors", "allocations", "streams", "contexts", "devices"] {
            assert_eq!(self.live(what), 0, "live {what} after every handle was dropped");
        }
    }
}

/// A real NPU, if CANN loads from the default locations and reports a device; otherwise prints
/// why the real-device run of `test` is skipped.
pub fn real_npu(test: &str) -> Option<Ascend> {
    use std::io::Write;
    // Written to the process's stderr directly (not `eprintln!`), so the test harness does not
    // capture it: the skip is visible in a normal `cargo test` run.
    let note = |text: String| {
        let _ = writeln!(std::io::stderr(), "note: {test}: {text}");
    };
    if !Ascend::is_available() {
        note("no Ascend NPU (CANN not found or no device); the real-device run is skipped".into());
        return None;
    }
    match Ascend::new(0) {
        Ok(npu) => Some(npu),
        Err(e) => {
            note(format!(
                "CANN is installed but device 0 did not open ({e}); the real-device run is skipped"
            ));
            None
        }
    }
}

/// Runs `body` on the double's device (checking afterwards that it released everything and saw
/// no violation), then on a real NPU when one is present.
pub fn on_every_device(test: &str, body: impl Fn(&Ascend)) {
    {
        let session = Double::session();
        let npu = session.open();
        body(&npu);
        drop(npu);
        session.assert_clean();
    }
    if let Some(npu) = real_npu(test) {
        body(&npu);
    }
}
