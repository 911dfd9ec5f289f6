#!/usr/bin/env python3
"""Replays the bundled traces at 100/75/50/25% budget with every policy through
`unimem replay --json` and prints a Markdown table (used for docs/benchmarks.md).
Usage: scripts/replay-table.py [path/to/unimem] [policies]"""
import json, subprocess, sys

exe = sys.argv[1] if len(sys.argv) > 1 else "target/release/unimem"
policies = sys.argv[2] if len(sys.argv) > 2 else "none,oracle"
traces = ["traces/resnet50-train.jsonl.gz", "traces/transformer-decode.jsonl.gz"]
print("| trace | budget | policy | time | x floor | vs none | H2D GB | D2H GB | GPU faults | peak resident / budget | steps (x floor) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for t in traces:
    for b in ["100%", "75%", "50%", "25%"]:
        out = subprocess.run([exe, "replay", t, "--budget", b, "--policy", policies, "--json"],
                             check=True, capture_output=True, text=True).stdout
        runs = [json.loads(l) for l in out.splitlines()]
        base = next(r for r in runs if r["policy"] == "none")["time_ns"]
        for r in runs:
            steps = ", ".join(f"{s['time_ns'] / s['compute_floor_ns']:.2f}" for s in r["steps"] if s["compute_floor_ns"])
            print(f"| {t.split('/')[-1].split('.')[0]} | {b} | {r['policy']} | {r['time_ns'] / 1e6:.1f} ms | "
                  f"{r['over_floor']:.2f} | {base / r['time_ns']:.2f}x | {r['h2d_bytes'] / 1e9:.2f} | "
                  f"{r['d2h_bytes'] / 1e9:.2f} | {r['gpu_faults']} | "
                  f"{r['peak_resident_bytes'] / r['budget_bytes'] * 100:.0f}% | {steps} |")
