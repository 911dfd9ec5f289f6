#!/usr/bin/env bash
# On the GPU machine, with the wheel carried in .whl/ and the binaries in .gpu/: records the
# trace of each program family of python/tests/test_gpu_models.py through the PyTorch bridge at
# its base peak, then replays each on the CUDA backend at 50% (and 25%) with the oracle and the
# advisor. Everything lands in $OUT/families.tgz (the device returns 8 files), packed again
# after each step so that a cut-off call keeps what ran: traces/*.jsonl.gz, record.jsonl,
# replays.jsonl.
# Usage: bash scripts/gpu-families.sh [families...]
set -uo pipefail
DEST=${OUT:-/tmp/unimem-families}
W=$(mktemp -d); mkdir -p "$DEST" "$W/traces"
trap 'tar czf "$DEST/families.tgz" -C "$W" .' EXIT
pack() { tar czf "$DEST/families.tgz" -C "$W" .; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/unimem_torch-*.whl || exit 1
export PYTHONPATH=/tmp/site UNIMEM_TORCH_LIB=/tmp/site/unimem_torch/libunimem_torch.so PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
families=("$@"); [ ${#families[@]} -gt 0 ] || families=(vit unet3d lstm embedding_bag mlp_compiled)
for f in "${families[@]}"; do
    timeout 240 python3 python/tests/test_gpu_models.py record "$f" "$W/traces/$f.jsonl.gz" \
        2>>"$W/record.err" | tee -a "$W/record.jsonl" || echo "record $f failed (rc $?)" | tee -a "$W/failed.txt"
    pack
done
for f in "${families[@]}"; do
    t="$W/traces/$f.jsonl.gz"; [ -s "$t" ] || continue
    for b in 50% 25%; do
        timeout 120 .gpu/bin/unimem replay "$t" --backend cuda --budget "$b" --policy oracle,advisor --json \
            2>>"$W/replay.err" | tee -a "$W/replays.jsonl" | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["trace"].split("/")[-1], d["budget"], d["policy"], "%.1f ms" % (d["time_ns"]/1e6), "%.2fx floor" % d["over_floor"], "%.2fx bound" % (d["time_ns"]/d["bound_ns"]))' \
            || echo "replay $f $b failed" | tee -a "$W/failed.txt"
        pack
    done
done
