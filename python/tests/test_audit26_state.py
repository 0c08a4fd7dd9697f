"""Audit 26, state: ``Optimizer.zero_grad(set_to_none=False)`` zeroes gradients; ``flow.load``
keeps the saved order and Python types (and still reads checkpoints written before it did);
``Module.state_dict`` lists state in PyTorch's order; ``load_state_dict`` returns
``_IncompatibleKeys`` and raises PyTorch's ``RuntimeError``; ``Optimizer.state_dict`` is
PyTorch's format, and loads PyTorch's (made of flow tensors), its own and the earlier flat one.
Plain-Python references run without torch; torch comparisons skip when it is missing."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn
from gflow import _gflow

P = flow.placement("cpu", [0])
OPTIMIZERS = [
    ("SGD", dict(lr=0.1), {"momentum_buffer"}),  # gflow keeps a buffer, unused at momentum 0
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True), {"momentum_buffer"}),
    ("Adam", dict(lr=0.1), {"exp_avg", "exp_avg_sq"}),
    ("Adam", dict(lr=0.1, amsgrad=True), {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}),
    ("AdamW", dict(lr=0.1, weight_decay=0.1), {"exp_avg", "exp_avg_sq"}),
    ("RMSprop", dict(lr=0.01), {"square_avg"}),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True),
     {"square_avg", "momentum_buffer", "grad_avg"}),
    ("Adagrad", dict(lr=0.1), {"sum"}),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.5, lr_decay=0.01), {"sum"}),
]
IDS = [f"{name}-{'-'.join(map(str, kw.values()))}" for name, kw, _ in OPTIMIZERS]


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((3, 4)), rng.standard_normal(3)


def _params(w, b, layout="local"):
    out = []
    for a in (w, b):
        t = flow.tensor(a)
        if layout == "global":
            t = t.to_global(placement=P, sbp=flow.sbp.split(0))
        out.append(nn.Parameter(t))
    return out


def _grads(seed, layout="local"):
    return _params(*_arrays(seed), layout=layout)


def _step(opt, params, seed, layout="local"):
    for p, g in zip(params, _grads(seed, layout)):
        p.grad = g.detach()
    opt.step()


# ---------------------------------------------------------------------------- finding 4


@pytest.mark.parametrize("layout", ["local", "global"])
def test_optimizer_zero_grad_keeps_zeros(layout):
    w, b = _params(*_arrays(), layout=layout)
    frozen = nn.Parameter(flow.ones(2))
    opt = flow.optim.SGD([w, b, frozen], lr=0.1)
    (w * w).sum().backward()
    (b * 3).sum().backward()
    opt.zero_grad(set_to_none=False)
    for p in (w, b):
        g = p.grad
        assert g is not None and tuple(g.shape) == tuple(p.shape) and g.dtype == p.dtype
        assert g.is_global == p.is_global and not g.requires_grad and g.grad_fn is None
        if layout == "global":
            assert g.placement == p.placement and g.sbp == p.sbp
        np.testing.assert_array_equal(g.numpy(), np.zeros(tuple(p.shape)))
    assert frozen.grad is None  # a parameter without a gradient keeps none, as PyTorch
    # the next backward accumulates onto the zeros
    (w * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((3, 4), 2.0))
    opt.zero_grad()  # set_to_none=True by default
    assert w.grad is None and b.grad is None


def test_module_and_optimizer_zero_grad_agree():
    model = nn.Linear(3, 2)
    opt = flow.optim.Adam(model.parameters())
    for clear in (lambda: model.zero_grad(set_to_none=False),
                  lambda: opt.zero_grad(set_to_none=False)):
        model(flow.ones(1, 3)).sum().backward()
        clear()
        assert [p.grad.tolist() for p in model.parameters()] == [[[0.0] * 3] * 2, [0.0] * 2]


def test_zero_grad_against_torch():
    torch = pytest.importorskip("torch")
    outs = []
    for M in (flow, torch):
        lin = M.nn.Linear(3, 2)
        opt = M.optim.SGD(lin.parameters(), lr=0.1)
        lin(M.ones(1, 3)).sum().backward()
        opt.zero_grad(set_to_none=False)
        outs.append([p.grad.tolist() for p in lin.parameters()])
    assert outs[0] == outs[1]


# ---------------------------------------------------------------------------- finding 6


def _same(got, want):
    """``got`` equals ``want`` with the same types, key order and nesting (tensors by value)."""
    assert type(got) is type(want) or (isinstance(want, dict) and isinstance(got, dict)), (
        got, want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, flow.Tensor):
        assert got.dtype == want.dtype and not got.is_global
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == want
        if isinstance(want, float):
            assert math.copysign(1, got) == math.copysign(1, want)


def test_load_keeps_order_and_python_types(tmp_path):
    obj = {
        "z": flow.ones(2), "a": flow.arange(3), "flag": True, "off": False, "m": 3, "neg": -2**63,
        "f": 0.1, "nz": -0.0, "inf": float("inf"), "nan": float("nan"),
        "s": "héllo, wörld: longer than eight bytes", "empty": "", "none": None,
        "list": [1, 2.5, False, [None, "x"], {"k": 1}], "tuple": (1, (2, "y")),
        "el": [], "et": (), "ed": {},
        7: {"0": "str key", 1: "int key", "b": 2, "a": 1},
        "nested": {"b": {"c": flow.zeros(1, dtype=flow.float64)}, "a": flow.tensor(True)},
    }
    flow.save(obj, tmp_path / "c")
    _same(flow.load(tmp_path / "c"), obj)


def test_load_gives_a_models_state_dict_in_its_order(tmp_path):
    model = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3), nn.Linear(3, 1))
    flow.save({"model": model.state_dict(), "epoch": 2}, tmp_path / "c")
    ck = flow.load(tmp_path / "c")
    assert list(ck) == ["model", "epoch"] and type(ck["epoch"]) is int
    assert list(ck["model"]) == list(model.state_dict())


def test_save_refuses_what_it_cannot_keep(tmp_path):
    with pytest.raises(ValueError, match="'/'"):
        flow.save({"a/b": 1}, tmp_path / "c")
    with pytest.raises(TypeError, match="set"):
        flow.save({"a": {1, 2}}, tmp_path / "c")
    with pytest.raises(TypeError, match="keys are str or int"):
        flow.save({"a": {1.5: 1}}, tmp_path / "c")
    with pytest.raises(OverflowError):
        flow.save({"a": 2**63}, tmp_path / "c")
    with pytest.raises(ValueError, match="both named"):
        flow.save({"a": {0: 1, "0": 2}}, tmp_path / "c")
    with pytest.raises(TypeError):
        flow.save([1, 2], tmp_path / "c")


def _old_checkpoint(path):
    """A checkpoint as flow.save wrote it before the order and type markers: names joined by
    "/", floats as their bits with a marker, bools as ints; an Adam's flat state."""
    import struct

    def bits(v):
        return struct.unpack("<q", struct.pack("<d", v))[0]

    exp_avg = flow.tensor([[0.1, 0.2], [0.3, 0.4]])
    tensors = [("model/weight", flow.ones(2, 2)), ("model/bias", flow.zeros(2)),
               ("optim/state/0.exp_avg", exp_avg), ("optim/state/0.exp_avg_sq", exp_avg * exp_avg),
               ("optim/state/0.step", flow.tensor([3])),
               ("optim/state/1.exp_avg", flow.full((2,), 0.5)),
               ("optim/state/1.exp_avg_sq", flow.full((2,), 0.25)),
               ("optim/state/1.step", flow.tensor([3]))]
    values = [("epoch", 3), ("flag", 1), ("loss", bits(0.25)), ("__gflow_float__/loss", 1),
              ("optim/param_groups/0/lr", bits(0.01)),
              ("__gflow_float__/optim/param_groups/0/lr", 1),
              ("optim/param_groups/0/betas/0", bits(0.8)),
              ("__gflow_float__/optim/param_groups/0/betas/0", 1),
              ("optim/param_groups/0/betas/1", bits(0.99)),
              ("__gflow_float__/optim/param_groups/0/betas/1", 1),
              ("optim/param_groups/0/eps", bits(1e-8)),
              ("__gflow_float__/optim/param_groups/0/eps", 1),
              ("optim/param_groups/0/weight_decay", bits(0.0)),
              ("__gflow_float__/optim/param_groups/0/weight_decay", 1),
              ("optim/param_groups/0/amsgrad", 0), ("optim/param_groups/0/maximize", 0)]
    _gflow.save_checkpoint(tensors, values, str(path))


