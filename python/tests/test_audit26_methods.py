"""Audit 26's differences from PyTorch in the Python-composed methods (``gflow/_methods.py``):
``index_fill`` / ``scatter(value=)`` (and their in-place forms), ``addcmul`` ``addmm``
``baddbmm`` keep an integer, bool or 16-bit ``self``'s dtype, the scalar cast to it as
PyTorch's; ``scatter`` with a repeated index writes the last source in index order (PyTorch's
CPU loop), never a sum; ``dot`` of int32 is int32; ``isclose`` / ``allclose`` of bool tensors
and ``bool ** bool``; and the names added: ``Tensor.softmax`` / ``log_softmax`` with
``dtype=``, ``isin``, ``hypot``, ``logcumsumexp`` (values and gradients).

Each is checked against a NumPy or plain-Python reference written here, and, where torch is
importable, against torch's values, dtypes and gradients."""

import math

import numpy as np
import pytest

import gflow as flow
import gflow._methods as methods
from torch_cases import KINDS, make

RNG = np.random.default_rng(26)
INF, NAN = math.inf, math.nan

DTYPES = {"int32": (flow.int32, np.int32), "int64": (flow.int64, np.int64),
          "bool": (flow.bool, np.bool_), "float16": (flow.float16, np.float16),
          "bfloat16": (flow.bfloat16, np.float32), "float32": (flow.float32, np.float32),
          "float64": (flow.float64, np.float64)}


def _torch():
    return pytest.importorskip("torch")


def _tdtype(torch, name):
    return getattr(torch, name)


def cast_scalar(value, name):
    """What PyTorch stores for the number ``value`` in a tensor of dtype ``name``."""
    if name == "bool":
        return value != 0
    if name.startswith("int"):
        return math.trunc(value)
    if name == "float16":
        return float(np.float16(value))
    return value


def base(name, shape=(2, 4)):
    a = RNG.integers(-5, 6, shape)
    return (a > 0) if name == "bool" else a.astype(np.float64 if "float" in name else np.int64)


# --- index_fill / scatter(value=) keep self's dtype ---


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("value", [7.5, -7.5, 1, 0, True, 2.25])
def test_index_fill_keeps_dtype(name, value):
    fdt, _ = DTYPES[name]
    a = base(name)
    x = flow.tensor(a, dtype=fdt)
    out = x.index_fill(1, flow.tensor([1, 3]), value)
    assert out.dtype == fdt
    want = a.astype(np.float64)
    want[:, [1, 3]] = cast_scalar(value, name)
    np.testing.assert_array_equal(out.numpy().astype(np.float64), want)
    # in place too (a bool tensor used to refuse the int64 result)
    y = flow.tensor(a, dtype=fdt)
    assert y.index_fill_(1, flow.tensor([1, 3]), value) is y
    np.testing.assert_array_equal(y.numpy().astype(np.float64), want)


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("value", [2.5, -2.5, 1, True])
def test_scatter_value_keeps_dtype(name, value):
    fdt, _ = DTYPES[name]
    a = base(name)
    idx = np.array([[0, 2], [3, 3]])
    out = flow.tensor(a, dtype=fdt).scatter(1, flow.tensor(idx), value)
    assert out.dtype == fdt
    want = a.astype(np.float64)
    for r in range(2):
        want[r, idx[r]] = cast_scalar(value, name)
    np.testing.assert_array_equal(out.numpy().astype(np.float64), want)
    y = flow.tensor(a, dtype=fdt)
    y.scatter_(1, flow.tensor(idx), value=value)
    assert y.dtype == fdt
    np.testing.assert_array_equal(y.numpy().astype(np.float64), want)


def test_index_fill_tensor_value_cast_to_self_dtype_with_gradient():
    x = flow.tensor([[1, 2, 3]], dtype=flow.int32)
    out = x.index_fill(1, flow.tensor([1]), flow.tensor(7.5, dtype=flow.float64))
    assert out.dtype == flow.int32 and out.tolist() == [[1, 7, 3]]
    # a float value tensor into float64: float64, and the gradient reaches the value (once per
    # filled position, a repeated index counted once, as PyTorch)
    v = flow.tensor(3.0, requires_grad=True)
    out = flow.zeros(2, 3, dtype=flow.float64).index_fill(1, flow.tensor([1, 1, 2]), v)
    assert out.dtype == flow.float64
    out.sum().backward()
    assert v.grad.item() == 4.0


