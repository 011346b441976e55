//! Interleaving the planes of a block for the blocked forwards (2-D planes, or rows of 3-D
//! volumes): `out[i * BLOCK + l] = rows[l][i]`, so that element `i` of every plane is one vector
//! of [`BLOCK`] lanes; and taking such a block apart again ([`deinterleave`]).
//!
//! The plain loop ([`interleave_plain`]) is the reference and runs everywhere. Where the task runs
//! in `pulp`'s AVX copy (x86-64-v3) and the values are `f32`, [`transposed`] first moves them 8
//! columns at a time through an 8 x 8 transpose in registers ([`transpose8`], with `pulp`'s safe
//! wrappers of the intrinsics: 8 loads, 24 shuffles and 8 stores for 64 values, where the plain
//! loop pays a load and a store for each), and the plain loop takes the columns left. Shuffles
//! move bits, so both give the same bits; the tests hold them to it.
//!
//! The half types are widened for comparing on the way in ([`interleave_widened`]): `bf16` in the
//! same registers (a widening of each 16-bit value and a shift, before the transpose), `f16` a
//! row at a time through F16C first.

use super::simd::{self, Isa};
use crate::element::{AccFloat, DType, PoolFloat};

/// Planes pooled together by the blocked kernel: the lanes of its vectors.
pub(super) const BLOCK: usize = 8;

/// `out[i * BLOCK + l] = rows[l][i]` for every plane `l < rows.len()` (at most [`BLOCK`]) and
/// column `i < out.len() / BLOCK`; every row holds at least `out.len() / BLOCK` values. Lanes
/// without a plane are left alone by the plain loop and may be written by the vector one (with
/// values of plane 0).
#[inline(always)]
pub(super) fn interleave<A: AccFloat>(isa: Isa, rows: &[&[A]], out: &mut [A]) {
    let done = transposed(isa, rows, out);
    interleave_plain(rows, &mut out[done * BLOCK..], done);
}

/// [`interleave`] of rows of `T`, widened for comparing on the way
/// ([`to_acc_compared`](crate::element::Accumulate::to_acc_compared)):
/// `out[i * BLOCK + l] = rows[l][i].to_acc_compared()`, with the same conditions on the lengths
/// and the lanes without a plane. `f32` and `f64` rows are interleaved as they are; `bf16` rows
/// 8 columns at a time in registers where `isa` has AVX2 ([`transposed_bf16`]: the 8 values of
/// a row zero-extended to 32 bits and shifted into place, which is the widening, then
/// [`transpose8`]), the rest by the plain loop; `f16` rows are widened into `widened` first (a
/// row at a time, [`simd::widen_compared`]; `widened` holds `rows.len()` of them), then
/// interleaved.
#[inline(always)]
pub(super) fn interleave_widened<T: PoolFloat>(
    isa: Isa,
    rows: &[&[T]],
    widened: &mut [T::Acc],
    out: &mut [T::Acc],
) {
    let mut acc: [&[T::Acc]; BLOCK] = [&[]; BLOCK];
    if T::as_acc(&[]).is_some() {
        for (row, acc) in rows.iter().zip(&mut acc) {
            *acc = T::as_acc(row).unwrap_or_default();
        }
        return interleave(isa, &acc[..rows.len()], out);
    }
    if T::DTYPE == DType::BF16 {
        let done = transposed_bf16(isa, rows, out);
        return interleave_plain_with(rows, &mut out[done * BLOCK..], done, T::to_acc_compared);
    }
    let columns = out.len() / BLOCK;
    for ((row, acc), widened) in rows.iter().zip(&mut acc).zip(widened.chunks_exact_mut(columns.max(1))) {
        simd::widen_compared(isa, &row[..columns], widened);
        *acc = widened;
    }
    interleave(isa, &acc[..rows.len()], out);
}

/// The reference: column by column from `from` (`out` starts at that column), one value at a
/// time.
#[inline(always)]
fn interleave_plain<A: Copy>(rows: &[&[A]], out: &mut [A], from: usize) {
    interleave_plain_with(rows, out, from, |v| v);
}

