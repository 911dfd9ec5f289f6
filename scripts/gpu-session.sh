#!/bin/bash
# On the GPU machine: this lending's calibration profile (`unimem probe --out`), the GPU tests
# (unimem-core's and CUPTI's, into one log), then the sample replays, logs under $OUT (three
# files and one per replay set: the device returns 8). Compare them with the simulator
# calibrated on the same lending (the fault-driven rate moves 2x between lendings):
#   python3 scripts/sim-vs-real.py $OUT/profile.toml $OUT/gpu-replays-*.jsonl
# Usage: bash scripts/gpu-session.sh [replay runs]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
rc=0
timeout 300 .gpu/bin/unimem probe --size 2GiB --out "$OUT/profile.toml" > "$OUT/probe.txt" 2>&1 || rc=1
grep -E "fault-driven H2D rate|discard released|fresh 2 MiB allocations" "$OUT/probe.txt"
# One log for all test binaries: the device returns only 8 files from $OUT, and the profile
# must be among them.
for t in .gpu/bin/gpu-* .gpu/bin/cupti_gpu-* .gpu/bin/cupti_feedback_gpu-* .gpu/bin/telemetry_gpu-*; do
  echo "== $t" | tee -a "$OUT/gpu-tests.log"
  "$t" --include-ignored --test-threads=1 --nocapture > "$OUT/test.log" 2>&1 || rc=1
  cat "$OUT/test.log" >> "$OUT/gpu-tests.log"
  grep -E "^test |test result|panicked|x floor|GB/s|learn_from_faults|CUPTI cost" "$OUT/test.log" | tail -30
done
rm -f "$OUT/test.log"
for i in $(seq 1 "${1:-1}"); do
  bash scripts/gpu-replays.sh "$OUT/gpu-replays-$i.jsonl" || rc=1
done
exit $rc
