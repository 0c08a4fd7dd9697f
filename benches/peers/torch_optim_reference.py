# Records PyTorch's (CPU, float64) optimizer trajectories, so that `tests/torch_optim.rs` checks
# gflow's optimizers against an independent reference without PyTorch in CI.
#   python benches/peers/torch_optim_reference.py [--out tests/data/torch_optim.json]
#
# Output: a JSON list of cases, each
#   {"name": unique, "optimizer": "sgd"|"adam"|"adamw"|"rmsprop"|"adagrad",
#    "options": the constructor's keyword arguments (PyTorch's names),
#    "param": {"shape": [..], "data": [..]}   the initial parameter (float64, row-major),
#    "grads": [[..], ...]                       the gradient given before each step,
#    "after": [[..], ...]}                      the parameter after each step.
import argparse
import json

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--out", default="tests/data/torch_optim.json")
a = ap.parse_args()

G = torch.Generator().manual_seed(20261128)
MAKE = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
        "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}
CASES = []


def case(name, kind, steps=4, **options):
    p0 = torch.randn(3, 4, generator=G, dtype=torch.float64)
    grads = [torch.randn(3, 4, generator=G, dtype=torch.float64) for _ in range(steps)]
    p = p0.clone().requires_grad_(True)
    opt = MAKE[kind]([p], **options)
    after = []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        after.append(p.detach().reshape(-1).tolist())
    CASES.append({"name": name, "optimizer": kind, "options": options,
                  "param": {"shape": [3, 4], "data": p0.reshape(-1).tolist()},
                  "grads": [g.reshape(-1).tolist() for g in grads], "after": after})


case("sgd", "sgd", lr=0.1)
case("sgd_momentum_dampening", "sgd", lr=0.1, momentum=0.9, dampening=0.1)
case("sgd_nesterov", "sgd", lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)
case("sgd_maximize", "sgd", lr=0.1, momentum=0.5, weight_decay=0.1, maximize=True)
case("adam", "adam", lr=0.01)
case("adamw", "adamw", lr=0.01, weight_decay=0.1)
case("rmsprop", "rmsprop", lr=0.01)
case("rmsprop_centered_momentum", "rmsprop", lr=0.01, alpha=0.9, momentum=0.5, centered=True,
     weight_decay=0.01)
case("rmsprop_maximize", "rmsprop", lr=0.02, eps=1e-6, maximize=True)
case("adagrad", "adagrad", lr=0.1)
case("adagrad_decay_initial", "adagrad", lr=0.1, lr_decay=0.05, initial_accumulator_value=0.3,
     weight_decay=0.02)
case("adagrad_maximize", "adagrad", lr=0.1, eps=1e-6, maximize=True)
case("adam_amsgrad", "adam", steps=6, lr=0.02, amsgrad=True, weight_decay=0.01)
case("adam_maximize", "adam", lr=0.01, maximize=True)
case("adamw_amsgrad_maximize", "adamw", steps=6, lr=0.02, amsgrad=True, maximize=True)

with open(a.out, "w") as f:
    json.dump(CASES, f, separators=(",", ":"))
    f.write("\n")
print(json.dumps({"cases": len(CASES), "torch": torch.__version__, "out": a.out}))
