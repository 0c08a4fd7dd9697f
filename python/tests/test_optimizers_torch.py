"""``flow.optim`` SGD (momentum, dampening, Nesterov, maximize), Adam, AdamW, RMSprop and
Adagrad against PyTorch's float64 trajectories recorded in ``tests/data/torch_optim.json`` (by
``benches/peers/torch_optim_reference.py``), on a local and a global parameter; PyTorch's
argument checks."""

import json
from pathlib import Path

import numpy as np
import pytest

import gflow as flow

CASES = json.loads((Path(__file__).resolve().parents[2] / "tests/data/torch_optim.json").read_text())
MAKE = {"sgd": flow.optim.SGD, "adam": flow.optim.Adam, "adamw": flow.optim.AdamW,
        "rmsprop": flow.optim.RMSprop, "adagrad": flow.optim.Adagrad}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.parametrize("layout", ["local", "global"])
def test_trajectory_equals_pytorchs(case, layout):
    shape = case["param"]["shape"]

    def make(values):
        t = flow.tensor(np.array(values, dtype=np.float64).reshape(shape))
        if layout == "global":
            t = t.to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.split(1))
        return t

    p = make(case["param"]["data"]).requires_grad_()
    opt = MAKE[case["optimizer"]]([p], **case["options"])
    for g, want in zip(case["grads"], case["after"]):
        p.grad = make(g)
        opt.step()
        np.testing.assert_allclose(p.numpy().reshape(-1), want, rtol=1e-12, atol=1e-12)


def test_pytorchs_argument_checks_and_state_names():
    w = flow.nn.Parameter(flow.ones(2)) if hasattr(flow.nn, "Parameter") else flow.ones(2)
    with pytest.raises(ValueError, match="Nesterov"):
        flow.optim.SGD([w], lr=0.1, nesterov=True)
    opt = flow.optim.RMSprop([w], lr=0.1, momentum=0.9, centered=True)
    w.grad = flow.ones(2)
    opt.step()
    assert sorted(opt.state_dict()["state"][0]) == ["grad_avg", "momentum_buffer",
                                                    "square_avg", "step"]
    opt = flow.optim.Adagrad([w], lr=0.1, lr_decay=-1.0)
    with pytest.raises(Exception, match="lr_decay"):
        opt.step()


def test_a_scheduler_drives_rmsprop_and_adagrad():
    for make in (flow.optim.RMSprop, flow.optim.Adagrad):
        w = flow.zeros(3).requires_grad_()
        opt = make([w], lr=0.1)
        sched = flow.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        lrs = []
        for _ in range(3):
            w.grad = flow.ones(3)
            opt.step()
            sched.step()
            lrs.append(opt.param_groups[0]["lr"])
        assert lrs == [0.05, 0.025, 0.0125]
