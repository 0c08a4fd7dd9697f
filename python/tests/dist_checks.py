"""Run under the launcher with 2 processes by test_distributed.py: per-rank randomness, a
sharded save and a load into another layout, retain_grad on a global tensor, [] indexing and
the NumPy view of a shard, attention with heads split, norms, gradient clipping and manual
SGD in place. Prints ``key: value`` lines the test reads; argv[1] is a scratch directory."""

import sys
from pathlib import Path

import numpy as np

import gflow as flow
import gflow.nn as nn

out = Path(sys.argv[1])
rank = flow.env.get_rank()
print("local_randn:", " ".join(f"{v:.6f}" for v in flow.randn(4).numpy()))

P = flow.placement("cpu", {0: range(2)})
flow.manual_seed(3)
model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
model.to_global(placement=P, sbp=flow.sbp.broadcast)
model[0].weight.data = model[0].weight.to_global(sbp=flow.sbp.split(0))
opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = flow.randn(8, 4, placement=P, sbp=flow.sbp.split(0))
model(x).sum().backward()
opt.step()
opt.zero_grad()
flow.save({"model": model.state_dict(), "optim": opt.state_dict()}, out / "ckpt")
print("saved_w0:", " ".join(f"{v:.6f}" for v in model[0].weight.numpy().ravel()))

flow.manual_seed(4)
fresh = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
fresh.to_global(placement=P, sbp=flow.sbp.broadcast)
for m in (fresh[0], fresh[2]):  # another layout than the saved one
    m.weight.data = m.weight.to_global(sbp=flow.sbp.split(1))
fopt = flow.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
ck = flow.load(out / "ckpt")
fresh.load_state_dict(ck["model"])
fopt.load_state_dict(ck["optim"])
print("loaded_sbp:", fresh[0].weight.sbp)
print("loaded_local_shape:", list(fresh[0].weight.to_local().shape))
same = all(np.array_equal(p.numpy(), q.numpy()) for p, q in zip(model.parameters(), fresh.parameters()))
print("loaded_equal:", same)
for m, o in ((model, opt), (fresh, fopt)):
    m(x).sum().backward()
    o.step()
same = all(np.allclose(p.numpy(), q.numpy(), rtol=1e-6, atol=1e-7)
           for p, q in zip(model.parameters(), fresh.parameters()))
print("stepped_equal:", same)

w = flow.randn(4, 3, placement=P, sbp=flow.sbp.split(0), requires_grad=True)
h = w * 2
h.retain_grad()
(h * h).sum().backward()
print("retain_grad_ok:", np.allclose(h.grad.numpy(), 2 * h.numpy()), h.grad.sbp)

# [] on a tensor split over two ranks: values and gradient as NumPy's.
a = np.arange(24, dtype=np.float64).reshape(4, 6)
g = flow.tensor(a, placement=P, sbp=flow.sbp.split(0), requires_grad=True)
key = (slice(1, 4), slice(None, None, 2))
y = g[key]
(y * y).sum().backward()
want = np.zeros_like(a)
want[key] = 2 * a[key]
print("index_ok:", np.array_equal(y.numpy(), a[key]) and np.array_equal(g[-1].numpy(), a[-1])
      and np.allclose(g.grad.numpy(), want), y.placement == P)
try:
    g[4]
    print("index_error: none")
except IndexError as e:
    print("index_error:", type(e).__name__)

# numpy() of this rank's shard views it: a write shows in the global value.
s = flow.zeros(4, 3, placement=P, sbp=flow.sbp.split(0))
s.to_local().numpy()[0, 0] = 10.0 + rank
print("shard_view_ok:", s.numpy()[:, 0].tolist() == [10.0, 0.0, 11.0, 0.0])

# Attention with heads split over the ranks: the same values as NumPy, heads still split.
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 2, 3, 4)) for _ in range(3))
parts = [flow.tensor(t, placement=P, sbp=flow.sbp.split(1)) for t in (q, k, v)]
o = nn.functional.scaled_dot_product_attention(*parts, is_causal=True)
sc = q @ k.transpose(0, 1, 3, 2) / 2.0
sc = np.where(np.triu(np.ones((3, 3), bool), 1), -np.inf, sc)
e = np.exp(sc - sc.max(-1, keepdims=True))
print("sdpa_ok:", np.allclose(o.numpy(), (e / e.sum(-1, keepdims=True)) @ v, rtol=1e-12), o.sbp)

# LayerNorm on rows split over the ranks; clipping gradients of split and broadcast parameters.
ln = nn.LayerNorm(6).to_global(placement=P, sbp=flow.sbp.broadcast)
yl = ln(flow.tensor(a, dtype=flow.float32, placement=P, sbp=flow.sbp.split(0)))
ref = (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)
print("layer_norm_ok:", np.allclose(yl.numpy(), ref, rtol=1e-4, atol=1e-5))
p1 = flow.ones(4, 2, placement=P, sbp=flow.sbp.split(0), requires_grad=True)
p2 = flow.ones(3, placement=P, sbp=flow.sbp.broadcast, requires_grad=True)
((p1 * 3).sum() + (p2 * 4).sum()).backward()
total = nn.utils.clip_grad_norm_([p1, p2], 1.0)
# float32 gradients: the norm comes back as a float32 tensor.
print("clip_ok:", np.isclose(float(total), np.sqrt(8 * 9 + 3 * 16), rtol=1e-7),
      np.allclose(p1.grad.numpy(), 3 / (float(total) + 1e-6), rtol=1e-6))

# OneFlow's manual SGD on a split and a broadcast parameter: in place, layouts and grads kept.
ws = flow.tensor(a, placement=P, sbp=flow.sbp.split(0), requires_grad=True)
wb = flow.tensor(a[0], placement=P, sbp=flow.sbp.broadcast, requires_grad=True)
same_objects = (ws, wb)
for _ in range(2):
    ((ws * ws).sum() + (ws * wb).sum()).backward()
    with flow.no_grad():
        ws -= 0.1 * ws.grad
        wb.sub_(wb.grad, alpha=0.1)
    ws.grad.zero_()
    wb.grad.zero_()
ra, rb = a.copy(), a[0].copy()
for _ in range(2):
    ra, rb = ra - 0.1 * (2 * ra + rb), rb - 0.1 * ra.sum(0)
print("inplace_sgd_ok:", all(x is y for x, y in zip((ws, wb), same_objects)),
    np.allclose(ws.numpy(), ra, rtol=1e-12) and np.allclose(wb.numpy(), rb, rtol=1e-12),
    ws.sbp, wb.sbp, float(ws.grad.abs().sum()) == 0.0 and bool((wb.grad == 0).all()))
