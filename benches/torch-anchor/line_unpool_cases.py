"""Writes PyTorch's CPU results for 1-D max pooling, adaptive 1-D max pooling, max unpooling
(1-D, 2-D and 3-D) and the max poolings' double backwards, for `tests/pool1d.rs::against_pytorch`
and `tests/unpool.rs::against_pytorch` to compare bit for bit:

    python benches/torch-anchor/line_unpool_cases.py DIR
    POOLGRAD_TORCH_CASES=DIR cargo test --release --test pool1d --test unpool against_pytorch -- --ignored

The shapes and parameters are those of PyTorch's own tests of these operations
(`test/nn/test_pooling.py`: `test_max_pool1d*`, `test_MaxPool1d_indices`,
`test_adaptive_max_pool1d*`, `test_MaxUnpool2d_output_size`, `test_max_unpool*`; the 1-D
unpooling on the same kinds of case), plus ceil mode, dilation, ties, NaN and -inf, and
overlapping windows (repeated indices). Each case: a line of
`lines.txt` or `unpool.txt` and raw little-endian files (see `pool3d_cases.py`).

1-D: `.x`, `.out`, `.idx`, `.go`, `.gi` as the 3-D cases (`.gi` PyTorch's backward in f32 and
f64; in f16 and bf16 the gradients summed in f32 in row-major output order, rounded once).

Unpooling: `.y` pooled values, `.idx` their int64 indices, `.out` PyTorch's `max_unpool`,
`.go` a gradient of it, `.gx_torch` PyTorch's gradient of the unpooling (a gather: every repeat
of an index reads it), `.ggx` a second-order gradient of the pooling's input and `.ggo`
PyTorch's double backward of the pooling (autograd through its backward).
"""

import os
import sys

import torch
import torch.nn.functional as F

# The 3-D cases' dtypes, raw files, values and half-type sums (any rank), from their script.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pool3d_cases import DTYPES, f32_sums, values, write  # noqa: E402


def line_case(out_dir, manifest, name, dtype, shape, op, k=1, s=1, p=0, d=1, ceil=False, size=1, kind="randn",
              seed=0):
    g = torch.Generator().manual_seed(seed)
    x = values(shape, kind, g).to(DTYPES[dtype]).requires_grad_(True)
    if op == "max":
        out, idx = F.max_pool1d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
    else:
        out, idx = F.adaptive_max_pool1d(x, size, return_indices=True)
    go = torch.randint(-64, 64, out.shape, generator=g).double().div(4).to(x.dtype)
    (gi_torch,) = torch.autograd.grad(out, x, go)
    gi = gi_torch if dtype in ("f32", "f64") else f32_sums(go, idx, x.shape)
    write(out_dir, name, {"x": x.detach(), "out": out.detach(), "idx": idx, "go": go, "gi": gi})
    manifest.write(" ".join(str(v) for v in [name, op, dtype, *shape, k, s, p, d, int(ceil), size]) + "\n")


def unpool_case(out_dir, manifest, name, dtype, shape, k, s, p=0, size=None, kind="randn", seed=0):
    """A max pooling of `shape` (1-D, 2-D or 3-D by its rank), unpooled back to `size` (default: `shape`'s)."""
    g = torch.Generator().manual_seed(seed)
    spatial = len(shape) - 2
    x = values(shape, kind, g).to(DTYPES[dtype]).requires_grad_(True)
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[spatial]
    unpool = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}[spatial]
    y, idx = pool(x, k, s, p, return_indices=True)
    size = list(size or shape[2:])
    y = y.detach().requires_grad_(True)
    out = unpool(y, idx, k, s, p, output_size=size)
    go = torch.randint(-64, 64, out.shape, generator=g).double().div(4).to(x.dtype)
    (gx_torch,) = torch.autograd.grad(out, y, go)
    # The double backward: the gradient of the pooling's backward with respect to its grad_output.
    xx = x.detach().requires_grad_(True)
    yy = pool(xx, k, s, p)
    gy = torch.zeros_like(yy).requires_grad_(True)
    (gxx,) = torch.autograd.grad(yy, xx, gy, create_graph=True)
    ggx = torch.randint(-64, 64, x.shape, generator=g).double().div(4).to(x.dtype)
    (ggo,) = torch.autograd.grad(gxx, gy, ggx)
    write(out_dir, name, {"y": y.detach(), "idx": idx, "out": out.detach(), "go": go, "gx_torch": gx_torch,
                          "ggx": ggx, "ggo": ggo})
    manifest.write(" ".join(str(v) for v in [name, dtype, len(shape), *shape, *size]) + "\n")


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "lines.txt"), "w") as m:
        n = 0
        for dtype in DTYPES:
            def c(**kw):
                nonlocal n
                line_case(out_dir, m, f"line{n}", dtype, seed=n, **kw)
                n += 1
            # test_max_pool1d* / test_MaxPool1d_indices: kernels 2 and 3, strides 1 and 2.
            c(shape=(2, 3, 10), op="max", k=2, s=2)
            c(shape=(1, 4, 9), op="max", k=3, s=1, p=1)
            c(shape=(2, 2, 12), op="max", k=3, s=2, p=1, d=2, kind="ties")
            c(shape=(1, 2, 7), op="max", k=2, s=3, ceil=True)
            c(shape=(2, 3, 11), op="max", k=3, s=2, p=1, ceil=True, kind="special")
            c(shape=(4, 8, 64), op="max", k=3, s=2, p=1)
            # test_adaptive_max_pool1d*: sizes below, equal to and above the input.
            c(shape=(2, 3, 10), op="adaptive", size=4)
            c(shape=(1, 2, 7), op="adaptive", size=7, kind="ties")
            c(shape=(1, 3, 5), op="adaptive", size=9, kind="special")
    with open(os.path.join(out_dir, "unpool.txt"), "w") as m:
        n = 0
        for dtype in DTYPES:
            def u(**kw):
                nonlocal n
                unpool_case(out_dir, m, f"unpool{n}", dtype, seed=100 + n, **kw)
                n += 1
            # test_MaxUnpool2d_output_size and SegNet's k2 s2; an output size one larger.
            u(shape=(2, 3, 8, 8), k=2, s=2)
            u(shape=(1, 1, 9, 9), k=2, s=2, size=(9, 9))
            # Overlapping windows: repeated indices (of equal values), ties among them.
            u(shape=(1, 2, 7, 7), k=3, s=2, p=1, kind="ties")
            u(shape=(2, 2, 6, 5), k=3, s=1, p=1)
            # 3-D (test_max_unpool3d*), non-overlapping and overlapping.
            u(shape=(1, 2, 4, 6, 6), k=2, s=2)
            u(shape=(1, 1, 5, 5, 5), k=3, s=1, p=1, kind="ties")
            # 1-D: SegNet-like k2 s2, an output one longer, overlapping windows (repeats).
            u(shape=(2, 3, 8), k=2, s=2)
            u(shape=(1, 2, 9), k=2, s=2, size=(9,))
            u(shape=(1, 2, 11), k=3, s=2, p=1, kind="ties")
            u(shape=(2, 2, 7), k=3, s=1, p=1, kind="special")


if __name__ == "__main__":
    main()
