# PyTorch Gloo collective bandwidth, one JSON line per (op, size), in the format of
# ../../../shared/bench/README.md: the TCP baseline for gflow's collectives between hosts.
# Start one process per rank (e.g. in each network namespace of netns_collectives.sh):
#   GLOO_SOCKET_IFNAME=eth0 python peer_collectives_gloo.py --master 10.0.0.1:29500 --rank R --world N
#     [--sizes 16,128] [--ops all_reduce,all_gather,all_to_all,p2p] [--label gloo]
import argparse, json, os, statistics, time
import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--master", required=True, help="host:port of rank 0's store")
ap.add_argument("--rank", type=int, required=True)
ap.add_argument("--world", type=int, required=True)
ap.add_argument("--sizes", default="16,128", help="MiB, comma separated")
ap.add_argument("--iters", type=int, default=7)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--label", default="gloo")
ap.add_argument("--ops", default="all_reduce,all_gather,all_to_all,p2p")
ap.add_argument("--out", default=None, help="append the lines here (rank 0), else stdout")
a = ap.parse_args()
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank, world_size=a.world)
r, n = a.rank, a.world


def timed(fn):
    ts = []
    for it in range(a.warmup + a.iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time
        if it >= a.warmup:
            ts.append(t.item())
    return statistics.median(ts)


lines = []
for mib in [int(s) for s in a.sizes.split(",")]:
    nbytes = mib << 20
    count = nbytes // 4
    part = count // n
    src = torch.randn(count, generator=torch.Generator().manual_seed(r))
    dst = torch.empty_like(src)
    gathered = [torch.empty(part) for _ in range(n)]

    def p2p():
        if r == 0:
            dist.send(src, 1)
        elif r == 1:
            dist.recv(dst, 0)

    ops = {
        "all_reduce": (lambda: (dst.copy_(src), dist.all_reduce(dst)), 2 * (n - 1) / n, "busbw_gbs"),
        "all_gather": (lambda: dist.all_gather(gathered, src[:part]), (n - 1) / n, "busbw_gbs"),
        "all_to_all": (lambda: dist.all_to_all_single(dst[: part * n], src[: part * n]), (n - 1) / n, "busbw_gbs"),
        "p2p": (p2p, 1.0, "gbs"),
    }
    for op in a.ops.split(","):
        fn, factor, metric = ops[op]
        med = timed(fn)
        if r == 0:
            lines.append(json.dumps({"system": a.label, "op": op, "ranks": 2 if op == "p2p" else n,
                                     "bytes": nbytes, "median_s": med, metric: factor * nbytes / med / 1e9}))
if r == 0:
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)
    else:
        print(text, end="", flush=True)
dist.destroy_process_group()
