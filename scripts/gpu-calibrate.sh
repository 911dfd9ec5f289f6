#!/bin/bash
# On the GPU machine: this lending's probes (each in a process of its own, then their median
# with `unimem probe --merge`: one probe's fault and population figures move by up to 30%
# between processes), the sample replays on the GPU, and the simulator's prediction of them
# calibrated with the median profile, run on this host with the policies' own work charged as
# measured here (`sim.policy_time = "measured"`). Logs under $OUT: probes.txt, profile-N.toml,
# gpu-replays-N.jsonl, sim-measured.jsonl, sim-vs-real.md (the device returns eight files:
# three probes and two runs fill them).
# Usage: bash scripts/gpu-calibrate.sh [replay runs] [probes]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
exe=.gpu/bin/unimem
rc=0
profiles=()
for i in $(seq 1 "${2:-3}"); do
  echo "== probe $i" >> "$OUT/probes.txt"
  timeout 300 $exe probe --size 2GiB --out "$OUT/profile-$i.toml" >> "$OUT/probes.txt" 2>&1 || rc=1
  profiles+=("$OUT/profile-$i.toml")
done
echo "== median" >> "$OUT/probes.txt"
$exe probe --merge "${profiles[@]}" --out /tmp/profile-median.toml >> "$OUT/probes.txt" 2>&1 || rc=1
grep -E "^== |fault-driven H2D rate|discard released|fresh 2 MiB allocations|^gpu_" "$OUT/probes.txt"
runs=()
for i in $(seq 1 "${1:-1}"); do
  bash scripts/gpu-replays.sh "$OUT/gpu-replays-$i.jsonl" > /dev/null || rc=1
  runs+=("$OUT/gpu-replays-$i.jsonl")
done
python3 scripts/sim-vs-real.py /tmp/profile-median.toml "${runs[@]}" --host --measured --exe $exe \
  --sim-out "$OUT/sim-measured.jsonl" | tee "$OUT/sim-vs-real.md" || rc=1
exit $rc