def test_load_reads_a_checkpoint_written_before_order_and_types(tmp_path):
    _old_checkpoint(tmp_path / "old")
    ck = flow.load(tmp_path / "old")
    # as it loaded then: sorted names, digit keys as ints, lists as mappings, bools as ints
    assert list(ck) == ["epoch", "flag", "loss", "model", "optim"]
    assert ck["epoch"] == 3 and ck["flag"] == 1 and ck["loss"] == 0.25
    assert list(ck["model"]) == ["bias", "weight"]
    assert list(ck["optim"]["param_groups"]) == [0]
    assert dict(ck["optim"]["param_groups"][0]["betas"]) == {0: 0.8, 1: 0.99}
    # its flat optimizer state loads into an optimizer, as it did
    model = nn.Linear(2, 2)
    assert model.load_state_dict(ck["model"]) is not None
    opt = flow.optim.Adam(model.parameters(), lr=1.0)
    opt.load_state_dict(ck["optim"])
    assert opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["betas"] == (0.8, 0.99)
    sd = opt.state_dict()
    assert float(sd["state"][0]["step"]) == 3.0
    np.testing.assert_allclose(sd["state"][0]["exp_avg"].numpy(), [[0.1, 0.2], [0.3, 0.4]])
    np.testing.assert_allclose(sd["state"][1]["exp_avg_sq"].numpy(), [0.25, 0.25])


