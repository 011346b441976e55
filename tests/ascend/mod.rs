//! Test support for the Ascend backend: builds the CANN test double (`tests/cann-double`, a
//! workspace member) and lays it out like a CANN install (`lib64/libascendcl.so`, `libnnopbase.so`, `libopapi_nn.so`), and
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

/// Builds the double (both variants, `cargo build -p cann-double -p cann-double-81`) once per test
/// process, into a target directory of its own under `target/tmp` (the outer `cargo test` holds
/// the lock of the workspace's), so that `cargo test --features ascend` works on a fresh clone;
/// returns the directory holding the libraries. An up-to-date build costs a second.
fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cann-double-target");
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(&cargo)
            .args(["build", "--quiet", "-p", "cann-double", "-p", "cann-double-81", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .unwrap_or_else(|e| panic!("could not run {} to build the CANN test double: {e}", cargo.display()));
        assert!(
            status.success(),
            "building the CANN test double failed ({status}): run `cargo build -p cann-double -p cann-double-81` to see why"
        );
        target.join("debug")
    })
}

/// Lays the double's library `file` (built by [`built`]) out as a CANN install under
/// `target/tmp/<name>`; returns the install root.
fn install(name: &str, file: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let so = built().join(file);
    assert!(so.exists(), "the CANN test double was built but {} is missing", so.display());
    let root = tmp.join(name).join("install");
    let lib64 = root.join("lib64");
    std::fs::create_dir_all(&lib64).unwrap();
    for name in NAMES {
        link(&so, &lib64.join(name));
    }
    root
}