@pytest.mark.parametrize("name,value", [("int32", 3e9), ("int32", NAN), ("int32", INF),
                                        ("int32", -2147483648.9), ("int64", 2 ** 63),
                                        ("float16", 1e5), ("bfloat16", 1e39),
                                        ("float32", 1e39)])
def test_fill_value_out_of_range_refused(name, value):
    fdt, _ = DTYPES[name]
    x = flow.zeros(3, dtype=fdt)
    with pytest.raises(RuntimeError, match="cannot be converted"):
        x.index_fill(0, flow.tensor([1]), value)
    with pytest.raises(RuntimeError, match="cannot be converted"):
        x.scatter(0, flow.tensor([1]), value)


def test_fill_value_at_the_edges_kept():
    assert flow.zeros(1, dtype=flow.int32).index_fill(0, flow.tensor([0]),
                                                     2147483647.9).tolist() == [2147483647]
    assert flow.zeros(1, dtype=flow.int64).index_fill(0, flow.tensor([0]),
                                                     2 ** 63 - 1).tolist() == [2 ** 63 - 1]
    assert flow.zeros(1, dtype=flow.bool).index_fill(0, flow.tensor([0]), NAN).tolist() == [True]
    assert flow.zeros(1, dtype=flow.float16).index_fill(0, flow.tensor([0]),
                                                       INF).tolist() == [INF]


def test_index_fill_scatter_value_against_torch():
    torch = _torch()
    for name in DTYPES:
        a = base(name)
        for value in (7.5, -7.5, 1, True, 0.25):
            t = torch.tensor(a, dtype=_tdtype(torch, name))
            x = flow.tensor(a, dtype=DTYPES[name][0])
            want = t.index_fill(1, torch.tensor([1, 3]), value)
            got = x.index_fill(1, flow.tensor([1, 3]), value)
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
            np.testing.assert_array_equal(got.numpy().astype(np.float64),
                                          want.to(torch.float64).numpy())
            want = t.scatter(1, torch.tensor([[0, 2], [3, 3]]), value)
            got = x.scatter(1, flow.tensor([[0, 2], [3, 3]]), value)
            np.testing.assert_array_equal(got.numpy().astype(np.float64),
                                          want.to(torch.float64).numpy())


# --- addcmul / addmm / baddbmm with an integer self ---


def test_integer_addcmul_truncates_value():
    i = flow.tensor([1, 2, 3], dtype=flow.int32)
    for value, want in [(0.5, [1, 2, 3]), (2.7, [3, 10, 21]), (-1.5, [0, -2, -6]),
                        (True, [2, 6, 12])]:
        out = i.addcmul(i, i, value=value)
        assert out.dtype == flow.int32 and out.tolist() == want
    out = flow.tensor([1, 2, 3]).addcmul(flow.tensor([1, 2, 3]), flow.tensor([1, 2, 3]),
                                         value=0.5)
    assert out.dtype == flow.int64 and out.tolist() == [1, 2, 3]
    # integer factors with a float16 self: float16, as PyTorch's promotion
    h = flow.tensor([1.0, 2.0, 3.0], dtype=flow.float16)
    out = h.addcmul(i, i, value=0.5)
    assert out.dtype == flow.float16 and out.tolist() == [1.5, 4.0, 7.5]
    with pytest.raises(RuntimeError, match="cannot be converted"):
        i.addcmul(i, i, value=NAN)
    b = flow.tensor([True, False])
    with pytest.raises(NotImplementedError):
        b.addcmul(b, b)


def test_integer_addmm_baddbmm_truncate_beta_alpha():
    a = np.array([[1, 2], [3, 4]])
    m = flow.tensor(a, dtype=flow.int32)
    for beta, alpha in [(0.5, 1), (1, 0.5), (2.5, 1.5), (-0.5, -1.9), (2, 3), (True, False)]:
        want = math.trunc(beta) * a + math.trunc(alpha) * (a @ a)
        out = m.addmm(m, m, beta=beta, alpha=alpha)
        assert out.dtype == flow.int32
        np.testing.assert_array_equal(out.numpy(), want)
        out = m.unsqueeze(0).baddbmm(m.unsqueeze(0), m.unsqueeze(0), beta=beta, alpha=alpha)
        assert out.dtype == flow.int32
        np.testing.assert_array_equal(out.numpy(), want[None])
    f = flow.tensor(a, dtype=flow.float64)
    np.testing.assert_array_equal(f.addmm(f, f, beta=0.5).numpy(), 0.5 * a + a @ a)


