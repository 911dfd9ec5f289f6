#!/bin/bash
# On the GPU machine: how long the device waits for the host between kernels. Replays both
# sample traces on the CUDA backend at 50% and 25% with `none` and `advisor`, each with a
# telemetry log (CUPTI off: its buffers would add host time), and writes one JSON line per run
# into $1 (default $OUT/gpu-idle.jsonl): the replay's time, the policy's host time, and from
# `unimem telemetry summarize` the device's idle time (gaps between one kernel's end and the
# next one's start when the host had not issued it yet), the kernels' stalls on data, and the
# part of those stalls with no copy on the link, and how far ahead of the device the host issued
# kernels (median kernels queued at an issue, and time from issue to start).
# Usage: bash scripts/gpu-idle.sh [out.jsonl] [path/to/unimem]   (BACKEND=sim to try it here;
#   BUDGETS, POLICIES and TRACES replace the budgets, policies and traces, e.g. BUDGETS="100% 50%";
#   LOGS=dir keeps each telemetry log there, gzipped)
set -euo pipefail
out=${1:-${OUT:-/tmp}/gpu-idle.jsonl}
exe=${2:-.gpu/bin/unimem}
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export UNIMEM_TELEMETRY_CUPTI=false
log=$(mktemp -d)
: > "$out"
for t in ${TRACES:-resnet50-train transformer-decode}; do
  for b in ${BUDGETS:-50% 25%}; do
    for p in ${POLICIES:-none advisor}; do
      "$exe" replay "traces/$t.jsonl.gz" --backend "${BACKEND:-cuda}" --budget "$b" --policy "$p" --json \
        --telemetry "$log/t.jsonl" > "$log/r.json"
      "$exe" telemetry summarize "$log/t.jsonl" --json > "$log/s.json"
      python3 - "$log/r.json" "$log/s.json" "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))["totals"]
row = {"trace": r["trace"].split("/")[-1], "budget": r["budget"], "policy": r["policy"],
       "steps": sum(1 for x in r["steps"] if x["compute_floor_ns"]), "time_ns": r["time_ns"], "policy_ns": r["policy_ns"],
       "kernels": r["kernels"], "device_idle_ns": s["device_idle_ns"],
       "kernel_stall_ns": s["kernel_stall_ns"], "stall_link_idle_ns": s["stall_link_idle_ns"],
       "host_lead": s.get("host_lead"), "wall_ns": r["wall_ns"], "backend_host_ns": r["backend_host_ns"]}
open(sys.argv[3], "a").write(json.dumps(row) + "\n")
print(row["trace"], row["budget"], row["policy"], "%.1f ms" % (row["time_ns"] / 1e6),
      "idle %.1f ms" % (row["device_idle_ns"] / 1e6), "policy %.1f ms" % (row["policy_ns"] / 1e6),
      "stalls %.1f ms" % (row["kernel_stall_ns"] / 1e6),
      "of them with no copy on the link %.1f ms" % (row["stall_link_idle_ns"] / 1e6),
      "host lead: median %s kernels" % (row["host_lead"] or {}).get("median_kernels"))
PY
      if [ -n "${LOGS:-}" ]; then
        mkdir -p "$LOGS"; gzip -c "$log/t.jsonl" > "$LOGS/$t-${b%\%}-$p.jsonl.gz"
      fi
    done
  done
done
rm -rf "$log"
