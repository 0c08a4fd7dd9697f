# Open MPI collective bandwidth, one JSON line per (op, size): the baseline for gflow's collectives.
# (A copy of ../../../shared/bench/peer_collectives_mpi.py extended with --kib and --ops.)
# mpirun --allow-run-as-root --oversubscribe -np N python peer_collectives_mpi.py [--sizes 1,16,128] [--kib]
#   [--ops all_reduce,...] [--label openmpi-tcp]
import argparse, json, statistics, sys, time
import numpy as np
from mpi4py import MPI

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="1,16,128", help="MiB, comma separated")
ap.add_argument("--iters", type=int, default=7)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--label", default="openmpi")
ap.add_argument("--kib", action="store_true", help="--sizes in KiB (latency-bound messages)")
ap.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,all_to_all")
a = ap.parse_args()
c = MPI.COMM_WORLD
r, n = c.Get_rank(), c.Get_size()

def timed(fn):
    ts = []
    for it in range(a.warmup + a.iters):
        c.Barrier()
        t0 = time.perf_counter()
        fn()
        t = c.allreduce(time.perf_counter() - t0, op=MPI.MAX)  # the slowest rank's time
        if it >= a.warmup:
            ts.append(t)
    return statistics.median(ts)

for mib in [int(s) for s in a.sizes.split(",")]:
    nbytes = mib << (10 if a.kib else 20)
    count = nbytes // 4
    src = np.random.default_rng(r).standard_normal(count).astype(np.float32)
    dst = np.empty_like(src)
    part = np.empty(count // n, dtype=np.float32)
    ops = {
        "all_reduce": (lambda: c.Allreduce(src, dst, op=MPI.SUM), 2 * (n - 1) / n),
        "all_gather": (lambda: c.Allgather(src[: count // n], dst[: (count // n) * n]), (n - 1) / n),
        "reduce_scatter": (lambda: c.Reduce_scatter_block(src[: (count // n) * n], part, op=MPI.SUM), (n - 1) / n),
        "all_to_all": (lambda: c.Alltoall(src[: (count // n) * n], dst[: (count // n) * n]), (n - 1) / n),
    }
    for op, (fn, factor) in ((o, ops[o]) for o in a.ops.split(",")):
        med = timed(fn)
        if r == 0:
            print(json.dumps({"system": a.label, "op": op, "ranks": n, "bytes": nbytes, "median_s": med,
                              "busbw_gbs": factor * nbytes / med / 1e9}), flush=True)
