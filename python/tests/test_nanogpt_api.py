"""What a PyTorch GPT script (nanoGPT's model.py and train.py) calls beyond the basics:
``topk`` and ``multinomial`` for sampling, ``nn.init`` and ``Tensor.normal_`` / ``uniform_``
through ``model.apply``, ``nn.ModuleDict``, tied weights counted once, and AdamW with param
groups (weight decay per group, the learning rate set per group each step)."""

import math

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn
import gflow.nn.functional as F

P2 = flow.placement("cpu", [0])


def test_topk_as_torch():
    x = flow.tensor([[1.0, 5.0, 3.0, 5.0], [0.0, 2.0, 2.0, -1.0]], requires_grad=True)
    # torch.topk(x, 2): values [[5, 5], [2, 2]], indices [[1, 3], [1, 2]] (ties: lower first)
    v, i = x.topk(2)
    np.testing.assert_array_equal(v.numpy(), [[5.0, 5.0], [2.0, 2.0]])
    np.testing.assert_array_equal(i.numpy(), [[1, 3], [1, 2]])
    assert i.dtype == flow.int64
    # torch.topk(x, 1, dim=0, largest=False): values [[0, 2, 2, -1]], indices [[1, 1, 1, 1]]
    r = flow.topk(x, 1, dim=0, largest=False)
    np.testing.assert_array_equal(r.values.numpy(), [[0.0, 2.0, 2.0, -1.0]])
    np.testing.assert_array_equal(r.indices.numpy(), [[1, 1, 1, 1]])
    # the gradient goes to the chosen elements
    (v * flow.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0, 2], [0, 3, 4, 0]])
    # nanoGPT's top-k filter: logits below the k-th largest become -inf
    logits = flow.tensor([[0.1, 2.0, -1.0, 0.7, 3.0]])
    kth = logits.topk(2).values[:, [-1]]
    logits[logits < kth] = -float("inf")
    assert np.isinf(logits.numpy()).sum() == 3
    g = flow.tensor(np.arange(12.0).reshape(3, 4)).to_global(placement=P2, sbp=flow.sbp.split(1))
    np.testing.assert_array_equal(g.topk(2, dim=1).indices.numpy(), [[3, 2]] * 3)
    with pytest.raises(flow.InvalidArgumentError, match="larger than"):
        x.topk(5)
    with pytest.raises(IndexError):
        x.topk(1, dim=2)


def test_multinomial_as_torch():
    flow.manual_seed(5)
    probs = F.softmax(flow.tensor([[0.0, 1.0, 2.0, -30.0]]), dim=-1)
    draws = flow.multinomial(probs, num_samples=4000, replacement=True)
    assert draws.shape == flow.Size([1, 4000]) and draws.dtype == flow.int64
    counts = np.bincount(draws.numpy().ravel(), minlength=4)
    p = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    assert np.all(np.abs(counts[:3] / 4000 - p) < 0.035), counts
    # without replacement (torch's default): distinct categories per row
    w = flow.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 5.0, 1.0, 1.0]])
    d = w.multinomial(3)
    assert sorted(d.numpy()[0]) == [0, 1, 2] and sorted(d.numpy()[1]) == [1, 2, 3]
    # nanoGPT's sampling step: one index per row, appended to the sequence
    idx = flow.zeros(2, 3, dtype=flow.long)
    nxt = flow.multinomial(F.softmax(flow.randn(2, 10), dim=-1), num_samples=1)
    assert flow.cat((idx, nxt), dim=1).shape == flow.Size([2, 4])
    with pytest.raises(flow.InvalidArgumentError, match="non-negative"):
        flow.tensor([0.5, -0.1]).multinomial(1)
    with pytest.raises(flow.InvalidArgumentError, match="only 2"):
        flow.tensor([0.5, 0.0, 1.0]).multinomial(3)