/// [`interleave_plain`], each value converted by `convert` on the way.
#[inline(always)]
fn interleave_plain_with<S: Copy, A>(rows: &[&[S]], out: &mut [A], from: usize, convert: impl Fn(S) -> A) {
    if out.len() < BLOCK {
        return; // no column left (a row's whole columns went through registers)
    }
    for (l, row) in rows.iter().enumerate() {
        for (lanes, &v) in out.chunks_exact_mut(BLOCK).zip(&row[from..]) {
            lanes[l] = convert(v);
        }
    }
}

/// The first columns of [`interleave_widened`] for `bf16` rows (`T` is `bf16` and `A` is
/// `f32`), 8 at a time, when `isa` has AVX2: each row's 8 values zero-extended to 32 bits and
/// shifted left by 16 (`bf16`'s widening for comparing, bit for bit), then [`transpose8`].
/// Returns how many columns it did (a multiple of 8, or 0).
#[inline(always)]
fn transposed_bf16<T: PoolFloat, A: AccFloat>(isa: Isa, rows: &[&[T]], out: &mut [A]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if let (Isa::V3(simd), 2, 4) = (isa, size_of::<T>(), size_of::<A>()) {
        let avx2 = simd.avx2;
        let widen = |bits: &[u16; 8]| -> [f32; 8] {
            let wide = avx2._mm256_cvtepu16_epi32(pulp::cast(*bits));
            pulp::cast(avx2._mm256_slli_epi32::<16>(wide))
        };
        return transposed_with::<T, u16>(isa, rows, bytemuck::cast_slice_mut(out), widen);
    }
    let _ = (isa, rows, out);
    0
}

/// Interleaves the first columns of `rows` into `out` 8 at a time through [`transpose8`] when
/// `isa` has AVX and the values are `f32`; returns how many columns it did (a multiple of 8,
/// or 0).
#[inline(always)]
fn transposed<A: AccFloat>(isa: Isa, rows: &[&[A]], out: &mut [A]) -> usize {
    if size_of::<A>() != size_of::<f32>() {
        return 0; // `f64` (a column of 8 fills two registers) keeps the plain loop
    }
    transposed_with::<A, f32>(isa, rows, bytemuck::cast_slice_mut(out), |column| *column)
}

/// The first columns of `rows` into `out` 8 at a time: each row read as `S` (its own bits:
/// 32-bit values as `f32`, or `bf16` as `u16`), its 8 values made `f32` by `load`, then
/// [`transpose8`] where `isa` has AVX. Returns how many columns it did (a multiple of 8, or 0).
#[inline(always)]
fn transposed_with<R: bytemuck::Pod, S: bytemuck::Pod>(
    isa: Isa,
    rows: &[&[R]],
    out: &mut [f32],
    load: impl Fn(&[S; 8]) -> [f32; 8],
) -> usize {
    let Some(&first) = rows.first() else { return 0 };
    let (columns, _) = out.as_chunks_mut::<{ 8 * BLOCK }>();
    // Lanes without a plane take plane 0's values; they are never read.
    let sources: [&[[S; 8]]; BLOCK] = core::array::from_fn(|l| {
        let row: &[S] = bytemuck::cast_slice(rows.get(l).copied().unwrap_or(first));
        row.as_chunks().0
    });
    // The eight sources zipped (indexing them would test each index).
    let [s0, s1, s2, s3, s4, s5, s6, s7] = sources;
    let zipped = s0.iter().zip(s1).zip(s2).zip(s3).zip(s4).zip(s5).zip(s6).zip(s7);
    let mut count = 0;
    for (dst, (((((((a, b), c), d), e), f), g), h)) in columns.iter_mut().zip(zipped) {
        let m = [load(a), load(b), load(c), load(d), load(e), load(f), load(g), load(h)];
        let Some(t) = transpose8(isa, m) else { break }; // no AVX
        *dst = bytemuck::cast(t);
        count += 1;
    }
    count * 8
}

