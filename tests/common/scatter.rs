//! The plain loop of a max pooling's backward with flat indices, by its definition: each
//! output's gradient added at its index in its own plane, in row-major output order, each sum in
//! the accumulator the operation promises (f64 for `f64`; f32 for `f32` and the half types, which
//! then round the whole sum once). Shared by the tests' helpers, the hostile-input tests and the
//! bridge tests.

#![allow(dead_code)] // each test uses the accumulators it checks

/// `w` added at `indices` (flat in each of `planes` planes of `per_plane` positions), in output
/// order, by `add` (the sum in the accumulator: [`in_f64`] or [`in_f32`]).
pub fn scatter_loop(
    (w, indices): (&[f64], &[i64]),
    (planes, per_plane): (usize, usize),
    add: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    let mut gx = vec![0.0; planes * per_plane];
    let per_output = indices.len() / planes.max(1);
    for (o, (&g, &i)) in w.iter().zip(indices).enumerate() {
        let at = o / per_output * per_plane + usize::try_from(i).unwrap();
        gx[at] = add(gx[at], g);
    }
    gx
}

/// A sum in f64.
pub fn in_f64(sum: f64, g: f64) -> f64 {
    sum + g
}

/// A sum in f32: both rounded to f32 and added there (exact back in f64).
pub fn in_f32(sum: f64, g: f64) -> f64 {
    f64::from(sum as f32 + g as f32)
}
