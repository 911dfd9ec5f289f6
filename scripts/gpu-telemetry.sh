#!/bin/bash
# On the GPU machine: CUDA replays of both sample traces with CUPTI telemetry (50% budget: none
# and advisor; 100%: none), each log summarized, exported to a Chrome trace and plotted; then the
# cost of telemetry: the faulting replay (resnet50-train, 50%, none) without it, with it, and
# with GPU fault records, alternating, RUNS times each. Everything goes under $1 (default $OUT or /tmp).
# Usage: bash scripts/gpu-telemetry.sh [out-dir] [path/to/unimem] [runs]
set -euo pipefail
out=${1:-${OUT:-/tmp}}
exe=${2:-.gpu/bin/unimem}
runs=${3:-5}
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p "$out"
for t in resnet50-train transformer-decode; do
  for run in 50%:none 50%:advisor 100%:none; do
    b=${run%%:*}; p=${run#*:}; name="$t.${b%\%}.$p"
    log="$out/$name.telemetry.jsonl"
    "$exe" replay "traces/$t.jsonl.gz" --backend cuda --budget "$b" --policy "$p" --json \
      --telemetry "$log" >> "$out/telemetry-replays.jsonl"
    "$exe" telemetry summarize "$log" > "$out/$name.summary.txt"
    "$exe" telemetry summarize --json "$log" > "$out/$name.summary.json"
    "$exe" telemetry export --chrome "$log" "$out/$name.trace.json"
    "$exe" telemetry plot "$log" "$out/$name.svg"
    echo "$name: $(wc -l < "$log") records, $(stat -c %s "$log") bytes"
    head -25 "$out/$name.summary.txt"
  done
done
# Telemetry off, on (default counters) and on with GPU fault records, on a faulting workload,
# alternating so that drift hits all alike.
: > "$out/telemetry-cost.jsonl"
for i in $(seq "$runs"); do
  for mode in off on faults; do
    args=()
    [ "$mode" != off ] && args=(--telemetry "$out/cost.jsonl")
    faults=false; [ "$mode" = faults ] && faults=true
    UNIMEM_TELEMETRY_GPU_FAULT_RECORDS=$faults "$exe" replay traces/resnet50-train.jsonl.gz --backend cuda \
      --budget 50% --policy none --json "${args[@]}" \
      | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({"mode": sys.argv[1], "time_ns": d["time_ns"], "wall_ns": d["wall_ns"], "events": d["events"]}))' "$mode" \
      | tee -a "$out/telemetry-cost.jsonl"
    [ "$mode" != off ] && echo "  log: $(wc -l < "$out/cost.jsonl") records, $(stat -c %s "$out/cost.jsonl") bytes"
  done
done
rm -f "$out/cost.jsonl"
