#!/bin/bash
# On the GPU machine: replays both sample traces on the CUDA backend at 100% and 50% budget with
# every policy, one JSON line per run, into $1 (default $OUT/gpu-replays.jsonl).
# Usage: bash scripts/gpu-replays.sh [out.jsonl] [path/to/unimem]
set -euo pipefail
out=${1:-${OUT:-/tmp}/gpu-replays.jsonl}
exe=${2:-.gpu/bin/unimem}
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
: > "$out"
for t in traces/resnet50-train.jsonl.gz traces/transformer-decode.jsonl.gz; do
  for b in 100% 50%; do
    "$exe" replay "$t" --backend cuda --budget "$b" --policy none,oracle,advisor --json | tee -a "$out" \
      | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["trace"].split("/")[-1], d["budget"], d["policy"], "%.1f ms" % (d["time_ns"]/1e6), "%.2fx floor" % d["over_floor"], [round(s["time_ns"]/s["compute_floor_ns"],2) for s in d["steps"] if s["compute_floor_ns"]])'
  done
done
