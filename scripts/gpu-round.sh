#!/usr/bin/env bash
# One round of GPU checks and benchmarks on a lent NVIDIA machine that has no Rust toolchain.
#
#   scripts/gpu-round.sh build   # here: release test binaries, tools and examples, packed in .dev/
#   scripts/gpu-round.sh run [SECTION...]   # there, from the repository root (with .dev/
#                                # and, for Vulkan, the loader's .deb files in .gl/ beside it)
#
# Sections (all but profile by default): machine, tests (TESTS='glob' picks test binaries,
# TEST_FILTER a test name filter), gpt, bench, profile (where the GPT's step goes on each GPU
# backend).
#
# `run` makes the CUDA libraries findable under the names cudarc's bindings look for, points
# /work/main (the path the test binaries were built at) at the checkout, then: the CUDA and
# wgpu conformance suites and the device tests with both backends required; the tiny GPT's
# f32 losses on CUDA, on wgpu and on 2 processes of which one computes on each, against
# PyTorch's recorded losses; f32 matmul against PyTorch (cuBLAS); the GPT's tokens/s on each
# backend against PyTorch on the same GPU. Every step has its own time limit; logs and JSON
# lines go to $OUT (or /tmp/gpu-round).
set -u
cd "$(dirname "$0")/.."
mode=${1:-run}

if [ "$mode" = build ]; then
    set -e
    rm -rf .dev && mkdir -p .dev/bin .dev/tests
    json=$(mktemp)
    cargo test --release -p gflow-cuda -p gflow-wgpu --no-run --message-format=json >"$json"
    cargo test --release --test devices --test device_optim --test device_ordinals \
        --test half_boxing --test local_rank_devices --no-run --message-format=json >>"$json"
    python3 - "$json" <<'EOF'
