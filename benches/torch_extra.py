#!/usr/bin/env python3
"""Companion of benches/torch-anchor/bench.py: times, on the same cases, what the anchor does
not: PyTorch's backward writing into a preallocated gradient (the `.grad_input` out= overload,
which is what poolgrad's plan API does), and the forwards (`adaptive_max_pool2d`,
`max_pool2d_with_indices`, their 3-D twins, `max_pool1d_with_indices` and `max_unpool2d`),
allocating and out=.

Usage: python benches/torch_extra.py [threads] [comma-separated case names]
Prints one JSON line per case and variant: name, variant, median_s."""
import json, os, sys
import torch, torch.nn.functional as F

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
# The anchor's cases, dtypes and timing loop, from the anchor itself.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch-anchor"))
from bench import CASES, DT, bench  # noqa: E402

only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
for name, kind, dt, shape, p in CASES:
    if only and name not in only:
        continue
    x = torch.randn(*shape).to(DT[dt])
    if kind == "adaptive":
        out, idx = F.adaptive_max_pool2d(x, p, return_indices=True)
        g = torch.randn(out.shape).to(DT[dt])
        gi = torch.empty_like(x)
        bwd_out = lambda: torch.ops.aten.adaptive_max_pool2d_backward.grad_input(g, x, idx, grad_input=gi)
        o2, i2 = torch.empty_like(out), torch.empty_like(idx)
        fwd = lambda: F.adaptive_max_pool2d(x, p, return_indices=True)
        fwd_out = lambda: torch.ops.aten.adaptive_max_pool2d.out(x, list(p), out=o2, indices=i2)
    elif kind == "adaptive3d":
        out, idx = F.adaptive_max_pool3d(x, p, return_indices=True)
        g = torch.randn(out.shape).to(DT[dt])
        gi = torch.empty_like(x)
        bwd_out = lambda: torch.ops.aten.adaptive_max_pool3d_backward.grad_input(g, x, idx, grad_input=gi)
        o2, i2 = torch.empty_like(out), torch.empty_like(idx)
        fwd = lambda: F.adaptive_max_pool3d(x, p, return_indices=True)
        fwd_out = lambda: torch.ops.aten.adaptive_max_pool3d.out(x, list(p), out=o2, indices=i2)
    elif kind == "maxpool3d":
        k, s, pad, ceil = p
        out, idx = F.max_pool3d(x, k, s, pad, ceil_mode=ceil, return_indices=True)
        g = torch.randn(out.shape).to(DT[dt])
        gi = torch.empty_like(x)
        bwd_out = lambda: torch.ops.aten.max_pool3d_with_indices_backward.grad_input(
            g, x, [k] * 3, [s] * 3, [pad] * 3, [1] * 3, ceil, idx, grad_input=gi)
        o2, i2 = torch.empty_like(out), torch.empty_like(idx)
        fwd = lambda: F.max_pool3d(x, k, s, pad, ceil_mode=ceil, return_indices=True)
        fwd_out = lambda: torch.ops.aten.max_pool3d_with_indices.out(
            x, [k] * 3, [s] * 3, [pad] * 3, [1] * 3, ceil, out=o2, indices=i2)
    elif kind == "maxpool1d":
        k, s, pad, ceil = p
        out, idx = F.max_pool1d(x, k, s, pad, ceil_mode=ceil, return_indices=True)
        g = torch.randn(out.shape).to(DT[dt])
        gi = torch.empty_like(x)
        x4, g4, idx4 = x.unsqueeze(-2), g.unsqueeze(-2), idx.unsqueeze(-2)
        bwd_out = lambda: torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
            g4, x4, [1, k], [1, s], [0, pad], [1, 1], ceil, idx4, grad_input=gi.unsqueeze(-2))
        o2, i2 = torch.empty_like(out), torch.empty_like(idx)
        fwd = lambda: F.max_pool1d(x, k, s, pad, ceil_mode=ceil, return_indices=True)
        fwd_out = lambda: torch.ops.aten.max_pool2d_with_indices.out(
            x4, [1, k], [1, s], [0, pad], [1, 1], ceil, out=o2.unsqueeze(-2), indices=i2.unsqueeze(-2))
    elif kind == "unpool2d":
        k = p[0]
        y, idx = F.max_pool2d(x, k, k, return_indices=True)
        g = torch.randn(x.shape).to(DT[dt])
        gi = torch.empty_like(y)
        bwd_out = lambda: torch.gather(g.flatten(2), 2, idx.flatten(2), out=gi.view(gi.shape[0], gi.shape[1], -1))
        o2 = torch.empty_like(x)
        size = list(x.shape[-2:])
        fwd = lambda: F.max_unpool2d(y, idx, k, k, output_size=size)
        fwd_out = lambda: torch.ops.aten.max_unpool2d.out(y, idx, size, out=o2)
    else:
        k, s, pad, ceil = p
        out, idx = F.max_pool2d(x, k, s, pad, ceil_mode=ceil, return_indices=True)
        g = torch.randn(out.shape).to(DT[dt])
        gi = torch.empty_like(x)
        bwd_out = lambda: torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
            g, x, [k, k], [s, s], [pad, pad], [1, 1], ceil, idx, grad_input=gi)
        o2, i2 = torch.empty_like(out), torch.empty_like(idx)
        fwd = lambda: F.max_pool2d(x, k, s, pad, ceil_mode=ceil, return_indices=True)
        fwd_out = lambda: torch.ops.aten.max_pool2d_with_indices.out(
            x, [k, k], [s, s], [pad, pad], [1, 1], ceil, out=o2, indices=i2)
    for variant, fn in (("backward_out", bwd_out), ("forward", fwd), ("forward_out", fwd_out)):
        print(json.dumps({"name": name, "variant": variant, "median_s": bench(fn)}), flush=True)
