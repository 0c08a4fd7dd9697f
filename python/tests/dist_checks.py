"""Run under the launcher with 2 processes by test_distributed.py: per-rank randomness, a
sharded save and a load into another layout, retain_grad on a global tensor. Prints
``key: value`` lines the test reads; argv[1] is a scratch directory."""

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
