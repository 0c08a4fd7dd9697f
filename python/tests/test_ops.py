"""The round-2 operators and dtypes from Python, each against NumPy (in one process, local and on
a one-rank placement, where the operator runs its global path)."""

import math

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn

P = flow.placement("cpu", [0])
RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)


def both(a):
    """The array as a local tensor and as a global one (split on dim 0)."""
    return [flow.tensor(a), flow.tensor(a).to_global(placement=P, sbp=flow.sbp.split(0))]


@pytest.mark.parametrize("kind", [0, 1])
def test_comparisons_are_bool_tensors(kind):
    x, y = both(A)[kind], both(B)[kind]
    for got, want in [(x == y, A == B), (x != y, A != B), (x < y, A < B), (x <= y, A <= B),
                      (x > y, A > B), (x >= y, A >= B), (x > 0, A > 0), (x.lt(0.5), A < 0.5)]:
        assert got.dtype == flow.bool
        np.testing.assert_array_equal(got.numpy(), want)
    assert (x == x).numpy().all()


@pytest.mark.parametrize("kind", [0, 1])
def test_where_masked_fill_tril_triu(kind):
    x, y = both(A)[kind], both(B)[kind]
    np.testing.assert_array_equal(flow.where(x > y, x, y).numpy(), np.where(A > B, A, B))
    np.testing.assert_array_equal(flow.where(x > 0, x, 0.0).numpy(), np.where(A > 0, A, 0))
    np.testing.assert_array_equal(x.masked_fill(x < 0, -9.0).numpy(), np.where(A < 0, -9, A))
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(x.tril(k).numpy(), np.tril(A, k))
        np.testing.assert_array_equal(flow.triu(x, k).numpy(), np.triu(A, k))


