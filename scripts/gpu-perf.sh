#!/bin/bash
# A host-side profile of a replay on the GPU machine, which has no perf: carry ours.
# Here, after scripts/gpu-pack.sh:  bash scripts/gpu-perf.sh pack
#   adds .gpu/perf: perf, the libraries it links that a CUDA machine may lack (not glibc's or
#   the C++ runtime's), and unimem with its symbols (debug info stripped).
# There:  bash scripts/gpu-perf.sh run OUTDIR [WINDOW] -- REPLAY_ARGS...
#   e.g.  bash scripts/gpu-perf.sh run $OUT 75%-82% -- replay traces/resnet50-train.jsonl.gz \
#           --backend cuda --budget 75% --policy advisor --json
#   records the whole process (set-up, pinning the staging memory, is most of it), writes the
#   top objects of each 5% slice of the run to OUTDIR/slices.txt (the replay's slices are the
#   ones where libcuda and unimem lead), and with WINDOW (a perf --time range such as 75%-82%)
#   that window by symbol with its callers to OUTDIR/window.txt. OUTDIR/folded.txt has the
#   replay's own samples (those under `replay_events`) as folded stacks (scripts/perf-fold.py),
#   unwound through DWARF call frames, since neither unimem nor libcuda keeps frame pointers.
set -euo pipefail
mode=${1:?pack or run}
if [ "$mode" = pack ]; then
  root=$(git rev-parse --show-toplevel); cd "$root"
  [ -d .gpu ] || { echo "run scripts/gpu-pack.sh first" >&2; exit 1; }
  mkdir -p .gpu/perf
  perf=$(command -v perf)
  cp "$perf" .gpu/perf/perf
  for lib in $(ldd "$perf" | awk '/=>/ {print $3}'); do
    case $(basename "$lib") in libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*) ;; *) cp -L "$lib" .gpu/perf/ ;; esac
  done
  objcopy --strip-debug target/release/unimem .gpu/perf/unimem-sym
  du -sh .gpu
  exit 0
fi
out=${2:?OUTDIR}
window=""
shift 2
if [ "${1:-}" != "--" ]; then window=$1; shift; fi
[ "${1:-}" = "--" ] && shift
p=.gpu/perf
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}:$p
"$p/perf" record -F 1999 --call-graph dwarf,16384 -o /tmp/unimem-perf.data -- "$p/unimem-sym" "$@" > "$out/replay.out" 2> "$out/perf-record.txt"
for i in $(seq 0 5 95); do
  echo "== $i%-$((i + 5))%"
  "$p/perf" report -i /tmp/unimem-perf.data --stdio --no-children -g none --sort dso --time "$i%-$((i + 5))%" 2>/dev/null \
    | grep "%" | grep -v "^#" | head -3
done > "$out/slices.txt"
if [ -n "$window" ]; then
  "$p/perf" report -i /tmp/unimem-perf.data --stdio --no-children -g caller --sort dso,sym --time "$window" \
    --percent-limit 1 2>/dev/null > "$out/window.txt"
fi
"$p/perf" script -i /tmp/unimem-perf.data --no-inline 2>/dev/null \
  | python3 scripts/perf-fold.py --within replay_events > "$out/folded.txt"
cat "$out/slices.txt"
