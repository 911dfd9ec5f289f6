#!/usr/bin/env python3
"""Compares GPU replays (`unimem replay --backend cuda --json` lines, e.g. from
scripts/gpu-replays.sh) with the simulator's prediction of the same runs, calibrated with a
profile written by `unimem probe`. Prints a Markdown table with the sim/real ratio per row.

Usage: scripts/sim-vs-real.py PROFILE.toml REAL.jsonl [REAL2.jsonl ...] [--exe target/release/unimem]
       [--host] [--measured] [--sim-out SIM.jsonl | --sim-in SIM.jsonl] [--config CONFIG.toml]
       [--mem NAME]
Several REAL files are repeated runs: the table shows their range and compares with the mean.
With --host, a second table sets the host time the backend's calls held the replaying thread
(`backend_host_ns`, real mean / simulated) beside the policy's own work on the GPU's host (its
time less the hints it gave), which the simulator does not charge by default.
--measured simulates with `sim.policy_time = "measured"`: the policy's own work costs what it
takes on this machine, so run it on the GPU's host. --sim-out saves the simulated runs (JSON
lines), --sim-in reads them back instead of simulating. --config simulates with that
configuration (e.g. `memory = "device"`); --mem keeps only the real runs whose "mem" field
(added by the script that ran them) is NAME.
"""
import json, os, subprocess, sys
from collections import defaultdict

args = sys.argv[1:]
def flag(name):
    if name in args:
        args.remove(name)
        return True
    return False
def option(name):
    if name in args:
        i = args.index(name); v = args[i + 1]; del args[i:i + 2]
        return v
    return None
exe = option("--exe") or "target/release/unimem"
host, measured = flag("--host"), flag("--measured")
sim_out, sim_in = option("--sim-out"), option("--sim-in")
config, mem = option("--config"), option("--mem")
saved = defaultdict(dict)
if sim_in:
    for line in open(sim_in):
        d = json.loads(line)
        saved[(d["trace"], d["budget"])][d["policy"]] = d
sim_lines = []
profile, files = args[0], args[1:]
host_rows = []
tally = []  # per row: the simulated time within 20% of the real mean
real = defaultdict(list)
for f in files:
    for line in open(f):
        d = json.loads(line)
        if mem is None or d.get("mem", d.get("memory")) == mem:
            real[(d["trace"], d["budget"], d["policy"])].append(d)
env = dict(os.environ, UNIMEM_SIM_PROFILE=profile)
if measured:
    env["UNIMEM_SIM_POLICY_TIME"] = "measured"
print("| trace | budget | policy | real (GPU) | sim | sim / real | real vs none | sim vs none |")
print("|---|---|---|---|---|---|---|---|")
for (trace, budget) in sorted({(t, b) for (t, b, _) in real}, key=lambda k: (k[0], -float(k[1].rstrip('%')))):
    policies = [p for p in ["none", "oracle", "advisor"] if (trace, budget, p) in real]
    if sim_in:
        sim = saved[(trace, budget)]
    else:
        out = subprocess.run([exe, "replay", trace, "--backend", "sim", "--budget", budget, "--policy", ",".join(policies), "--json"]
                             + (["--config", config] if config else []),
                             check=True, capture_output=True, text=True, env=env).stdout
        sim = {d["policy"]: d for d in map(json.loads, out.splitlines())}
        sim_lines += out.splitlines()
    mean = lambda p: sum(r["time_ns"] for r in real[(trace, budget, p)]) / len(real[(trace, budget, p)])
    for p in policies:
        runs = [r["time_ns"] / 1e6 for r in real[(trace, budget, p)]]
        m, s = mean(p), sim[p]["time_ns"]
        span = f"{min(runs):.0f}-{max(runs):.0f} ms" if len(runs) > 1 else f"{runs[0]:.0f} ms"
        name = trace.split('/')[-1].split('.')[0]
        within = abs(s / m - 1) <= 0.2
        tally.append(within)
        mark = "" if within else f" (**{s / m:.3f}, outside 20%**)"
        # Budgets replayed without `none` have no speed-up over it.
        vs_none = (f"{mean('none') / m:.2f}x | {sim['none']['time_ns'] / s:.2f}x"
                   if "none" in policies else "- | -")
        print(f"| {name} | {budget} | {p} | {span} | {s / 1e6:.0f} ms | {s / m:.2f}{mark} | {vs_none} |")
        timed = [r for r in real[(trace, budget, p)] if "backend_host_ns" in r]
        if host and timed:
            avg = lambda f: sum(map(f, timed)) / len(timed) / 1e6
            hints = lambda h: sum(h[k] for k in ["prefetch_to_device", "prefetch_to_host", "discard", "advise", "stage_out"])
            sh = sim[p]["backend_host_ns"]
            cells = [f"{avg(lambda r: r['backend_host_ns'][k]):.0f} / {sh[k] / 1e6:.0f}" for k in ["launch", "allocate"]]
            cells.append(f"{avg(lambda r: hints(r['backend_host_ns'])):.0f} / {hints(sh) / 1e6:.0f}")
            cells.append(f"{avg(lambda r: r['policy_ns'] - hints(r['backend_host_ns'])):.0f}")
            host_rows.append(f"| {name} | {budget} | {p} | " + " | ".join(cells) + " |")
print(f"\nWithin 20% of the real time (its mean over the runs): {sum(tally)} of {len(tally)} rows")
if host_rows:
    print("\nHost time, ms (real / sim): the backend's calls, and the policy's own work (real)\n")
    print("| trace | budget | policy | launch | allocate | hints | policy's own |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(host_rows))
if sim_out:
    with open(sim_out, "w") as f:
        f.write("\n".join(sim_lines) + "\n")