import json, shutil, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        shutil.copy(m["executable"], ".dev/tests/")
EOF
    cargo build --release --bin gflow-bench --bin gflow-launch --example gpt \
        --example data_parallelism
    cp target/release/gflow-bench target/release/gflow-launch .dev/bin/
    cp target/release/examples/gpt target/release/examples/data_parallelism .dev/bin/
    strip .dev/bin/* .dev/tests/*
    # what travels to the device machine is limited to 64 MiB: about a quarter of this
    tar -C .dev -cf - bin tests | xz -T0 -6 >.dev/dev.tar.xz
    rm -rf .dev/bin .dev/tests
    du -sh .dev
    exit 0
fi
tar -C .dev -xJf .dev/dev.tar.xz

OUT=${OUT:-/tmp/gpu-round}
mkdir -p "$OUT"
log="$OUT/round.log"
say() { echo "== $*" | tee -a "$log"; }

# The Vulkan loader (the NVIDIA ICD ships with the driver).
for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
ldconfig
if [ ! -e /usr/share/vulkan/icd.d/nvidia_icd.json ] &&
    [ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
# cudarc 0.19's 12.8 bindings open libnvrtc.so / libcublas.so (or .so.12): give CUDA 13's
# libraries those names.
mkdir -p /tmp/culib
for lib in nvrtc nvrtc-builtins cublas cublasLt; do
    f=$( (ls /usr/local/cuda/lib64/lib$lib.so.* /usr/local/cuda/targets/x86_64-linux/lib/lib$lib.so.*
        python3 -c "import nvidia, glob, os; [print(p) for d in nvidia.__path__ for p in glob.glob(os.path.join(d, '**', 'lib$lib.so.*'), recursive=True)]"
    ) 2>/dev/null | head -1)
    [ -n "$f" ] && ln -sf "$f" /tmp/culib/lib$lib.so && ln -sf "$f" /tmp/culib/lib$lib.so.12 &&
        ln -sf "$f" "/tmp/culib/$(basename "$f")"
done
export LD_LIBRARY_PATH=/tmp/culib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ls -l /tmp/culib >>"$log"
# The test binaries know the checkout as /work/main.
if [ "$(pwd -P)" != /work/main ]; then mkdir -p /work && ln -sfn "$(pwd -P)" /work/main; fi
mkdir -p target/release/examples
cp .dev/bin/gflow-bench .dev/bin/gflow-launch target/release/
cp .dev/bin/gpt .dev/bin/data_parallelism target/release/examples/
export XDG_RUNTIME_DIR=/tmp/xdg && mkdir -p -m 700 $XDG_RUNTIME_DIR
export GFLOW_TIMEOUT_SECS=60

sections=${*:2}
sections=${sections:-machine tests gpt bench}
want() { [[ " $sections " == *" $1 "* ]]; }

if want machine; then
say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a "$log"
(.dev/bin/gflow-bench matmul --device cuda --sizes 256 --runs 1; .dev/bin/gflow-bench matmul --device wgpu --sizes 256 --runs 1) 2>&1 | grep -v '"op"' | tee -a "$log"
fi

if want tests; then
say "tests (GFLOW_REQUIRE_BACKEND=cuda,wgpu)"
for t in .dev/tests/${TESTS:-*}; do
    name=$(basename "$t")
    req=cuda,wgpu
    # its second adapter is a copy of lavapipe, which this machine has not
    case $name in local_rank_devices-*) req= ;; esac
    GFLOW_REQUIRE_BACKEND=$req timeout 120 "$t" --test-threads 4 ${TEST_FILTER:-} >"$OUT/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(grep -h '^test result' "$OUT/$name.log" | tail -1) $(grep -c 'SKIPPED' "$OUT/$name.log") skips" | tee -a "$log"
    [ $rc = 0 ] || grep -E '^(test .* FAILED|---- |thread .* panicked)' -A3 "$OUT/$name.log" | head -30 | tee -a "$log"
done
fi

if want gpt; then
say "the tiny GPT's f32 losses against PyTorch's"
gpt() { timeout 120 target/release/examples/gpt --config tiny --steps 20 --val-frac 0 --sample 0 --quiet \
    --init tests/data/gpt_tiny_init.safetensors "$@"; }
gpt --simulate 1 --layout single --device cuda --losses-out "$OUT/l_cuda.json" >>"$log" 2>&1
gpt --simulate 1 --layout single --device wgpu --losses-out "$OUT/l_wgpu.json" >>"$log" 2>&1
GFLOW_DEVICE_OVERRIDE=0:cuda,1:wgpu timeout 120 target/release/gflow-launch --nproc-per-node 2 \
    target/release/examples/gpt --config tiny --steps 20 --val-frac 0 --sample 0 --quiet \
    --init tests/data/gpt_tiny_init.safetensors --layout dp --device gpu \
    --losses-out "$OUT/l_mixed.json" >>"$log" 2>&1
python3 - "$OUT" <<'EOF' 2>&1 | tee -a "$log"
import json, sys
want = json.load(open("tests/data/gpt_tiny_losses.json"))["losses"]["f32"]
for k in ["cuda", "wgpu", "mixed"]:
    try:
        got = json.load(open(f"{sys.argv[1]}/l_{k}.json"))["losses"]
        err = max(abs(g - w) / abs(w) for g, w in zip(got, want))
        print(f"gpt tiny f32 on {k}: {len(got)} steps, max relative error {err:.2e}", "ok" if len(got) == 20 and err <= 1e-4 else "FAIL")
    except Exception as e:
        print(f"gpt tiny f32 on {k}: FAIL ({e})")
EOF
say "two ranks on two devices (data_parallelism seed, CUDA and wgpu)"
GFLOW_DEVICE_OVERRIDE=0:cuda,1:wgpu timeout 60 target/release/gflow-launch --nproc-per-node 2 \
    target/release/examples/data_parallelism --device gpu 2>&1 | tail -6 | tee -a "$log"

fi

bench() { timeout "$1" "${@:2}" 2>>"$OUT/bench.err" | grep '^{' | tee -a "$OUT/bench.jsonl"; }
if want bench; then
say "benchmarks (JSON lines in $OUT/bench.jsonl)"
bench 60 target/release/gflow-bench matmul --device cuda --sizes 4096 --runs 9
bench 60 target/release/gflow-bench matmul --device wgpu --sizes 4096 --runs 9
bench 60 python3 benches/peers/peer_matmul_torch.py --sizes 4096 --runs 9
for cfg in small 50m; do
    bench 60 python3 benches/peers/gpt_torch.py --config $cfg --device cuda --steps 12 --quiet
    bench 60 target/release/gflow-bench gpt --config $cfg --layout single --ranks 1 --runs 5 --device cuda
    bench 60 target/release/gflow-bench gpt --config $cfg --layout single --ranks 1 --runs 5 --device wgpu
done
fi

if want profile; then
say "where the GPT's step goes (JSON lines in $OUT/profile.jsonl)"
for dev in cuda wgpu; do
    for cfg in small 50m; do
        for sync in "" --profile-sync; do
            timeout 60 target/release/gflow-bench gpt --config $cfg --layout single --ranks 1 \
                --runs 3 --device $dev --profile $sync 2>>"$OUT/bench.err" | grep '^{' |
                sed "s/\"config\": \"$cfg\"/\"config\": \"$cfg${sync:+ (sync)}\"/" >>"$OUT/profile.jsonl"
        done
    done
done
python3 - "$OUT/profile.jsonl" <<'EOF' | tee -a "$log"
import json, sys, collections
pending = []
for r in (json.loads(l) for l in open(sys.argv[1])):
    if r["op"] == "gpt_profile":
        pending.append(r)
        continue
    print(f'{r["device"]} {r["config"]}: {r["median_step_s"] * 1e3:.1f} ms/step, {r["tokens_per_s"]:.0f} tokens/s')
    by = collections.Counter()
    for p in pending:
        by[p["category"]] += p["ms_per_step"]
    print("  by category:", {k: round(v, 1) for k, v in by.most_common()})
    for p in sorted(pending, key=lambda p: -p["ms_per_step"])[:14]:
        print(f'  {p["ms_per_step"]:8.2f} ms {p["calls_per_step"]:7.1f} calls  {p["scope"]}')
    pending = []
EOF
fi
say "done"
