//! Opening the NPU the Ascend examples run on, from their command line. Shared by
//! `examples/ascend.rs` and `examples/ascend_device.rs` through `#[path]`.

use std::process::ExitCode;

use poolgrad::device::ascend::Ascend;

/// Device 0 of the CANN install found as CANN's `set_env.sh` says, or of `--library-dir DIR`.
/// Without an NPU, prints why and `how_to_run` and gives the exit code: success, since an
/// example that cannot find hardware has nothing to report; a usage error is a failure.
pub fn open(example: &str, how_to_run: &[&str]) -> Result<Ascend, ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opened = match args.as_slice() {
        [flag, dir] if flag == "--library-dir" => Ascend::with_library_dir(dir, 0),
        [] => Ascend::new(0),
        _ => {
            eprintln!("usage: {example} [--library-dir DIR]");
            return Err(ExitCode::FAILURE);
        }
    };
    opened.map_err(|e| {
        println!("No Ascend NPU here: {e}\n");
        for line in how_to_run {
            println!("{line}");
        }
        ExitCode::SUCCESS
    })
}