/// Makes `link` a symbolic link to `target`, atomically: test binaries that nextest runs side by
/// side lay out the same install, so the link is made under a name of this process's and renamed
/// over the old one (a remove-then-create would race).
pub fn link(target: &Path, link: &Path) {
    if std::fs::read_link(link).is_ok_and(|t| t == target) {
        return;
    }
    let name = link.file_name().unwrap().to_string_lossy();
    let tmp = link.with_file_name(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
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

/// Calls of `function` in the CANN 8.1 double ([`cann81_root`]) since its process started.
pub fn cann81_calls(function: &str) -> u64 {
    static LIB: OnceLock<libloading::Library> = OnceLock::new();
    let lib = LIB.get_or_init(|| {
        // SAFETY: loads the 8.1 double (the file the backend opens through the symlinks); its
        // initialisers only set up Rust statics.
        unsafe { libloading::Library::new(cann81_root().join("lib64").join(NAMES[0])) }
            .expect("load the 8.1 double")
    });
    let f = cstr(function);
    type Calls = unsafe extern "C" fn(*const std::ffi::c_char) -> u64;
    // SAFETY: `cann_double_calls(const char*) -> uint64_t`; `f` outlives the call.
    unsafe { (lib.get::<Calls>("cann_double_calls").unwrap())(f.as_ptr()) }
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

    /// The CANN release the double's `aclsysGetCANNVersion` reports; `None` for an install without
    /// its version record (the call then fails).
    pub fn set_release(&self, release: Option<&str>) {
        let release = release.map(cstr);
        let ptr = release.as_ref().map_or(std::ptr::null(), |r| r.as_ptr());
        type SetRelease = unsafe extern "C" fn(*const std::ffi::c_char);
        // SAFETY: `cann_double_set_release(const char*)` takes NULL or a NUL-terminated string
        // that outlives the call.
        unsafe { (self.double.lib.get::<SetRelease>("cann_double_set_release").unwrap())(ptr) }
    }

    /// `aclInit`'s reference count in the double (`aclInitRefCount`).
    pub fn init_refs(&self) -> u64 {
        // SAFETY: `cann_double_init_refs() -> uint64_t`.
        unsafe { (self.double.lib.get::<unsafe extern "C" fn() -> u64>("cann_double_init_refs").unwrap())() }
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
        self.assert_clean_but_executors(0);
    }

    /// As [`Session::assert_clean`], with `executors` executors left to CANN (made by a phase 1
    /// whose launch never came: CANN documents no release for them).
    pub fn assert_clean_but_executors(&self, executors: i64) {
        assert_eq!(self.violations(), Vec::<String>::new(), "CANN protocol violations");
        for what in ["tensors", "int_arrays", "allocations", "streams", "contexts", "devices"] {
            assert_eq!(self.live(what), 0, "live {what} after every handle was dropped");
        }
        assert_eq!(self.live("executors"), executors, "executors left to CANN");
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

/// Another CANN user of the process (torch_npu, a custom operator library), calling the double's
/// C ABI directly as such a library calls CANN: it binds its thread to the device
/// (`aclrtSetDevice`, which binds the device's primary context), makes streams there and launches
/// aclnn operators on them.
pub struct Foreign<'s> {
    lib: &'s libloading::Library,
}

type Ptr = *mut std::ffi::c_void;

impl Session {
    /// The double's C ABI, as another library of the process would call it.
    pub fn foreign(&self) -> Foreign<'_> {
        let foreign = Foreign { lib: &self.double.lib };
        foreign.init();
        foreign
    }
}

impl Foreign<'_> {
    fn f<T: Copy>(&self, name: &str) -> T {
        // SAFETY: every caller below names a CANN function with the C type `T` it passes.
        unsafe { *self.lib.get::<T>(name).unwrap() }
    }

    /// `aclInit(NULL)`, as every CANN user calls it first; `ACL_ERROR_REPEAT_INITIALIZE` (another
    /// user initialised CANN already) counts as success, as CANN's users treat it.
    pub fn init(&self) {
        // SAFETY: `aclError aclInit(const char*)`; NULL is the default configuration.
        let code = unsafe {
            self.f::<unsafe extern "C" fn(*const std::ffi::c_char) -> i32>("aclInit")(std::ptr::null())
        };
        assert!(code == 0 || code == 100_002, "aclInit: {code}");
    }

    /// `aclrtSetDevice(device)`.
    pub fn set_device(&self, device: i32) -> i32 {
        // SAFETY: `aclError aclrtSetDevice(int32_t)`.
        unsafe { self.f::<unsafe extern "C" fn(i32) -> i32>("aclrtSetDevice")(device) }
    }

    /// `aclrtResetDevice(device)`.
    pub fn reset_device(&self, device: i32) -> i32 {
        // SAFETY: `aclError aclrtResetDevice(int32_t)`.
        unsafe { self.f::<unsafe extern "C" fn(i32) -> i32>("aclrtResetDevice")(device) }
    }

    /// The calling thread's current context, or the status `aclrtGetCurrentContext` failed with.
    pub fn current_context(&self) -> Result<usize, i32> {
        let mut ctx: Ptr = std::ptr::null_mut();
        // SAFETY: `aclError aclrtGetCurrentContext(aclrtContext*)`; `ctx` is a valid out-pointer.
        let code =
            unsafe { self.f::<unsafe extern "C" fn(*mut Ptr) -> i32>("aclrtGetCurrentContext")(&mut ctx) };
        if code == 0 { Ok(ctx as usize) } else { Err(code) }
    }

    /// `aclrtCreateContext(device)`, which also makes it current.
    pub fn create_context(&self, device: i32) -> usize {
        let mut ctx: Ptr = std::ptr::null_mut();
        // SAFETY: `aclError aclrtCreateContext(aclrtContext*, int32_t)`.
        let code = unsafe {
            self.f::<unsafe extern "C" fn(*mut Ptr, i32) -> i32>("aclrtCreateContext")(&mut ctx, device)
        };
        assert_eq!(code, 0, "aclrtCreateContext");
        ctx as usize
    }

    /// `aclrtDestroyContext(ctx)`.
    pub fn destroy_context(&self, ctx: usize) -> i32 {
        // SAFETY: `aclError aclrtDestroyContext(aclrtContext)`.
        unsafe { self.f::<unsafe extern "C" fn(Ptr) -> i32>("aclrtDestroyContext")(ctx as Ptr) }
    }

    /// A stream in the current context.
    pub fn create_stream(&self) -> usize {
        let mut stream: Ptr = std::ptr::null_mut();
        // SAFETY: `aclError aclrtCreateStream(aclrtStream*)`.
        let code =
            unsafe { self.f::<unsafe extern "C" fn(*mut Ptr) -> i32>("aclrtCreateStream")(&mut stream) };
        assert_eq!(code, 0, "aclrtCreateStream");
        stream as usize
    }

    /// `aclrtDestroyStream(stream)`.
    pub fn destroy_stream(&self, stream: usize) -> i32 {
        // SAFETY: `aclError aclrtDestroyStream(aclrtStream)`.
        unsafe { self.f::<unsafe extern "C" fn(Ptr) -> i32>("aclrtDestroyStream")(stream as Ptr) }
    }

    /// `aclrtMalloc(bytes)` in the current context: the device address.
    pub fn malloc(&self, bytes: usize) -> usize {
        let mut p: Ptr = std::ptr::null_mut();
        // SAFETY: `aclError aclrtMalloc(void**, size_t, aclrtMemMallocPolicy)`; `p` is a valid out-pointer.
        let code = unsafe {
            self.f::<unsafe extern "C" fn(*mut Ptr, usize, i32) -> i32>("aclrtMalloc")(&mut p, bytes, 0)
        };
        assert_eq!(code, 0, "aclrtMalloc");
        p as usize
    }

    /// `aclrtFree(ptr)`.
    pub fn free(&self, ptr: usize) -> i32 {
        // SAFETY: `aclError aclrtFree(void*)`.
        unsafe { self.f::<unsafe extern "C" fn(Ptr) -> i32>("aclrtFree")(ptr as Ptr) }
    }

    /// Copies `host` to device address `ptr` (`aclrtMemcpy`, host to device).
    pub fn upload(&self, ptr: usize, host: &[u8]) {
        type Memcpy = unsafe extern "C" fn(Ptr, usize, *const std::ffi::c_void, usize, i32) -> i32;
        // SAFETY: `host` is readable for its length; the double checks the device range.
        let code = unsafe {
            self.f::<Memcpy>("aclrtMemcpy")(ptr as Ptr, host.len(), host.as_ptr().cast(), host.len(), 1)
        };
        assert_eq!(code, 0, "aclrtMemcpy host to device");
    }

    /// Copies `host.len()` bytes from device address `ptr` into `host` (`aclrtMemcpy`, device to host).
    pub fn download(&self, ptr: usize, host: &mut [u8]) {
        type Memcpy = unsafe extern "C" fn(Ptr, usize, *const std::ffi::c_void, usize, i32) -> i32;
        // SAFETY: `host` is writable for its length; the double checks the device range.
        let code = unsafe {
            self.f::<Memcpy>("aclrtMemcpy")(host.as_mut_ptr().cast(), host.len(), ptr as Ptr, host.len(), 2)
        };
        assert_eq!(code, 0, "aclrtMemcpy device to host");
    }

    /// `aclrtSynchronizeStream(stream)`.
    pub fn synchronize(&self, stream: usize) -> i32 {
        // SAFETY: `aclError aclrtSynchronizeStream(aclrtStream)`.
        unsafe { self.f::<unsafe extern "C" fn(Ptr) -> i32>("aclrtSynchronizeStream")(stream as Ptr) }
    }

    /// One f32 `aclnnAdaptiveMaxPool2dBackward` of a 1x1x2x2 plane onto 1x1 on `stream`, as an
    /// operator library launches it; returns the launch's status (and on success, synchronises
    /// and checks the gradient landed on the maximum).
    pub fn launch_on(&self, stream: usize) -> i32 {
        type Malloc = unsafe extern "C" fn(*mut Ptr, usize, i32) -> i32;
        type Memcpy = unsafe extern "C" fn(Ptr, usize, *const std::ffi::c_void, usize, i32) -> i32;
        type Create =
            unsafe extern "C" fn(*const i64, u64, i32, *const i64, i64, i32, *const i64, u64, Ptr) -> Ptr;
        type Phase1 = unsafe extern "C" fn(Ptr, Ptr, Ptr, Ptr, *mut u64, *mut Ptr) -> i32;
        type Launch = unsafe extern "C" fn(Ptr, u64, Ptr, Ptr) -> i32;
        let (malloc, free, memcpy) = (
            self.f::<Malloc>("aclrtMalloc"),
            self.f::<unsafe extern "C" fn(Ptr) -> i32>("aclrtFree"),
            self.f::<Memcpy>("aclrtMemcpy"),
        );
        let create = self.f::<Create>("aclCreateTensor");
        let destroy = self.f::<unsafe extern "C" fn(Ptr) -> i32>("aclDestroyTensor");
        // grad_output [1,1,1,1] = 2; self [1,1,2,2]; indices [1,1,1,1] = 3 (int64); grad_input [1,1,2,2].
        let shapes: [([i64; 4], i32, Vec<u8>); 4] = [
            ([1, 1, 1, 1], 0, 2f32.to_le_bytes().to_vec()),
            ([1, 1, 2, 2], 0, vec![0; 16]),
            ([1, 1, 1, 1], 9, 3i64.to_le_bytes().to_vec()),
            ([1, 1, 2, 2], 0, vec![0; 16]),
        ];
        let mut buffers = Vec::new();
        let mut tensors = Vec::new();
        for (dims, dtype, bytes) in &shapes {
            let mut p: Ptr = std::ptr::null_mut();
            // SAFETY: the documented signatures; `bytes` is readable for its length, `p` is an
            // allocation of that many bytes, the dimension arrays outlive the calls.
            unsafe {
                assert_eq!(malloc(&mut p, bytes.len(), 0), 0, "aclrtMalloc");
                assert_eq!(memcpy(p, bytes.len(), bytes.as_ptr().cast(), bytes.len(), 1), 0, "aclrtMemcpy");
                let numel = dims.iter().product::<i64>();
                let strides = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1];
                tensors.push(create(
                    dims.as_ptr(),
                    4,
                    *dtype,
                    strides.as_ptr(),
                    0,
                    0,
                    [numel].as_ptr(),
                    1,
                    p,
                ));
            }
            buffers.push(p);
        }
        let (mut size, mut exec) = (0u64, std::ptr::null_mut());
        let phase1 = self.f::<Phase1>("aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize");
        let launch = self.f::<Launch>("aclnnAdaptiveMaxPool2dBackward");
        // SAFETY: live tensors, valid out-pointers, a workspace of `size` bytes (or none).
        let code = unsafe {
            assert_eq!(
                phase1(tensors[0], tensors[1], tensors[2], tensors[3], &mut size, &mut exec),
                0,
                "phase 1"
            );
            let mut ws: Ptr = std::ptr::null_mut();
            if size > 0 {
                assert_eq!(malloc(&mut ws, size as usize, 0), 0, "workspace");
            }
            let code = launch(ws, size, exec, stream as Ptr);
            if code == 0 {
                let sync = self.f::<unsafe extern "C" fn(Ptr) -> i32>("aclrtSynchronizeStream");
                assert_eq!(sync(stream as Ptr), 0, "aclrtSynchronizeStream");
                let mut out = [0u8; 16];
                assert_eq!(memcpy(out.as_mut_ptr().cast(), 16, buffers[3], 16, 2), 0, "download");
                let got: Vec<f32> =
                    out.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
                assert_eq!(got, [0.0, 0.0, 0.0, 2.0], "the foreign launch computed its gradient");
            }
            if !ws.is_null() {
                free(ws);
            }
            code
        };
        for t in tensors {
            // SAFETY: each tensor is live and destroyed once.
            unsafe { destroy(t) };
        }
        for p in buffers {
            // SAFETY: each buffer is live, its work synchronised (or never queued), freed once.
            unsafe { free(p) };
        }
        code
    }
}
