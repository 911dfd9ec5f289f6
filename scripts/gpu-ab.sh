#!/bin/bash
# On the GPU machine: replays alternating two builds, so that both see the same lending and
# its drift; one JSON line per run, each tagged with "build" (A or B) and "round".
# Usage: bash scripts/gpu-ab.sh A_EXE B_EXE ROUNDS OUT.jsonl TRACE:BUDGET:POLICIES...
#   e.g. bash scripts/gpu-ab.sh .gpu/bin/unimem-base .gpu/bin/unimem 3 $OUT/ab.jsonl \
#          resnet50-train:50%:advisor,oracle transformer-decode:50%:advisor
# A build may carry environment for its runs: PATH,KEY=VALUE[,KEY=VALUE...]
#   (e.g. .gpu/bin/unimem,UNIMEM_STAGING=100% to A/B a setting on one build).
# The builds take turns in each round, A first in odd rounds and B first in even ones.
set -euo pipefail
a=$1 b=$2 rounds=$3 out=$4
shift 4
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
: > "$out"
for r in $(seq 1 "$rounds"); do
  order="A B"
  [ $((r % 2)) -eq 0 ] && order="B A"
  for case in "$@"; do
    IFS=: read -r trace budget policies <<< "$case"
    for build in $order; do
      spec=$a
      [ "$build" = B ] && spec=$b
      IFS=, read -r exe envs <<< "$spec"
      env ${envs//,/ } "$exe" replay "traces/$trace.jsonl.gz" --backend cuda --budget "$budget" --policy "$policies" --json \
        | python3 -c 'import json,sys
build, rnd, out = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "a")
for l in sys.stdin:
    d = json.loads(l); d["build"] = build; d["round"] = rnd
    out.write(json.dumps(d) + "\n")
    print(rnd, build, d["trace"].split("/")[-1], d["budget"], d["policy"], "%.1f ms" % (d["time_ns"] / 1e6),
          "policy %.1f ms" % (d["policy_ns"] / 1e6), "wall %.1f ms" % (d["wall_ns"] / 1e6))' "$build" "$r" "$out"
    done
  done
done