def test_integer_scalars_against_torch():
    torch = _torch()
    a = np.array([[1, 2], [3, 4]])
    for name in ("int32", "int64"):
        m, t = flow.tensor(a, dtype=DTYPES[name][0]), torch.tensor(a, dtype=_tdtype(torch, name))
        for beta, alpha in [(0.5, 1), (2.5, 1.5), (-0.5, -1.9)]:
            got, want = m.addmm(m, m, beta=beta, alpha=alpha), t.addmm(t, t, beta=beta,
                                                                       alpha=alpha)
            np.testing.assert_array_equal(got.numpy(), want.numpy())
            got = m[None].baddbmm(m[None], m[None], beta=beta, alpha=alpha)
            want = t[None].baddbmm(t[None], t[None], beta=beta, alpha=alpha)
            np.testing.assert_array_equal(got.numpy(), want.numpy())
        for value in (0.5, 2.7, -1.5):
            got, want = m.addcmul(m, m, value=value), t.addcmul(t, t, value=value)
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
            np.testing.assert_array_equal(got.numpy(), want.numpy())


# --- scatter with a repeated index: the last source wins ---


def scatter_ref(base_, d, idx, src):
    """PyTorch's CPU loop: each index element in order writes its source."""
    out = base_.copy()
    for pos in np.ndindex(idx.shape):
        at = list(pos)
        at[d] = idx[pos]
        out[tuple(at)] = src[pos]
    return out


def scatter_case(rng):
    nd = int(rng.integers(1, 4))
    shape = tuple(int(s) for s in rng.integers(1, 5, nd))
    d = int(rng.integers(0, nd))
    ishape = tuple(int(rng.integers(1, 8)) if i == d else int(rng.integers(1, s + 1))
                   for i, s in enumerate(shape))
    return shape, d, rng.integers(0, shape[d], ishape)


def test_scatter_repeated_index_writes_one_source():
    out = flow.zeros(1, 3).scatter(1, flow.tensor([[1, 1]]), flow.tensor([[10.0, 20.0]]))
    assert out.tolist() == [[0.0, 20.0, 0.0]]


@pytest.mark.parametrize("kind", KINDS)
def test_scatter_repeats_last_wins_with_gradients(kind):
    rng = np.random.default_rng(3)
    for _ in range(40):
        shape, d, idx = scatter_case(rng)
        src = rng.standard_normal(idx.shape)
        b = rng.standard_normal(shape)
        # dims other than d may be split only when the index and src have self's size there
        sbp = flow.sbp.split(d) if kind == "split" else None
        x, s = make(b, kind, True, sbp), make(src, kind, True, sbp)
        i = make(idx, kind, False, sbp)
        out = x.scatter(d, i, s)
        np.testing.assert_array_equal(out.numpy(), scatter_ref(b, d, idx, src))
        up = rng.standard_normal(shape)
        (out * make(up, "local" if kind == "local" else "broadcast")).sum().backward()
        written = scatter_ref(np.zeros(shape), d, idx, np.ones(idx.shape)) > 0
        np.testing.assert_array_equal(x.grad.numpy(), np.where(written, 0.0, up))
        # every source gets the gradient at the position it was written to (PyTorch's gather)
        near = tuple(slice(None) if j == d else slice(0, n) for j, n in enumerate(idx.shape))
        np.testing.assert_array_equal(s.grad.numpy(), np.take_along_axis(up[near], idx, d))


@pytest.mark.parametrize("name", list(DTYPES))
def test_scatter_repeats_every_dtype(name):
    fdt, _ = DTYPES[name]
    idx = np.array([1, 1, 2, 2, 0, 1])
    src = np.array([1, 0, 0, 1, 1, 1]) if name == "bool" else np.array([7, 8, 9, -10, 3, 5])
    out = flow.zeros(4, dtype=fdt).scatter(0, flow.tensor(idx), flow.tensor(src, dtype=fdt))
    assert out.dtype == fdt
    want = scatter_ref(np.zeros(4), 0, idx, src.astype(np.float64))
    np.testing.assert_array_equal(out.numpy().astype(np.float64), want)


def test_scatter_keeps_negative_zero_and_non_finite_sources():
    out = flow.ones(4).scatter(0, flow.tensor([1, 1, 2, 3, 3]),
                               flow.tensor([5.0, -0.0, -0.0, INF, NAN]))
    got = out.numpy()
    assert list(np.signbit(got[:3])) == [False, True, True]
    assert got[0] == 1.0 and math.isnan(got[3])
    out = flow.zeros(2).scatter(0, flow.tensor([0, 0, 1]), flow.tensor([NAN, 2.0, -INF]))
    assert out.tolist() == [2.0, -INF]


