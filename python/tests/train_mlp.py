"""The MLP of tests/training.rs (same data, weights, 20 steps), trained with gflow's Python API:
locally (no launcher) or data parallel over every rank of the job. Prints one loss per line."""

import sys

import numpy as np

import gflow as flow
import gflow.nn as nn

N, D, H, O = 16, 8, 12, 4


def data(n, seed, scale):
    i = np.arange(n)
    return ((((i * 7919 + seed * 104729) % 1000) / 500.0 - 1.0) * scale).astype(np.float32)


def init():
    return dict(w1=data(H * D, 1, 0.35).reshape(H, D), b1=data(H, 2, 0.35),
                w2=data(O * H, 3, 0.3).reshape(O, H), b2=data(O, 4, 0.3),
                x=data(N * D, 5, 1.0).reshape(N, D), y=data(N * O, 6, 1.0).reshape(N, O))


def main(adam):
    i = init()
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, O))
    for p, v in zip(model.parameters(), (i["w1"], i["b1"], i["w2"], i["b2"])):
        p.data = flow.tensor(v)
    x, y = flow.tensor(i["x"]), flow.tensor(i["y"])
    world = flow.env.get_world_size()
    if world > 1:
        p = flow.placement("cpu", list(range(world)))
        model.to_global(placement=p, sbp=flow.sbp.broadcast)
        x = x.to_global(placement=p, sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
        y = y.to_global(placement=p, sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
    opt = (flow.optim.Adam(model.parameters(), lr=0.01) if adam
           else flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    loss_fn = nn.MSELoss()
    for _ in range(20):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"{loss.item():.9g}")


if __name__ == "__main__":
    main(sys.argv[1:] == ["adam"])
