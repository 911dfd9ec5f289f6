#!/bin/bash
# On the GPU machine: the GPU tests (unimem-core's and CUPTI's), then the sample replays,
# logs under $OUT. Usage: bash scripts/gpu-session.sh [replay runs]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
rc=0
for t in .gpu/bin/gpu-* .gpu/bin/cupti_gpu-* .gpu/bin/cupti_feedback_gpu-*; do
  echo "== $t"
  "$t" --include-ignored --test-threads=1 --nocapture > "$OUT/$(basename "${t%-*}").log" 2>&1 || rc=1
  grep -E "^test |test result|panicked|x floor|GB/s|learn_from_faults|CUPTI cost" "$OUT/$(basename "${t%-*}").log" | tail -30
done
for i in $(seq 1 "${1:-1}"); do
  bash scripts/gpu-replays.sh "$OUT/gpu-replays-$i.jsonl" || rc=1
done
exit $rc