def test_scatter_src_larger_than_index():
    b = RNG.standard_normal((3, 4))
    src = RNG.standard_normal((3, 5))
    idx = np.array([[0, 0, 3], [1, 2, 1]])
    out = flow.tensor(b).scatter(1, flow.tensor(idx), flow.tensor(src))
    np.testing.assert_array_equal(out.numpy(), scatter_ref(b, 1, idx, src[:2, :3]))


def test_scatter_repeats_against_torch():
    torch = _torch()
    rng = np.random.default_rng(4)
    for _ in range(60):
        shape, d, idx = scatter_case(rng)
        src, b, up = (rng.standard_normal(idx.shape), rng.standard_normal(shape),
                      rng.standard_normal(shape))
        x, s = flow.tensor(b, requires_grad=True), flow.tensor(src, requires_grad=True)
        tx, ts = torch.tensor(b, requires_grad=True), torch.tensor(src, requires_grad=True)
        out, tout = x.scatter(d, flow.tensor(idx), s), tx.scatter(d, torch.tensor(idx), ts)
        np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
        (out * flow.tensor(up)).sum().backward()
        (tout * torch.tensor(up)).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
        np.testing.assert_array_equal(s.grad.numpy(), ts.grad.numpy())
    # large repeated index along either dim
    idx = torch.randint(0, 5, (3, 500))
    src = torch.randn(3, 500)
    got = flow.zeros(3, 8).scatter(1, flow.tensor(idx.numpy()), flow.tensor(src.numpy()))
    np.testing.assert_array_equal(got.numpy(), torch.zeros(3, 8).scatter(1, idx, src).numpy())
    got = flow.zeros(8, 3).scatter(0, flow.tensor(idx.T.numpy().copy()),
                                   flow.tensor(src.T.numpy().copy()))
    np.testing.assert_array_equal(got.numpy(), torch.zeros(8, 3).scatter(0, idx.T, src.T).numpy())


# --- dot of int32 ---


@pytest.mark.parametrize("name", ["int32", "int64", "float32", "float64"])
def test_dot_keeps_dtype(name):
    fdt, ndt = DTYPES[name]
    a, b = np.array([1, 2, -3], ndt), np.array([3, 4, 5], ndt)
    for out in (flow.dot(flow.tensor(a), flow.tensor(b)), flow.tensor(a).dot(flow.tensor(b))):
        assert out.dtype == fdt and out.item() == -4
    out = flow.tensor(np.array([[1, 2], [3, 4]], ndt)).mv(flow.tensor(a[:2]))
    assert out.dtype == fdt and out.tolist() == [5, 11]


def test_dot_int32_wraps_as_int32():
    a = flow.tensor([2 ** 30, 2 ** 30], dtype=flow.int32)
    out = flow.dot(a, flow.tensor([2, 2], dtype=flow.int32))
    assert out.dtype == flow.int32 and out.item() == 0  # 2**32 wraps to 0


def test_dot_against_torch():
    torch = _torch()
    for name in ("int32", "int64"):
        a = torch.tensor([1, 2, -3], dtype=_tdtype(torch, name))
        got = flow.dot(flow.tensor(a.numpy()), flow.tensor(a.numpy()))
        want = torch.dot(a, a)
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        assert got.item() == want.item()


# --- isclose / allclose of bool, bool ** bool ---


def test_isclose_allclose_bool():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    x, y = flow.tensor(a), flow.tensor(b)
    for kw in ({}, {"equal_nan": True}, {"rtol": 0, "atol": 0}):
        out = flow.isclose(x, y, **kw)
        assert out.dtype == flow.bool and out.tolist() == list(a == b)
    # as float32 under tolerances: 1 is within atol=1 of 0
    assert flow.isclose(x, y, atol=1.0).tolist() == [True] * 4
    assert flow.allclose(x, x) and not flow.allclose(x, y)
    with pytest.raises(RuntimeError, match="rtol"):
        flow.isclose(x, y, rtol=-1)


