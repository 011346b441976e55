"""Writes PyTorch's CPU results for 3-D max pooling and adaptive 3-D max pooling, for
`tests/pool3d.rs::against_pytorch` to compare bit for bit:

    python benches/torch-anchor/pool3d_cases.py DIR
    POOLGRAD_TORCH_CASES=DIR cargo test --release --test pool3d against_pytorch -- --ignored

The shapes and parameters are those of PyTorch's own tests of these operations
(`test/nn/test_pooling.py`: `test_max_pool3d*`, `test_MaxPool3d_indices`,
`test_adaptive_max_pool3d*`, the NaN and -inf tests), plus ceil mode, dilation, padding-only
edges and outputs larger than the input. Each case: a line of `manifest.txt` and raw
little-endian files: `.x` input, `.out` values, `.idx` int64 indices, `.go` a gradient, `.gi`
the expected gradient. For f32 and f64 `.gi` is PyTorch's backward; for f16 and bf16 it is the
rule poolgrad documents for the half types (the gradients summed in f32 in row-major output
order, rounded once), with PyTorch's own backward beside it as `.gi_torch`.
"""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}


def raw(t):
    t = t.contiguous()
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write(out_dir, name, files):
    """Each tensor of `files` as `out_dir/name.ext`, its raw bytes (`raw`)."""
    for ext, t in files.items():
        with open(os.path.join(out_dir, f"{name}.{ext}"), "wb") as f:
            f.write(raw(t))


def f32_sums(go, idx, shape):
    """The half types' rule: f32 sums in row-major output order, rounded once (any rank: the
    first two axes are the planes, the rest each plane's positions)."""
    planes = shape[0] * shape[1]
    g = go.float().reshape(planes, -1).numpy()
    ix = idx.reshape(planes, -1).numpy()
    out = np.zeros((planes, int(np.prod(shape[2:]))), dtype=np.float32)
    for p in range(planes):
        for j in range(g.shape[1]):
            out[p, ix[p, j]] = np.float32(out[p, ix[p, j]] + g[p, j])
    return torch.from_numpy(out.reshape(shape)).to(go.dtype)


def values(shape, kind, g):
    """Input values in f64: normal ("randn"), small integers with ties ("ties"), or small
    integers with NaN and -inf among them ("special")."""
    if kind == "randn":
        return torch.randn(shape, generator=g, dtype=torch.float64)
    if kind == "ties":
        return torch.randint(0, 4, shape, generator=g).double()
    x = torch.randint(0, 8, shape, generator=g).double()
    x[x == 0] = float("nan")
    x[x == 1] = float("-inf")
    return x


def case(out_dir, manifest, name, dtype, shape, op, kernel=(1, 1, 1), stride=(1, 1, 1), padding=(0, 0, 0),
         dilation=(1, 1, 1), ceil=False, size=(1, 1, 1), kind="randn", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = values(shape, kind, g).to(DTYPES[dtype]).requires_grad_(True)
    if op == "max":
        out, idx = F.max_pool3d(x, kernel, stride, padding, dilation, ceil_mode=ceil, return_indices=True)
    else:
        out, idx = F.adaptive_max_pool3d(x, size, return_indices=True)
    go = torch.randint(-64, 64, out.shape, generator=g).double().div(4).to(x.dtype)
    (gi_torch,) = torch.autograd.grad(out, x, go)
    gi = gi_torch if dtype in ("f32", "f64") else f32_sums(go, idx, x.shape)
    write(out_dir, name, {"x": x.detach(), "out": out.detach(), "idx": idx, "go": go, "gi": gi, "gi_torch": gi_torch})
    fields = [name, op, dtype, *shape, *kernel, *stride, *padding, *dilation, int(ceil), *size]
    manifest.write(" ".join(str(v) for v in fields) + "\n")


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "manifest.txt"), "w") as m:
        k = 0
        for dtype in DTYPES:
            def c(**kw):
                nonlocal k
                case(out_dir, m, f"case{k}", dtype, seed=k, **kw)
                k += 1
            # test_max_pool3d* / test_MaxPool3d_indices: kernel 2 and 3, stride 1 and 2.
            c(shape=(2, 3, 5, 6, 7), op="max", kernel=(2, 2, 2), stride=(2, 2, 2))
            c(shape=(1, 4, 7, 7, 7), op="max", kernel=(3, 3, 3), stride=(1, 1, 1))
            c(shape=(2, 3, 8, 9, 10), op="max", kernel=(3, 2, 3), stride=(2, 1, 2), padding=(1, 1, 1))
            # Ceil mode, dilation, ties, NaN and -inf.
            c(shape=(1, 2, 5, 7, 9), op="max", kernel=(2, 3, 2), stride=(2, 2, 3), ceil=True)
            c(shape=(2, 2, 9, 8, 7), op="max", kernel=(2, 2, 3), stride=(1, 2, 1), padding=(1, 1, 1),
              dilation=(2, 3, 2), kind="ties")
            c(shape=(1, 3, 6, 6, 6), op="max", kernel=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1),
              ceil=True, kind="special")
            # A video-like shape (the benchmark's, smaller).
            c(shape=(2, 8, 8, 28, 28), op="max", kernel=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1))
            # Slices of 56x56 (the benchmark's), which the blocked kernel takes, 8 at a time.
            c(shape=(1, 8, 6, 56, 56), op="max", kernel=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1))
            c(shape=(1, 8, 16, 56, 56), op="adaptive", size=(4, 7, 7), kind="ties")
            # test_adaptive_max_pool3d*: sizes below, equal to and above the input.
            c(shape=(2, 3, 5, 6, 7), op="adaptive", size=(3, 4, 5))
            c(shape=(1, 2, 7, 7, 7), op="adaptive", size=(1, 1, 1), kind="ties")
            c(shape=(1, 2, 3, 4, 5), op="adaptive", size=(5, 6, 7), kind="special")
            c(shape=(2, 4, 9, 10, 11), op="adaptive", size=(4, 3, 5))


if __name__ == "__main__":
    main()
