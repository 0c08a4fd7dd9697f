"""Per-operator overhead of the Python binding: `x + y` on a small global tensor (8x8 f32,
`split(0)` over a placement of this one process), the op `gflow-bench dispatch --ranks 1` times
through the Rust API, against PyTorch DTensor's same op (`Shard(0)` on a one-process gloo mesh)
and eager local tensors, when PyTorch is installed. Prints one JSON line per system,
{"bench": "op_overhead", "system", "op", "us_per_op"} (the median of 7 runs).
Usage: python python/bench/op_overhead.py [iters]"""

import json
import os
import sys
import time

ITERS = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
RUNS = 7


def per_op_us(f):
    f()
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        for _ in range(ITERS):
            f()
        times.append((time.perf_counter() - t) / ITERS * 1e6)
    return sorted(times)[RUNS // 2]


def emit(system, op, us):
    print(json.dumps({"bench": "op_overhead", "system": system, "op": op, "us_per_op": round(us, 3)}))


def gflow_rows():
    import gflow as flow

    p = flow.placement(type="cpu", ranks=[0])
    x = flow.randn(8, 8, placement=p, sbp=flow.sbp.split(0))
    y = flow.randn(8, 8, placement=p, sbp=flow.sbp.split(0))
    emit("gflow-python", "add_8x8_global_s0", per_op_us(lambda: x + y))
    a, b = flow.randn(8, 8), flow.randn(8, 8)
    emit("gflow-python", "add_8x8_local", per_op_us(lambda: a + b))


def torch_rows():
    try:
        import torch
        import torch.distributed as dist
        from torch.distributed.tensor import Shard, distribute_tensor
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError as e:
        print(f"# PyTorch not installed ({e}): no DTensor row", file=sys.stderr)
        return
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    x = distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)])
    y = distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)])
    emit("torch-dtensor", "add_8x8_global_s0", per_op_us(lambda: x + y))
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    emit("torch-eager", "add_8x8_local", per_op_us(lambda: a + b))
    dist.destroy_process_group()


if __name__ == "__main__":
    gflow_rows()
    torch_rows()
