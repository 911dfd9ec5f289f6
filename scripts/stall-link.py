#!/usr/bin/env python3
"""How much of a replay's kernel stalls passed with a copy on the link, from a telemetry log
(`unimem replay --telemetry LOG`): the stalls (each kernel's start to the end of its stall)
against the union of the migrations in each direction. Stalls with no copy on the link wait
for something else: the host issuing the data, the driver's own work (populations,
repopulations), or events.

Usage: scripts/stall-link.py LOG.jsonl [LOG2.jsonl ...]
"""
import json, sys


def merged(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(a, b):
    i = j = total = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, e - s)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


for path in sys.argv[1:]:
    stalls, moves = [], {"h2d": [], "d2h": []}
    for line in open(path):
        e = json.loads(line)
        if e.get("kind") == "kernel" and e.get("stall_ns", 0) > 0:
            stalls.append((e["start_ns"], e["start_ns"] + e["stall_ns"]))
        elif e.get("kind") == "migration" and e.get("bytes", 0) > 0:  # populations copy nothing
            moves[e["dir"]].append((e["start_ns"], e["end_ns"]))
    st = merged(stalls)
    h2d, d2h = merged(moves["h2d"]), merged(moves["d2h"])
    link = merged(moves["h2d"] + moves["d2h"])
    total = sum(e - s for s, e in st)
    busy = overlap(st, link)
    print(f"{path}: kernel stalls {total / 1e6:.1f} ms; with H2D copies {overlap(st, h2d) / 1e6:.1f} ms, "
          f"with D2H copies {overlap(st, d2h) / 1e6:.1f} ms, with either {busy / 1e6:.1f} ms, "
          f"with no copy on the link {(total - busy) / 1e6:.1f} ms")
