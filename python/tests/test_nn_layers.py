"""``nn.LayerNorm``, ``nn.RMSNorm``, ``nn.functional.scaled_dot_product_attention`` and
``nn.utils.clip_grad_norm_`` against float64 NumPy computations (forward, and gradients where the
formula is short), on local tensors and on global ones."""

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn
import gflow.nn.functional as F

P = flow.placement("cpu", [0])
RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape)


def layer_norm_ref(x, w, b, eps, n):
    axes = tuple(range(x.ndim - n, x.ndim))
    mu = x.mean(axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm_ref(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


@pytest.mark.parametrize("shape, norm", [((4, 6), 6), ((2, 3, 4), (3, 4))])
def test_layer_norm_matches_numpy_with_its_parameter_gradients(shape, norm):
    a, up = rand(*shape), rand(*shape)
    m = nn.LayerNorm(norm, eps=1e-5)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    with flow.no_grad():
        m.weight.data = flow.tensor(rand(*np.atleast_1d(norm)), dtype=flow.float32)
        m.bias.data = flow.tensor(rand(*np.atleast_1d(norm)), dtype=flow.float32)
    w, b = m.weight.numpy().astype(np.float64), m.bias.numpy().astype(np.float64)
    x = flow.tensor(a, dtype=flow.float32)
    y = m(x)
    n = len(np.atleast_1d(norm))
    np.testing.assert_allclose(y.numpy(), layer_norm_ref(a, w, b, 1e-5, n), rtol=1e-4, atol=1e-5)
    (y * flow.tensor(up, dtype=flow.float32)).sum().backward()
    xhat = layer_norm_ref(a, 1.0, 0.0, 1e-5, n)
    lead = tuple(range(a.ndim - n))
    np.testing.assert_allclose(m.weight.grad.numpy(), (up * xhat).sum(lead), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m.bias.grad.numpy(), up.sum(lead), rtol=1e-5, atol=1e-5)


def test_layer_norm_without_affine_and_rms_norm_on_global_inputs():
    a = rand(6, 8)
    x = flow.tensor(a, dtype=flow.float32, placement=P, sbp=flow.sbp.split(0))
    fixed = nn.LayerNorm(8, elementwise_affine=False)
    assert fixed.parameters() == []
    y = fixed(x)
    assert y.is_global and y.sbp == (flow.sbp.split(0),)
    np.testing.assert_allclose(y.numpy(), layer_norm_ref(a, 1.0, 0.0, 1e-5, 1), rtol=1e-4,
                               atol=1e-5)
    rms = nn.RMSNorm(8).to_global(placement=P, sbp=flow.sbp.broadcast)
    np.testing.assert_allclose(rms(x).numpy(), rms_norm_ref(a, 1.0, 1e-6), rtol=1e-4, atol=1e-5)


def test_rms_norm_matches_numpy_with_its_gradients():
    a, up = rand(3, 5), rand(3, 5)
    m = nn.RMSNorm(5, eps=1e-3)
    with flow.no_grad():
        m.weight.data = flow.tensor(rand(5), dtype=flow.float64)
    w = m.weight.numpy()
    x = flow.tensor(a, requires_grad=True)
    y = m(x)
    np.testing.assert_allclose(y.numpy(), rms_norm_ref(a, w, 1e-3), rtol=1e-12)
    (y * flow.tensor(up)).sum().backward()
    r = np.sqrt((a * a).mean(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(m.weight.grad.numpy(), (up * a / r).sum(0), rtol=1e-10)
    gy = up * w
    dx = gy / r - a * (gy * a).sum(-1, keepdims=True) / (a.shape[-1] * r ** 3)
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-10, atol=1e-12)


def test_norm_errors_are_typed():
    with pytest.raises(flow.InvalidArgumentError, match="last dim only"):
        nn.RMSNorm((3, 4))
    with pytest.raises(flow.InvalidArgumentError, match="positive"):
        nn.RMSNorm(0)
    with pytest.raises(flow.ShapeError, match="normalised"):
        nn.LayerNorm(4)(flow.ones(2, 5))


def sdpa_ref(q, k, v, mask=None, causal=False, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask", "scale"])
def test_sdpa_matches_numpy(case):
    q, k, v = rand(2, 3, 4, 8), rand(2, 3, 5, 8), rand(2, 3, 5, 6)
    kw, ref = {}, {}
    if case == "causal":
        k, v = k[:, :, :4], v[:, :, :4]
        kw["is_causal"] = ref["causal"] = True
    if case == "bool_mask":
        m = RNG.random((4, 5)) > 0.3
        m[:, 0] = True
        kw["attn_mask"], ref["mask"] = flow.tensor(m), m
    if case == "float_mask":
        m = rand(1, 3, 4, 5)
        kw["attn_mask"], ref["mask"] = flow.tensor(m), m
    if case == "scale":
        kw["scale"] = ref["scale"] = 0.3
    out = F.scaled_dot_product_attention(flow.tensor(q), flow.tensor(k), flow.tensor(v), **kw)
    np.testing.assert_allclose(out.numpy(), sdpa_ref(q, k, v, **ref), rtol=1e-10, atol=1e-12)


def test_sdpa_gradient_matches_finite_differences_and_keeps_heads_split():
    q, k, v = rand(1, 2, 3, 4), rand(1, 2, 3, 4), rand(1, 2, 3, 4)
    up = rand(1, 2, 3, 4)
    qt = flow.tensor(q, requires_grad=True)
    args = [t.to_global(placement=P, sbp=flow.sbp.split(1))
            for t in (qt, flow.tensor(k), flow.tensor(v))]
    out = F.scaled_dot_product_attention(*args, is_causal=True)
    assert out.sbp == (flow.sbp.split(1),)
    (out * flow.tensor(up).to_global(placement=P, sbp=flow.sbp.broadcast)).sum().backward()
    f = lambda qq: (sdpa_ref(qq, k, v, causal=True) * up).sum()
    num = np.zeros_like(q)
    for i in np.ndindex(q.shape):
        d = np.zeros_like(q)
        d[i] = 1e-6
        num[i] = (f(q + d) - f(q - d)) / 2e-6
    np.testing.assert_allclose(qt.grad.numpy(), num, rtol=1e-6, atol=1e-8)


def test_sdpa_refuses_dropout_and_bad_shapes():
    x = flow.ones(1, 1, 2, 2)
    with pytest.raises(flow.InvalidArgumentError, match="dropout_p"):
        F.scaled_dot_product_attention(x, x, x, dropout_p=0.1)
    with pytest.raises(flow.ShapeError, match="batch, heads, seq, head_dim"):
        F.scaled_dot_product_attention(flow.ones(2, 2), x, x)


def params_with_grads(global_):
    ws = [flow.tensor(rand(3, 4), requires_grad=True), flow.tensor(rand(5), requires_grad=True)]
    ps = [w.to_global(placement=P, sbp=s) for w, s in
          zip(ws, (flow.sbp.split(0), flow.sbp.broadcast))] if global_ else ws
    gs = [rand(3, 4), rand(5)]
    for p, g in zip(ps, gs):
        p.grad = flow.tensor(g).to_global(placement=P, sbp=p.sbp) if global_ else flow.tensor(g)
    return ps, gs


@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_clip_grad_norm_scales_every_gradient_as_pytorch(global_):
    ps, gs = params_with_grads(global_)
    norm = np.sqrt(sum((g * g).sum() for g in gs))
    total = nn.utils.clip_grad_norm_(ps, 1.0)
    assert isinstance(total, flow.Tensor) and total.dtype == flow.float64
    np.testing.assert_allclose(float(total), norm, rtol=1e-12)
    coef = 1.0 / (norm + 1e-6)
    for p, g in zip(ps, gs):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-12)
    # Below max_norm nothing changes.
    ps, gs = params_with_grads(global_)
    nn.utils.clip_grad_norm_(ps, 10 * norm)
    for p, g in zip(ps, gs):
        np.testing.assert_array_equal(p.grad.numpy(), g)


def test_clip_grad_norm_errors():
    w = flow.tensor([1.0], requires_grad=True)
    with pytest.raises(flow.InvalidArgumentError, match="max_norm"):
        nn.utils.clip_grad_norm_(w, -1.0)


def test_docstring_examples_run():
    import doctest

    for module in (flow, nn.utils):
        assert doctest.testmod(module).failed == 0


def test_module_containers_grow_as_pytorchs():
    """``Sequential.append/extend``, ``ModuleList.extend``, ``add_module`` (PyTorch's checks of
    the name) and ``named_children`` naming a module held twice once."""
    s = flow.nn.Sequential(flow.nn.Linear(2, 3))
    s.append(flow.nn.ReLU()).extend([flow.nn.Linear(3, 1)])
    assert len(s) == 3 and len(list(s.parameters())) == 4
    assert s(flow.randn(4, 2)).shape == (4, 1)
    lst = flow.nn.ModuleList([flow.nn.Linear(1, 1)]).extend([flow.nn.ReLU()])
    assert len(lst) == 2
    m = flow.nn.Module()
    lin = flow.nn.Linear(1, 1)
    m.add_module("a", lin)
    m.b = lin
    assert [n for n, _ in m.named_children()] == ["a"]
    with pytest.raises(KeyError):
        m.add_module("x.y", flow.nn.ReLU())
    with pytest.raises(TypeError):
        m.add_module("c", 3)