def test_load_keeps_types_against_torch(tmp_path):
    torch = pytest.importorskip("torch")
    obj = {"z": 1.5, "a": [1, (2, None)], "flag": True, "s": "x", "m": {3: "three"}}
    flow.save(obj, tmp_path / "g")
    torch.save(obj, tmp_path / "t.pt")
    assert flow.load(tmp_path / "g") == torch.load(tmp_path / "t.pt")
    assert list(flow.load(tmp_path / "g")) == list(torch.load(tmp_path / "t.pt"))


# ---------------------------------------------------------------------------- finding 7


def _net(M):
    class Block(M.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = M.nn.Linear(2, 2)
            self.register_buffer("scale", M.ones(2))
            self.register_buffer("scratch", M.zeros(2), persistent=False)
            self.norm = M.nn.LayerNorm(2)

    class Net(M.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = Block()
            self.register_buffer("buf", M.zeros(2))
            self.head = M.nn.Linear(2, 1)
            self.bias = M.nn.Parameter(M.zeros(1))
            self.shared = self.head  # one module under two names

    return Net()


NET_STATE = ["bias", "buf", "first.scale", "first.lin.weight", "first.lin.bias",
             "first.norm.weight", "first.norm.bias", "head.weight", "head.bias",
             "shared.weight", "shared.bias"]


def test_state_dict_order_as_torchs():
    m = _net(flow)
    assert list(m.state_dict()) == NET_STATE
    assert [n for n, _ in m.named_parameters()] == [
        "bias", "first.lin.weight", "first.lin.bias", "first.norm.weight", "first.norm.bias",
        "head.weight", "head.bias"]
    assert [n for n, _ in m.named_buffers()] == ["buf", "first.scale", "first.scratch"]
    sd = m.state_dict(prefix="net.", keep_vars=True)
    assert list(sd) == ["net." + k for k in NET_STATE] and sd["net.bias"] is m.bias
    # a buffer shared by two modules comes once, as PyTorch's named_buffers
    m.head.register_buffer("scale", m.first.scale)
    assert [n for n, _ in m.named_buffers()] == ["buf", "first.scale", "first.scratch"]
    assert len(list(m.named_buffers(remove_duplicate=False))) == 4


def test_state_dict_order_against_torch():
    torch = pytest.importorskip("torch")
    g, t = _net(flow), _net(torch)
    assert list(g.state_dict()) == list(t.state_dict())
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in g.named_buffers()] == [n for n, _ in t.named_buffers()]


# ---------------------------------------------------------------------------- finding 11


def test_load_state_dict_returns_incompatible_keys():
    m = _net(flow)
    sd = m.state_dict()
    result = m.load_state_dict(sd)
    assert result == ([], []) and repr(result) == str(result) == "<All keys matched successfully>"
    assert result.missing_keys == [] and result.unexpected_keys == []
    bad = {k: v for k, v in sd.items() if k not in ("buf", "first.lin.bias")}
    bad.update({"first.lin.extra": flow.ones(1), "other.w": flow.ones(1), "extra": flow.ones(1)})
    missing, unexpected = m.load_state_dict(bad, strict=False)
    assert missing == ["buf", "first.lin.bias"]
    assert unexpected == ["other.w", "extra", "first.lin.extra"]
    assert repr(m.load_state_dict(bad, strict=False)).startswith(
        "_IncompatibleKeys(missing_keys=['buf', 'first.lin.bias'], unexpected_keys=")
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict(bad)
    assert str(e.value) == (
        "Error(s) in loading state_dict for Net:\n"
        '\tMissing key(s) in state_dict: "buf", "first.lin.bias". \n'
        '\tUnexpected key(s) in state_dict: "other.w", "extra", "first.lin.extra". ')
    with pytest.raises(TypeError, match="dict-like"):
        m.load_state_dict([("bias", flow.ones(1))])


def test_load_state_dict_size_mismatch_is_a_runtime_error():
    lin = nn.Linear(2, 3)
    before = lin.weight.numpy().copy()
    for strict in (True, False):
        with pytest.raises(RuntimeError) as e:
            lin.load_state_dict({"weight": flow.ones(3, 3), "bias": flow.full((3,), 2.0)},
                                strict=strict)
        assert str(e.value) == (
            "Error(s) in loading state_dict for Linear:\n\tsize mismatch for weight: copying a "
            "param with shape flow.Size([3, 3]) from checkpoint, the shape in current model is "
            "flow.Size([3, 2]).")
        # the other tensors are still written, as PyTorch's
        np.testing.assert_array_equal(lin.bias.numpy(), [2.0, 2.0, 2.0])
        np.testing.assert_array_equal(lin.weight.numpy(), before)


@pytest.mark.parametrize("layout", ["local", "global"])
def test_load_state_dict_writes_in_place_any_layout(layout):
    src = nn.Linear(3, 2)
    dst = nn.Linear(3, 2)
    if layout == "global":
        dst.to_global(placement=P, sbp=flow.sbp.broadcast)
    w = dst.weight
    assert repr(dst.load_state_dict(src.state_dict())) == "<All keys matched successfully>"
    assert dst.weight is w and w.is_global == (layout == "global")
    np.testing.assert_array_equal(w.numpy(), src.weight.numpy())


def test_load_state_dict_against_torch():
    torch = pytest.importorskip("torch")
    msgs = []
    for M in (flow, torch):
        m = _net(M)
        sd = {k: v for k, v in m.state_dict().items() if k != "buf"}
        sd["first.lin.extra"] = M.ones(1)
        sd["head.weight"] = M.ones(3, 2)
        r = m.load_state_dict({k: v for k, v in sd.items() if k != "head.weight"}, strict=False)
        assert type(r).__name__ == "_IncompatibleKeys" and isinstance(r, tuple)
        msgs.append([list(r.missing_keys), list(r.unexpected_keys)])
        with pytest.raises(RuntimeError) as e:
            m.load_state_dict(sd)
        msgs.append(str(e.value).replace("torch.Size", "flow.Size"))
    assert msgs[:2] == msgs[2:]


# ---------------------------------------------------------------------------- finding 12


def test_optimizer_state_dict_is_pytorchs_format():
    w, b, c = _params(*_arrays()) + [nn.Parameter(flow.ones(2))]
    opt = flow.optim.Adam([{"params": [w, b]}, {"params": [c], "lr": 0.5}], lr=0.1)
    _step(opt, [w, b], 1)
    sd = opt.state_dict()
    assert list(sd) == ["state", "param_groups"]
    assert list(sd["state"]) == [0, 1, 2]
    assert list(sd["state"][0]) == ["step", "exp_avg", "exp_avg_sq"]
    step = sd["state"][0]["step"]
    assert step.dtype == flow.float32 and tuple(step.shape) == () and step.item() == 1.0
    assert sd["state"][2]["step"].item() == 0.0  # not stepped yet
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert list(sd["param_groups"][0])[0] == "lr" and list(sd["param_groups"][0])[-1] == "params"
    assert [g["lr"] for g in sd["param_groups"]] == [0.1, 0.5]
    # the moments are handles on the optimizer's state
    assert sd["state"][1]["exp_avg"]._same_as(opt.state[b]["exp_avg"])
    assert opt.param_groups[0]["params"] == [w, b]  # the live groups keep the parameters


@pytest.mark.parametrize("name,options,names", OPTIMIZERS, ids=IDS)
def test_optimizer_state_names(name, options, names):
    w, b = _params(*_arrays())
    opt = getattr(flow.optim, name)([w, b], **options)
    _step(opt, [w, b], 1)
    assert set(opt.state_dict()["state"][0]) == names | {"step"}


@pytest.mark.parametrize("name,options,names", OPTIMIZERS, ids=IDS)
def test_optimizer_state_names_against_torch(name, options, names):
    torch = pytest.importorskip("torch")
    w, b = _arrays()
    t = [torch.nn.Parameter(torch.tensor(a)) for a in (w, b)]
    opt = getattr(torch.optim, name)(t, **options)
    for p, g in zip(t, _arrays(1)):
        p.grad = torch.tensor(g)
    opt.step()
    theirs = set(opt.state_dict()["state"].get(0, {}))
    w, b = _params(*_arrays())
    ours = getattr(flow.optim, name)([w, b], **options)
    _step(ours, [w, b], 1)
    ours = set(ours.state_dict()["state"][0])
    # PyTorch's SGD keeps no step and a buffer only with momentum; the rest match exactly
    assert theirs == (ours & theirs if name == "SGD" else ours)


def _resume_equals(name, options, sd_of, layout="local"):
    """An optimizer stepped twice, its state dict passed through ``sd_of`` and loaded into a
    fresh optimizer on a copy of the parameters: the next step of both is the same."""
    w, b = _params(*_arrays(), layout=layout)
    opt = getattr(flow.optim, name)([w, b], **options)
    for seed in (1, 2):
        _step(opt, [w, b], seed, layout)
    w2, b2 = _params(w.numpy(), b.numpy(), layout=layout)
    again = getattr(flow.optim, name)([w2, b2], lr=123.0)
    again.load_state_dict(sd_of(opt.state_dict()))
    assert again.param_groups[0]["lr"] == options["lr"]
    for o, ps in ((opt, [w, b]), (again, [w2, b2])):
        _step(o, ps, 3, layout)
    for p, q in zip((w, b), (w2, b2)):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


@pytest.mark.parametrize("name,options,names", OPTIMIZERS, ids=IDS)
def test_optimizer_state_dict_round_trips(name, options, names, tmp_path):
    _resume_equals(name, options, lambda sd: sd)

    def saved(sd):
        flow.save({"optim": sd}, tmp_path / "c")
        ck = flow.load(tmp_path / "c")["optim"]
        assert list(ck["state"]) == [0, 1] and ck["param_groups"][0]["params"] == [0, 1]
        return ck

    _resume_equals(name, options, saved, layout="global")


def test_optimizer_loads_the_flat_format_and_pytorchs_plain_dict():
    w, b = _params(*_arrays())
    opt = flow.optim.SGD([w, b], lr=0.1, momentum=0.9)
    # gflow's earlier flat format
    opt.load_state_dict({"state": {"0.step": flow.tensor([2]), "0.momentum_buffer": flow.ones(3, 4),
                                   "1.step": flow.tensor([2]), "1.momentum_buffer": flow.ones(3)},
                         "param_groups": [{"lr": 0.2, "momentum": 0.9}]})
    assert opt.param_groups[0]["lr"] == 0.2
    np.testing.assert_array_equal(opt.state[w]["momentum_buffer"].numpy(), np.ones((3, 4)))
    with pytest.raises(KeyError, match="0.step"):
        opt.load_state_dict({"state": {"0.momentum_buffer": flow.ones(3, 4)}, "param_groups": []})
    # PyTorch's SGD: no step count, only the buffer, and only for parameters that stepped;
    # the others start afresh (the next step's buffer is its gradient)
    before = w.numpy().copy()
    opt.load_state_dict({"state": {1: {"momentum_buffer": flow.full((3,), 2.0)}},
                         "param_groups": [{"lr": 0.1, "momentum": 0.9, "dampening": 0,
                                           "weight_decay": 0, "nesterov": False,
                                           "maximize": False, "foreach": None,
                                           "differentiable": False, "fused": None,
                                           "params": [0, 1]}]})
    assert opt.state[w]["step"].tolist() == [0] and opt.state[b]["step"].tolist() == [1]
    _step(opt, [w, b], 1)
    gw, gb = _arrays(1)
    np.testing.assert_allclose(w.numpy(), before - 0.1 * gw, rtol=1e-12)
    np.testing.assert_allclose(opt.state[b]["momentum_buffer"].numpy(), 0.9 * 2.0 + gb,
                               rtol=1e-12)
    with pytest.raises(ValueError, match="number of parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0]}, {"params": [1]}]})
    with pytest.raises(ValueError, match="doesn't match the size"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0]}]})


