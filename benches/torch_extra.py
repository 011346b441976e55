#!/usr/bin/env python3
"""Companion of benches/torch-anchor/bench.py: times, on the same cases, what the anchor does
not: PyTorch's backward writing into a preallocated gradient (the `.grad_input` out= overload,
which is what poolgrad's plan API does), and the forwards (`adaptive_max_pool2d`,
`max_pool2d_with_indices`), allocating and out=.

Usage: python benches/torch_extra.py [threads] [comma-separated case names]
Prints one JSON line per case and variant: name, variant, median_s."""
import json, sys, time, statistics
import torch, torch.nn.functional as F

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
CASES = [  # the anchor's cases, verbatim
  ("adaptive_div_f32",   "adaptive", "f32",  (32, 256, 28, 28), (7, 7)),
  ("adaptive_ovl_f32",   "adaptive", "f32",  (32, 256, 30, 30), (7, 7)),
  ("adaptive_ovl_bf16",  "adaptive", "bf16", (32, 256, 30, 30), (7, 7)),
  ("adaptive_ovl_f16",   "adaptive", "f16",  (32, 256, 30, 30), (7, 7)),
  ("adaptive_global_f32","adaptive", "f32",  (64, 2048, 7, 7),  (1, 1)),
  ("maxpool_stem_f32",   "maxpool",  "f32",  (32, 64, 112, 112), (3, 2, 1, False)),
  ("maxpool_stem_bf16",  "maxpool",  "bf16", (32, 64, 112, 112), (3, 2, 1, False)),
  ("maxpool_k2_f32",     "maxpool",  "f32",  (32, 128, 56, 56), (2, 2, 0, False)),
  ("maxpool_s1_b1_f32",  "maxpool",  "f32",  (1, 64, 264, 264), (3, 1, 1, True)),
]

def bench(fn, reps=15):
    fn(); fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)

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
