#!/usr/bin/env bash
# Runs every check of the project: formatting, lints, and all tests of the workspace.
# Usage: ./scripts/test.sh   (from any directory; installs nothing the toolchain lacks yet)
set -euo pipefail
cd "$(dirname "$0")/.."

for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "installing the $c component"
    rustup component add "$c"
  fi
done

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== cargo test"
cargo test --workspace
echo "== all checks passed"
