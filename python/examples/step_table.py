"""Reads the examples' JSON lines (`--mode unimem --step-stats`) and prints, as a Markdown
table, each timed step of each run: its time, the library's host time by part of its data moves
(`runtime_move_host_ns`), its new buffers, the policy's time and the staging pinned by the
step's end. Parts that are zero in every step shown are left out.

    python3 python/examples/step_table.py RUNS.jsonl [--model gpt2]
"""

import argparse
import json
import sys


def step_rows(runs):
    """(run label, step index, step ms, that step's host times) for every timed step of every
    run that has per-step figures."""
    rows = []
    for n, run in enumerate(runs):
        steps = run.get("unimem", {}).get("each_step_host_ms")
        if not steps:
            continue
        label = run.get("build", run.get("model", f"run {n + 1}"))
        if "round" in run:
            label = f"{label} {run['round']}"
        for i, (ms, host) in enumerate(zip(run["step_ms"], steps)):
            rows.append((label, i + 1, ms, host))
    return rows


def table(rows):
    """The Markdown table of `step_rows`: the move parts that are not zero in every row, then
    new buffers, the policy and the staging pinned."""
    parts = []
    for _, _, _, host in rows:
        for part, ms in host["moves"].items():
            if ms and part not in parts:
                parts.append(part)
    head = ["run", "step", "ms"] + parts + ["new buffers", "policy", "staging pinned GB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, i, ms, host in rows:
        cells = [label, str(i), f"{ms:.1f}"] + [f"{host['moves'][p]:.1f}" for p in parts]
        cells += [str(host.get("new_buffers", "-")), f"{host['policy']:.1f}"]
        pinned = host.get("staging_pinned_bytes")
        cells.append("-" if pinned is None else f"{pinned / 1e9:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", help="a file of the examples' JSON lines")
    p.add_argument("--model", default=None, help="only the runs of this model (resnet50, gpt2)")
    args = p.parse_args()
    runs = []
    with open(args.runs) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{args.runs}:{n}: not a JSON line ({e})")
    if args.model:
        runs = [r for r in runs if r.get("model") == args.model]
    rows = step_rows(runs)
    if not rows:
        sys.exit(f"{args.runs}: no run with per-step figures (run the examples with --step-stats)")
    print(table(rows))


if __name__ == "__main__":
    main()
