#!/bin/bash
# Builds `unimem` at another revision (a git worktree with a target directory of its own) and
# adds it to .gpu/bin as unimem-base, for an A/B on the GPU machine against the working tree's
# build (scripts/gpu-ab.sh .gpu/bin/unimem-base .gpu/bin/unimem ...). Run it after
# scripts/gpu-pack.sh, which empties .gpu.
# Usage (from the project root): scripts/gpu-base.sh REV
set -euo pipefail
rev=${1:?usage: scripts/gpu-base.sh REV}
root=$(git rev-parse --show-toplevel); cd "$root"
[ -d .gpu/bin ] || { echo "no .gpu/bin: run scripts/gpu-pack.sh first" >&2; exit 2; }
commit=$(git rev-parse --verify "$rev^{commit}")
tree=$(mktemp -d "${TMPDIR:-/tmp}/unimem-base.XXXXXX")
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$tree" "$commit" >/dev/null
target=${UNIMEM_BASE_TARGET:-$root/target/base}
CARGO_TARGET_DIR="$target" cargo build --release -p unimem-cli --manifest-path "$tree/Cargo.toml"
cp "$target/release/unimem" .gpu/bin/unimem-base
strip .gpu/bin/unimem-base 2>/dev/null || true
echo "$commit" > .gpu/base-commit
echo ".gpu/bin/unimem-base: unimem at $commit"
