"""Run by test_global_checks.py on 2 ranks: prints one `key: value` line per check."""

import numpy as np

import gflow as flow

r = flow.env.get_rank()
P = flow.placement("cpu", [0, 1])

# A 16-bit dtype= keeps the asked partial SBP (the cast used to come back split)
for dt in (flow.bfloat16, flow.float16):
    t = flow.tensor(np.ones((3, 2), np.float32), dtype=dt, placement=P, sbp=flow.sbp.partial_sum)
    print(f"partial_{dt}: {t.sbp} {t.dtype} {t.numpy().tolist()}")
a = flow.arange(4, dtype=flow.float16, placement=P, sbp=flow.sbp.partial_max)
print(f"arange_pmax: {a.sbp} {a.numpy().tolist()}")

# data that differs between ranks is refused on every rank
try:
    flow.tensor([float(r)] * 2, placement=P, sbp=flow.sbp.broadcast)
    print("differs: accepted")
except flow.InvalidValueError as e:
    print(f"differs: {type(e).__name__} {'ranks 0 and 1' in str(e)}")
same = flow.tensor([1.0, 2.0], placement=P, sbp=flow.sbp.split(0))
print(f"same: {same.numpy().tolist()}")

# optimizers refuse partial_max parameters (their components hold -inf)
w = flow.tensor([1.0, 2.0], placement=P, sbp=flow.sbp.partial_max).requires_grad_()
(w * w).sum().backward()
try:
    flow.optim.SGD([w], lr=0.1).step()
    print("sgd_pmax: stepped")
except flow.InvalidArgumentError as e:
    print(f"sgd_pmax: {type(e).__name__}")

# item() on a rank outside the placement names the placement
one = flow.tensor([3.0], placement=flow.placement("cpu", [0]), sbp=flow.sbp.broadcast)
try:
    print(f"item: {one.item()}")
except flow.PlacementError as e:
    print(f"item: {type(e).__name__}")