def test_in_place_random_fills_and_nn_init():
    flow.manual_seed(1)
    w = flow.zeros(400, 300)
    w.normal_(mean=1.0, std=0.02)
    assert abs(w.numpy().mean() - 1.0) < 2e-3 and abs(w.numpy().std() - 0.02) < 1e-3
    w.uniform_(-2.0, 3.0)
    assert w.numpy().min() >= -2.0 and w.numpy().max() < 3.0
    assert abs(w.numpy().mean() - 0.5) < 0.05
    lin = nn.Linear(300, 400)
    a = math.sqrt(6.0 / 700)
    nn.init.xavier_uniform_(lin.weight)
    assert np.abs(lin.weight.numpy()).max() <= a and np.abs(lin.weight.numpy()).max() > 0.95 * a
    nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
    assert abs(lin.weight.numpy().std() - math.sqrt(2.0 / 300)) < 2e-3
    nn.init.zeros_(lin.bias)
    assert not lin.bias.numpy().any()
    nn.init.constant_(lin.bias, 0.5)
    assert (lin.bias.numpy() == 0.5).all()
    assert lin.weight.requires_grad and lin.weight.is_leaf
    # a global parameter keeps its placement and SBP, and its values do not depend on them
    flow.manual_seed(2)
    g = flow.zeros(8, 6).to_global(placement=P2, sbp=flow.sbp.split(0))
    g.normal_()
    assert g.sbp == (flow.sbp.split(0),) and g.is_global
    flow.manual_seed(2)
    b = flow.zeros(8, 6).to_global(placement=P2, sbp=flow.sbp.broadcast)
    np.testing.assert_array_equal(b.normal_().numpy(), g.numpy())
    with pytest.raises(flow.DTypeError):
        flow.zeros(3, dtype=flow.int64).normal_()
    with pytest.raises(RuntimeError, match="leaf"):
        flow.zeros(3, requires_grad=True).normal_()
    with pytest.raises(ValueError):
        nn.init.xavier_uniform_(flow.zeros(5))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.ln = nn.LayerNorm(4)


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(10, 4),
            h=nn.ModuleList([Block() for _ in range(2)]),
        ))
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx):
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block.ln(block.fc(x))
        return self.lm_head(x)


def test_module_dict_apply_and_tied_weights():
    m = TinyGPT()
    names = [n for n, _ in m.named_parameters()]
    # the tied table comes once, under its first name, as PyTorch's
    assert names[0] == "transformer.wte.weight" and "lm_head.weight" not in names
    assert sum(p.numel() for p in m.parameters()) == 10 * 4 + 2 * (4 * 4 + 4 + 4 + 4)
    assert "lm_head.weight" in m.state_dict() and "transformer.wte.weight" in m.state_dict()
    assert [n for n, _ in m.named_modules()][:4] == ["", "transformer", "transformer.wte",
                                                       "transformer.h"]
    assert len(m.modules()) == 11 and set(m.transformer.keys()) == {"wte", "h"}
    assert "wte" in m.transformer and isinstance(m.transformer["h"], nn.ModuleList)
    # apply ran the init on every Linear: small weights, zero biases
    assert np.abs(m.lm_head.weight.numpy()).max() < 0.1
    assert not m.transformer.h[1].fc.bias.numpy().any()
    out = m(flow.tensor([[1, 2, 3]]))
    assert out.shape == flow.Size([1, 3, 10])
    with pytest.raises(TypeError):
        nn.ModuleDict({"x": 3})


def adamw_reference(p, grads, lr, wd, betas=(0.9, 0.95), eps=1e-8):
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, (g, step_lr) in enumerate(zip(grads, lr), start=1):
        p = p * (1 - step_lr * wd)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        mh, vh = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        p = p - step_lr * mh / (np.sqrt(vh) + eps)
    return p


def test_adamw_param_groups_as_nanogpt_builds_them():
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]])
    b0 = np.array([0.1, -0.2])
    w = nn.Parameter(flow.tensor(w0))
    b = nn.Parameter(flow.tensor(b0))
    groups = [{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}]
    opt = flow.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95))
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    lrs = [1e-2, 5e-3, 2e-3]
    gw, gb = [], []
    for step, lr in enumerate(lrs):
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = ((w * w).sum() * (step + 1) + (b * 3.0).sum())
        loss.backward()
        gw.append(w.grad.numpy().copy())
        gb.append(b.grad.numpy().copy())
        opt.step()
    np.testing.assert_allclose(w.numpy(), adamw_reference(w0, gw, lrs, 0.1), rtol=1e-10)
    np.testing.assert_allclose(b.numpy(), adamw_reference(b0, gb, lrs, 0.0), rtol=1e-10)
    # the state of both groups, numbered over all parameters, round-trips
    sd = opt.state_dict()
    assert list(sd["state"]) == [0, 1] and "exp_avg" in sd["state"][1]
    assert [g["lr"] for g in sd["param_groups"]] == [2e-3, 2e-3]
    again = flow.optim.AdamW(groups, lr=1.0)
    again.load_state_dict(sd)
    np.testing.assert_array_equal(again.state_dict()["state"][1]["exp_avg"].numpy(),
                                  sd["state"][1]["exp_avg"].numpy())
    assert again.param_groups[1]["lr"] == 2e-3
    with pytest.raises(ValueError, match="more than once"):
        flow.optim.AdamW([{"params": [w]}, {"params": [w, b]}])
    with pytest.raises(TypeError, match="unknown param group options"):
        flow.optim.AdamW([{"params": [w], "momentum": 0.9}])