/// `outs[l][i] = lanes[i * BLOCK + l]` for every plane `l < outs.len()` (at most [`BLOCK`]) and
/// column `i < lanes.len() / BLOCK` (every row at least that long): [`interleave`] undone. Values
/// of 32 bits go 8 columns at a time through [`transpose8`] where `isa` has AVX, as there; the
/// plain loop takes the rest.
#[inline(always)]
pub(super) fn deinterleave<X: bytemuck::Pod>(isa: Isa, lanes: &[X], outs: &mut [&mut [X]]) {
    let done = detransposed(isa, lanes, outs);
    for (l, out) in outs.iter_mut().enumerate() {
        for (o, column) in out[done..].iter_mut().zip(lanes.chunks_exact(BLOCK).skip(done)) {
            *o = column[l];
        }
    }
}

/// The first columns of [`deinterleave`], 8 at a time through [`transpose8`] for 32-bit values
/// where `isa` has AVX; returns how many columns it did (a multiple of 8, or 0).
#[inline(always)]
fn detransposed<X: bytemuck::Pod>(isa: Isa, lanes: &[X], outs: &mut [&mut [X]]) -> usize {
    if size_of::<X>() != size_of::<f32>() || outs.is_empty() {
        return 0;
    }
    let lanes: &[f32] = bytemuck::cast_slice(lanes);
    let (columns, _) = lanes.as_chunks::<{ 8 * BLOCK }>();
    let mut count = 0;
    for (c, column) in columns.iter().enumerate() {
        let m: [[f32; 8]; 8] = bytemuck::cast(*column);
        let Some(t) = transpose8(isa, m) else { break }; // no AVX
        for (out, row) in outs.iter_mut().zip(&t) {
            let out: &mut [f32] = bytemuck::cast_slice_mut(&mut out[c * 8..(c + 1) * 8]);
            out.copy_from_slice(row);
        }
        count += 1;
    }
    count * 8
}

/// `t[i][l] = m[l][i]`: an 8 x 8 transpose of 32-bit values (bits moved, never changed) in AVX
/// registers, where `isa` has them (x86-64-v3); else `None`. Inlined into the x86-64-v3 copy of
/// a kernel, it is 8 loads, 24 shuffles and 8 stores.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn transpose8(isa: Isa, m: [[f32; 8]; 8]) -> Option<[[f32; 8]; 8]> {
    use core::arch::x86_64::__m256;
    let Isa::V3(simd) = isa else { return None };
    let avx = simd.avx;
    let r: [__m256; 8] = m.map(pulp::cast);
    // Pairs of rows, then quadruples, within each 128-bit half; then the halves.
    let t = [
        avx._mm256_unpacklo_ps(r[0], r[1]), // a0 b0 a1 b1 | a4 b4 a5 b5
        avx._mm256_unpackhi_ps(r[0], r[1]), // a2 b2 a3 b3 | a6 b6 a7 b7
        avx._mm256_unpacklo_ps(r[2], r[3]),
        avx._mm256_unpackhi_ps(r[2], r[3]),
        avx._mm256_unpacklo_ps(r[4], r[5]),
        avx._mm256_unpackhi_ps(r[4], r[5]),
        avx._mm256_unpacklo_ps(r[6], r[7]),
        avx._mm256_unpackhi_ps(r[6], r[7]),
    ];
    let s = [
        avx._mm256_shuffle_ps::<0x44>(t[0], t[2]), // a0 b0 c0 d0 | a4 b4 c4 d4
        avx._mm256_shuffle_ps::<0xEE>(t[0], t[2]), // a1 b1 c1 d1 | a5 b5 c5 d5
        avx._mm256_shuffle_ps::<0x44>(t[1], t[3]), // a2 .. | a6 ..
        avx._mm256_shuffle_ps::<0xEE>(t[1], t[3]), // a3 .. | a7 ..
        avx._mm256_shuffle_ps::<0x44>(t[4], t[6]), // e0 f0 g0 h0 | e4 f4 g4 h4
        avx._mm256_shuffle_ps::<0xEE>(t[4], t[6]),
        avx._mm256_shuffle_ps::<0x44>(t[5], t[7]),
        avx._mm256_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    let c: [__m256; 8] = [
        avx._mm256_permute2f128_ps::<0x20>(s[0], s[4]), // a0 .. h0
        avx._mm256_permute2f128_ps::<0x20>(s[1], s[5]),
        avx._mm256_permute2f128_ps::<0x20>(s[2], s[6]),
        avx._mm256_permute2f128_ps::<0x20>(s[3], s[7]),
        avx._mm256_permute2f128_ps::<0x31>(s[0], s[4]), // a4 .. h4
        avx._mm256_permute2f128_ps::<0x31>(s[1], s[5]),
        avx._mm256_permute2f128_ps::<0x31>(s[2], s[6]),
        avx._mm256_permute2f128_ps::<0x31>(s[3], s[7]),
    ];
    Some(c.map(pulp::cast))
}