def test_isclose_floats_as_pytorch_formula():
    a = np.array([1.0, 1.0 + 1e-6, INF, INF, NAN, 0.0, 1e10])
    b = np.array([1.0, 1.0, INF, -INF, NAN, 1e-9, 1e10 + 1.0])
    with np.errstate(invalid="ignore"):
        want = (a == b) | (np.isfinite(a - b) & (np.abs(a - b) <= 1e-8 + np.abs(1e-5 * b)))
    assert flow.isclose(flow.tensor(a), flow.tensor(b)).tolist() == list(want)
    want_nan = want | (np.isnan(a) & np.isnan(b))
    assert flow.isclose(flow.tensor(a), flow.tensor(b),
                        equal_nan=True).tolist() == list(want_nan)


def test_bool_to_bool_power():
    b = flow.tensor([True, False, True])
    for out in (b ** True, b.pow(True), flow.pow(b, True)):
        assert out.dtype == flow.bool and out.tolist() == [True, False, True]
    out = b ** False
    assert out.dtype == flow.bool and out.tolist() == [True, True, True]
    # the other forms unchanged
    assert (b ** 2).dtype == flow.int64 and (b ** 2).tolist() == [1, 0, 1]
    assert (2 ** b).tolist() == [2, 1, 2]
    x = flow.tensor([1.0, 2.0])
    assert (x ** x).tolist() == [1.0, 4.0] and (x ** 2).tolist() == [1.0, 4.0]


def test_bool_isclose_and_power_against_torch():
    torch = _torch()
    a, b = [True, False, True, False], [True, True, False, False]
    for kw in ({}, {"atol": 1.0}, {"rtol": 0, "atol": 0}):
        assert (flow.isclose(flow.tensor(a), flow.tensor(b), **kw).tolist()
                == torch.isclose(torch.tensor(a), torch.tensor(b), **kw).tolist())
    assert flow.allclose(flow.tensor(a), flow.tensor(a)) == torch.allclose(torch.tensor(a),
                                                                           torch.tensor(a))
    for e in (True, False):
        got, want = flow.tensor(a) ** e, torch.tensor(a) ** e
        assert got.dtype == flow.bool and want.dtype == torch.bool
        assert got.tolist() == want.tolist()


# --- Tensor.softmax / log_softmax(dtype=) ---


def np_log_softmax(a, d):
    m = a.max(axis=d, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis=d, keepdims=True))


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_dtype(fn):
    a = RNG.standard_normal((3, 5))
    x = flow.tensor(a, dtype=flow.float16, requires_grad=True)
    out = getattr(x, fn)(1, dtype=flow.float64)
    assert out.dtype == flow.float64
    a16 = a.astype(np.float16).astype(np.float64)  # cast first, as PyTorch
    want = np_log_softmax(a16, 1)
    want = want if fn == "log_softmax" else np.exp(want)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-14)
    up = RNG.standard_normal((3, 5))
    (out * flow.tensor(up)).sum().backward()
    assert x.grad.dtype == flow.float16
    s = np.exp(np_log_softmax(a16, 1))
    if fn == "softmax":
        g = s * (up - (up * s).sum(1, keepdims=True))
    else:
        g = up - s * up.sum(1, keepdims=True)
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), g, rtol=2e-3, atol=2e-3)
    # an integer input normalised in float32; flow.softmax passes dtype= on; positional too
    i = flow.tensor([1, 2, 3], dtype=flow.int32)
    assert getattr(i, fn)(0, flow.float32).dtype == flow.float32
    assert getattr(flow, fn)(i, 0, dtype=flow.float64).dtype == flow.float64
    assert getattr(flow.tensor([1.0, 2.0]), fn)(0).dtype == flow.float32


def test_softmax_dtype_against_torch():
    torch = _torch()
    a = RNG.standard_normal((2, 6)).astype(np.float32)
    for fn in ("softmax", "log_softmax"):
        x = flow.tensor(a, dtype=flow.float16, requires_grad=True)
        t = torch.tensor(a, dtype=torch.float16, requires_grad=True)
        out, tout = getattr(x, fn)(-1, dtype=flow.float32), getattr(t, fn)(-1,
                                                                            dtype=torch.float32)
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-6, atol=1e-7)
        up = RNG.standard_normal((2, 6)).astype(np.float32)
        (out * flow.tensor(up)).sum().backward()
        (tout * torch.tensor(up)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy().astype(np.float32),
                                   t.grad.float().numpy(), rtol=2e-3, atol=2e-3)


# --- isin ---


@pytest.fixture(params=["pairs", "sort"])
def isin_path(request, monkeypatch):
    """Runs a test through the all-pairs comparison and through the sort."""
    if request.param == "sort":
        monkeypatch.setattr(methods, "_ISIN_PAIRS", 0)
    return request.param


