//! Hostile input for every public entry point, decoded from arbitrary bytes. Shared by the
//! cargo-fuzz targets (`tests/fuzz`) and the corpus replay test (`tests/fuzz_corpus.rs`).
//!
//! The property: each call returns `Ok` with a result equal to the reference
//! (`poolgrad::testing::reference`), or an `Err`. A panic anywhere is a finding.
#![allow(dead_code)]

#[path = "../common/equality.rs"]
mod equality;
#[path = "../common/forwards.rs"]
mod forwards;
#[path = "../common/scatter.rs"]
mod scatter;
#[path = "../common/unpooling.rs"]
mod unpooling;

use ndarray::{ArrayD, ArrayViewD, IxDyn, ShapeBuilder};
use poolgrad::testing::{Tolerance, compare, compare_indices, reference};
use poolgrad::{ArgmaxIndex, Bitmask, I32Argmax, Mask, MaskLayout, MaxPool2dParams, PoolFloat};

/// Reads the fuzzer's bytes; past the end it yields zeros.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(core::array::from_fn(|_| self.u8()))
    }

    /// Mostly small sizes, sometimes zero, sometimes huge.
    pub fn size(&mut self) -> usize {
        match self.u8() {
            0..=219 => usize::from(self.u8() % 7) + 1,
            220..=229 => 0,
            230..=239 => usize::from(self.u8()) * 64,
            240..=249 => 1 << (self.u8() % 40),
            _ => self.u64() as usize,
        }
    }

    pub fn small(&mut self, max: u8) -> usize {
        usize::from(self.u8() % (max + 1))
    }

    pub fn value(&mut self) -> f64 {
        match self.u8() {
            0..=199 => f64::from(self.u8() % 7) - 3.0,
            200..=229 => f64::from(self.u8()) / 16.0 - 8.0,
            230..=239 => f64::NAN,
            240..=244 => f64::INFINITY,
            245..=249 => f64::NEG_INFINITY,
            _ => f64::from_bits(self.u64()),
        }
    }

    pub fn index(&mut self, plane: usize) -> i64 {
        match self.u8() {
            0..=229 => (self.u64() % plane.max(1) as u64) as i64,
            230..=239 => -1,
            240..=249 => plane as i64,
            _ => self.u64() as i64,
        }
    }
}

/// The Ascend backend as a second device for the same inputs (`tests/ascend_hostile.rs`, with the
/// CANN test double). The property there: the NPU returns the CPU's result bit for bit, or an
/// error raised before any device call (the double counts the calls).
#[cfg(feature = "ascend")]
pub mod npu {
    use std::cell::RefCell;

    use ndarray::{Array, Dimension};
    use poolgrad::device::ascend::Ascend;
    use poolgrad::{ArgmaxIndex, Error, MaskLayout, PoolFloat, Pooled, PooledMask};

    /// The device and a counter of every call it makes into CANN.
    pub struct Hook {
        pub npu: Ascend,
        pub device_calls: Box<dyn Fn() -> u64>,
        pub stats: Stats,
    }

    /// What the NPU did with the inputs it was given.
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Stats {
        /// Ran and matched the CPU.
        pub ran: usize,
        /// Rejected, as the CPU did, before any device call.
        pub rejected: usize,
        /// Valid, but beyond the device (dtype, layout, size): refused before any device call.
        pub refused: usize,
    }

    thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    pub fn install(hook: Hook) {
        HOOK.with(|h| *h.borrow_mut() = Some(hook));
    }

    pub fn uninstall() -> Option<Hook> {
        HOOK.with(|h| h.borrow_mut().take())
    }

    pub fn check<R>(
        what: &str,
        cpu: &poolgrad::Result<R>,
        call: impl FnOnce(&Ascend) -> poolgrad::Result<R>,
        same: impl Fn(&R, &R) -> bool,
    ) {
        HOOK.with(|h| {
            let mut h = h.borrow_mut();
            let Some(hook) = h.as_mut() else { return };
            let before = (hook.device_calls)();
            let got = call(&hook.npu);
            let calls = (hook.device_calls)() - before;
            match (cpu, &got) {
                (Ok(a), Ok(b)) => {
                    assert!(same(a, b), "{what}: the NPU's result differs from the CPU's");
                    hook.stats.ran += 1;
                }
                (Err(e), Ok(_)) => panic!("{what}: the NPU accepts what the CPU rejects ({e})"),
                (_, Err(e)) => {
                    assert_eq!(calls, 0, "{what}: rejected only after {calls} device calls: {e}");
                    match (cpu, e) {
                        (Ok(_), Error::DeviceLimit { .. }) => hook.stats.refused += 1,
                        (Ok(_), _) => panic!("{what}: the CPU accepts but the NPU fails: {e}"),
                        (Err(_), _) => hook.stats.rejected += 1,
                    }
                }
            }
        })
    }

    pub fn same_bits<T: PoolFloat, D: Dimension>(a: &Array<T, D>, b: &Array<T, D>) -> bool {
        a.shape() == b.shape() && a.iter().zip(b).all(|(x, y)| bytemuck::bytes_of(x) == bytemuck::bytes_of(y))
    }

    pub fn same_pooled<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
        a: &Pooled<T, I, D>,
        b: &Pooled<T, I, D>,
    ) -> bool {
        same_bits(&a.output, &b.output) && a.indices == b.indices
    }

    /// Values bit for bit and the same arg-max (the layouts leave some mask bits unspecified).
    pub fn same_masked<T: PoolFloat, L: MaskLayout, D: Dimension>(
        a: &PooledMask<T, L, D>,
        b: &PooledMask<T, L, D>,
    ) -> bool {
        same_bits(&a.output, &b.output) && a.mask.to_indices::<i64>().ok() == b.mask.to_indices::<i64>().ok()
    }
}

/// Runs the call on the NPU hook too (feature `ascend`); nothing otherwise.
#[cfg(feature = "ascend")]
macro_rules! also_on_npu {
    ($what:expr, $cpu:expr, |$npu:ident| $call:expr, $same:expr) => {
        npu::check($what, &$cpu, |$npu| $call, $same)
    };
}
#[cfg(not(feature = "ascend"))]
macro_rules! also_on_npu {
    ($($t:tt)*) => {};
}

/// Elements a test may materialise; larger shapes are only checked for rejection.
const BUDGET: usize = 1 << 16;

