# unimem's routine commands. Install just with `cargo install just` where it is missing;
# the README's two commands (demo, tests) need nothing but cargo.

# List the recipes.
default:
    @just --list

# Format, lint, API docs and tests: what CI runs (.ci/run).
check: fmt-check lint docs test

# Run the whole test suite.
test:
    cargo test --workspace

# Clippy on every target, warnings are errors.
lint:
    cargo clippy --workspace --all-targets -- -D warnings

# Format the code.
fmt:
    cargo fmt --all

# Check formatting without changing files.
fmt-check:
    cargo fmt --all -- --check

# Replay the bundled traces on the simulator.
demo:
    cargo run --release -p unimem-cli -- demo

# Criterion benchmarks (replay throughput, parse, simulator launch).
bench:
    cargo bench -p unimem-benches

# The replay table of docs/benchmarks.md (100/75/50/25% budget, every policy).
replay-table:
    cargo build --release -p unimem-cli
    python3 scripts/replay-table.py target/release/unimem

# Replay a generated 1M-event trace with the none policy: throughput and peak RSS.
replay-1m:
    cargo build --release -p unimem-cli
    target/release/unimem trace gen --pattern streaming --events 1000000 --regions 256 --region-bytes 1MiB --kernel-ns 20000 target/synth1m.jsonl.gz
    target/release/unimem replay target/synth1m.jsonl.gz --budget 50% --policy none

# API documentation, warnings are errors.
docs:
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

# Build release and test binaries into .gpu/ for a GPU machine without cargo; there:
# `bash .gpu/run.sh` runs every test, GPU tests included.
gpu-build:
    scripts/gpu-pack.sh

# Add `unimem` built at another revision to .gpu/bin as unimem-base, for an A/B on the GPU
# machine (`bash scripts/gpu-ab.sh .gpu/bin/unimem-base .gpu/bin/unimem ROUNDS OUT CASES...`).
gpu-base REV:
    scripts/gpu-base.sh {{REV}}

# Add perf, its libraries and unimem with its symbols to .gpu/perf, for a host-side profile of
# a replay on the GPU machine (there: `bash scripts/gpu-perf.sh run OUT [WINDOW] -- ARGS`).
gpu-perf:
    scripts/gpu-perf.sh pack

# The tensor examples on the simulator (append `cuda` on a GPU machine: just examples cuda).
examples *ARGS:
    cargo run --release -p unimem-tensor --example training_loop -- {{ARGS}}
    cargo run --release -p unimem-tensor --example streaming -- {{ARGS}}

# The synthetic-pattern table of docs/benchmarks.md.
synthetic-table:
    cargo build --release -p unimem-cli
    python3 scripts/replay-table.py target/release/unimem none,oracle,advisor --synthetic

# Simulator against recorded GPU replays (docs/data/), per row, with host time by kind of call.
sim-vs-real PROFILE="crates/unimem-core/profiles/h200.toml" +RUNS="docs/data/gpu-replays-f492178.jsonl":
    cargo build --release -p unimem-cli
    python3 scripts/sim-vs-real.py {{PROFILE}} {{RUNS}} --host

# The smallest budget within a slowdown for a trace, with its curve: `just plan TRACE 1.5`.
plan trace slowdown:
    cargo run --release -p unimem-cli -- plan {{trace}} --max-slowdown {{slowdown}} --policy advisor,oracle

# Record the tensor example's trace and plan its budget (simulator).
record-example:
    UNIMEM_TRACE_RECORD=target/training_loop.jsonl.gz cargo run --release -p unimem-tensor --example training_loop
    cargo run --release -p unimem-cli -- plan target/training_loop.jsonl.gz --max-slowdown 1.5

# The PyTorch package's wheel (builds libunimem_torch.so with cargo), for a machine without cargo
torch-wheel:
    pip wheel ./python -w .whl

# The PyTorch package's tests that need neither PyTorch nor a GPU, against a debug build
torch-test:
    cargo build -p unimem-torch
    UNIMEM_TORCH_LIB=target/debug/libunimem_torch.so python3 -m unittest discover -s python/tests -v

# Each timed step of the PyTorch examples' runs (JSON lines from `--mode unimem --step-stats`):
# `just step-table RUNS.jsonl --model gpt2`
step-table FILE *ARGS:
    python3 python/examples/step_table.py {{FILE}} {{ARGS}}
