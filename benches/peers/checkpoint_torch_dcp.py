# Peer of `gflow-bench checkpoint`: save and load GB/s of torch.distributed.checkpoint (DCP) for
# the same model: 8 f32 tensors of (rows, 1024) totalling --bytes (default 1 GiB), each a
# DTensor sharded on dim 0 over the ranks (as gflow's split(0)), on CPU over Gloo. DCP's file
# writer fsyncs its files (sync_files=True), as gflow's save does. Time is the slowest rank's,
# median of --runs after one warm-up. Rank 0 prints JSON lines:
#   {"system": "torch-dcp", "op": "checkpoint_save" | "checkpoint_load", "ranks", "bytes", "median_s", "gbs"}
#
#   for n in 1 2 4; do
#     /tmp/gflow-peers/venv/bin/torchrun --standalone --nproc-per-node $n \
#       benches/peers/checkpoint_torch_dcp.py --bytes 268435456 --runs 3
#   done
import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

TENSORS, COLS = 8, 1024

p = argparse.ArgumentParser()
p.add_argument("--bytes", type=int, default=1 << 30)
p.add_argument("--runs", type=int, default=5)
p.add_argument("--dir", default=None)
a = p.parse_args()

dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (n,))
rows = max(1, a.bytes // (TENSORS * COLS * 4))
nbytes = TENSORS * rows * COLS * 4
root = a.dir or os.path.join(tempfile.gettempdir(), f"torch-dcp-bench-{os.environ.get('MASTER_PORT', '0')}")
path = os.path.join(root, f"ckpt-{n}")


def model(fill):
    return {
        f"layer{i}.weight": distribute_tensor(
            torch.full((rows, COLS), float(i + 1) if fill is None else fill), mesh, [Shard(0)])
        for i in range(TENSORS)
    }


def slowest(dt):
    t = torch.tensor([dt], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


sd, target = model(None), model(0.0)
saves, loads = [], []
for i in range(a.runs + 1):
    if rank == 0:
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(root, exist_ok=True)
    dist.barrier()
    t = time.perf_counter()
    dcp.save(sd, checkpoint_id=path)
    ts = slowest(time.perf_counter() - t)
    dist.barrier()
    t = time.perf_counter()
    dcp.load(target, checkpoint_id=path)
    tl = slowest(time.perf_counter() - t)
    if i > 0:
        saves.append(ts)
        loads.append(tl)
for i in range(TENSORS):
    local = target[f"layer{i}.weight"].to_local()
    assert bool((local == i + 1).all()), f"layer{i} loaded wrong values"
dist.barrier()
if rank == 0:
    shutil.rmtree(root, ignore_errors=True)
    for op, ts in (("checkpoint_save", saves), ("checkpoint_load", loads)):
        med = statistics.median(ts)
        print(json.dumps({"system": "torch-dcp", "op": op, "ranks": n, "bytes": nbytes,
                          "median_s": round(med, 6), "gbs": round(nbytes / med / 1e9, 3)}))
dist.destroy_process_group()