fn count(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn dims(b: &mut Bytes) -> Vec<usize> {
    let rank = match b.u8() % 16 {
        0 => 2,
        1 => 5,
        2..=7 => 3,
        _ => 4,
    };
    (0..rank).map(|_| b.size()).collect()
}

fn array<T: PoolFloat>(b: &mut Bytes, dims: &[usize]) -> Option<ArrayD<T>> {
    let n = count(dims).filter(|&n| n <= BUDGET)?;
    let data = (0..n).map(|_| T::round_from_f64(b.value())).collect();
    ArrayD::from_shape_vec(IxDyn(dims), data).ok()
}

/// A broadcast view of any shape over one element: huge shapes without memory. Shapes whose
/// results would be allocatable yet slow to compute (between 2^18 and 2^40 elements) are
/// skipped, so that the fuzzer stays fast; smaller ones run, larger ones must be rejected.
fn broadcast<'a, T: PoolFloat>(one: &'a [T], dims: &[usize]) -> Option<ArrayViewD<'a, T>> {
    if count(dims).is_some_and(|n| n > 1 << 18 && n as u64 <= 1 << 40) {
        return None;
    }
    ArrayViewD::from_shape(IxDyn(dims).strides(IxDyn(&vec![0; dims.len()])), one).ok()
}

/// The most negative value of `I`.
fn min_index<I: ArgmaxIndex>() -> I {
    I::try_from(i64::MIN).or_else(|_| I::try_from(i64::from(i32::MIN))).unwrap_or_default()
}

