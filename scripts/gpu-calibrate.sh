#!/bin/bash
# On the GPU machine: this lending's probe, the sample replays on the GPU, and the simulator's
# prediction of them calibrated with that probe, run on this host with the policies' own work
# charged as measured here (`sim.policy_time = "measured"`). Logs under $OUT.
# Usage: bash scripts/gpu-calibrate.sh [replay runs]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
rc=0
timeout 300 .gpu/bin/unimem probe --size 2GiB --out "$OUT/profile.toml" > "$OUT/probe.txt" 2>&1 || rc=1
grep -E "fault-driven H2D rate  |prefetch call host|through the CUDA backend|cuMemAllocManaged" "$OUT/probe.txt"
runs=()
for i in $(seq 1 "${1:-1}"); do
  bash scripts/gpu-replays.sh "$OUT/gpu-replays-$i.jsonl" > /dev/null || rc=1
  runs+=("$OUT/gpu-replays-$i.jsonl")
done
python3 scripts/sim-vs-real.py "$OUT/profile.toml" "${runs[@]}" --host --measured --exe .gpu/bin/unimem \
  --sim-out "$OUT/sim-measured.jsonl" | tee "$OUT/sim-vs-real.md" || rc=1
exit $rc