def test_isin(isin_path):
    e = RNG.integers(0, 12, (4, 6))
    t = RNG.integers(0, 12, 7)
    for got in (flow.isin(flow.tensor(e), flow.tensor(t)), flow.tensor(e).isin(flow.tensor(t))):
        assert got.dtype == flow.bool
        np.testing.assert_array_equal(got.numpy(), np.isin(e, t))
    np.testing.assert_array_equal(
        flow.isin(flow.tensor(e), flow.tensor(t), invert=True).numpy(), ~np.isin(e, t))
    np.testing.assert_array_equal(
        flow.isin(flow.tensor(e), flow.tensor(t), assume_unique=True).numpy(), np.isin(e, t))
    # scalars on either side; dtypes promoted as ==; NaN is in nothing; -0.0 equals 0.0
    assert flow.isin(flow.tensor(e), 3).tolist() == (e == 3).tolist()
    out = flow.isin(int(t[0]), flow.tensor(t))
    assert out.shape == () and out.item() is True
    f = np.array([NAN, 0.0, -0.0, 1.5, INF, 2.0])
    got = flow.isin(flow.tensor(f, dtype=flow.float16), flow.tensor([NAN, 0.0, INF, 2.0]))
    assert got.tolist() == [False, True, True, False, True, True]
    got = flow.isin(flow.tensor([1, 2, 3], dtype=flow.int32), flow.tensor([2.0, 2.5]))
    assert got.tolist() == [False, True, False]
    # empty on either side
    assert flow.isin(flow.tensor(e), flow.tensor(np.zeros(0, np.int64))).tolist() == (
        np.zeros(e.shape, bool).tolist())
    assert flow.isin(flow.zeros(0), flow.tensor([1.0])).shape == (0,)
    with pytest.raises(NotImplementedError):
        flow.isin(flow.tensor([True]), flow.tensor([True]))


@pytest.mark.parametrize("kind", KINDS)
def test_isin_global(kind, isin_path):
    e = RNG.integers(0, 9, (6, 3))
    t = RNG.integers(0, 9, 4)
    got = flow.isin(make(e, kind), make(t, "local" if kind == "local" else "broadcast"))
    assert got.is_global == (kind != "local")
    np.testing.assert_array_equal(got.numpy(), np.isin(e, t))


def test_isin_against_torch(isin_path):
    torch = _torch()
    e = RNG.standard_normal((5, 5)).round(1)
    t = np.concatenate([e.reshape(-1)[:6], [NAN, 0.3]])
    assert (flow.isin(flow.tensor(e), flow.tensor(t)).tolist()
            == torch.isin(torch.tensor(e), torch.tensor(t)).tolist())
    assert (flow.isin(flow.tensor(e), flow.tensor(t), invert=True).tolist()
            == torch.isin(torch.tensor(e), torch.tensor(t), invert=True).tolist())
    i = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert flow.isin(flow.tensor(i.numpy()), 2).tolist() == torch.isin(i, 2).tolist()
    assert flow.isin(2, flow.tensor(i.numpy())).item() == torch.isin(2, i).item()


# --- hypot ---


def test_hypot_values_and_gradients():
    a = RNG.standard_normal((3, 4)) * 10
    b = RNG.standard_normal(4) * 10
    x, y = flow.tensor(a, requires_grad=True), flow.tensor(b, requires_grad=True)
    for out in (flow.hypot(x, y), x.hypot(y)):
        np.testing.assert_allclose(out.numpy(), np.hypot(a, b), rtol=1e-15)
    out = flow.hypot(x, y)
    up = RNG.standard_normal((3, 4))
    (out * flow.tensor(up)).sum().backward()
    h = np.hypot(a, b)
    np.testing.assert_allclose(x.grad.numpy(), up * a / h, rtol=1e-13)
    np.testing.assert_allclose(y.grad.numpy(), (up * b / h).sum(0), rtol=1e-13)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "float64"])