@pytest.mark.parametrize("kind", [0, 1])
def test_activations_softmax_and_cross_entropy(kind):
    x = both(A)[kind]
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(x.gelu().numpy(), 0.5 * A * (1 + erf(A / np.sqrt(2))), rtol=1e-5, atol=1e-6)
    tanh_form = 0.5 * A * (1 + np.tanh(np.sqrt(2 / np.pi) * (A + 0.044715 * A ** 3)))
    np.testing.assert_allclose(nn.GELU(approximate="tanh")(x).numpy(), tanh_form, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nn.SiLU()(x).numpy(), A / (1 + np.exp(-A)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(flow.nn.functional.silu(x).numpy(), A / (1 + np.exp(-A)), rtol=1e-5, atol=1e-6)
    e = np.exp(A - A.max(1, keepdims=True))
    np.testing.assert_allclose(x.softmax(dim=1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(x.logsumexp(1).numpy(), np.log(np.exp(A).sum(1)), rtol=1e-5)
    target = np.array([1, 0, 3])
    t = flow.tensor(target)
    if kind:
        t = t.to_global(placement=P, sbp=flow.sbp.split(0))
    logp = A - np.log(np.exp(A).sum(1, keepdims=True))
    want = -logp[np.arange(3), target].mean()
    np.testing.assert_allclose(nn.CrossEntropyLoss()(x, t).numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("kind", [0, 1])
def test_unary_and_reductions(kind):
    x = both(A)[kind]
    for name, f in [("abs", np.abs), ("sin", np.sin), ("cos", np.cos), ("exp", np.exp)]:
        np.testing.assert_allclose(getattr(x, name)().numpy(), f(A), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.abs().rsqrt().numpy(), 1 / np.sqrt(np.abs(A)), rtol=1e-5)
    np.testing.assert_allclose((x.abs() ** 1.5).numpy(), np.abs(A) ** 1.5, rtol=1e-5)
    np.testing.assert_allclose(x.clamp(-0.5, 0.5).numpy(), np.clip(A, -0.5, 0.5))
    np.testing.assert_allclose(x.clamp(min=0).numpy(), np.maximum(A, 0))
    np.testing.assert_allclose(x.min(dim=0).values.numpy(), A.min(0))
    np.testing.assert_allclose(flow.maximum(x, both(B)[kind]).numpy(), np.maximum(A, B))
    np.testing.assert_allclose(flow.minimum(x, both(B)[kind]).numpy(), np.minimum(A, B))
    am = x.argmax(dim=1)
    assert am.dtype == flow.int64
    np.testing.assert_array_equal(am.numpy(), A.argmax(1))
    np.testing.assert_array_equal(x.argmin(dim=0, keepdim=True).numpy(), A.argmin(0)[None])
    assert x.argmax().item() == A.argmax()


@pytest.mark.parametrize("kind", [0, 1])
def test_layout_and_indexing(kind):
    c = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    x = both(c)[kind]
    np.testing.assert_array_equal(x.permute(2, 0, 1).numpy(), c.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.permute((1, 0, 2)).numpy(), c.transpose(1, 0, 2))
    parts = x.split(3, dim=2)
    assert [p.shape for p in parts] == [(2, 3, 3), (2, 3, 1)]
    np.testing.assert_array_equal(parts[1].numpy(), c[:, :, 3:])
    chunks = x.chunk(2, dim=-1)
    np.testing.assert_array_equal(chunks[0].numpy(), c[:, :, :2])
    # An index goes with its tensor: local with local, global (broadcast) with global.
    def index(a):
        t = flow.tensor(a)
        return t.to_global(placement=P, sbp=flow.sbp.broadcast) if kind else t
    idx = np.array([2, 0, 2])
    np.testing.assert_array_equal(x.index_select(1, index(idx)).numpy(), c[:, idx])
    g = RNG.integers(0, 4, (2, 3, 4))
    np.testing.assert_array_equal(x.gather(2, index(g)).numpy(), np.take_along_axis(c, g, 2))


def test_dtypes_and_casts():
    assert [repr(d) for d in (flow.float16, flow.bfloat16, flow.int32, flow.bool)] == [
        "flow.float16", "flow.bfloat16", "flow.int32", "flow.bool"]
    assert flow.half == flow.float16 and flow.int == flow.int32
    assert flow.float16.is_floating_point and not flow.int32.is_floating_point
    x = flow.tensor(np.array([1.7, -2.5, 0.0, 3.25], dtype=np.float32))
    h = x.to(flow.float16)
    assert h.dtype == flow.float16 and h.numpy().dtype == np.float16
    np.testing.assert_array_equal(h.numpy(), np.array([1.7, -2.5, 0, 3.25], dtype=np.float16))
    bf = x.to(flow.bfloat16)
    assert bf.dtype == flow.bfloat16
    np.testing.assert_allclose(bf.numpy(), [1.703125, -2.5, 0, 3.25])  # 8 bits of mantissa
    i = x.to(flow.int32)
    assert i.dtype == flow.int32 and i.numpy().dtype == np.int32
    np.testing.assert_array_equal(i.numpy(), [1, -2, 0, 3])  # truncation, as PyTorch
    b = x.bool()
    assert b.dtype == flow.bool and b.numpy().dtype == np.bool_
    np.testing.assert_array_equal(b.numpy(), [True, True, False, True])
    assert x.long().dtype == flow.int64 and x.double().numpy().dtype == np.float64
    assert x.to("cpu") is not None and x.int().float().dtype == flow.float32
    # NumPy arrays keep their dtype.
    for np_dtype, dtype in [(np.int32, flow.int32), (np.float16, flow.float16),
                            (np.bool_, flow.bool), (np.int64, flow.int64)]:
        t = flow.tensor(np.array([1, 0, 1], dtype=np_dtype))
        assert t.dtype == dtype and t.numpy().dtype == np_dtype
    assert flow.tensor([True, False]).dtype == flow.bool
    # Integer tensors against float numbers promote, as PyTorch.
    np.testing.assert_array_equal((flow.tensor([1, 2]) > 1.5).numpy(), [False, True])


def test_tensors_hash_as_objects():
    x, y = flow.ones(2), flow.ones(2)
    assert len({x, y, x}) == 2


def test_integer_matmul_as_torch():
    # torch.tensor([[1, 2]]) @ torch.tensor([[3], [4]]) is tensor([[11]]) (int64)
    y = flow.tensor([[1, 2]]) @ flow.tensor([[3], [4]])
    assert y.dtype == flow.int64
    np.testing.assert_array_equal(y.numpy(), [[11]])


def test_shape_methods_take_torch_keywords():
    x = flow.tensor(np.arange(6, dtype=np.float32))
    assert x.reshape(shape=(2, 3)).shape == flow.Size([2, 3])
    assert x.view(size=(3, 2)).shape == flow.Size([3, 2])
    y = x.reshape(2, 3)
    assert y.permute(dims=(1, 0)).shape == flow.Size([3, 2])
    assert flow.tensor(np.ones((1, 3), dtype=np.float32)).expand(size=(4, 3)).shape == flow.Size([4, 3])
    with pytest.raises(TypeError):
        x.reshape(shap=(2, 3))


def test_var_and_std_as_torch():
    a = np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]], dtype=np.float32)
    x = flow.tensor(a)
    np.testing.assert_allclose(x.var().numpy(), a.var(ddof=1), rtol=1e-6)
    np.testing.assert_allclose(x.var(1).numpy(), a.var(axis=1, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(x.var(0, unbiased=False).numpy(), a.var(axis=0), rtol=1e-6)
    np.testing.assert_allclose(x.std(1, correction=0, keepdim=True).numpy(),
                               a.std(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(flow.std(x, 0).numpy(), a.std(axis=0, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(x.var(False).numpy(), a.var(), rtol=1e-6)
    assert np.isnan(flow.tensor(np.array([1.0], dtype=np.float32)).var().numpy())
    with pytest.raises(RuntimeError):
        flow.tensor([1, 2, 3]).var()
    y = flow.tensor(a, requires_grad=True)
    y.var().backward()  # d var / dx = 2 (x - mean) / (n - 1)
    np.testing.assert_allclose(y.grad.numpy(), 2 * (a - a.mean()) / 5, rtol=1e-5)


def test_flip_and_repeat_as_torch():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = flow.tensor(a)
    np.testing.assert_array_equal(x.flip(1).numpy(), a[:, ::-1])
    np.testing.assert_array_equal(flow.flip(x, (0, 1)).numpy(), a[::-1, ::-1])
    np.testing.assert_array_equal(x.flip(dims=[0]).numpy(), a[::-1])
    np.testing.assert_array_equal(x.repeat(2, 1).numpy(), np.tile(a, (2, 1)))
    np.testing.assert_array_equal(x.repeat((2, 1, 2)).numpy(), np.tile(a, (2, 1, 2)))
    ints = flow.tensor([1, 2, 3])
    assert ints.repeat(2).dtype == flow.int64
    np.testing.assert_array_equal(ints.repeat(2).numpy(), [1, 2, 3, 1, 2, 3])
    y = flow.tensor(a, requires_grad=True)
    (y.flip(0).repeat(2, 1) * flow.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))).sum().backward()
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(y.grad.numpy(), (w[:2] + w[2:])[::-1])
    with pytest.raises(RuntimeError):
        x.repeat(2)


def test_cumsum_as_torch():
    # Values and gradient recorded from PyTorch 2.15: x.cumsum(1), then (y * y).sum().backward().
    x = flow.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], requires_grad=True)
    y = x.cumsum(1)
    np.testing.assert_array_equal(y.numpy(), [[1.0, -1.0, 2.0], [4.0, 9.0, 3.0]])
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[4.0, 2.0, 4.0], [32.0, 24.0, 6.0]])
    np.testing.assert_array_equal(flow.cumsum(x, dim=0).numpy(), [[1, -2, 3], [5, 3, -3]])
    assert x.cumsum(-1, dtype=flow.float64).dtype == flow.float64
    ints = flow.tensor([1, 2, 3], dtype=flow.int32).cumsum(0)
    assert ints.dtype == flow.int64 and ints.numpy().tolist() == [1, 3, 6]
    assert (flow.tensor([1.0, 0.0, 2.0]) > 0).cumsum(0).numpy().tolist() == [1, 1, 2]
    # Longer than a block of the scan, global and split along the summed dim.
    v = np.arange(300, dtype=np.float64).reshape(3, 100) / 7
    g = flow.tensor(v, placement=flow.placement("cpu", [0]), sbp=flow.sbp.split(1))
    np.testing.assert_allclose(g.cumsum(1).numpy(), np.cumsum(v, axis=1), rtol=1e-12)
    with pytest.raises(flow.ShapeError, match="out of range"):
        x.cumsum(2)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.sum(2),
        lambda x: x.softmax(-3),
        lambda x: x.cumsum(5),
        lambda x: x.unsqueeze(4),
        lambda x: x.transpose(0, 2),
        lambda x: x.argmax(2),
        lambda x: flow.cat([x, x], dim=3),
    ],
)
def test_a_dim_out_of_range_is_an_index_error_as_in_pytorch(call):
    # PyTorch raises IndexError("Dimension out of range ..."); gflow's error is both that and
    # a flow.ShapeError.
    x = flow.randn(2, 3)
    with pytest.raises(IndexError, match="out of range") as e:
        call(x)
    assert isinstance(e.value, flow.ShapeError) and isinstance(e.value, flow.DimOutOfRangeError)


