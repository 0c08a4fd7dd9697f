#!/usr/bin/env bash
# The main demo: 4 processes on this machine (shared-memory links), started by gflow-launch.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin gflow-launch --example demo
exec ./target/release/gflow-launch --nproc-per-node 4 ./target/release/examples/demo
