#!/usr/bin/env bash
# Runs every check of the project: formatting, lints, and all tests of the workspace.
# Usage: ./scripts/test.sh   (from any directory; installs rustfmt/clippy and, as root on Debian,
# Mesa's software Vulkan driver for the wgpu tests)
set -euo pipefail
cd "$(dirname "$0")/.."

for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "installing the $c component"
    rustup component add "$c"
  fi
done

# wgpu needs a Vulkan driver: Mesa's lavapipe (software) where no GPU driver is installed.
if ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing mesa-vulkan-drivers (lavapipe) for the wgpu tests"
    apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; } ||
      echo "!!! could not install mesa-vulkan-drivers: the wgpu tests will skip (or fail under GFLOW_REQUIRE_BACKEND=wgpu) !!!"
  else
    echo "!!! no Vulkan driver and cannot install one: the wgpu tests will skip !!!"
  fi
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
chmod 700 "$XDG_RUNTIME_DIR" 2>/dev/null || true

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== cargo test"
cargo test --workspace
echo "== python: build the package into a venv (dev profile, in target/) and run pytest"
./python/ci.sh
echo "== all checks passed"
