#!/bin/bash
# Builds the project's binaries and test binaries here (release) and packs them, stripped,
# into .gpu/ at the project root, which git ignores, for the GPU machine (it has no cargo).
# Usage (from the project root):  scripts/gpu-pack.sh [cargo test args...]
#   default args: --workspace --all-features; e.g. `-p unimem-core --all-features --test blocks
#   --test contract` packs just those test binaries (and, always, the `unimem` binary).
# Then, on the GPU machine, with .gpu carried along: bash .gpu/run.sh [filter]
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--workspace --all-features)
rm -rf .gpu; mkdir -p .gpu/bin
# The CLI is built whatever the tests asked for: a `unimem` left in target/ by another
# revision's build must never be packed as this one's.
cargo build --release -p unimem-cli --bins
cargo test --release "${args[@]}" --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"].get("test"): print(m["executable"])' \
  | while read -r exe; do cp "$exe" .gpu/bin/; done
cp target/release/unimem .gpu/bin/
strip .gpu/bin/* 2>/dev/null || true
cat > .gpu/run.sh <<'RUN'
#!/bin/bash
# On the GPU machine: runs every packed test binary (GPU tests included), one thread each.
# Optional $1 filters test names. Writes the full log to $OUT/gpu-tests.log.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
rc=0
for t in .gpu/bin/*-*; do
  [ -x "$t" ] || continue
  echo "== $t"; "$t" ${1:+"$1"} --include-ignored --test-threads=1 2>&1 | tee -a "${OUT:-/tmp}/gpu-tests.log" | tail -5
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
exit $rc
RUN
chmod +x .gpu/run.sh
du -sh .gpu; ls -la .gpu/bin
echo "carry: [\".gpu\"]   (limit: 64 MiB for everything that travels)"