fn indices<I: ArgmaxIndex>(b: &mut Bytes, dims: &[usize], plane: usize) -> Option<ArrayD<I>> {
    let n = count(dims).filter(|&n| n <= BUDGET)?;
    let data = (0..n)
        .map(|_| {
            let v = b.index(plane);
            I::try_from_flat(v as usize).filter(|_| v >= 0).unwrap_or_else(min_index::<I>)
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(dims), data).ok()
}

fn params(b: &mut Bytes) -> MaxPool2dParams {
    let mut two = || [b.size().min(1 << 20), b.size().min(1 << 20)];
    let (k, s, p, d) = (two(), two(), [b.small(3), b.small(3)], [b.small(3), b.small(3)]);
    let ceil = b.u8() & 1 == 1;
    MaxPool2dParams::new(k).with_stride(s).with_padding(p).with_dilation(d).with_ceil_mode(ceil)
}

fn plane_of(dims: &[usize]) -> usize {
    match dims.len() {
        3 | 4 => dims[dims.len() - 2].saturating_mul(dims[dims.len() - 1]),
        _ => 1,
    }
}

/// The fuzz targets, one per family of entry points.
pub const TARGETS: [&str; 7] =
    ["adaptive", "max_pool", "mask", "raw_mask", "views", "mask_conversions", "volumes"];

/// Runs `data` as fuzz target `target` would (the first byte picks forward or backward).
pub fn run_target(target: &str, data: &[u8]) {
    let (first, rest) = data.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
    let flip = first & 1;
    let op = match target {
        "adaptive" => flip,
        "max_pool" => 2 + flip,
        "mask" => 4 + flip,
        "raw_mask" => 6,
        "views" => 7,
        "mask_conversions" => 8,
        "volumes" => 9,
        _ => return run(data),
    };
    run_op(op, rest)
}

/// Runs one decoded call and checks the property. Panics on a violation.
pub fn run(data: &[u8]) {
    let mut b = Bytes::new(data);
    let op = b.u8();
    run_op(op, b.data);
}

/// The entry points, by number: 0, 1 adaptive forward and backward; 2, 3 max pooling with
/// indices; 4, 5 with a mask (forward, and forward then backward); 6 a mask of arbitrary bytes
/// through every mask entry point; 7 views of arbitrary shapes and strides through the plan API;
/// 8 the `Mask` conversions with indices and masks in every memory layout, up to huge sizes;
/// 9 the other poolings (3-D, 1-D), max unpooling and the double backwards ([`volumes`]).
pub fn run_op(op: u8, data: &[u8]) {
    let mut b = Bytes::new(data);
    let (op, dtype) = (op % 10, b.u8() % 4);
    match dtype {
        0 => run_typed::<f32>(op, &mut b),
        1 => run_typed::<f64>(op, &mut b),
        2 => run_typed::<half::f16>(op, &mut b),
        _ => run_typed::<half::bf16>(op, &mut b),
    }
}

fn run_typed<T: PoolFloat>(op: u8, b: &mut Bytes) {
    let wide = b.u8() & 1 == 1;
    match (op, wide) {
        (0 | 1, false) => adaptive::<T, i32>(op, b),
        (0 | 1, true) => adaptive::<T, i64>(op, b),
        (2 | 3, false) => max_pool::<T, i32>(op, b),
        (2 | 3, true) => max_pool::<T, i64>(op, b),
        (4 | 5, false) => mask::<T, I32Argmax>(op, b),
        (4 | 5, true) => mask::<T, Bitmask>(op, b),
        (6, _) => raw_mask::<T>(b),
        (9, false) => volumes::<T, i32>(b),
        (9, true) => volumes::<T, i64>(b),
        (7, _) => views::<T>(b),
        (_, false) => mask_conversions::<I32Argmax>(b),
        (_, true) => mask_conversions::<Bitmask>(b),
    }
}

fn ok_or_err<R>(what: &str, result: poolgrad::Result<R>) -> Option<R> {
    match result {
        Ok(r) => Some(r),
        Err(e) => {
            // Errors must render (a panic in Display is a finding too).
            assert!(!e.to_string().is_empty(), "{what}: empty error message");
            None
        }
    }
}

/// Whether a call would materialise `dims` elements that are allocatable but slow to compute:
/// such calls are skipped (smaller ones run, larger ones must be rejected).
fn too_slow(dims: &[usize]) -> bool {
    count(dims).is_some_and(|n| n > 1 << 20 && n as u64 <= 1 << 40)
}

/// Whether an adaptive pooling of `in_dims` to `out` (its last axes) is [`too_slow`]: its output,
/// or its work, which grows like `N*C*(H+Ho)*(W+Wo)` (its windows overlap where the output is
/// larger than the input). An output size is the caller's choice, so a small input can ask for
/// an allocatable but huge result.
fn adaptive_too_slow(in_dims: &[usize], out: &[usize]) -> bool {
    let (r, k) = (in_dims.len(), out.len());
    if r < k {
        return false;
    }
    let out_dims: Vec<usize> = in_dims[..r - k].iter().chain(out).copied().collect();
    let work = (r > k).then(|| {
        in_dims[r - k..]
            .iter()
            .zip(out)
            .try_fold(count(&in_dims[..r - k])?, |n, (&i, &o)| n.checked_mul(i.checked_add(o)?))
    });
    too_slow(&out_dims) || work.flatten().is_some_and(|n| too_slow(&[n]))
}

fn adaptive<T: PoolFloat, I: ArgmaxIndex>(op: u8, b: &mut Bytes) {
    let in_dims = dims(b);
    let out = [b.size(), b.size()];
    let one = [T::round_from_f64(1.0)];
    if adaptive_too_slow(&in_dims, &out) {
        return;
    }
    if op == 0 {
        match array::<T>(b, &in_dims) {
            Some(x) => {
                let res = forwards::adaptive::<T, I, _>(&x, out);
                also_on_npu!(
                    "adaptive forward",
                    res,
                    |dev| forwards::adaptive_on::<_, T, I, _>(dev, &x, out),
                    npu::same_pooled
                );
                let got = ok_or_err("adaptive forward", res);
                if let Some(g) = got {
                    let (v, i) = reference::adaptive_max_pool2d(&x, out).expect("reference accepts");
                    compare("adaptive forward", v.view(), g.output.view(), Tolerance::exact()).unwrap();
                    compare_indices("adaptive indices", i.view(), g.indices.mapv(|x| x.to_i64()).view())
                        .unwrap();
                }
            }
            None => {
                if let Some(x) = broadcast(&one, &in_dims) {
                    let res = forwards::adaptive::<T, I, _>(&x, out);
                    also_on_npu!(
                        "adaptive forward (broadcast)",
                        res,
                        |dev| forwards::adaptive_on::<_, T, I, _>(dev, &x, out),
                        npu::same_pooled
                    );
                    ok_or_err("adaptive forward (broadcast)", res.map(|_| ()));
                }
            }
        }
    } else {
        let mut g_dims = in_dims.clone();
        if g_dims.len() >= 2 {
            let r = g_dims.len();
            (g_dims[r - 2], g_dims[r - 1]) = (out[0], out[1]);
        }
        if b.u8().is_multiple_of(8) && !g_dims.is_empty() {
            g_dims[0] = b.size(); // a mismatch
        }
        let plane = plane_of(&in_dims);
        let (Some(g), Some(ix)) = (array::<T>(b, &g_dims), indices::<I>(b, &g_dims, plane)) else { return };
        let Some(x) = broadcast(&one, &in_dims) else { return };
        let res = poolgrad::adaptive_max_pool2d_backward(&g, &x, &ix);
        also_on_npu!(
            "adaptive backward",
            res,
            |dev| poolgrad::on(dev).adaptive_max_pool2d_backward(&g, &x, &ix),
            npu::same_bits
        );
        let got = ok_or_err("adaptive backward", res);
        if let Some(gi) = got {
            let want = reference::adaptive_max_pool2d_backward(&g, &x, &ix)
                .expect("reference accepts what poolgrad accepts");
            compare("adaptive backward", want.view(), gi.view(), Tolerance::for_dtype(T::DTYPE)).unwrap();
        }
    }
}

fn max_pool<T: PoolFloat, I: ArgmaxIndex>(op: u8, b: &mut Bytes) {
    let in_dims = dims(b);
    let p = params(b);
    let one = [T::round_from_f64(1.0)];
    if op == 2 {
        match array::<T>(b, &in_dims) {
            Some(x) => {
                let got = ok_or_err("max_pool forward", forwards::max_pool::<T, I, _>(&x, &p));
                if let Some(g) = got {
                    let (v, i) = reference::max_pool2d_with_indices(&x, &p).expect("reference accepts");
                    compare("max_pool forward", v.view(), g.output.view(), Tolerance::exact()).unwrap();
                    compare_indices("max_pool indices", i.view(), g.indices.mapv(|x| x.to_i64()).view())
                        .unwrap();
                }
            }
            None => {
                if let Some(x) = broadcast(&one, &in_dims) {
                    ok_or_err(
                        "max_pool forward (broadcast)",
                        forwards::max_pool::<T, I, _>(&x, &p).map(|_| ()),
                    );
                }
            }
        }
    } else {
        let Some(x) = broadcast(&one, &in_dims) else { return };
        let out = if in_dims.len() >= 3 {
            p.output_size([in_dims[in_dims.len() - 2], in_dims[in_dims.len() - 1]]).unwrap_or([1, 1])
        } else {
            [1, 1]
        };
        let mut g_dims = in_dims.clone();
        if g_dims.len() >= 2 {
            let r = g_dims.len();
            (g_dims[r - 2], g_dims[r - 1]) = (out[0], out[1]);
        }
        let plane = plane_of(&in_dims);
        let (Some(g), Some(ix)) = (array::<T>(b, &g_dims), indices::<I>(b, &g_dims, plane)) else { return };
        let got = ok_or_err("max_pool backward", poolgrad::max_pool2d_with_indices_backward(&g, &x, &ix, &p));
        if let Some(gi) = got {
            let want =
                reference::max_pool2d_with_indices_backward(&g, &x, &ix, &p).expect("reference accepts");
            compare("max_pool backward", want.view(), gi.view(), Tolerance::for_dtype(T::DTYPE)).unwrap();
        }
    }
}

/// The byte count of the mask of a pooling, when it is defined.
fn mask_bytes(in_dims: &[usize], p: &MaxPool2dParams) -> Option<usize> {
    let r = in_dims.len();
    if r < 3 {
        return None;
    }
    let [ho, wo] = p.output_size([in_dims[r - 2], in_dims[r - 1]]).ok()?;
    let shape = poolgrad::geometry::mask_shape(1, 1, p.kernel(), [ho, wo])?;
    count(&in_dims[..r - 2])?.checked_mul(shape[2])?.checked_mul(shape[3])
}

fn mask<T: PoolFloat, L: MaskLayout>(op: u8, b: &mut Bytes) {
    let in_dims = dims(b);
    let p = params(b);
    if mask_bytes(&in_dims, &p).is_some_and(|n| too_slow(&[n])) {
        return;
    }
    let Some(x) = array::<T>(b, &in_dims) else {
        let one = [T::round_from_f64(1.0)];
        if let Some(x) = broadcast(&one, &in_dims) {
            let res = poolgrad::max_pool2d_with_mask(&x, &p, L::default());
            also_on_npu!(
                "mask forward (broadcast)",
                res,
                |dev| poolgrad::on(dev).max_pool2d_with_mask(&x, &p, L::default()),
                npu::same_masked
            );
            ok_or_err("mask forward (broadcast)", res.map(|_| ()));
        }
        return;
    };
    let res = poolgrad::max_pool2d_with_mask(&x, &p, L::default());
    also_on_npu!(
        "mask forward",
        res,
        |dev| poolgrad::on(dev).max_pool2d_with_mask(&x, &p, L::default()),
        npu::same_masked
    );
    let Some(pooled) = ok_or_err("mask forward", res) else {
        return;
    };
    let (v, m) = reference::max_pool2d_with_mask(&x, &p, L::default()).expect("reference accepts");
    compare("mask forward", v.view(), pooled.output.view(), Tolerance::exact()).unwrap();
    compare_indices("mask bytes", m.as_array().view(), pooled.mask.as_array().view()).unwrap();
    if op == 5 {
        let Some(g) = array::<T>(b, pooled.output.shape()) else { return };
        let res = poolgrad::max_pool2d_with_mask_backward(&g, &x, &pooled.mask);
        also_on_npu!(
            "mask backward",
            res,
            |dev| poolgrad::on(dev).max_pool2d_with_mask_backward(&g, &x, &pooled.mask),
            npu::same_bits
        );
        let gi = res.expect("a forward's own mask");
        let want = reference::max_pool2d_with_mask_backward(&g, &x, &pooled.mask).unwrap();
        compare("mask backward", want.view(), gi.view(), Tolerance::for_dtype(T::DTYPE)).unwrap();
    }
}

/// A mask of arbitrary bytes (as copied off a device) through every mask entry point.
fn raw_mask<T: PoolFloat>(b: &mut Bytes) {
    let in_dims = dims(b);
    let p = params(b);
    let bitmask = b.u8() & 1 == 1;
    let mut mdims = match in_dims.len() {
        3 | 4 => {
            let r = in_dims.len();
            let [ho, wo] = p.output_size([in_dims[r - 2], in_dims[r - 1]]).unwrap_or([1, 1]);
            let shape = poolgrad::geometry::mask_shape(1, 1, p.kernel(), [ho, wo]).unwrap_or([1, 1, 1, 1]);
            let mut d = in_dims[..r - 2].to_vec();
            d.extend_from_slice(&shape[2..]);
            d
        }
        _ => vec![1, 1, 1],
    };
    if b.u8().is_multiple_of(8) && !mdims.is_empty() {
        mdims[0] = b.size();
    }
    let Some(n) = count(&mdims).filter(|&n| n <= BUDGET) else { return };
    let bytes: Vec<i8> = (0..n).map(|_| b.u8() as i8).collect();
    // ndarray itself refuses shapes whose non-zero axes overflow, even with no elements.
    let Ok(raw) = ArrayD::from_shape_vec(IxDyn(&mdims), bytes) else { return };
    if bitmask {
        raw_mask_layout::<T, Bitmask>(b, raw, &p, &in_dims);
    } else {
        raw_mask_layout::<T, I32Argmax>(b, raw, &p, &in_dims);
    }
}

fn raw_mask_layout<T: PoolFloat, L: MaskLayout>(
    b: &mut Bytes,
    raw: ArrayD<i8>,
    p: &MaxPool2dParams,
    in_dims: &[usize],
) {
    let Some(mask) = ok_or_err("Mask::from_raw", Mask::<L, _>::from_raw(raw, p, in_dims)) else { return };
    let _ = ok_or_err("Mask::to_indices", mask.to_indices::<i64>());
    let _ = ok_or_err("Mask::selected", mask.selected());
    let one = [T::round_from_f64(1.0)];
    let Some(x) = broadcast(&one, in_dims) else { return };
    let Some(g) = array::<T>(b, &mask.pooled_shape()) else { return };
    let res = poolgrad::max_pool2d_with_mask_backward(&g, &x, &mask);
    also_on_npu!(
        "mask backward (raw)",
        res,
        |dev| poolgrad::on(dev).max_pool2d_with_mask_backward(&g, &x, &mask),
        npu::same_bits
    );
    if let Some(gi) = ok_or_err("mask backward (raw)", res) {
        let want = reference::max_pool2d_with_mask_backward(&g, &x, &mask).expect("reference accepts");
        compare("raw mask backward", want.view(), gi.view(), Tolerance::for_dtype(T::DTYPE)).unwrap();
    }
}

/// Views with arbitrary shapes and strides over a small buffer, through the plan API.
fn views<T: PoolFloat>(b: &mut Bytes) {
    let shape = dims(b);
    let strides: Vec<usize> = (0..shape.len()).map(|_| b.size()).collect();
    let len = b.small(200);
    let data = vec![T::round_from_f64(0.5); len];
    let accepted = ok_or_err(
        "TensorRef::from_slice_with_strides",
        poolgrad::TensorRef::from_slice_with_strides(&data, &shape, &strides),
    );
    if accepted.is_some() {
        // The contract, in u128 arithmetic: strides are forward steps, taken on axes of length
        // 2 or more, and the last element (or, with no elements, the end) lies inside the data.
        let last: u128 = shape.iter().zip(&strides).map(|(&n, &s)| (n.max(1) as u128 - 1) * s as u128).sum();
        let empty = shape.contains(&0);
        assert!(
            if empty { last <= len as u128 } else { last < len as u128 },
            "{shape:?} / {strides:?} over {len}"
        );
    }
    let mut out = vec![T::round_from_f64(0.0); len];
    let mut idx = vec![0i64; len];
    if let Ok(t) = poolgrad::TensorMut::from_slice_with_strides(&mut out, &shape, &strides) {
        // No two elements share memory: every offset is distinct.
        let mut offsets: Vec<usize> = Vec::new();
        let v = t.as_ref().view();
        let base = v.as_ptr() as usize;
        for x in v.iter() {
            offsets.push((x as *const T as usize - base) / size_of::<T>().max(1));
        }
        offsets.sort_unstable();
        assert!(offsets.windows(2).all(|w| w[0] != w[1]), "{shape:?} / {strides:?}: an output aliases");
    }
    let (Some(input), Some(output), Some(indices)) = (
        ok_or_err("input view", poolgrad::TensorRef::from_slice_with_strides(&data, &shape, &strides)),
        ok_or_err("output view", poolgrad::TensorMut::from_slice_with_strides(&mut out, &shape, &strides)),
        ok_or_err("indices view", poolgrad::TensorMut::from_slice_with_strides(&mut idx, &shape, &strides)),
    ) else {
        return;
    };
    let size = [b.size(), b.size()];
    let op = poolgrad::op::AdaptiveMaxPool2d { input, output_size: size, output, indices };
    if let Some(plan) = ok_or_err("plan", poolgrad::Plan::new(&poolgrad::device::cpu::Cpu::sequential(), op))
    {
        let _ = ok_or_err("run", plan.run());
    }
}

/// Bytes a `Mask` conversion may allocate for its result here (zeroed memory is not touched until
/// written). The fuzzer runs with `-malloc_limit_mb=64`, so that a copy of the input or a
/// reservation well beyond the result, which the conversions must not make, is a finding. The
/// harness holds at most two such results at once: one, and the result of another layout or
/// conversion that it is compared with.
pub const RESULT_BUDGET: usize = 48 << 20;

/// Values a conversion may visit here (larger cases only run where an early error is certain).
const WORK_BUDGET: usize = 1 << 24;

/// The `Mask` constructors and conversions with indices in every memory layout (standard,
/// Fortran order, reversed, strided, broadcast over huge shapes) and masks in Fortran order.
/// The property: every layout gives what a standard-layout copy of the same values gives (the
/// same mask, or the same error at the same position); broadcast indices over huge shapes fail
/// at the first bad index (by the windows' definition), without a copy; no call aborts.
fn mask_conversions<L: MaskLayout>(b: &mut Bytes) {
    let in_dims = dims(b);
    let p = params(b);
    let source = b.u8() % 6;
    let r = in_dims.len();
    let (Some(pooled), true) = (pooled_dims(&in_dims, &p), r == 3 || r == 4) else {
        // No pooling: every constructor refuses, whatever the layout.
        let idx = ArrayD::<i64>::zeros(IxDyn(&[1, 1, 1]));
        assert!(Mask::<L, _>::from_indices(&idx, &p, &in_dims).is_err());
        return;
    };
    let plane = plane_of(&in_dims);
    let mask_bytes = mask_bytes(&in_dims, &p);
    // A result that could be allocated but is beyond the budget: skip (see RESULT_BUDGET).
    if mask_bytes.is_some_and(|n| n > RESULT_BUDGET && n <= isize::MAX as usize) {
        return;
    }
    let values = count(&pooled);
    if source >= 4 {
        return zeroed_mask::<L>(&p, &in_dims, &pooled, source == 5);
    }
    if source == 0 {
        // One index seen at every position, over any shape.
        let v = b.index(plane);
        let zero_strides = IxDyn(&vec![0; pooled.len()]);
        let one = [v];
        let Ok(idx) = ArrayViewD::from_shape(IxDyn(&pooled).strides(zero_strides), &one[..]) else { return };
        // The index errors are certain only once the shapes and parameters pass (`from_raw`
        // checks those first: past them, only its `data` can be wrong).
        let empty = ArrayD::<i8>::zeros(IxDyn(&vec![0; r]));
        let shapes_pass = matches!(
            Mask::<L, _>::from_raw(empty, &p, &in_dims),
            Err(poolgrad::Error::ShapeMismatch { arg: "data", .. })
        );
        let expected = first_bad_broadcast::<L>(&p, &in_dims, &pooled, v).filter(|_| shapes_pass);
        if values.is_none_or(|n| n > WORK_BUDGET) && expected.is_none() {
            return; // valid at every position: the whole mask would be written
        }
        let got = Mask::<L, _>::from_indices(&idx, &p, &in_dims);
        match (expected, &got) {
            (Some(e), Err(g)) if mask_bytes.is_some_and(|n| n <= RESULT_BUDGET) => {
                assert_eq!(g, &e, "broadcast {v} over {pooled:?}")
            }
            (_, Err(g)) => {
                ok_or_err::<()>("Mask::from_indices (broadcast)", Err(g.clone()));
            }
            (Some(e), Ok(_)) => panic!("broadcast {v} over {pooled:?} accepted, expected {e}"),
            (None, Ok(m)) => check_mask(m, values.unwrap_or(0)),
        }
        return;
    }
    // Materialised indices: small shapes only.
    let Some(n) = values.filter(|&n| n <= BUDGET) else { return };
    let data: Vec<i64> = (0..n).map(|_| b.index(plane)).collect();
    let Ok(standard) = ArrayD::from_shape_vec(IxDyn(&pooled), data) else { return };
    let expected = Mask::<L, _>::from_indices(&standard, &p, &in_dims);
    let same = |what: &str, got: poolgrad::Result<Mask<L, IxDyn>>| match (&expected, &got) {
        (Ok(a), Ok(g)) => assert!(a == g, "{what}: a different mask"),
        (Err(a), Err(g)) => assert_eq!(a, g, "{what}"),
        _ => panic!("{what}: {got:?}, but the standard layout gives {expected:?}"),
    };
    match source {
        1 => {
            let mut fortran = ArrayD::<i64>::zeros(IxDyn(&pooled).f());
            fortran.assign(&standard);
            same("Fortran-order indices", Mask::<L, _>::from_indices(&fortran, &p, &in_dims));
        }
        2 => {
            // Stored reversed along one axis, read through negative strides: the same values.
            let axis = ndarray::Axis(b.small(3) % r);
            let mut stored = standard.clone();
            stored.invert_axis(axis);
            let mut view = stored.view();
            view.invert_axis(axis);
            same("reversed indices", Mask::<L, _>::from_indices(&view, &p, &in_dims));
        }
        _ => {
            // Every other column of a wider array.
            let mut wide_dims = pooled.clone();
            wide_dims[r - 1] = wide_dims[r - 1].saturating_mul(2);
            // (Fallible: the doubled shape may overflow where the pooled one did not.)
            let Ok(mut wide) = ArrayD::<i64>::from_shape_vec(IxDyn(&wide_dims), vec![0; 2 * n]) else {
                return;
            };
            wide.slice_each_axis_mut(|a| {
                ndarray::Slice::new(0, None, if a.axis.index() == r - 1 { 2 } else { 1 })
            })
            .assign(&standard);
            let view = wide.slice_each_axis(|a| {
                ndarray::Slice::new(0, None, if a.axis.index() == r - 1 { 2 } else { 1 })
            });
            same("strided indices", Mask::<L, _>::from_indices(&view, &p, &in_dims));
        }
    }
    if let Ok(mask) = &expected {
        check_mask(mask, n);
    }
}

/// A zeroed mask of a pooling (allocated zeroed, so untouched until read), in standard or
/// Fortran order, through `selected` and `to_indices`. Zero bytes are value 0 everywhere in
/// `I32Argmax` (a valid index) and no bit at all in `Bitmask` (nothing selected; no arg-max).
fn zeroed_mask<L: MaskLayout>(p: &MaxPool2dParams, in_dims: &[usize], pooled: &[usize], fortran: bool) {
    let r = in_dims.len();
    let Some(shape) = poolgrad::geometry::mask_shape(1, 1, p.kernel(), [pooled[r - 2], pooled[r - 1]]) else {
        return;
    };
    let mut dims = in_dims[..r - 2].to_vec();
    dims.extend_from_slice(&shape[2..]);
    let (Some(bytes), Some(values)) = (count(&dims), count(pooled)) else { return };
    let offsets = shape[2];
    if bytes > RESULT_BUDGET || values.saturating_mul(offsets) > WORK_BUDGET {
        return;
    }
    // (Fallible: ndarray refuses shapes whose non-empty axes overflow, even with no elements.)
    let shape = if fortran { IxDyn(&dims).f() } else { IxDyn(&dims).into_shape_with_order() };
    let Ok(data) = ArrayD::<i8>::from_shape_vec(shape, vec![0; bytes]) else { return };
    let Some(mask) = ok_or_err("Mask::from_raw (zeroed)", Mask::<L, _>::from_raw(data, p, in_dims)) else {
        return;
    };
    let fits = |size: usize| values.saturating_mul(size) <= RESULT_BUDGET;
    if L::NAME == "Bitmask" {
        assert_eq!(mask.selected(), Ok(vec![]), "a zeroed Bitmask selects nothing");
        if values > 0 && fits(8) {
            let e = mask.to_indices::<i64>().unwrap_err();
            let expected = vec![0; r];
            assert!(
                matches!(&e, poolgrad::Error::MaskContent { position, .. } if *position == expected),
                "{e}"
            );
        }
    } else {
        if fits(8) {
            let indices = mask.to_indices::<i64>().expect("value 0 is in every plane");
            assert!(indices.iter().all(|&i| i == 0));
        }
        if fits(16) {
            let pairs = mask.selected().expect("value 0 is in every plane");
            assert!(pairs.len() == values && pairs.iter().enumerate().all(|(e, &pair)| pair == (e, 0)));
        }
    }
}

/// `[N, C, Ho, Wo]` (the caller's rank) of a pooling, when it has an output.
fn pooled_dims(in_dims: &[usize], p: &MaxPool2dParams) -> Option<Vec<usize>> {
    let r = in_dims.len();
    if r < 3 {
        return None;
    }
    let [ho, wo] = p.output_size([in_dims[r - 2], in_dims[r - 1]]).ok()?;
    let mut d = in_dims.to_vec();
    (d[r - 2], d[r - 1]) = (ho, wo);
    Some(d)
}

/// The error that index `v` at every position must give, by the windows' definition: outside
/// the plane at the first position; for `Bitmask`, outside the window of position 0 or 1 (in
/// row-major order). `None` when `v` is valid at both, so the error, if any, comes later.
fn first_bad_broadcast<L: MaskLayout>(
    p: &MaxPool2dParams,
    in_dims: &[usize],
    pooled: &[usize],
    v: i64,
) -> Option<poolgrad::Error> {
    let r = in_dims.len();
    let [h, w] = [in_dims[r - 2], in_dims[r - 1]];
    let [ho, wo] = [pooled[r - 2], pooled[r - 1]];
    let at = |e: usize| {
        let mut position = vec![0; r];
        (position[r - 2], position[r - 1]) = (e / wo, e % wo);
        position
    };
    let (op, arg) = ("Mask::from_indices", "indices");
    if count(pooled) == Some(0) {
        return None;
    }
    let plane = h.checked_mul(w)?;
    if v < 0 || v as u64 >= plane as u64 {
        return Some(poolgrad::Error::IndexOutOfRange { op, arg, position: at(0), value: v, plane });
    }
    if L::NAME != "Bitmask" {
        return None;
    }
    let flat = v as usize;
    let (ih, iw) = (flat / w, flat % w);
    // Window `o` of an axis reads inputs `o·s − p ..` for `k` steps (dilation 1: the mask
    // operations refuse any other, and then the shapes do not pass), clipped to the input: by
    // the definition, without listing the taps (a kernel may have 2^35 of them).
    let inside = |i: usize, o: usize, axis: usize| {
        let origin = o as i128 * p.stride()[axis] as i128 - p.padding()[axis] as i128;
        (origin..origin + p.kernel()[axis] as i128).contains(&(i as i128))
    };
    // Positions 0 and 1 of the first plane (position 1 only when the plane has two).
    (0..ho.saturating_mul(wo).min(2)).find_map(|e| {
        let (oh, ow) = (e / wo, e % wo);
        let in_window = inside(ih, oh, 0) && inside(iw, ow, 1);
        (!in_window).then(|| poolgrad::Error::IndexNotInWindow { op, arg, position: at(e), value: v })
    })
}

/// A mask's conversions: its indices and selected pairs read alike from the mask and from a
/// Fortran-order copy of its bytes (`values` outputs, small enough to visit).
fn check_mask<L: MaskLayout>(mask: &Mask<L, IxDyn>, values: usize) {
    if values > WORK_BUDGET || mask.as_array().len() > BUDGET * 16 {
        return;
    }
    let indices = mask.to_indices::<i64>();
    let pairs = mask.selected();
    let mut fortran = ArrayD::<i8>::zeros(mask.as_array().raw_dim().f());
    fortran.assign(mask.as_array());
    let copy = Mask::<L, _>::from_raw(fortran, mask.params(), &mask.input_shape()).expect("the same shape");
    assert_eq!(copy.to_indices::<i64>(), indices, "indices from a Fortran-order mask");
    assert_eq!(copy.selected(), pairs, "pairs from a Fortran-order mask");
}

/// The windows of one axis for [`volumes`]: adaptive to `out`, or kernel, stride, padding,
/// dilation (the taps inside the input), each computed tap by tap.
fn axis_window(o: usize, n: usize, adaptive: Option<usize>, [k, s, p, d]: [usize; 4]) -> Vec<usize> {
    match adaptive {
        Some(out) => ((o as u128 * n as u128 / out as u128) as usize
            ..((o as u128 + 1) * n as u128).div_ceil(out as u128) as usize)
            .collect(),
        None => (0..k as i128)
            .map(|i| o as i128 * s as i128 - p as i128 + i * d as i128)
            .filter(|&t| t >= 0 && t < n as i128)
            .map(|t| t as usize)
            .collect(),
    }
}

/// The 3-D and 1-D poolings, max unpooling and the double backwards, on decoded shapes,
/// parameters, values and indices: each call is an error, or equal to a plain loop written here
/// (every tap in `(d, h, w)` order; sums in the kernels' order, `f32` for the half types).
fn volumes<T: PoolFloat, I: ArgmaxIndex>(b: &mut Bytes) {
    let which = b.u8() % 6;
    let in_dims = dims(b);
    let three = [(b.size().min(1 << 20)), b.size().min(1 << 20), b.size().min(1 << 20)];
    let strides = [b.size().min(1 << 20), b.size().min(1 << 20), b.size().min(1 << 20)];
    let pads = [b.small(2), b.small(2), b.small(2)];
    let dils = [b.small(2), b.small(2), b.small(2)];
    let ceil = b.u8() & 1 == 1;
    let adaptive = b.u8() & 1 == 1;
    let p3 = poolgrad::MaxPool3dParams::new(three)
        .with_stride(strides)
        .with_padding(pads)
        .with_dilation(dils)
        .with_ceil_mode(ceil);
    let one = [T::round_from_f64(1.0)];
    match which {
        // 3-D forwards, against the loop when the input is small.
        0 => {
            if adaptive && adaptive_too_slow(&in_dims, &three) {
                return;
            }
            let Some(x) = array::<T>(b, &in_dims) else {
                if let Some(x) = broadcast(&one, &in_dims) {
                    if adaptive {
                        ok_or_err(
                            "adaptive 3-D (broadcast)",
                            poolgrad::adaptive_max_pool3d(&x, three).map(drop),
                        );
                    } else {
                        ok_or_err(
                            "max 3-D (broadcast)",
                            poolgrad::max_pool3d_with_indices(&x, &p3).map(drop),
                        );
                    }
                }
                return;
            };
            let res = if adaptive {
                poolgrad::adaptive_max_pool3d(&x, three)
            } else {
                poolgrad::max_pool3d_with_indices(&x, &p3)
            };
            also_on_npu!(
                "3-D forward",
                res,
                |dev| if adaptive {
                    poolgrad::on(dev).adaptive_max_pool3d(&x, three)
                } else {
                    poolgrad::on(dev).max_pool3d_with_indices(&x, &p3)
                },
                npu::same_pooled
            );
            let Some(got) = ok_or_err("3-D forward", res) else { return };
            let r = in_dims.len();
            let [d, h, w] = [in_dims[r - 3], in_dims[r - 2], in_dims[r - 1]];
            let od = got.output.shape()[r - 3];
            let (oh, ow) = (got.output.shape()[r - 2], got.output.shape()[r - 1]);
            let volume = d * h * w;
            let axis = |a: usize, o: usize, n: usize, out: usize| {
                let kspd = [three[a], strides[a], pads[a], dils[a]];
                axis_window(o, n, adaptive.then_some(out), kspd)
            };
            let xs = x.as_slice().expect("standard layout");
            for (e, (&v, &i)) in got.output.iter().zip(&got.indices).enumerate() {
                let (v_at, o) = (e / (od * oh * ow), e % (od * oh * ow));
                let (a, rest) = (o / (oh * ow), o % (oh * ow));
                let (ds, hs, ws) = (axis(0, a, d, od), axis(1, rest / ow, h, oh), axis(2, rest % ow, w, ow));
                assert!(
                    !ds.is_empty() && !hs.is_empty() && !ws.is_empty(),
                    "3-D: an empty window was accepted"
                );
                let (mut best, mut at) = (f64::NEG_INFINITY, (ds[0] * h + hs[0]) * w + ws[0]);
                for &z in &ds {
                    for &y in &hs {
                        for &xx in &ws {
                            let t = (z * h + y) * w + xx;
                            let value = xs[v_at * volume + t].to_f64_exact();
                            if value > best || value.is_nan() {
                                (best, at) = (value, t);
                            }
                        }
                    }
                }
                assert_eq!(i.to_i64(), at as i64, "3-D index of output {e}");
                let v = v.to_f64_exact();
                assert!(equality::same_or_both_nan(v, best), "3-D value of output {e}");
            }
        }
        // 3-D backwards with arbitrary indices: the sums in output order.
        1 => {
            let Some(x) = broadcast(&one, &in_dims) else { return };
            let mut g_dims = in_dims.clone();
            let r = g_dims.len();
            if r >= 4 {
                let out = if adaptive {
                    Ok(three)
                } else {
                    p3.output_size([g_dims[r - 3], g_dims[r - 2], g_dims[r - 1]])
                };
                let [a, bb, c] = out.unwrap_or([1, 1, 1]);
                (g_dims[r - 3], g_dims[r - 2], g_dims[r - 1]) = (a, bb, c);
            }
            let volume = if r >= 4 { count(&in_dims[r - 3..]).unwrap_or(usize::MAX) } else { 1 };
            let (Some(g), Some(ix)) = (array::<T>(b, &g_dims), indices::<I>(b, &g_dims, volume)) else {
                return;
            };
            let res = if adaptive {
                poolgrad::adaptive_max_pool3d_backward(&g, &x, &ix)
            } else {
                poolgrad::max_pool3d_with_indices_backward(&g, &x, &ix, &p3)
            };
            also_on_npu!(
                "3-D backward",
                res,
                |dev| if adaptive {
                    poolgrad::on(dev).adaptive_max_pool3d_backward(&g, &x, &ix)
                } else {
                    poolgrad::on(dev).max_pool3d_with_indices_backward(&g, &x, &ix, &p3)
                },
                npu::same_bits
            );
            let Some(gi) = ok_or_err("3-D backward", res) else { return };
            let w: Vec<f64> = g.iter().map(|v| v.to_f64_exact()).collect();
            let at: Vec<i64> = ix.iter().map(|i| i.to_i64()).collect();
            let planes = (gi.len() / volume.max(1), volume);
            let sums = if T::DTYPE == poolgrad::DType::F64 {
                scatter::scatter_loop((&w, &at), planes, scatter::in_f64)
            } else {
                let in_f32 = scatter::scatter_loop((&w, &at), planes, scatter::in_f32);
                in_f32.into_iter().map(|s| T::round_from_f64(s).to_f64_exact()).collect()
            };
            for (&got, &want) in gi.iter().zip(&sums) {
                let got = got.to_f64_exact();
                assert!(equality::same_or_both_nan(got, want), "3-D backward sum");
            }
        }
        // 1-D: the forward against the loop.
        2 => {
            let lines: Vec<usize> = in_dims.iter().copied().take(3).collect();
            if adaptive && adaptive_too_slow(&lines, &three[..1]) {
                return;
            }
            let Some(x) = array::<T>(b, &lines) else { return };
            let p1 = poolgrad::MaxPool1dParams::new([three[0]])
                .with_stride([strides[0]])
                .with_padding([pads[0]])
                .with_dilation([dils[0]])
                .with_ceil_mode(ceil);
            let got = if adaptive {
                ok_or_err("adaptive 1-D", poolgrad::adaptive_max_pool1d(&x, three[0]))
            } else {
                ok_or_err("max 1-D", poolgrad::max_pool1d_with_indices(&x, &p1))
            };
            let Some(got) = got else { return };
            let l = *lines.last().expect("a rank of 2 or 3");
            let lo = *got.output.shape().last().expect("rank");
            let xs = x.as_slice().expect("standard layout");
            for (e, &i) in got.indices.iter().enumerate() {
                let taps = axis_window(
                    e % lo,
                    l,
                    adaptive.then_some(three[0]),
                    [three[0], strides[0], pads[0], dils[0]],
                );
                let (mut best, mut at) = (f64::NEG_INFINITY, taps[0]);
                for t in taps {
                    let value = xs[(e / lo) * l + t].to_f64_exact();
                    if value > best || value.is_nan() {
                        (best, at) = (value, t);
                    }
                }
                let _ = best;
                assert_eq!(i.to_i64(), at as i64, "1-D index of output {e}");
            }
        }
        // Unpooling, its backward, the double backward: against the loops.
        _ => {
            let Some(x) = array::<T>(b, &in_dims) else { return };
            let r = in_dims.len();
            // 1-D where the 3-D operations would only refuse the rank.
            let spatial = match which {
                3 => 2,
                5 if r <= 3 => 1,
                _ => 3,
            };
            let size = three[..spatial].to_vec();
            let mut full_dims = in_dims.clone();
            if r >= spatial {
                full_dims.truncate(r - spatial);
                full_dims.extend_from_slice(&size);
            }
            let plane: usize = count(&size).unwrap_or(usize::MAX);
            let Some(ix) = indices::<I>(b, &in_dims, plane) else { return };
            let Some(g) = array::<T>(b, &full_dims) else { return };
            // Each of the three on a device (`poolgrad::on`), one at a time.
            macro_rules! unpool {
                ($on:expr) => {
                    if spatial == 1 {
                        $on.max_unpool1d(&x, &ix, size[0])
                    } else if spatial == 2 {
                        $on.max_unpool2d(&x, &ix, [size[0], size[1]])
                    } else {
                        $on.max_unpool3d(&x, &ix, three)
                    }
                };
            }
            macro_rules! unpool_backward {
                ($on:expr) => {
                    if spatial == 1 {
                        $on.max_unpool1d_backward(&g, &ix)
                    } else if spatial == 2 {
                        $on.max_unpool2d_backward(&g, &ix)
                    } else {
                        $on.max_unpool3d_backward(&g, &ix)
                    }
                };
            }
            macro_rules! double_backward {
                ($on:expr) => {
                    if spatial == 1 {
                        $on.max_pool1d_double_backward(&g, &ix)
                    } else if spatial == 2 {
                        $on.max_pool2d_double_backward(&g, &ix)
                    } else {
                        $on.max_pool3d_double_backward(&g, &ix)
                    }
                };
            }
            let cpu = poolgrad::device::cpu::Cpu::sequential();
            let (y, gx, ggo) = (
                unpool!(poolgrad::on(&cpu)),
                unpool_backward!(poolgrad::on(&cpu)),
                double_backward!(poolgrad::on(&cpu)),
            );
            also_on_npu!("unpooling", y, |dev| unpool!(poolgrad::on(dev)), npu::same_bits);
            also_on_npu!("unpooling backward", gx, |dev| unpool_backward!(poolgrad::on(dev)), npu::same_bits);
            also_on_npu!("double backward", ggo, |dev| double_backward!(poolgrad::on(dev)), npu::same_bits);
            let (y, gx, ggo) = (
                ok_or_err("unpooling", y),
                ok_or_err("unpooling backward", gx),
                ok_or_err("double backward", ggo),
            );
            let per = if r >= spatial { count(&in_dims[r - spatial..]).unwrap_or(1).max(1) } else { 1 };
            let xs = x.as_slice().expect("standard layout");
            let gs = g.as_slice().expect("standard layout");
            // Any call that succeeded had every index inside its plane and shapes that agree.
            if y.is_none() && gx.is_none() && ggo.is_none() {
                return;
            }
            let values: Vec<f64> = xs.iter().map(|v| v.to_f64_exact()).collect();
            let indices: Vec<usize> = ix.iter().map(|i| i.to_i64() as usize).collect();
            let gradient: Vec<f64> = gs.iter().map(|v| v.to_f64_exact()).collect();
            let want = unpooling::unpool_loops(&values, &indices, per, plane, &gradient);
            fn agrees<T: PoolFloat>(got: &ArrayD<T>, want: &[f64]) -> bool {
                got.len() == want.len()
                    && got.iter().zip(want).all(|(a, &b)| equality::same_or_both_nan(a.to_f64_exact(), b))
            }
            if let Some(y) = y {
                assert!(agrees(&y, &want.output), "unpooling");
            }
            if let Some(gx) = gx {
                assert!(agrees(&gx, &want.gradient), "unpooling backward");
            }
            if let Some(ggo) = ggo {
                assert!(agrees(&ggo, &want.gathered), "double backward");
            }
        }
    }
}