def test_hypot_without_overflow_or_underflow(name):
    fdt, _ = DTYPES[name]
    big = {"float32": 3e38, "float16": 4e4, "bfloat16": 3e38, "float64": 1e300}[name]
    tiny = {"float32": 1e-40, "float16": 1e-7, "bfloat16": 1e-40, "float64": 1e-310}[name]
    a = np.array([3.0, big / 3, tiny, 0.0, INF, NAN, -INF, NAN, -5.0])
    b = np.array([4.0, big / 3, tiny, 0.0, NAN, -INF, 1.0, 1.0, 12.0])
    x, y = flow.tensor(a, dtype=fdt), flow.tensor(b, dtype=fdt)
    out = flow.hypot(x, y)
    assert out.dtype == fdt
    xa, ya = x.to(flow.float64).numpy(), y.to(flow.float64).numpy()  # the stored inputs
    want = np.hypot(xa, ya)
    # half an ulp (rounded once), or one step of the dtype's subnormals
    rtol = {"float32": 2 ** -24, "float16": 2 ** -11, "bfloat16": 2 ** -8, "float64": 2e-16}[name]
    atol = {"float32": 2 ** -149, "float16": 2 ** -24, "bfloat16": 2 ** -133,
            "float64": 0.0}[name]
    got = out.to(flow.float64).numpy()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)  # nan, inf where they are
    assert np.isfinite(got[1]) and got[2] > 0


def test_hypot_refuses_integers_and_numbers():
    i = flow.tensor([3, 4], dtype=flow.int32)
    with pytest.raises(NotImplementedError):
        flow.hypot(i, i)
    with pytest.raises(TypeError):
        flow.hypot(flow.tensor([3.0]), 4.0)
    x = flow.tensor([3.0, 5.0])
    assert x.hypot_(flow.tensor([4.0, 12.0])) is x and x.tolist() == [5.0, 13.0]


def test_hypot_against_torch():
    torch = _torch()
    a = RNG.standard_normal((2, 5)).astype(np.float32) * 4
    b = RNG.standard_normal((2, 5)).astype(np.float32) * 4
    for name in ("float32", "float16", "bfloat16"):
        x = flow.tensor(a, dtype=DTYPES[name][0], requires_grad=True)
        y = flow.tensor(b, dtype=DTYPES[name][0], requires_grad=True)
        tx = torch.tensor(a, dtype=_tdtype(torch, name), requires_grad=True)
        ty = torch.tensor(b, dtype=_tdtype(torch, name), requires_grad=True)
        out, tout = flow.hypot(x, y), torch.hypot(tx, ty)
        np.testing.assert_array_equal(out.to(flow.float32).numpy(), tout.float().detach().numpy())
        out.sum().backward()
        tout.sum().backward()
        tol = 1e-6 if name == "float32" else 1e-2
        np.testing.assert_allclose(x.grad.to(flow.float32).numpy(), tx.grad.float().numpy(),
                                   rtol=tol, atol=tol)
        np.testing.assert_allclose(y.grad.to(flow.float32).numpy(), ty.grad.float().numpy(),
                                   rtol=tol, atol=tol)
    big = torch.tensor([3e38, 1e-40])
    assert (flow.hypot(flow.tensor(big.numpy()), flow.tensor(big.numpy())).tolist()
            == torch.hypot(big, big).tolist())


# --- logcumsumexp ---


def np_logcumsumexp(a, d):
    return np.logaddexp.accumulate(a, axis=d)


@pytest.mark.parametrize("shape,d", [((7,), 0), ((3, 9), 1), ((5, 4, 3), 0), ((2, 33), -1),
                                     ((4, 17), 0), ((), 0), ((4, 0), 1)])
def test_logcumsumexp_values_and_gradients(shape, d):
    a = RNG.standard_normal(shape) * 5
    x = flow.tensor(a, requires_grad=True)
    out = flow.logcumsumexp(x, d)
    want = np_logcumsumexp(a, d) if a.ndim else a
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-13, atol=1e-13)
    assert x.logcumsumexp(d).shape == x.shape
    up = RNG.standard_normal(shape)
    (out * flow.tensor(up)).sum().backward()
    # d/dx_j sum_i up_i y_i = sum_{i >= j} up_i exp(x_j - y_i)
    if a.ndim:
        am, ym, um = (np.moveaxis(v, d, -1) for v in (a, want, up))
        n = am.shape[-1]
        later = np.arange(n)[None, :] >= np.arange(n)[:, None]  # [j, i]: i >= j
        g = (um[..., None, :] * np.exp(am[..., :, None] - ym[..., None, :]) * later).sum(-1)
        g = np.moveaxis(g, -1, d)
    else:
        g = up
    np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-12, atol=1e-12)