def test_adagrad_state_not_stepped_holds_the_initial_value():
    # PyTorch's Adagrad sum starts at initial_accumulator_value; gflow's takes it at step 1
    w, b = _params(*_arrays())
    opt = flow.optim.Adagrad([w, b], lr=0.1, initial_accumulator_value=0.5)
    sd = opt.state_dict()
    assert sd["state"][0]["step"].item() == 0.0
    np.testing.assert_array_equal(sd["state"][0]["sum"].numpy(), np.full((3, 4), 0.5))
    _resume_equals("Adagrad", dict(lr=0.1, initial_accumulator_value=0.5), lambda sd: sd)
    fresh = flow.optim.Adagrad(_params(*_arrays()), lr=0.1, initial_accumulator_value=0.5)
    fresh.load_state_dict(sd)
    np.testing.assert_array_equal(fresh.state_dict()["state"][1]["sum"].numpy(), np.full(3, 0.5))


def _to_flow(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return flow.tensor(obj.detach().numpy())
    if isinstance(obj, dict):
        return {k: _to_flow(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_flow(v) for v in obj)
    return obj


def _to_torch(obj):
    import torch

    if isinstance(obj, flow.Tensor):
        return torch.tensor(obj.numpy())
    if isinstance(obj, dict):
        return {k: _to_torch(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_torch(v) for v in obj)
    return obj


@pytest.mark.parametrize("steps", [0, 2])
@pytest.mark.parametrize("name,options,names", OPTIMIZERS, ids=IDS)
def test_optimizer_takes_and_gives_torchs_state(name, options, names, steps):
    torch = pytest.importorskip("torch")
    w, b = _arrays()
    t = [torch.nn.Parameter(torch.tensor(a, dtype=torch.float32)) for a in (w, b)]
    topt = getattr(torch.optim, name)(t, **options)
    for seed in range(1, steps + 1):
        for p, g in zip(t, _arrays(seed)):
            p.grad = torch.tensor(g, dtype=torch.float32)
        topt.step()
    # PyTorch's state, its tensors made flow tensors, into a gflow optimizer
    f = [nn.Parameter(flow.tensor(p.detach().numpy())) for p in t]
    fopt = getattr(flow.optim, name)(f, lr=5.0)
    fopt.load_state_dict(_to_flow(topt.state_dict()))
    # and gflow's state back into a second PyTorch optimizer
    t2 = [torch.nn.Parameter(p.detach().clone()) for p in t]
    topt2 = getattr(torch.optim, name)(t2, lr=5.0)
    topt2.load_state_dict(_to_torch(fopt.state_dict()))
    for seed in (7, 8):
        grads = _arrays(seed)
        for p, g in zip(t + t2, grads + grads):
            p.grad = torch.tensor(g, dtype=torch.float32)
        for p, g in zip(f, grads):
            p.grad = flow.tensor(g.astype(np.float32))
        topt.step()
        topt2.step()
        fopt.step()
        for p, q, r in zip(t, f, t2):
            np.testing.assert_allclose(q.numpy(), p.detach().numpy(), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(r.detach().numpy(), p.detach().numpy(), rtol=1e-6,
                                       atol=1e-6)


def test_adam_resumes_torchs_state_as_the_brief_says():
    torch = pytest.importorskip("torch")
    w, b = _arrays()
    t = [torch.nn.Parameter(torch.tensor(a)) for a in (w, b)]
    topt = torch.optim.Adam(t, lr=0.01)
    for seed in (1, 2):
        for p, g in zip(t, _arrays(seed)):
            p.grad = torch.tensor(g)
        topt.step()
    f = [nn.Parameter(flow.tensor(p.detach().numpy())) for p in t]
    fopt = flow.optim.Adam(f, lr=0.01)
    fopt.load_state_dict(_to_flow(topt.state_dict()))
    grads = _arrays(3)
    for p, q, g in zip(t, f, grads):
        p.grad, q.grad = torch.tensor(g), flow.tensor(g)
    topt.step()
    fopt.step()
    for p, q in zip(t, f):
        np.testing.assert_allclose(q.numpy(), p.detach().numpy(), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------- two ranks


def test_two_ranks(run_job, tmp_path):
    job = run_job(Path(__file__), 2, "--two-ranks", str(tmp_path))
    assert job.rc == 0, job.stdout[-3000:] + job.stderr[-3000:]
    for r in (0, 1):
        lines = [line for line in job.out[r] if ": " in line]
        assert lines == ["zero_grad: True", "Adam: True", "Adagrad: True", "SGD: True"], job.out[r]


def _run_two_ranks(scratch):
    """Under the launcher with 2 processes: zero_grad(set_to_none=False) of split gradients,
    and optimizers on parameters split over both ranks saved with flow.save (PyTorch's
    format) and resumed on another layout take the same next step."""
    p2 = flow.placement("cpu", [0, 1])

    def params(w, b, sbp):
        return [nn.Parameter(flow.tensor(a, placement=p2, sbp=sbp)) for a in (w, b)]

    def step(opt, ps, seed):
        for p, g in zip(ps, _arrays(seed)):
            p.grad = flow.tensor(g, placement=p.placement, sbp=p.sbp)
        opt.step()

    w, b = params(*_arrays(), flow.sbp.split(0))
    opt = flow.optim.SGD([w, b], lr=0.1)
    (w * w).sum().backward()
    opt.zero_grad(set_to_none=False)
    print("zero_grad:", w.grad.sbp == w.sbp and not w.grad.numpy().any(), flush=True)
    for name, options in (("Adam", dict(lr=0.1, amsgrad=True)),
                          ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.5)),
                          ("SGD", dict(lr=0.1, momentum=0.9))):
        w, b = params(*_arrays(), flow.sbp.split(0))
        opt = getattr(flow.optim, name)([w, b], **options)
        for seed in (1, 2):
            step(opt, [w, b], seed)
        flow.save({"optim": opt.state_dict(), "name": name}, Path(scratch) / name)
        w2, b2 = params(w.numpy(), b.numpy(), flow.sbp.broadcast)
        again = getattr(flow.optim, name)([w2, b2], lr=9.0)
        ck = flow.load(Path(scratch) / name)
        again.load_state_dict(ck["optim"])
        for o, ps in ((opt, [w, b]), (again, [w2, b2])):
            step(o, ps, 3)
        same = ck["name"] == name and all(np.array_equal(p.numpy(), q.numpy())
                                          for p, q in zip((w, b), (w2, b2)))
        print(f"{name}:", same, flush=True)


if __name__ == "__main__" and "--two-ranks" in sys.argv:
    _run_two_ranks(sys.argv[-1])
