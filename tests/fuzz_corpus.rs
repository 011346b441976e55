//! Replays the fuzzing corpus (`tests/fuzz/corpus/*/*`, every past finding among it) and random
//! byte strings through the hostile-input harness, on stable, in the normal test suite. The
//! property: every call returns a result equal to the reference, or an error; never a panic,
//! and never an allocation beyond a budget: as the fuzzer's `-malloc_limit_mb`, each corpus input
//! runs with at most [`ENTRY_BUDGET`] bytes of heap more than before it (this binary's heap is
//! counted and capped by `cap`), so a copy of a large input aborts the run.

mod capped_heap;
mod hostile;

use capped_heap::{serial, within};

use proptest::prelude::*;

/// The heap one corpus input may add: the two largest results the harness holds at once (each
/// at most [`hostile::RESULT_BUDGET`]: a mask and the same mask built from another layout of its
/// indices, say), and room for the reference's work. The fuzzer's `-malloc_limit_mb` bounds each
/// allocation rather than their sum, so one budget of a single result would refuse here what
/// the fuzzer runs.
const ENTRY_BUDGET: usize = 2 * hostile::RESULT_BUDGET + (16 << 20);

/// The corpus lives in the fuzz package (`tests/fuzz`), which the published crate does not ship:
/// in a package (cargo writes `Cargo.toml.orig` into every one) the replay is skipped, with a
/// message; in the repository a missing corpus is a failure.
fn corpus_root() -> Option<std::path::PathBuf> {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.join("tests/fuzz/corpus");
    if !root.exists() && manifest.join("Cargo.toml.orig").exists() {
        println!("note: the fuzz corpus ships with the repository, not the package: replay skipped");
        return None;
    }
    Some(root)
}

#[test]
fn corpus_replays_without_a_finding() {
    let _serial = serial();
    let Some(root) = corpus_root() else { return };
    let mut replayed = 0;
    let mut targets: Vec<_> = std::fs::read_dir(&root).expect("tests/fuzz/corpus exists").flatten().collect();
    targets.sort_by_key(|e| e.file_name());
    for target in targets {
        let name = target.file_name().to_string_lossy().into_owned();
        assert!(hostile::TARGETS.contains(&name.as_str()), "unknown corpus folder {name}");
        let mut files: Vec<_> =
            std::fs::read_dir(target.path()).expect("a corpus folder").flatten().collect();
        files.sort_by_key(|e| e.file_name());
        for file in files {
            let data = std::fs::read(file.path()).expect("a corpus file");
            within(ENTRY_BUDGET, || hostile::run_target(&name, &data));
            replayed += 1;
        }
    }
    assert!(replayed > 0, "the corpus is empty");
    println!("replayed {replayed} corpus inputs");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]
    /// Every target, with the heap budget of a corpus input (as the fuzzer's `-malloc_limit_mb`),
    /// so that a call allocating beyond its result fails here rather than exhausting the machine.
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _serial = serial();
        within(ENTRY_BUDGET, || hostile::run(&data));
    }

    /// The `volumes` target alone (3-D and 1-D pooling, unpooling, double backwards), whose corpus
    /// is still empty: random bytes through it, with the heap budget of a corpus input.
    #[test]
    fn random_bytes_through_the_volumes_target(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _serial = serial();
        within(ENTRY_BUDGET, || hostile::run_target("volumes", &data));
    }
}

/// Two masks of 32 MiB, one built from indices in the standard layout and one from the same
/// indices in Fortran order, held together for comparison: under a budget of one result (64 MiB)
/// the second failed to allocate, and the harness took its error for a difference between the
/// layouts (found by `random_bytes_never_panic`, once in 200 runs). The entry budget now holds
/// the two results the harness keeps at once.
#[test]
fn two_results_of_the_largest_size_fit_the_entry_budget() {
    let _serial = serial();
    // Op 8 (the `Mask` conversions), `Bitmask`, Fortran-order indices; past the end, zeros.
    let data = [
        118, 0, 0, 82, 0, 19, 0, 0, 0, 0, 0, 5, 230, 228, 0, 1, 250, 0, 0, 0, 0, 0, 0, 0, 1, 186, 0, 21, 25,
        133, 61,
    ];
    within(ENTRY_BUDGET, || hostile::run(&data));
}