def test_rounding_as_torch():
    v = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1.234567, -7.77, 0.125]
    x = flow.tensor(v, requires_grad=True)
    # torch 2.15's values for the same input
    want = {
        "floor": [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 1.0, -8.0, 0.0],
        "ceil": [-2.0, -1.0, -0.0, 1.0, 2.0, 3.0, 2.0, -7.0, 1.0],
        "trunc": [-2.0, -1.0, -0.0, 0.0, 1.0, 2.0, 1.0, -7.0, 0.0],
        "round": [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 1.0, -8.0, 0.0],
    }
    for name, w in want.items():
        np.testing.assert_array_equal(getattr(x, name)().numpy(), w)
        np.testing.assert_array_equal(getattr(flow, name)(x).numpy(), w)
    # torch: x.round(decimals=2) and (decimals=-1)
    np.testing.assert_array_equal(
        x.round(decimals=2).numpy(),
        np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1.23, -7.77, 0.12], dtype=np.float32))
    np.testing.assert_array_equal(x.round(decimals=-1).numpy(), [-0.0, -0.0, -0.0, 0.0, 0.0, 0.0,
                                                                0.0, -10.0, 0.0])
    # piecewise constant: zero gradient, as torch (not None)
    (x.floor() * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(9))
    i = flow.tensor([3, -4])
    assert i.floor().dtype == flow.int64 and i.round().numpy().tolist() == [3, -4]
    g = flow.tensor(np.array([[0.5, 1.5], [2.5, -0.7]])).to_global(
        placement=flow.placement("cpu", [0]), sbp=flow.sbp.split(1))
    np.testing.assert_array_equal(g.round().numpy(), [[0.0, 2.0], [2.0, -1.0]])
