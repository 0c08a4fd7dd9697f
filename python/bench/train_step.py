"""One small training step (MLP 256-512-256, batch 64, SGD), gflow vs PyTorch when installed:
prints one JSON line per framework, {"bench", "framework", "steps", "ms_per_step"}. Local, one
process. Usage: python python/bench/train_step.py [steps]"""

import json
import sys
import time

import numpy as np

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 50
D, H, N = 256, 512, 64


def run(flow, nn, optim, tensor):
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, D))
    opt = optim.SGD(model.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    x = tensor(rng.standard_normal((N, D)).astype(np.float32))
    y = tensor(rng.standard_normal((N, D)).astype(np.float32))
    loss_fn = nn.MSELoss()

    def step():
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    for _ in range(3):
        step()
    t = time.perf_counter()
    for _ in range(STEPS):
        step()
    return (time.perf_counter() - t) / STEPS * 1e3


def report(framework, ms):
    print(json.dumps({"bench": "mlp_train_step", "framework": framework, "steps": STEPS,
                      "ms_per_step": round(ms, 3)}))


if __name__ == "__main__":
    import gflow

    report("gflow", run(gflow, gflow.nn, gflow.optim, gflow.tensor))
    try:
        import torch
    except ImportError:
        print(json.dumps({"bench": "mlp_train_step", "framework": "torch", "skipped": "not installed"}))
    else:
        report("torch", run(torch, torch.nn, torch.optim, torch.tensor))
