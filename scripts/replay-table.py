#!/usr/bin/env python3
"""Replays traces at several budgets with several policies through `unimem replay --json` and
prints a Markdown table (used for docs/benchmarks.md).

Usage:
  scripts/replay-table.py [path/to/unimem] [policies]              the bundled sample traces
  scripts/replay-table.py [path/to/unimem] [policies] --synthetic  the synthetic patterns,
      generated with `unimem trace gen` (20000 events, 64 x 4 MiB regions; read-only and with
      every other kernel updating its input in place), at 50% budget
"""
import json, os, subprocess, sys, tempfile

args = [a for a in sys.argv[1:] if not a.startswith("--")]
exe = args[0] if len(args) > 0 else "target/release/unimem"
policies = args[1] if len(args) > 1 else "none,oracle,advisor"
synthetic = "--synthetic" in sys.argv

if synthetic:
    tmp = tempfile.mkdtemp(prefix="unimem-synth-")
    traces, budgets = [], ["50%"]
    for pattern in ["streaming", "strided", "alternating", "graph", "random"]:
        for write_every in [0, 2]:
            path = os.path.join(tmp, f"{pattern}-w{write_every}.jsonl.gz")
            subprocess.run([exe, "trace", "gen", path, "--pattern", pattern, "--events", "20000",
                            "--write-every", str(write_every)], check=True, capture_output=True)
            traces.append((f"{pattern}{' (writes)' if write_every else ''}", path))
else:
    traces = [(t, f"traces/{t}.jsonl.gz") for t in ["resnet50-train", "transformer-decode"]]
    budgets = ["100%", "75%", "50%", "25%"]

print("| trace | budget | policy | time | x floor | x bound | x phase | vs none | H2D GB | D2H GB | staged GB | dup GB | remote GB "
      "| prefetch acc / cov / on-time | peak resident / budget | steps (x floor) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, path in traces:
    for b in budgets:
        out = subprocess.run([exe, "replay", path, "--budget", b, "--policy", policies, "--json"],
                             check=True, capture_output=True, text=True).stdout
        runs = [json.loads(l) for l in out.splitlines()]
        base = next(r for r in runs if r["policy"] == "none")["time_ns"]
        for r in runs:
            steps = [f"{s['time_ns'] / s['compute_floor_ns']:.2f}" for s in r["steps"] if s["compute_floor_ns"]]
            steps = ", ".join(steps if len(steps) <= 4 else steps[:3] + ["..."])
            p = r["prefetch"]
            metrics = "-" if p["arrived_bytes"] == 0 else f"{p['accuracy']:.2f} / {p['coverage']:.2f} / {p['timeliness']:.2f}"
            print(f"| {name} | {b} | {r['policy']} | {r['time_ns'] / 1e6:.1f} ms | "
                  f"{r['over_floor']:.2f} | {r['over_bound']:.2f} | {r['over_phase_bound']:.2f} | {base / r['time_ns']:.2f}x | {r['h2d_bytes'] / 1e9:.2f} | "
                  f"{r['d2h_bytes'] / 1e9:.2f} | {r['placement']['staged'] / 1e9:.2f} | "
                  f"{r['placement']['duplicated'] / 1e9:.2f} | "
                  f"{r['placement']['remote'] / 1e9:.2f} | {metrics} | "
                  f"{r['peak_resident_bytes'] / r['budget_bytes'] * 100:.0f}% | {steps} |")
