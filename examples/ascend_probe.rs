//! One command that settles, on a real Ascend NPU, what only hardware can: runs each of the six
//! operators once per case (3x3 and 1x1 kernels; plain inputs, a tie, a NaN; f32, f16, and bf16
//! where the SoC takes it), compares every result with the CPU backend, and reports the SoC, the
//! CANN version, every status code, the first mask bytes, the mask layout and bit order found,
//! tie and NaN agreement and the scope of deterministic mode.
//!
//! ```text
//! cargo run --release --features ascend --example ascend_probe                      # CANN from the environment
//! cargo run --release --features ascend --example ascend_probe -- --library-dir DIR # CANN (or the test double) in DIR
//! ... -- --json FILE                                                                # where the JSON report goes
//! ```
//!
//! It prints a short report and writes it as JSON (default `ascend_probe.json`); attach both to a
//! bug report. Without an NPU it says what it needs and exits successfully. It exits with failure
//! only if a result the device produced differs from the CPU's on a plain input (ties and NaNs are
//! reported, not judged: CANN documents no NaN support).

use std::fmt::Write as _;
use std::process::ExitCode;

use half::{bf16, f16};
use ndarray::{Array4, ArrayD, IxDyn};
use poolgrad::device::ascend::Ascend;
use poolgrad::device::cpu::Cpu;
use poolgrad::{
    AscendError, Bitmask, Error, I32Argmax, Mask, MaskLayout, MaxPool2dParams, PoolFloat,
    adaptive_max_pool2d_backward_on, adaptive_max_pool2d_on, max_pool2d_with_indices_backward_on,
    max_pool2d_with_indices_on, max_pool2d_with_mask_backward_on, max_pool2d_with_mask_on,
};

/// One operator run: what happened, in a word, and the detail.
struct Outcome {
    op: &'static str,
    dtype: &'static str,
    kernel: usize,
    input: &'static str,
    /// "match", "mismatch", "refused" (by poolgrad, before any device call) or "cann-error".
    result: &'static str,
    status: Option<i32>,
    detail: String,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut dir, mut json) = (None, "ascend_probe.json".to_string());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--library-dir", Some(d)) => dir = Some(d.clone()),
            ("--json", Some(f)) => json = f.clone(),
            _ => {
                eprintln!("usage: ascend_probe [--library-dir DIR] [--json FILE]");
                return ExitCode::FAILURE;
            }
        }
    }
    let opened = match &dir {
        Some(d) => Ascend::with_library_dir(d, 0),
        None => Ascend::new(0),
    };
    let npu = match opened {
        Ok(npu) => npu,
        Err(e) => {
            println!("No Ascend NPU here: {e}\n");
            println!("The probe needs an Ascend NPU with its driver and the CANN toolkit (8.3 or later for");
            println!(
                "aclnnAdaptiveMaxPool2dBackward): source /usr/local/Ascend/ascend-toolkit/set_env.sh, then"
            );
            println!("  cargo run --release --features ascend --example ascend_probe");
            return ExitCode::SUCCESS;
        }
    };
    let mut outcomes = Vec::new();
    let mut masks = Vec::new();
    for kernel in [3, 1] {
        for input in ["plain", "tie", "nan"] {
            probe::<f32>(&npu, "f32", kernel, input, &mut outcomes, &mut masks);
            probe::<f16>(&npu, "f16", kernel, input, &mut outcomes, &mut masks);
            probe::<bf16>(&npu, "bf16", kernel, input, &mut outcomes, &mut masks);
        }
    }
    let determinism = determinism_scope(&npu, dir.as_deref());
    let report = Report { npu: &npu, outcomes: &outcomes, masks: &masks, determinism: &determinism };
    print!("{}", report.text());
    if let Err(e) = std::fs::write(&json, report.json()) {
        eprintln!("could not write {json}: {e}");
        return ExitCode::FAILURE;
    }
    println!("\nJSON report written to {json}: please attach it, with the text above, to a bug report.");
    let bad = outcomes.iter().any(|o| o.result == "mismatch" && o.input == "plain");
    if bad { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// `[2, 3, 5, 6]` values: small integers (exact in every dtype), with a tie in every 3x3 window of
/// the "tie" input and a NaN at a known place in the "nan" input.
fn input<T: PoolFloat>(kind: &str) -> Array4<T> {
    Array4::from_shape_fn((2, 3, 5, 6), |(n, c, h, w)| {
        let v = match kind {
            "tie" => ((n + c + h / 2 + w / 2) % 3) as f32,
            _ => ((n * 7 + c * 5 + h * 3 + w * 2) % 11) as f32,
        };
        let v = if kind == "nan" && h == 2 && w == 3 { f32::NAN } else { v };
        cast(v)
    })
}

fn cast<T: PoolFloat>(v: f32) -> T {
    T::round_from_f64(f64::from(v))
}

fn wide<T: PoolFloat>(v: T) -> f64 {
    v.to_f64_exact()
}

fn params(kernel: usize) -> MaxPool2dParams {
    if kernel == 1 {
        MaxPool2dParams::new([1, 1])
    } else {
        MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1])
    }
}

