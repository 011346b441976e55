//! The plain loops of max unpooling, its backward and the max poolings' double backward, by
//! their definitions: each plane's values are written in order to their indices, so the last of
//! equal indices wins; the unpooling's backward reads the output gradient at each index for that
//! last value alone (0 for the earlier ones), and the double backward reads it for every value.
//! Shared by the unpooling, hostile-input and bridge tests.

#![allow(dead_code)] // each test uses the parts it checks

use std::collections::HashMap;

/// What the loops give for one input: the unpooling, its backward and the double backward.
pub struct Unpooled {
    /// The unpooled output, zero where no index points.
    pub output: Vec<f64>,
    /// The unpooling's backward: the gradient of each value.
    pub gradient: Vec<f64>,
    /// The double backward: the output gradient gathered at every index.
    pub gathered: Vec<f64>,
    /// How many positions some value was written to (fewer than the values: indices repeat).
    pub written: usize,
}

/// `values` and `indices` run over planes of `per` elements each, pointing into planes of `plane`
/// positions; `output_gradient` has the unpooled output's length.
pub fn unpool_loops(
    values: &[f64],
    indices: &[usize],
    per: usize,
    plane: usize,
    output_gradient: &[f64],
) -> Unpooled {
    let at = |e: usize| (e / per) * plane + indices[e];
    let mut output = vec![0.0; output_gradient.len()];
    let mut last = HashMap::new();
    for (e, &v) in values.iter().enumerate() {
        output[at(e)] = v;
        last.insert(at(e), e);
    }
    let gathered: Vec<f64> = (0..values.len()).map(|e| output_gradient[at(e)]).collect();
    let gradient = (0..values.len()).map(|e| if last[&at(e)] == e { gathered[e] } else { 0.0 }).collect();
    Unpooled { output, gradient, gathered, written: last.len() }
}