/// Elsewhere, no transpose in registers: the plain loops do it all.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn transpose8(_: Isa, _: [[f32; 8]; 8]) -> Option<[[f32; 8]; 8]> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bits worth moving: NaNs with payloads and both signs, infinities, subnormals, -0 and
    /// ordinary values.
    fn awkward(i: usize) -> u32 {
        const SPECIAL: [u32; 9] = [
            0x7FC0_0001,
            0xFFA0_0003,
            0x7F80_0000,
            0xFF80_0000,
            0x0000_0001,
            0x8070_0000,
            0x8000_0000,
            0,
            0x3F80_0000,
        ];
        SPECIAL.get(i % 13).copied().unwrap_or((i as u32).wrapping_mul(0x9E37_79B9))
    }

    /// The vector path gives the plain loop's bits, for every number of planes in a block and
    /// lengths around the 8-column steps.
    #[test]
    fn transposed_columns_equal_the_plain_loop() {
        let isa = Isa::best();
        for planes in 1..=BLOCK {
            for n in [0, 1, 7, 8, 9, 16, 23, 64, 81] {
                let rows: Vec<Vec<f32>> = (0..planes)
                    .map(|l| (0..n).map(|i| f32::from_bits(awkward(l * 131 + i))).collect())
                    .collect();
                let rows: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
                let mut plain = vec![0.0f32; n * BLOCK];
                interleave_plain(&rows, &mut plain, 0);
                let mut vector = vec![0.0f32; n * BLOCK];
                isa.enter(|| interleave(isa, &rows, &mut vector));
                for i in 0..n {
                    for l in 0..planes {
                        let (p, v) = (plain[i * BLOCK + l].to_bits(), vector[i * BLOCK + l].to_bits());
                        assert_eq!(v, p, "planes {planes}, n {n}, column {i}, lane {l}");
                        assert_eq!(p, rows[l][i].to_bits(), "the plain loop itself");
                    }
                }
            }
        }
    }

    /// Rows of every element type interleaved with their widening ([`interleave_widened`]) give
    /// each value widened for comparing, bit for bit (signalling NaNs included: `bf16` widens
    /// them without the quiet bit in both paths), in the baseline copy and in the processor's
    /// best, for every number of planes and lengths around the 8-column steps.
    #[test]
    fn widened_columns_equal_the_definition() {
        fn check<T: PoolFloat>(of: impl Fn(usize) -> T) {
            for planes in 1..=BLOCK {
                for n in [0, 1, 7, 8, 9, 16, 23, 64, 81] {
                    let rows: Vec<Vec<T>> =
                        (0..planes).map(|l| (0..n).map(|i| of(l * 131 + i)).collect()).collect();
                    let rows: Vec<&[T]> = rows.iter().map(Vec::as_slice).collect();
                    for isa in [Isa::Baseline, Isa::best()] {
                        let zero = T::default().to_acc();
                        let mut widened = vec![zero; planes * n];
                        let mut out = vec![zero; n * BLOCK];
                        isa.enter(|| interleave_widened(isa, &rows, &mut widened, &mut out));
                        for i in 0..n {
                            for l in 0..planes {
                                let want = rows[l][i].to_acc_compared();
                                assert_eq!(
                                    bytemuck::bytes_of(&out[i * BLOCK + l]),
                                    bytemuck::bytes_of(&want),
                                    "{} {isa:?}: planes {planes}, n {n}, column {i}, lane {l}",
                                    T::DTYPE
                                );
                            }
                        }
                    }
                }
            }
        }
        let bits16 = |i: usize| (awkward(i) >> 16) as u16 ^ (i as u16);
        check(|i| half::bf16::from_bits(bits16(i)));
        check(|i| half::f16::from_bits(bits16(i)));
        check(|i| f32::from_bits(awkward(i)));
        check(|i| f64::from_bits(u64::from(awkward(i)) << 29 | i as u64));
    }

    /// `bf16` widened through registers is a zero extension and a shift: every `bf16` bit pattern
    /// (signalling NaNs too) lands as its bits shifted into the top half, which is also what the
    /// plain loop's conversion gives.
    #[test]
    fn bf16_widened_in_registers_is_a_shift() {
        let isa = Isa::best();
        let all: Vec<half::bf16> = (0..=u16::MAX).map(half::bf16::from_bits).collect();
        let rows: Vec<&[half::bf16]> = all.chunks(1 << 13).collect();
        let mut out = vec![0.0f32; (1 << 13) * BLOCK];
        let done = isa.enter(|| transposed_bf16(isa, &rows, &mut out));
        #[cfg(target_arch = "x86_64")]
        assert_eq!(done, if std::is_x86_feature_detected!("avx2") { 1 << 13 } else { 0 });
        for i in 0..done {
            for (l, row) in rows.iter().enumerate() {
                assert_eq!(out[i * BLOCK + l].to_bits(), u32::from(row[i].to_bits()) << 16, "{i} {l}");
            }
        }
    }

    /// Taking a block apart gives every plane its column, through registers where the processor
    /// has AVX and by the plain loop in the baseline copy, for every number of planes and
    /// lengths around the 8-column steps; 64-bit values take the plain loop.
    #[test]
    fn taken_apart_columns_equal_the_definition() {
        fn check<X: bytemuck::Pod + PartialEq + core::fmt::Debug>(of: impl Fn(usize) -> X) {
            for planes in 1..=BLOCK {
                for n in [0, 1, 7, 8, 9, 16, 23, 64, 81] {
                    let lanes: Vec<X> = (0..n * BLOCK).map(&of).collect();
                    for isa in [Isa::best(), Isa::Baseline] {
                        let mut outs = vec![vec![of(0); n]; planes];
                        let mut views: Vec<&mut [X]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
                        isa.enter(|| deinterleave(isa, &lanes, &mut views));
                        for (l, out) in outs.iter().enumerate() {
                            for (i, v) in out.iter().enumerate() {
                                let want = bytemuck::bytes_of(&lanes[i * BLOCK + l]);
                                assert_eq!(
                                    bytemuck::bytes_of(v),
                                    want,
                                    "{isa:?}: planes {planes}, n {n}, column {i}, lane {l}"
                                );
                            }
                        }
                    }
                }
            }
        }
        check(|i| f32::from_bits(awkward(i)));
        check(|i| awkward(i) as i32);
        check(|i| f64::from_bits(u64::from(awkward(i)) << 29 | i as u64));
    }

    /// Where the task runs in AVX, the columns go through registers (and so the test above
    /// tested the vector path); the plain loop is used for `f64`.
    #[test]
    fn vector_path_is_taken_where_it_exists() {
        let isa = Isa::best();
        let rows = [[1.0f32; 16].as_slice(); BLOCK];
        let mut out = [0.0f32; 16 * BLOCK];
        let done = isa.enter(|| transposed(isa, &rows, &mut out));
        let m: [[f32; 8]; 8] = core::array::from_fn(|l| core::array::from_fn(|i| (10 * l + i) as f32));
        let t = isa.enter(|| transpose8(isa, m));
        #[cfg(target_arch = "x86_64")]
        let avx = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c");
        #[cfg(not(target_arch = "x86_64"))]
        let avx = false;
        assert_eq!(done, if avx { 16 } else { 0 });
        let want: [[f32; 8]; 8] = core::array::from_fn(|i| core::array::from_fn(|l| (10 * l + i) as f32));
        assert_eq!(t, avx.then_some(want));
        let rows64 = [[1.0f64; 16].as_slice(); BLOCK];
        let mut out64 = [0.0f64; 16 * BLOCK];
        assert_eq!(isa.enter(|| transposed(isa, &rows64, &mut out64)), 0);
    }
}
