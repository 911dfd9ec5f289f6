#!/usr/bin/env python3
"""Compares GPU replays (`unimem replay --backend cuda --json` lines, e.g. from
scripts/gpu-replays.sh) with the simulator's prediction of the same runs, calibrated with a
profile written by `unimem probe`. Prints a Markdown table with the sim/real ratio per row.

Usage: scripts/sim-vs-real.py PROFILE.toml REAL.jsonl [REAL2.jsonl ...] [--exe target/release/unimem]
Several REAL files are repeated runs: the table shows their range and compares with the mean.
"""
import json, os, subprocess, sys
from collections import defaultdict

args = sys.argv[1:]
exe = "target/release/unimem"
if "--exe" in args:
    i = args.index("--exe"); exe = args[i + 1]; del args[i:i + 2]
profile, files = args[0], args[1:]
real = defaultdict(list)
for f in files:
    for line in open(f):
        d = json.loads(line)
        real[(d["trace"], d["budget"], d["policy"])].append(d)
env = dict(os.environ, UNIMEM_SIM_PROFILE=profile)
print("| trace | budget | policy | real (H200) | sim | sim / real | real vs none | sim vs none |")
print("|---|---|---|---|---|---|---|---|")
for (trace, budget) in sorted({(t, b) for (t, b, _) in real}, key=lambda k: (k[0], -float(k[1].rstrip('%')))):
    policies = [p for p in ["none", "oracle", "advisor"] if (trace, budget, p) in real]
    out = subprocess.run([exe, "replay", trace, "--backend", "sim", "--budget", budget, "--policy", ",".join(policies), "--json"],
                         check=True, capture_output=True, text=True, env=env).stdout
    sim = {d["policy"]: d for d in map(json.loads, out.splitlines())}
    mean = lambda p: sum(r["time_ns"] for r in real[(trace, budget, p)]) / len(real[(trace, budget, p)])
    for p in policies:
        runs = [r["time_ns"] / 1e6 for r in real[(trace, budget, p)]]
        m, s = mean(p), sim[p]["time_ns"]
        span = f"{min(runs):.0f}-{max(runs):.0f} ms" if len(runs) > 1 else f"{runs[0]:.0f} ms"
        print(f"| {trace.split('/')[-1].split('.')[0]} | {budget} | {p} | {span} | {s / 1e6:.0f} ms | {s / m:.2f} | "
              f"{mean('none') / m:.2f}x | {sim['none']['time_ns'] / s:.2f}x |")
