#!/bin/bash
# On the GPU machine: this lending's calibration profile (`unimem probe --out`), the GPU tests
# (unimem-core's and CUPTI's), then the sample replays, logs under $OUT. Compare them with the
# simulator calibrated on the same lending (the fault-driven rate moves 2x between lendings):
#   python3 scripts/sim-vs-real.py $OUT/profile.toml $OUT/gpu-replays-*.jsonl
# Usage: bash scripts/gpu-session.sh [replay runs]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
rc=0
timeout 300 .gpu/bin/unimem probe --size 2GiB --out "$OUT/profile.toml" > "$OUT/probe.txt" 2>&1 || rc=1
grep -E "fault-driven H2D rate  " "$OUT/probe.txt"
for t in .gpu/bin/gpu-* .gpu/bin/cupti_gpu-* .gpu/bin/cupti_feedback_gpu-* .gpu/bin/telemetry_gpu-*; do
  echo "== $t"
  "$t" --include-ignored --test-threads=1 --nocapture > "$OUT/$(basename "${t%-*}").log" 2>&1 || rc=1
  grep -E "^test |test result|panicked|x floor|GB/s|learn_from_faults|CUPTI cost" "$OUT/$(basename "${t%-*}").log" | tail -30
done
for i in $(seq 1 "${1:-1}"); do
  bash scripts/gpu-replays.sh "$OUT/gpu-replays-$i.jsonl" || rc=1
done
exit $rc
