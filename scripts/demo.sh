#!/usr/bin/env bash
# The main demo: gflow-launch starts 4 processes on this machine (shared-memory links) that train
# a GPT on global tensors, data parallel, for about a minute (`--layout tp|2d|fsdp` works too).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin gflow-launch --example gpt
exec ./target/release/gflow-launch --nproc-per-node 4 ./target/release/examples/gpt "$@"