class MaskedAttention(nn.Module):
    """nanoGPT's attention without flash: a causal mask as a buffer."""

    def __init__(self, n=4):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.register_buffer("bias", flow.tril(flow.ones(n, n)).view(1, 1, n, n))
        self.register_buffer("scratch", flow.zeros(2), persistent=False)

    def forward(self, att):
        t = att.size(-1)
        return att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf")).softmax(-1)


def test_buffers_as_torch():
    m = MaskedAttention()
    outer = nn.ModuleDict({"attn": m})
    assert [n for n, _ in outer.named_buffers()] == ["attn.bias", "attn.scratch"]
    assert len(outer.buffers()) == 2 and [n for n, _ in outer.named_parameters()] == [
        "attn.lin.weight", "attn.lin.bias"]
    sd = outer.state_dict()
    assert "attn.bias" in sd and "attn.scratch" not in sd
    np.testing.assert_array_equal(sd["attn.bias"].numpy(), np.tril(np.ones((4, 4)))[None, None])
    # loading writes the buffer in place; assigning a registered name replaces the buffer
    sd["attn.bias"] = flow.ones(1, 1, 4, 4)
    outer.load_state_dict(sd)
    assert m.bias.numpy().all()
    m.bias = flow.tril(flow.ones(4, 4)).view(1, 1, 4, 4)
    assert "bias" in m._buffers and m._buffers["bias"] is m.bias
    out = m(flow.zeros(1, 1, 3, 3))
    np.testing.assert_allclose(out.numpy()[0, 0, 1], [0.5, 0.5, 0.0])
    # to_global converts buffers too
    m.to_global(placement=P2, sbp=flow.sbp.broadcast)
    assert m.bias.is_global and m.scratch.is_global and m.lin.weight.is_global
    g = flow.zeros(1, 1, 3, 3).to_global(placement=P2, sbp=flow.sbp.broadcast)
    np.testing.assert_allclose(m(g).numpy()[0, 0, 2], [1 / 3] * 3)
    m.to_local()
    assert not m.bias.is_global
    with pytest.raises(KeyError):
        m.register_buffer("lin", flow.zeros(1))
    with pytest.raises(TypeError):
        m.register_buffer("other", [1, 2])


def test_module_conveniences_and_grad_modes_as_torch():
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    m.register_buffer("steps", flow.zeros(1, dtype=flow.int64))
    assert m.to("cpu") is m and m.cpu() is m
    assert m.to(flow.float64)[0].weight.dtype == flow.float64
    assert m.steps.dtype == flow.int64  # only floating tensors are cast
    assert m.float()[0].bias.dtype == flow.float32 and m.half()[0].weight.dtype == flow.float16
    assert m.bfloat16()[0].weight.dtype == flow.bfloat16 and m.double()[0].weight.dtype == flow.float64
    assert m.to(device="cpu", dtype=flow.float32)[0].weight.dtype == flow.float32
    assert not m.requires_grad_(False)[0].weight.requires_grad
    assert m.requires_grad_()[0].weight.requires_grad
    opt = flow.optim.SGD(m.parameters(), lr=0.1)
    m.double()  # an optimizer built before follows the converted parameters
    m(flow.randn(4, 2, dtype=flow.float64)).sum().backward()
    opt.step()
    m.zero_grad(set_to_none=False)
    assert m[0].weight.grad is not None and not m[0].weight.grad.numpy().any()
    m.zero_grad()
    assert m[0].weight.grad is None
    with pytest.raises(TypeError):
        m.to(memory_format=None)

    x = flow.randn(2, requires_grad=True)
    with flow.no_grad():
        with flow.enable_grad():
            assert (x * 2).requires_grad
        assert not (x * 2).requires_grad
    flow.set_grad_enabled(False)
    assert not flow.is_grad_enabled() and not (x * 2).requires_grad
    flow.set_grad_enabled(True)
    assert (x * 2).requires_grad
    with flow.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad
    with flow.inference_mode():
        assert not (x * 2).requires_grad

    @flow.inference_mode()
    def infer():
        return (x * 2).requires_grad

    @flow.set_grad_enabled(False)
    def frozen():
        return (x * 2).requires_grad

    assert not infer() and not frozen() and (x * 2).requires_grad
    # the boxing buffer pool empties on request (its filling is tests/empty_cache.rs's)
    assert isinstance(flow.empty_cache(), int) and flow.empty_cache() == 0
