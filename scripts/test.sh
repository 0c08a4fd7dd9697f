#!/usr/bin/env bash
# Runs every check of the project: formatting, lints, and all tests of the workspace.
# Usage: ./scripts/test.sh   (from any directory; installs rustfmt/clippy and, as root on Debian,
# Mesa's software Vulkan driver for the wgpu tests and Open MPI for the mpirun test)
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
# Open MPI's mpirun for the scheduler tests (tests/schedulers.rs skips loudly without it).
if ! command -v mpirun >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing openmpi-bin for the mpirun test"
    apt-get install -y -qq openmpi-bin >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq openmpi-bin >/dev/null 2>&1; } ||
      echo "!!! could not install openmpi-bin: the mpirun test will skip !!!"
  else
    echo "!!! no mpirun and cannot install one: the mpirun test will skip !!!"
  fi
fi
# iptables blocks UDP between two network namespaces in tests/tcp.rs (it skips loudly without).
if ! command -v iptables >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing iptables for the UDP-blocked test"
    apt-get install -y -qq iptables >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq iptables >/dev/null 2>&1; } ||
      echo "!!! could not install iptables: the UDP-blocked test will skip !!!"
  else
    echo "!!! no iptables and cannot install it: the UDP-blocked test will skip !!!"
  fi
fi
# The checkpoint tests check that files gflow writes load in Python's safetensors.
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  echo "installing python safetensors and numpy for the checkpoint tests"
  python3 -m pip install -q safetensors numpy >/dev/null 2>&1 ||
    echo "!!! could not install python safetensors: tests/checkpoint_safetensors will fail !!!"
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
chmod 700 "$XDG_RUNTIME_DIR" 2>/dev/null || true

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== cargo doc (no broken links; every public item documented)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
echo "== cargo test"
cargo test --workspace
echo "== cargo check --no-default-features (the CPU build: shared-memory links only)"
cargo check --no-default-features
echo "== gflow-transport without QUIC: one host links, two hosts are refused"
cargo test -p gflow-transport --no-default-features --lib without_quic
# The CPU build for macOS and Windows: the Linux-only paths are cfg-gated.
for target in aarch64-apple-darwin x86_64-pc-windows-gnu; do
  echo "== cargo check --no-default-features --target $target"
  if rustup target list --installed 2>/dev/null | grep -q "$target" ||
    rustup target add "$target" >/dev/null 2>&1; then
    cargo check --no-default-features --target "$target"
  else
    echo "!!! cannot install the $target target: that build is NOT checked !!!"
  fi
done
echo "== python: build the package into a venv (dev profile, in target/) and run pytest"
./python/ci.sh
echo "== all checks passed"
