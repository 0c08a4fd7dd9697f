# PyTorch DDP on Gloo (CPU): steps/s of the MLP `gflow-bench train` runs (3 Linear layers of
# --width with ReLU between, MSE loss, SGD lr 0.01, global batch --batch split over the ranks),
# one JSON line from rank 0: the peer of `gflow-launch --nproc-per-node 2 gflow-bench train`.
# torchrun --nproc-per-node 2 peer_train_torch.py [--width 1024] [--batch 256] [--runs 9]
import argparse, json, os, statistics, time
import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--width", type=int, default=1024)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--runs", type=int, default=9)
a = ap.parse_args()
dist.init_process_group("gloo")
n, r = dist.get_world_size(), dist.get_rank()
torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
torch.manual_seed(0)
w = a.width
model = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w),
                            torch.nn.ReLU(), torch.nn.Linear(w, w))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x = torch.randn(a.batch // n, w)
y = torch.randn(a.batch // n, w)
ts = []
for i in range(a.runs + 2):
    dist.barrier()
    t0 = time.perf_counter()
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if i >= 2:
        ts.append(t.item())
med = statistics.median(ts)
if r == 0:
    print(json.dumps({"system": "torch-gloo", "op": f"train_mlp_3x{w}_b{a.batch}", "ranks": n,
                      "median_s": med, "steps_per_s": 1 / med}), flush=True)
dist.destroy_process_group()
