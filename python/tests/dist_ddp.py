"""Run by test_distributed.py under the launcher: DistributedDataParallel as PyTorch users
write it (local batches, a local loss), against full-batch training of the same model in one
process (each rank replays it); prints `ddp_equal: True` when every parameter matches."""

import numpy as np

import gflow as flow
import gflow.nn as nn

r, n = flow.env.get_rank(), flow.env.get_world_size()
rng = np.random.default_rng(3)
X = rng.standard_normal((4 * n, 5)).astype(np.float32)
Y = rng.standard_normal((4 * n, 2)).astype(np.float32)


def model():
    flow.manual_seed(7)
    m = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 2))
    # every rank starts from different values: DDP must take rank 0's
    with flow.no_grad():
        for p in m.parameters():
            p.add_(flow.tensor(np.full(p.shape, 0.01 * r, dtype=np.float32)))
    return m


ddp = nn.parallel.DistributedDataParallel(model(), device_ids=None)
# the reference starts where DDP does: rank 0's values (local random values differ by rank)
ref = model()
with flow.no_grad():
    for p, q in zip(ref.parameters(), ddp.module.parameters()):
        p.copy_(q.to_local())
print(f"ddp_start: {float(sum(p.numpy().sum() for p in ref.parameters())):.6f}", flush=True)
ref_opt = flow.optim.SGD(ref.parameters(), lr=0.1)
opt = flow.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(3):
    ref_opt.zero_grad()
    nn.MSELoss()(ref(flow.tensor(X)), flow.tensor(Y)).backward()
    ref_opt.step()
    opt.zero_grad()
    rows = slice(4 * r, 4 * r + 4)
    out = ddp(flow.tensor(X[rows]))
    assert not out.is_global and tuple(out.shape) == (4, 2)
    nn.MSELoss()(out, flow.tensor(Y[rows])).backward()
    opt.step()
same = all(np.allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
           for a, b in zip(ref.parameters(), ddp.module.parameters()))
print(f"ddp_equal: {same}", flush=True)
print(f"ddp_keys: {list(ddp.state_dict())[:2]}", flush=True)
