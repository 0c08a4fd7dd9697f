# PyTorch (CPU) timings of the transformer operators, one JSON line each: the peer of gflow's
# operator benchmarks (same row fields: op, shape, dtype, fwd_ms, fwd_bwd_ms, threads).
#   python torch_ops_bench.py [--threads 2] [--runs 7] [--small]
# Rows:
#   softmax, log_softmax (last dim), layer_norm (weight and bias), rms_norm (eps 1e-6, weight),
#   gelu (tanh), gelu_erf on activations --act (default 8,1024,768), f32;
#   scaled_dot_product_attention on q = k = v of --attn (default 8,12,256,64), causal and not, f32;
#   matmul --mm^3 (default 1024) in f32 and bf16 (forward only: fwd_ms, plus gflops).
# fwd_ms: the forward alone; fwd_bwd_ms: forward, then backward of (out * w).sum() for a fixed
# random w (w's product is in the timed region, as in gflow's runs). Median of --runs after 2
# warm-ups. --small divides the sizes for a quick check on a loaded machine.
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
ap.add_argument("--runs", type=int, default=7)
ap.add_argument("--act", default="8,1024,768")
ap.add_argument("--attn", default="8,12,256,64")
ap.add_argument("--mm", type=int, default=1024)
ap.add_argument("--small", action="store_true", help="sizes / 4 (attention batch and seq / 4)")
a = ap.parse_args()
if a.threads:
    torch.set_num_threads(a.threads)
act = [int(s) for s in a.act.split(",")]
attn = [int(s) for s in a.attn.split(",")]
mm = a.mm
if a.small:
    act = [max(1, act[0] // 4), max(1, act[1] // 4)] + act[2:]
    attn = [max(1, attn[0] // 4), attn[1], max(1, attn[2] // 4), attn[3]]
    mm //= 4
torch.manual_seed(0)
THREADS = torch.get_num_threads()


def median_ms(f):
    ts = []
    for i in range(a.runs + 2):
        t0 = time.perf_counter()
        f()
        if i >= 2:
            ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def row(op, shape, dtype, **kw):
    print(json.dumps({"system": "torch-cpu", "op": op, "shape": list(shape), "dtype": dtype,
                      "threads": THREADS, **kw}), flush=True)


def bench(op, fn, inputs, dtype="f32"):
    """fwd_ms and fwd_bwd_ms of out = fn(*inputs); the gradient flows to every input."""
    xs = [x.detach().clone().requires_grad_(True) for x in inputs]
    with torch.no_grad():
        w = torch.randn_like(fn(*xs))

    def fwd():
        with torch.no_grad():
            fn(*xs)

    def fwd_bwd():
        for x in xs:
            x.grad = None
        (fn(*xs) * w).sum().backward()

    row(op, inputs[0].shape, dtype, fwd_ms=median_ms(fwd), fwd_bwd_ms=median_ms(fwd_bwd))


x = torch.randn(*act)
d = act[-1]
wt, bs = torch.rand(d) + 0.5, torch.randn(d)
bench("softmax", lambda x: x.softmax(-1), [x])
bench("log_softmax", lambda x: x.log_softmax(-1), [x])
bench("layer_norm", lambda x, w, b: F.layer_norm(x, (d,), w, b, eps=1e-5), [x, wt, bs])
bench("rms_norm", lambda x, w: F.rms_norm(x, (d,), w, eps=1e-6), [x, wt])
bench("gelu", lambda x: F.gelu(x, approximate="tanh"), [x])
bench("gelu_erf", F.gelu, [x])
q, k, v = (torch.randn(*attn) for _ in range(3))
bench("scaled_dot_product_attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [q, k, v])
bench("scaled_dot_product_attention_causal",
      lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [q, k, v])
for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
    m1, m2 = torch.randn(mm, mm).to(dt), torch.randn(mm, mm).to(dt)
    ms = median_ms(lambda: m1 @ m2)
    row("matmul", (mm, mm, mm), name, fwd_ms=ms, gflops=2 * mm ** 3 / (ms / 1e3) / 1e9)
