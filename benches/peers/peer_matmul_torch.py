# PyTorch on CUDA (cuBLAS): f32 matmul GFLOP/s with TF32 off, and elementwise add GB/s against a
# device-to-device copy, one JSON line each: the peer of `gflow-bench matmul --device cuda|wgpu`.
# python peer_matmul_torch.py [--sizes 4096] [--runs 9]
import argparse, json, statistics, time
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="4096")
ap.add_argument("--runs", type=int, default=9)
a = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")


def timed(f):
    ts = []
    for i in range(a.runs + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        if i >= 2:
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


for n in [int(s) for s in a.sizes.split(",")]:
    x = (torch.arange(n * n, device=dev) % 7 - 3).float().reshape(n, n)
    med = timed(lambda: x @ x)
    print(json.dumps({"system": "torch-cublas", "op": "matmul_f32", "m": n, "k": n, "n": n,
                      "median_s": med, "gflops": 2 * n ** 3 / med / 1e9}), flush=True)
    bytes_ = n * n * 4
    add = timed(lambda: x + x)
    copy = timed(lambda: x.clone())
    add_gbs, copy_gbs = 3 * bytes_ / add / 1e9, 2 * bytes_ / copy / 1e9
    print(json.dumps({"system": "torch-cublas", "op": "add_f32", "bytes": bytes_, "median_s": add,
                      "gbs": add_gbs, "copy_gbs": copy_gbs, "ratio": add_gbs / copy_gbs}), flush=True)