/// Findings of the first fuzzing runs, each fixed in the crate. Their sizes (2^40 and more) exist
/// only on 64-bit targets.
#[cfg(target_pointer_width = "64")]
mod findings {
    use ndarray::{ArrayViewD, IxDyn, ShapeBuilder};
    use poolgrad::MaxPool2dParams;
    use poolgrad::testing::reference;

    fn broadcast(dims: &[usize]) -> ArrayViewD<'static, f32> {
        static ONE: [f32; 1] = [1.0];
        ArrayViewD::from_shape(IxDyn(dims).strides(IxDyn(&vec![0; dims.len()])), &ONE[..]).unwrap()
    }

    /// The reference allocated its result with ndarray's infallible constructors: a huge output
    /// aborted the process. It now returns an error.
    #[test]
    fn reference_rejects_impossible_outputs() {
        let _serial = super::serial();
        let x = broadcast(&[1, 1, 4, 4]);
        let e = reference::adaptive_max_pool2d(&x, [1 << 31, 1 << 31]).unwrap_err();
        assert!(matches!(e, poolgrad::Error::Allocation { .. } | poolgrad::Error::Overflow { .. }), "{e:?}");
        let e = poolgrad::adaptive_max_pool2d(&x, [1 << 31, 1 << 31]).unwrap_err();
        assert!(matches!(e, poolgrad::Error::Allocation { .. } | poolgrad::Error::Overflow { .. }), "{e:?}");
    }

    /// Once the views took 5-D arrays (for the 3-D poolings), the 2-D references panicked on
    /// one (found by `random_bytes_through_the_npu`); they now refuse its rank.
    #[test]
    fn the_references_refuse_five_dimensional_arrays() {
        let _serial = super::serial();
        let x = broadcast(&[1, 1, 2, 2, 2]);
        let e = reference::adaptive_max_pool2d(&x, [1, 1]).unwrap_err();
        assert!(matches!(e, poolgrad::Error::Rank { op: "reference", got: 5, .. }), "{e:?}");
        let e = reference::max_pool2d_with_indices(&x, &MaxPool2dParams::new([1, 1])).unwrap_err();
        assert!(matches!(e, poolgrad::Error::Rank { got: 5, .. }), "{e:?}");
    }

    /// The reference visited every tap of the kernel, even a kernel of 2^40 over a 1x1 input
    /// (a hang); it now visits only the taps inside the input.
    #[test]
    fn huge_kernels_cost_their_valid_taps_only() {
        let _serial = super::serial();
        let x = broadcast(&[1, 1, 1]);
        let p = MaxPool2dParams::new([1 << 40, 1 << 40]).with_padding([1 << 39, 1 << 39]);
        let (v, i) = reference::max_pool2d_with_indices(&x, &p).unwrap();
        assert_eq!((v.shape(), i[[0, 0, 0]]), (&[1, 1, 1][..], 0));
        let pooled = poolgrad::max_pool2d_with_indices(&x, &p).unwrap();
        assert_eq!(pooled.indices[[0, 0, 0]], 0);
    }

    /// Window tables are per output row and column; with no planes (N = 0) the output is empty
    /// whatever Ho and Wo are, and the tables were still allocated: an abort for Wo = 2^40
    /// (found by the `raw_mask` target). They are now skipped when there are no planes, and
    /// allocated fallibly otherwise.
    #[test]
    fn empty_batches_allocate_no_window_tables() {
        let _serial = super::serial();
        let x = broadcast(&[0, 1, 4, 4]);
        let p = poolgrad::adaptive_max_pool2d(&x, [1 << 40, 1]).unwrap();
        assert_eq!(p.output.shape(), &[0, 1, 1 << 40, 1]);
        // Where ndarray itself cannot describe the shape, an error (not an abort).
        let e = poolgrad::adaptive_max_pool2d(&x, [1 << 40, 1 << 40]).unwrap_err();
        assert!(matches!(e, poolgrad::Error::Overflow { .. }), "{e:?}");

        let x = broadcast(&[0, 1, 1, 1 << 40]);
        let params = MaxPool2dParams::new([1, 1]);
        let p = poolgrad::max_pool2d_with_indices(&x, &params).unwrap();
        assert_eq!(p.indices.shape(), &[0, 1, 1, 1 << 40]);

        let bitmask = poolgrad::max_pool2d_with_mask(&x, &params, poolgrad::Bitmask).unwrap();
        let g = broadcast(&[0, 1, 1, 1 << 40]);
        let gx = poolgrad::max_pool2d_with_mask_backward(&g, &x, &bitmask.mask).unwrap();
        assert_eq!(gx.shape(), &[0, 1, 1, 1 << 40]);
    }

    /// The half types' per-task accumulators (one plane per task) were sized for an empty batch
    /// too: a huge plane asked for a terabyte workspace. No planes now means no scratch.
    #[test]
    fn empty_batches_of_half_types_need_no_scratch() {
        let _serial = super::serial();
        static ONE: [half::f16; 1] = [half::f16::ONE];
        let broadcast16 = |dims: &[usize]| {
            ArrayViewD::from_shape(IxDyn(dims).strides(IxDyn(&vec![0; dims.len()])), &ONE[..]).unwrap()
        };
        let x = broadcast16(&[0, 1, 1, 1 << 40]);
        let g = broadcast16(&[0, 1, 1, 1 << 40]);
        let params = MaxPool2dParams::new([1, 1]);
        let idx = ndarray::ArrayD::<i64>::zeros(IxDyn(&[0, 1, 1, 1 << 40]));
        let gx = poolgrad::max_pool2d_with_indices_backward(&g, &x, &idx, &params).unwrap();
        assert_eq!(gx.shape(), &[0, 1, 1, 1 << 40]);
        let bitmask = poolgrad::max_pool2d_with_mask(&x, &params, poolgrad::Bitmask).unwrap();
        let gx = poolgrad::max_pool2d_with_mask_backward(&g, &x, &bitmask.mask).unwrap();
        assert_eq!(gx.shape(), &[0, 1, 1, 1 << 40]);
    }

    /// An empty batch through the adaptive 3-D forward (whose window tables are skipped when
    /// there are no volumes, so that a volume's output has no elements) panicked as its work was
    /// cut into tasks (found by `random_bytes_through_the_volumes_target`). Every 3-D and 1-D
    /// forward now returns the empty results PyTorch does.
    #[test]
    fn empty_batches_of_volumes_have_empty_results() {
        let _serial = super::serial();
        let x = ndarray::Array5::<f32>::zeros([0, 3, 4, 5, 6]);
        let p = poolgrad::adaptive_max_pool3d(&x, [1, 2, 1]).unwrap();
        assert_eq!((p.output.shape(), p.indices.shape()), (&[0, 3, 1, 2, 1][..], &[0, 3, 1, 2, 1][..]));
        let params = poolgrad::MaxPool3dParams::new([2, 2, 2]);
        let p = poolgrad::max_pool3d_with_indices(&x, &params).unwrap();
        assert_eq!(p.output.shape(), &[0, 3, 2, 2, 3]);
        let xh = ndarray::Array5::<half::f16>::zeros([0, 1, 1, 1, 1]);
        assert_eq!(poolgrad::adaptive_max_pool3d(&xh, [1, 1, 1]).unwrap().output.shape(), &[0, 1, 1, 1, 1]);
        let x1 = ndarray::Array3::<f32>::zeros([0, 2, 5]);
        assert_eq!(poolgrad::adaptive_max_pool1d(&x1, 3).unwrap().output.shape(), &[0, 2, 3]);
    }

    /// A half-type forward whose planes go in blocks but leave a few planes over (10 planes: a
    /// block of 8, then 2 one at a time) widened each leftover plane into scratch sized for a
    /// block's band of input rows only: with a kernel one row high over 128 x 5 planes, 96
    /// values for a 640-value plane, an out-of-bounds panic (found by `random_bytes_never_panic`).
    /// The scratch now holds a whole widened plane as well; the results equal the reference.
    #[test]
    fn half_type_planes_left_over_from_blocks_have_scratch() {
        use poolgrad::testing::{Tolerance, compare, compare_indices};
        fn check<T: poolgrad::PoolFloat>() {
            let x = ndarray::Array4::<T>::from_shape_fn([2, 5, 128, 5], |(n, c, h, w)| {
                T::round_from_f64(((n * 7 + c * 5 + h * 3 + w * 11) % 17) as f64 - 8.0)
            });
            let p = MaxPool2dParams::new([1, 4]).with_stride([1, 1]);
            let got = poolgrad::max_pool2d_with_indices(&x, &p).unwrap();
            let (v, i) = reference::max_pool2d_with_indices(&x.view().into_dyn(), &p).unwrap();
            compare("output", v.view(), got.output.view().into_dyn(), Tolerance::exact()).unwrap();
            compare_indices("indices", i.view(), got.indices.view().into_dyn()).unwrap();
            let masked = poolgrad::max_pool2d_with_mask(&x, &p, poolgrad::Bitmask).unwrap();
            compare("mask output", v.view(), masked.output.view().into_dyn(), Tolerance::exact()).unwrap();
        }
        let _serial = super::serial();
        check::<half::f16>();
        check::<half::bf16>();
    }

    /// The check that no dilated window reads only padding walked every output window (a hang on
    /// huge broadcast inputs); it now only looks where a window can miss the input.
    #[test]
    fn dilation_check_is_constant_time() {
        let _serial = super::serial();
        let p = MaxPool2dParams::new([2, 2]).with_dilation([3, 3]).with_stride([1, 1]);
        assert_eq!(p.output_size([1 << 40, 1 << 40]).unwrap(), [(1 << 40) - 3, (1 << 40) - 3]);
        // Where a window can miss (dilation above the input), it is still caught.
        let p = MaxPool2dParams::new([2, 1]).with_stride([1, 1]).with_dilation([4, 1]).with_padding([1, 0]);
        assert!(p.output_size([3, 4]).is_err());
    }

    /// `TensorMut::from_slice_with_strides` looked for two positions sharing an element with
    /// positions of at most 4 axes, and overflowed on a 5-D shape (found by
    /// `random_bytes_through_the_npu` once views took rank 5): the aliasing rule's error now names
    /// the pair in the shape's own rank.
    #[test]
    fn aliasing_strides_of_five_dimensional_outputs_are_a_layout_error() {
        let mut data = [0f32; 16];
        // Strides 5, 3, 2 over two elements each: no two axes alias on their own (the search of
        // every element runs), but (0, 0, 1, 0, 0) and (0, 0, 0, 1, 1) share element 5.
        let e = poolgrad::TensorMut::from_slice_with_strides(&mut data, &[1, 1, 2, 2, 2], &[16, 16, 5, 3, 2])
            .unwrap_err();
        match e {
            poolgrad::Error::Layout { reason, .. } => {
                assert!(reason.contains("[0, 0, 0, 1, 1]") && reason.contains("[0, 0, 1, 0, 0]"), "{reason}")
            }
            other => panic!("expected a layout error, got {other:?}"),
        }
    }
}
