#!/usr/bin/env bash
# The PyTorch bridge on the GPU (run on the device machine, from the repository root, with the
# wheel `pip wheel ./python -w .whl` made carried in .whl/): installs it, then
#   smoke: its GPU tests and a short ResNet-50 run under unimem;
#   all:   also both examples in every mode, and ResNet-50's trace recorded at a budget it fits.
# Each step is cut off after $STEP_S seconds (240 by default), so that a hang costs one step's
# time, not the whole call's. Logs and JSON lines go to $OUT/torch.tgz, one file (the device
# tool brings back 8 from $OUT), packed again after each step so that a cut-off call keeps
# what ran: `tar xzf torch.tgz` gives gpu.txt, test_gpu.log, resnet50.jsonl, gpt2.jsonl, ...
set -uo pipefail
stage=${1:-all}
DEST=${OUT:-/tmp/unimem-torch}
OUT=$(mktemp -d)
STEP_S=${STEP_S:-240}
mkdir -p "$DEST"
trap 'tar czf "$DEST/torch.tgz" -C "$OUT" .' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/unimem_torch-*.whl || exit 1
export PYTHONPATH=/tmp/site UNIMEM_TORCH_LIB=/tmp/site/unimem_torch/libunimem_torch.so PYTHONUNBUFFERED=1
run() {
    timeout "$STEP_S" "$@" || echo "step failed or cut off (rc $?): $*" | tee -a "$OUT/failed.txt"
    tar czf "$DEST/torch.tgz" -C "$OUT" .
}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, unimem_torch; print('torch', torch.__version__, unimem_torch.library_path())" | tee -a "$OUT/gpu.txt"
run python3 -m unittest python/tests/test_gpu.py -v 2>&1 | tee "$OUT/test_gpu.log"
if [ "$stage" = smoke ]; then
    run python3 python/examples/resnet50.py --mode unimem --steps 3 --warmup 1 2>&1 | tee "$OUT/smoke.log"
    exit 0
fi
run python3 python/examples/resnet50.py --mode all 2>"$OUT/resnet50.err" | tee "$OUT/resnet50.jsonl"
run python3 python/examples/gpt2.py --mode all 2>"$OUT/gpt2.err" | tee "$OUT/gpt2.jsonl"
peak=$(head -1 "$OUT/resnet50.jsonl" | python3 -c "import json, sys; print(json.load(sys.stdin)['peak_device_bytes'])")
run python3 python/examples/resnet50.py --mode unimem --budget 1.0 --base-peak "$peak" --steps 4 \
    --record "$OUT/resnet50-torch.jsonl.gz" 2>"$OUT/record.err" | tee "$OUT/resnet50-record.jsonl"
