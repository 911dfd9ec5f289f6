#!/usr/bin/env python3
"""Folds `perf script` output (call graphs) into one line per distinct stack, root first:
`frame;frame;...;leaf COUNT`, the format of flame-graph tools.

  perf script -i perf.data | python3 scripts/perf-fold.py [--within SYMBOL] > folded.txt

--within keeps only the samples with SYMBOL (a substring) on their stack, cut to start there:
`--within replay_events` keeps a replay's own stretch and drops set-up and teardown.
Symbols lose their offsets and generic arguments, so that one function is one frame.
"""
import argparse
import collections
import re
import sys


def clean(frame: str) -> str:
    # "7f12 name+0x1a (/lib/x.so)" -> "name"
    frame = re.sub(r"^[0-9a-f]+ ", "", frame.strip())
    frame = frame.rsplit(" (", 1)[0]
    frame = re.sub(r"\+0x[0-9a-f]+$", "", frame)
    depth, out = 0, []
    for ch in frame:  # drop <...> generic arguments, keep the path
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out).replace(";", ",") or "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--within", help="keep samples with this symbol on the stack, from it down")
    args = ap.parse_args()
    counts: collections.Counter = collections.Counter()
    frames: list = []

    def flush() -> None:
        if not frames:
            return
        stack = [clean(f) for f in reversed(frames)]  # root first
        if args.within:
            at = [i for i, f in enumerate(stack) if args.within in f]
            if not at:
                return
            stack = stack[at[0]:]
        counts[";".join(stack)] += 1

    for line in sys.stdin:
        if not line.strip():
            flush()
            frames = []
        elif line.startswith((" ", "\t")):
            frames.append(line)
        # else: a sample's header line (command, pid, time, event)
    flush()
    for stack, n in counts.most_common():
        print(f"{stack} {n}")


if __name__ == "__main__":
    main()