def test_logcumsumexp_stable_at_the_edges():
    # far apart values: a global max would underflow the first to -inf
    out = flow.tensor([-1e9, 0.0, -INF, INF, 3.0]).logcumsumexp(0)
    assert out.tolist() == [-1e9, 0.0, 0.0, INF, INF]
    out = flow.tensor([[-INF, -INF, -INF], [-INF, 2.0, -INF]]).logcumsumexp(1)
    assert out.tolist() == [[-INF, -INF, -INF], [-INF, 2.0, 2.0]]  # -inf, not NaN
    out = flow.tensor([1.0, NAN, 1.0]).logcumsumexp(0).tolist()
    assert out[0] == 1.0 and math.isnan(out[1]) and math.isnan(out[2])
    out = flow.tensor([1e30, 1e30, -1e30]).logcumsumexp(0)
    np.testing.assert_allclose(out.numpy(), [1e30, 1e30, 1e30], rtol=1e-7)
    # long: one logsumexp per prefix, float32 error small
    a = RNG.standard_normal(1000).astype(np.float32) * 10
    np.testing.assert_allclose(flow.tensor(a).logcumsumexp(0).numpy(),
                               np_logcumsumexp(a.astype(np.float64), 0), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_logcumsumexp_16_bit(name):
    fdt, _ = DTYPES[name]
    a = RNG.standard_normal((3, 50)) * 3
    x = flow.tensor(a, dtype=fdt)
    out = x.logcumsumexp(1)
    assert out.dtype == fdt
    want = np_logcumsumexp(x.to(flow.float64).numpy(), 1)
    got = out.to(flow.float64).numpy()
    eps = 2 ** -10 if name == "float16" else 2 ** -7
    np.testing.assert_allclose(got, want, rtol=eps, atol=eps)


def test_logcumsumexp_refuses_integers():
    with pytest.raises(NotImplementedError):
        flow.logcumsumexp(flow.tensor([1, 2, 3]), 0)


@pytest.mark.parametrize("kind", KINDS)
def test_logcumsumexp_global(kind):
    a = RNG.standard_normal((6, 5))
    for d in (0, 1):
        x = make(a, kind, True)
        out = flow.logcumsumexp(x, d)
        assert out.is_global == (kind != "local")
        np.testing.assert_allclose(out.numpy(), np_logcumsumexp(a, d), rtol=1e-13)
        out.sum().backward()
        np.testing.assert_allclose(x.grad.numpy().sum(), a.size, rtol=1e-12)


def test_logcumsumexp_against_torch():
    torch = _torch()
    a = RNG.standard_normal((4, 40)) * 6
    for name in ("float64", "float32", "float16", "bfloat16"):
        x = flow.tensor(a, dtype=DTYPES[name][0], requires_grad=True)
        t = torch.tensor(a, dtype=_tdtype(torch, name), requires_grad=True)
        out, tout = x.logcumsumexp(1), torch.logcumsumexp(t, 1)
        assert str(out.dtype).split(".")[-1] == str(tout.dtype).split(".")[-1]
        tol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[name]
        np.testing.assert_allclose(out.to(flow.float64).numpy(),
                                   tout.double().detach().numpy(), rtol=tol, atol=tol)
        up = RNG.standard_normal((4, 40))
        (out * flow.tensor(up, dtype=x.dtype)).sum().backward()
        (tout * torch.tensor(up, dtype=t.dtype)).sum().backward()
        got, want = x.grad.to(flow.float64).numpy(), t.grad.double().numpy()
        if name in ("float64", "float32"):
            np.testing.assert_allclose(got, want, rtol=tol * 10, atol=tol * 10)
        else:
            # torch's 16-bit backward rounds in 16 bits along the way (10% off in bfloat16):
            # both against the float64 gradient of the rounded inputs, gflow's the closer
            ar = x.detach().to(flow.float64).numpy()
            ur = flow.tensor(up, dtype=x.dtype).to(flow.float64).numpy()
            y = np_logcumsumexp(ar, 1)
            later = np.arange(40)[None, :] >= np.arange(40)[:, None]
            g = (ur[:, None, :] * np.exp(ar[:, :, None] - y[:, None, :]) * later).sum(-1)
            assert np.abs(got - g).max() <= np.abs(want - g).max()
            np.testing.assert_allclose(got, g, rtol=tol, atol=tol)
    edge = torch.tensor([-1e9, 0.0, -INF, INF, 3.0])
    assert (flow.tensor(edge.numpy()).logcumsumexp(0).tolist()
            == torch.logcumsumexp(edge, 0).tolist())