fn outcome<V: PartialEq + std::fmt::Debug>(
    what: (&'static str, &'static str, usize, &'static str),
    got: poolgrad::Result<V>,
    want: V,
) -> Outcome {
    let (op, dtype, kernel, input) = what;
    let (result, status, detail) = match got {
        Ok(v) if v == want => ("match", None, String::new()),
        Ok(v) => ("mismatch", None, format!("device {v:?} != cpu {want:?}")),
        Err(e @ Error::DeviceLimit { .. }) => ("refused", None, e.to_string()),
        Err(e @ Error::Ascend(AscendError::Cann { status, .. })) => ("cann-error", status, e.to_string()),
        Err(e) => ("error", None, e.to_string()),
    };
    Outcome { op, dtype, kernel, input, result, status, detail }
}

/// NaN-aware equality of float arrays: the bits of every element.
fn bits<T: PoolFloat>(a: &ArrayD<T>) -> Vec<u64> {
    a.iter().map(|&v| wide(v).to_bits()).collect()
}

fn probe<T: PoolFloat>(
    npu: &Ascend,
    dtype: &'static str,
    kernel: usize,
    input_kind: &'static str,
    outcomes: &mut Vec<Outcome>,
    masks: &mut Vec<(usize, &'static str, String, String)>,
) {
    let cpu = Cpu::sequential();
    let x = input::<T>(input_kind).into_dyn();
    let p = params(kernel);
    let tag = |op| (op, dtype, kernel, input_kind);
    if kernel == 3 {
        let want = adaptive_max_pool2d_on(&cpu, &x, [2, 3]).unwrap();
        let got = adaptive_max_pool2d_on(npu, &x, [2, 3]);
        let got = got.map(|r| (bits(&r.output), r.indices));
        outcomes.push(outcome(tag("adaptive_max_pool2d"), got, (bits(&want.output), want.indices.clone())));
        let g = want.output.mapv(|v| cast::<T>(wide(v) as f32 * 0.5 + 1.0));
        let want_g = adaptive_max_pool2d_backward_on(&cpu, &g, &x, &want.indices).unwrap();
        let got = adaptive_max_pool2d_backward_on(npu, &g, &x, &want.indices).map(|r| bits(&r));
        outcomes.push(outcome(tag("adaptive_max_pool2d_backward"), got, bits(&want_g)));
    }
    let want = max_pool2d_with_indices_on(&cpu, &x, &p).unwrap();
    let got = max_pool2d_with_indices_on(npu, &x, &p).map(|r| (bits(&r.output), r.indices));
    outcomes.push(outcome(tag("max_pool2d_with_indices"), got, (bits(&want.output), want.indices.clone())));
    let g = want.output.mapv(|v| cast::<T>(wide(v) as f32 - 2.0));
    let want_g = max_pool2d_with_indices_backward_on(&cpu, &g, &x, &want.indices, &p).unwrap();
    let got = max_pool2d_with_indices_backward_on(npu, &g, &x, &want.indices, &p).map(|r| bits(&r));
    outcomes.push(outcome(tag("max_pool2d_with_indices_backward"), got, bits(&want_g)));
    if npu.writes_mask_layout::<I32Argmax>(&p) {
        mask_probe::<T, I32Argmax>(npu, tag, &x, &p, outcomes, masks);
    } else {
        mask_probe::<T, Bitmask>(npu, tag, &x, &p, outcomes, masks);
    }
}

fn mask_probe<T: PoolFloat, L: MaskLayout>(
    npu: &Ascend,
    tag: impl Fn(&'static str) -> (&'static str, &'static str, usize, &'static str),
    x: &ArrayD<T>,
    p: &MaxPool2dParams,
    outcomes: &mut Vec<Outcome>,
    masks: &mut Vec<(usize, &'static str, String, String)>,
) {
    let cpu = Cpu::sequential();
    let want = max_pool2d_with_mask_on(&cpu, x, p, L::default()).unwrap();
    let want_idx = want.mask.to_indices::<i64>().unwrap();
    let got = max_pool2d_with_mask_on(npu, x, p, L::default());
    let (_, dtype, kernel, input) = tag("");
    if let Ok(dev) = &got
        && input == "plain"
        && dtype == "f32"
    {
        let raw = dev.mask.as_array();
        let first: Vec<String> = raw.iter().take(32).map(|b| format!("{:02x}", *b as u8)).collect();
        masks.push((kernel, L::NAME, first.join(" "), layout_found(raw, p, x.shape(), &want_idx)));
    }
    let got = got.map(|r| (bits(&r.output), r.mask.to_indices::<i64>().ok()));
    outcomes.push(outcome(tag("max_pool2d_with_mask"), got, (bits(&want.output), Some(want_idx))));
    let g = want.output.mapv(|v| cast::<T>(wide(v) as f32 + 3.0));
    let want_g = max_pool2d_with_mask_backward_on(&cpu, &g, x, &want.mask).unwrap();
    let got = max_pool2d_with_mask_backward_on(npu, &g, x, &want.mask).map(|r| bits(&r));
    outcomes.push(outcome(tag("max_pool2d_with_mask_backward"), got, bits(&want_g)));
}

/// Which reading of the device's mask bytes gives the CPU's arg-max: the int32 prefix, the 5HD bit
/// mask with bit b = channel b (LSB first), or with the bits of each 16-bit word reversed.
fn layout_found(raw: &ArrayD<i8>, p: &MaxPool2dParams, shape: &[usize], want: &ArrayD<i64>) -> String {
    let decodes = |raw: ArrayD<i8>, bitmask: bool| -> bool {
        let got = if bitmask {
            Mask::<Bitmask, IxDyn>::from_raw(raw, p, shape).and_then(|m| m.to_indices::<i64>())
        } else {
            Mask::<I32Argmax, IxDyn>::from_raw(raw, p, shape).and_then(|m| m.to_indices::<i64>())
        };
        got.is_ok_and(|g| g == *want)
    };
    let mut reversed = raw.clone();
    let flat = reversed.as_slice_mut().expect("a mask the crate allocated is contiguous");
    for word in flat.chunks_exact_mut(2) {
        let w = u16::from_le_bytes([word[0] as u8, word[1] as u8]).reverse_bits().to_le_bytes();
        word.copy_from_slice(&[w[0] as i8, w[1] as i8]);
    }
    let found = [
        (decodes(raw.clone(), false), "I32Argmax (int32 prefix)"),
        (decodes(raw.clone(), true), "Bitmask, bit b = channel b (LSB first)"),
        (decodes(reversed, true), "Bitmask with reversed bit order (MSB first)"),
    ];
    let names: Vec<&str> = found.iter().filter(|(ok, _)| *ok).map(|(_, n)| *n).collect();
    if names.is_empty() { "none of the known layouts".to_string() } else { names.join(" or ") }
}

/// What `is_deterministic` reads on this device and on a second handle after setting it here.
fn determinism_scope(npu: &Ascend, dir: Option<&str>) -> String {
    let open = || match dir {
        Some(d) => Ascend::with_library_dir(d, npu.device_id()),
        None => Ascend::new(npu.device_id()),
    };
    let Ok(first) = open() else { return "unknown (could not open a second handle)".into() };
    let before = first.is_deterministic();
    let Ok(first) = first.deterministic(true) else { return "unknown (setting it failed)".into() };
    let other = open().ok().and_then(|o| o.is_deterministic());
    let scope = match other {
        Some(true) => "process-wide: a second handle reads it on",
        Some(false) => "per context: a second handle reads it off",
        None => "unknown: the levels disagree or cannot be read",
    };
    let _ = first.deterministic(false);
    format!("{scope} (is_deterministic before setting it: {before:?})")
}

struct Report<'a> {
    npu: &'a Ascend,
    outcomes: &'a [Outcome],
    masks: &'a [(usize, &'static str, String, String)],
    determinism: &'a str,
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Report<'_> {
    fn version(&self) -> String {
        self.npu.acl_interface_version().unwrap_or_else(|| "unknown (aclrtGetVersion not exported)".into())
    }

    fn memory(&self) -> String {
        self.npu.memory_total().map_or_else(|| "unknown".into(), |b| format!("{b} bytes"))
    }

    fn text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "poolgrad {} Ascend probe", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(t, "SoC: {} ({})", self.npu.soc_name(), self.npu.soc_family());
        let _ = writeln!(t, "CANN runtime: {}; libraries from {}", self.version(), self.npu.library_origin());
        let _ = writeln!(t, "device memory (aclrtGetMemInfo, total): {}", self.memory());
        let _ = writeln!(t, "deterministic mode: {}", self.determinism);
        for (kernel, layout, first, found) in self.masks {
            let _ = writeln!(t, "mask {kernel}x{kernel} (expected {layout}): layout found: {found}");
            let _ = writeln!(t, "  first bytes: {first}");
        }
        let count = |r: &str| self.outcomes.iter().filter(|o| o.result == r).count();
        let _ = writeln!(
            t,
            "runs: {} match, {} mismatch, {} refused by poolgrad, {} CANN errors, {} other errors",
            count("match"),
            count("mismatch"),
            count("refused"),
            count("cann-error"),
            count("error")
        );
        for o in self.outcomes.iter().filter(|o| o.result != "match" && o.result != "refused") {
            let _ = writeln!(
                t,
                "  {} {} {}x{} {}: {} {}",
                o.op, o.dtype, o.kernel, o.kernel, o.input, o.result, o.detail
            );
        }
        t
    }

    fn json(&self) -> String {
        let runs: Vec<String> = self
            .outcomes
            .iter()
            .map(|o| {
                format!(
                    "    {{\"op\": {}, \"dtype\": {}, \"kernel\": {}, \"input\": {}, \"result\": {}, \"status\": {}, \"detail\": {}}}",
                    json_str(o.op),
                    json_str(o.dtype),
                    o.kernel,
                    json_str(o.input),
                    json_str(o.result),
                    o.status.map_or("null".into(), |s| s.to_string()),
                    json_str(&o.detail)
                )
            })
            .collect();
        let masks: Vec<String> = self
            .masks
            .iter()
            .map(|(k, layout, first, found)| {
                format!(
                    "    {{\"kernel\": {k}, \"expected_layout\": {}, \"first_bytes\": {}, \"layout_found\": {}}}",
                    json_str(layout),
                    json_str(first),
                    json_str(found)
                )
            })
            .collect();
        format!(
            "{{\n  \"poolgrad\": {},\n  \"soc\": {},\n  \"family\": {},\n  \"cann_version\": {},\n  \"libraries\": {},\n  \"memory_total\": {},\n  \"determinism\": {},\n  \"masks\": [\n{}\n  ],\n  \"runs\": [\n{}\n  ]\n}}\n",
            json_str(env!("CARGO_PKG_VERSION")),
            json_str(self.npu.soc_name()),
            json_str(&self.npu.soc_family().to_string()),
            json_str(&self.version()),
            json_str(self.npu.library_origin()),
            self.npu.memory_total().map_or("null".into(), |b| b.to_string()),
            json_str(self.determinism),
            masks.join(",\n"),
            runs.join(",\n")
        )
    }
}
