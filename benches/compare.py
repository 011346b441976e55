#!/usr/bin/env python3
"""Runs PyTorch's anchor and poolgrad's bench side by side on this machine, in one session, and
writes the README's performance table (Markdown, to stdout) and a bar chart (SVG).

Usage (from the repository root):
    python3 benches/compare.py --torch /path/to/python-with-torch [--rounds 3] [--svg benches/performance.svg]

It first builds the bench (`cargo build --release --example bench`), so that it never times a
binary left over from another checkout or experiment, and names the commit it measured.

Runs, in this order, `--rounds` times: the anchor at 2 threads, poolgrad at 2 threads, the
companion PyTorch timings (benches/torch_extra.py) at 2 threads, then the anchor and poolgrad at
1 thread. Each run reports per-case medians; every figure here is the median of those over the
rounds, so a slow spell of a shared machine during one run moves no ratio alone. The thread
scaling table sets each backward's 1-thread time beside its 2-thread time (speed-up 2 / 1).
"""
import argparse, json, os, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANCHOR = os.path.join(ROOT, "benches", "torch-anchor", "bench.py")
BENCH = os.path.join(ROOT, "target", "release", "examples", "bench")


def run(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def by_name(rows):
    return {r["name"]: r for r in rows}


def merge(rounds):
    """One record per case (keyed by name, or by name and variant) from the same case in every
    round: each timing and bandwidth is the median over the rounds, and the bandwidth on the
    minimum traffic follows the median time."""
    merged = {}
    for name, first in rounds[0].items():
        rows = [r[name] for r in rounds if name in r]
        rec = dict(first)
        for key in ("median_s", "median_fn_s", "floor_s", "alloc_floor_s", "median_seq_s", "median_into_s", "gbps"):
            if key in first:
                rec[key] = statistics.median(r[key] for r in rows)
        if "tmin_bytes" in first:
            rec["gbps_on_tmin"] = first["tmin_bytes"] / rec["median_s"] / 1e9
        merged[name] = rec
    return merged


def svg_chart(rows, path):
    """Horizontal bars per case: GB/s on the minimum traffic of poolgrad (plan API) and of
    PyTorch writing into a preallocated gradient (`out=`), the kernel-to-kernel comparison."""
    width, bar, gap, left = 760, 12, 10, 170
    height = 60 + len(rows) * (2 * bar + gap)
    peak = max(max(r[1], r[2], r[3]) for r in rows) * 1.1
    scale = (width - left - 40) / peak
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">Backward, GB/s on the minimum traffic (2 threads; higher is better)</text>']
    copy_x = left + rows[0][3] * scale
    out.append(f'<line x1="{copy_x:.1f}" y1="28" x2="{copy_x:.1f}" y2="{height - 10}" stroke="#888" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{copy_x + 3:.1f}" y="38" fill="#555">copy bandwidth {rows[0][3]:.1f}</text>')
    y = 48
    for name, ours, torch, _copy in rows:
        out.append(f'<text x="{left - 6}" y="{y + bar + 4}" text-anchor="end">{name}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{ours * scale:.1f}" height="{bar}" fill="#2a7ab9"/>')
        out.append(f'<text x="{left + ours * scale + 3:.1f}" y="{y + bar - 2}">poolgrad {ours:.1f}</text>')
        out.append(f'<rect x="{left}" y="{y + bar}" width="{torch * scale:.1f}" height="{bar}" fill="#e07b39"/>')
        out.append(f'<text x="{left + torch * scale + 3:.1f}" y="{y + 2 * bar - 2}">PyTorch out= {torch:.1f}</text>')
        y += 2 * bar + gap
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", required=True, help="a python with torch (see benches/torch-anchor/setup.sh)")
    ap.add_argument("--svg", default=os.path.join(ROOT, "benches", "performance.svg"))
    ap.add_argument("--rounds", type=int, default=3, help="interleaved runs of every program; figures are medians over them")
    args = ap.parse_args()

    subprocess.run(["cargo", "build", "--release", "--example", "bench"], cwd=ROOT, check=True)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    print("Measured: " + (commit.stdout.strip() or "a tree outside git") + ".\n")

    runs = {"anchor2": [], "ours2": [], "extra": [], "anchor1": [], "ours1": []}
    for _ in range(max(args.rounds, 1)):
        runs["anchor2"].append(by_name(run([args.torch, ANCHOR, "2"])))
        runs["ours2"].append(by_name(run([BENCH, "--threads", "2"])))
        rows = run([args.torch, os.path.join(ROOT, "benches", "torch_extra.py"), "2"])
        runs["extra"].append({(r["name"], r["variant"]): r for r in rows})
        runs["anchor1"].append(by_name(run([args.torch, ANCHOR, "1"])))
        runs["ours1"].append(by_name(run([BENCH, "--threads", "1", "--plan-only"])))
    anchor2, ours2, anchor1, ours1 = (merge(runs[k]) for k in ("anchor2", "ours2", "anchor1", "ours1"))
    extra = {key: r["median_s"] for key, r in merge(runs["extra"]).items()}
    copy2, copy1 = ours2["copy"]["gbps"], ours1["copy"]["gbps"]

    ms = lambda s: f"{s * 1e3:.2f}"
    print(f"Medians over {max(args.rounds, 1)} interleaved rounds. Copy bandwidth measured in the same process: "
          f"{copy2:.1f} GB/s with 2 threads, {copy1:.1f} GB/s with 1.\n")
    print("| backward (2 threads) | PyTorch op, ms | PyTorch `out=`, ms | poolgrad fn, ms | poolgrad plan, ms | op / plan | `out=` / plan | plan GB/s on T_min | of copy | memory floor, ms | op / floor | 1 thread: PyTorch op / plan |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    chart = []
    for name, a in anchor2.items():
        if name.startswith("tiny_"):
            continue
        o = ours2[name]
        t_out = extra[(name, "backward_out")]
        r1 = anchor1[name]["median_s"] / ours1[name]["median_s"]
        print(f"| {name} | {ms(a['median_s'])} | {ms(t_out)} | {ms(o['median_fn_s'])} | {ms(o['median_s'])} | "
              f"{a['median_s'] / o['median_s']:.1f}x | {t_out / o['median_s']:.2f}x | {o['gbps_on_tmin']:.1f} | "
              f"{o['gbps_on_tmin'] / copy2 * 100:.0f}% | {ms(o['floor_s'])} | {a['median_s'] / o['floor_s']:.1f}x | {r1:.1f}x |")
        chart.append((name, o["gbps_on_tmin"], a["tmin_bytes"] / t_out / 1e9, copy2))
    print()
    print("| backward without a PyTorch twin (2 threads) | poolgrad plan, ms | GB/s on T_min | of copy | memory floor, ms | plan / floor |")
    print("|---|---|---|---|---|---|")
    for name, o in ours2.items():
        if not name.startswith(("fwd_", "tiny_")) and name != "copy" and name not in anchor2:
            print(f"| {name} | {ms(o['median_s'])} | {o['gbps_on_tmin']:.1f} | {o['gbps_on_tmin'] / copy2 * 100:.0f}% | "
                  f"{ms(o['floor_s'])} | {o['median_s'] / o['floor_s']:.2f}x |")
    print()
    print("| thread scaling (backward, plan) | poolgrad 1 thread, ms | poolgrad 2 threads, ms | poolgrad speed-up | PyTorch op 1 thread, ms | PyTorch op 2 threads, ms | PyTorch speed-up |")
    print("|---|---|---|---|---|---|---|")
    for name, o in ours2.items():
        if name.startswith(("fwd_", "tiny_")) or name == "copy" or name not in ours1:
            continue
        one, two = ours1[name]["median_s"], o["median_s"]
        torch_cols = "| - | - | - |"
        if name in anchor2 and name in anchor1:
            t1, t2 = anchor1[name]["median_s"], anchor2[name]["median_s"]
            torch_cols = f"| {ms(t1)} | {ms(t2)} | {t1 / t2:.2f}x |"
        print(f"| {name} | {ms(one)} | {ms(two)} | {one / two:.2f}x {torch_cols}")
    print()
    print("| forward (2 threads) | PyTorch, ms | PyTorch `out=`, ms | poolgrad plan, ms | PyTorch / poolgrad | memory floor, ms | plan / floor |")
    print("|---|---|---|---|---|---|---|")
    for name in (n for n in anchor2 if not n.startswith("tiny_")):
        o = ours2["fwd_" + name]
        f = o["median_s"]
        t, to = extra[(name, "forward")], extra[(name, "forward_out")]
        print(f"| {name} | {ms(t)} | {ms(to)} | {ms(f)} | {min(t, to) / f:.2f}x | {ms(o['floor_s'])} | {f / o['floor_s']:.2f}x |")
    print()
    print("| mask forward (2 threads) | PyTorch `max_pool2d_with_indices`, ms | poolgrad plan, ms | PyTorch / poolgrad | memory floor, ms | plan / floor |")
    print("|---|---|---|---|---|---|")
    for name in (n for n in anchor2 if not n.startswith("tiny_")):
        for layout in ("i32argmax", "bitmask"):
            o = ours2.get(f"fwd_{name}_{layout}")
            if o is not None:
                t = min(extra[(name, "forward")], extra[(name, "forward_out")])
                print(f"| {name}_{layout} | {ms(t)} | {ms(o['median_s'])} | {t / o['median_s']:.2f}x | "
                      f"{ms(o['floor_s'])} | {o['median_s'] / o['floor_s']:.2f}x |")
    print()
    print("| forward without a PyTorch twin (2 threads) | poolgrad plan, ms | memory floor, ms | plan / floor |")
    print("|---|---|---|---|")
    for name, o in ours2.items():
        if name.startswith("fwd_") and "floor_s" in o and name[len("fwd_"):].split("_i32argmax")[0].split("_bitmask")[0] not in anchor2:
            print(f"| {name} | {ms(o['median_s'])} | {ms(o['floor_s'])} | {o['median_s'] / o['floor_s']:.2f}x |")
    print()
    print("| tiny case (f32, default device) | PyTorch op, us | poolgrad fn, us | PyTorch / poolgrad | `Cpu::sequential()`, us | fn / sequential | `_into`, us |")
    print("|---|---|---|---|---|---|---|")
    us = lambda s: f"{s * 1e6:.1f}"
    for name, o in ours2.items():
        if name.startswith("tiny_") and name in anchor2:
            t = anchor2[name]["median_s"]
            print(f"| {name} | {us(t)} | {us(o['median_s'])} | {t / o['median_s']:.1f}x | {us(o['median_seq_s'])} | "
                  f"{o['median_s'] / o['median_seq_s']:.2f}x | {us(o['median_into_s'])} |")
    print()
    print("| allocating function (2 threads) | plan, ms | allocation floor, ms | fn, ms | fn / (plan + floor) |")
    print("|---|---|---|---|---|")
    for name, o in ours2.items():
        if "alloc_floor_s" in o and "median_fn_s" in o:
            bound = o["median_s"] + o["alloc_floor_s"]
            print(f"| {name} | {ms(o['median_s'])} | {ms(o['alloc_floor_s'])} | {ms(o['median_fn_s'])} | {o['median_fn_s'] / bound:.2f}x |")
    svg_chart(chart, args.svg)
    print(f"\n(chart written to {os.path.relpath(args.svg, ROOT)})", file=sys.stderr)


if __name__ == "__main__":
    main()
