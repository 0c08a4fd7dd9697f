"""PyTorch functions composed in Python over gflow's operators (``gflow/_methods.py``):
``movedim moveaxis swapaxes swapdims take_along_dim tensordot mv reshape_as tensor_split
nan_to_num nansum nanmean isposinf isneginf logaddexp logit clamp_min clamp_max floor_divide
float_power exp2 var_mean std_mean aminmax median nanmedian kthvalue quantile nanquantile cummax
cummin unique index_add index_fill scatter``, their in-place forms and the in-place unary
methods ``abs_ ... nan_to_num_``.

Values are checked against float64 NumPy references written here, and, where torch is
importable, against torch's values (and gradients); a few gradients by central differences;
a sample on global tensors (a 1-rank placement); bad arguments raise as PyTorch's."""

import math

import numpy as np
import pytest

import gflow as flow

RNG = np.random.default_rng(5)
P = flow.placement("cpu", [0])
NAN, INF = math.nan, math.inf


def T(a, requires_grad=False):
    return flow.tensor(np.asarray(a), requires_grad=requires_grad)


def G(a):
    return flow.tensor(np.asarray(a)).to_global(placement=P, sbp=flow.sbp.broadcast)


def close(got, want, rtol=1e-6, atol=1e-9):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64) if got.dtype != bool else got, want,
                               rtol=rtol, atol=atol, equal_nan=True)


A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((3, 4))
C3 = RNG.standard_normal((2, 3, 4))
WITH_NAN = np.array([[3.0, NAN, 1.0, 2.0, 7.0], [2.5, 1.0, -4.0, 5.0, 0.5],
                     [NAN, NAN, 1.0, 0.0, 9.0]])
SPECIAL = np.array([NAN, INF, -INF, 1.5, -0.0, 1e300])


def np_movedim(a, s, d):
    return np.moveaxis(a, s, d)


def np_lower_median(a, axis):
    s = np.sort(a, axis=axis)
    n = a.shape[axis]
    v = np.take(s, (n - 1) // 2, axis=axis)
    return np.where(np.isnan(a).any(axis=axis), NAN, v)


def np_nanmedian_lower(a, axis):
    out = []
    for row in np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1).T:
        r = np.sort(row[~np.isnan(row)])
        out.append(r[(len(r) - 1) // 2] if len(r) else NAN)
    return np.array(out).reshape(np.delete(a.shape, axis))


def np_cummax(a, axis, op=np.maximum):
    return op.accumulate(a, axis=axis)


# (name, call(lib, *tensors), reference(*arrays), inputs): lib is ``flow`` or ``torch``
CASES = [
    ("movedim", lambda t, x: t.movedim(x, 0, -1), lambda x: np_movedim(x, 0, -1), C3),
    ("movedim_seq", lambda t, x: t.movedim(x, (0, 1), (2, 0)),
     lambda x: np_movedim(x, (0, 1), (2, 0)), C3),
    ("moveaxis", lambda t, x: t.moveaxis(x, -1, 0), lambda x: np.moveaxis(x, -1, 0), C3),
    ("swapaxes", lambda t, x: t.swapaxes(x, 0, 2), lambda x: np.swapaxes(x, 0, 2), C3),
    ("swapdims", lambda t, x: t.swapdims(x, 1, 2), lambda x: np.swapaxes(x, 1, 2), C3),
    ("tensordot2", lambda t, x, y: t.tensordot(x, y), lambda x, y: np.tensordot(x, y),
     C3, RNG.standard_normal((3, 4, 2))),
    ("tensordot1", lambda t, x, y: t.tensordot(x, y, 1), lambda x, y: np.tensordot(x, y, 1),
     C3, RNG.standard_normal((4, 5))),
    ("tensordot0", lambda t, x, y: t.tensordot(x, y, 0), lambda x, y: np.tensordot(x, y, 0),
     A[:2, :2], B[:2]),
    ("tensordot_pairs", lambda t, x, y: t.tensordot(x, y, dims=([0, 2], [1, 0])),
     lambda x, y: np.tensordot(x, y, axes=([0, 2], [1, 0])), C3, RNG.standard_normal((4, 2, 5))),
    ("mv", lambda t, m, v: t.mv(m, v), lambda m, v: m @ v, A, B[0]),
    ("nan_to_num", lambda t, x: t.nan_to_num(x),
     lambda x: np.nan_to_num(x, nan=0.0, posinf=np.finfo(np.float64).max,
                             neginf=np.finfo(np.float64).min), SPECIAL),
    ("nan_to_num_args", lambda t, x: t.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0),
     lambda x: np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0), SPECIAL),
    ("nansum", lambda t, x: t.nansum(x), lambda x: np.nansum(x), WITH_NAN),
    ("nansum_dim", lambda t, x: t.nansum(x, 1, keepdim=True),
     lambda x: np.nansum(x, 1, keepdims=True), WITH_NAN),
    ("nanmean", lambda t, x: t.nanmean(x, dim=0), lambda x: np.nanmean(x, 0), WITH_NAN),
    ("isposinf", lambda t, x: t.isposinf(x), np.isposinf, SPECIAL),
    ("isneginf", lambda t, x: t.isneginf(x), np.isneginf, SPECIAL),
    ("logaddexp", lambda t, x, y: t.logaddexp(x, y), np.logaddexp, A * 300, B),
    ("logaddexp_inf", lambda t, x, y: t.logaddexp(x, y), np.logaddexp,
     np.array([INF, -INF, -INF, NAN, 1.0]), np.array([INF, -INF, 2.0, 1.0, INF])),
    ("logit", lambda t, x: t.logit(x), lambda x: np.log(x / (1 - x)),
     RNG.uniform(0.05, 0.95, (3, 4))),
    ("logit_eps", lambda t, x: t.logit(x, eps=0.1),
     lambda x: np.log(np.clip(x, 0.1, 0.9) / (1 - np.clip(x, 0.1, 0.9))),
     np.array([0.0, 0.05, 0.3, 0.95, 1.0])),
    ("clamp_min", lambda t, x: t.clamp_min(x, 0.2), lambda x: np.maximum(x, 0.2), A),
    ("clamp_max", lambda t, x: t.clamp_max(x, 0.2), lambda x: np.minimum(x, 0.2), A),
    ("clamp_min_tensor", lambda t, x, y: t.clamp_min(x, y), np.maximum, A, B),
    ("floor_divide", lambda t, x, y: t.floor_divide(x, y), np.floor_divide, A * 5, B),
    ("float_power", lambda t, x: t.float_power(x, 3), lambda x: x ** 3.0, A),
    ("exp2", lambda t, x: t.exp2(x), np.exp2, A),
    ("aminmax_min", lambda t, x: t.aminmax(x, dim=1).min, lambda x: x.min(1), A),
    ("aminmax_max", lambda t, x: t.aminmax(x, dim=0, keepdim=True).max,
     lambda x: x.max(0, keepdims=True), A),
    ("median_all", lambda t, x: t.median(x), lambda x: np.sort(x.ravel())[(x.size - 1) // 2], A),
    ("median_dim", lambda t, x: t.median(x, 1).values, lambda x: np_lower_median(x, 1),
     WITH_NAN),
    ("median_nan_all", lambda t, x: t.median(x), lambda x: np.array(NAN), WITH_NAN),
    ("nanmedian_dim", lambda t, x: t.nanmedian(x, 1).values,
     lambda x: np_nanmedian_lower(x, 1), WITH_NAN),
    ("nanmedian_all", lambda t, x: t.nanmedian(x),
     lambda x: np.sort(x[~np.isnan(x)])[(np.sum(~np.isnan(x)) - 1) // 2], WITH_NAN),
    ("kthvalue", lambda t, x: t.kthvalue(x, 2, 0).values, lambda x: np.sort(x, 0)[1], A),
    ("quantile_linear", lambda t, x: t.quantile(x, 0.37, dim=1),
     lambda x: np.quantile(x, 0.37, axis=1), A),
    ("quantile_vec", lambda t, x, q: t.quantile(x, q, dim=0, keepdim=True),
     lambda x, q: np.quantile(x, q, axis=0, keepdims=True), A, np.array([0.0, 0.25, 0.9, 1.0])),
    ("quantile_all", lambda t, x: t.quantile(x, 0.5), lambda x: np.quantile(x, 0.5), A),
    ("quantile_nan", lambda t, x: t.quantile(x, 0.5, 1), lambda x: np.quantile(x, 0.5, 1),
     WITH_NAN[:2]),
    ("median_ties", lambda t, x: t.median(x), lambda x: np.array(1.0),
     np.array([[1.0, 3.0, 1.0], [0.0, 1.0, 5.0]])),
    ("nanquantile", lambda t, x: t.nanquantile(x, 0.3, 1), lambda x: np.nanquantile(x, 0.3, 1),
     WITH_NAN),
    ("cummax", lambda t, x: t.cummax(x, 1).values, lambda x: np_cummax(x, 1), A),
    ("cummin", lambda t, x: t.cummin(x, 0).values, lambda x: np_cummax(x, 0, np.minimum), A),
    ("index_add", lambda t, x, s: x.index_add(0, t.tensor([2, 0]), s, alpha=2.0),
     lambda x, s: x + np.stack([2 * s[1], np.zeros(4), 2 * s[0]]), A, B[:2]),
    ("index_add_dup", lambda t, x, s: x.index_add(1, t.tensor([1, 1, 3]), s),
     lambda x, s: x + np.stack([np.zeros(3), s[:, 0] + s[:, 1], np.zeros(3), s[:, 2]], 1),
     A, B[:, :3]),
    ("index_fill", lambda t, x: x.index_fill(1, t.tensor([0, -1]), -2.0),
     lambda x: np.concatenate([np.full((3, 1), -2.0), x[:, 1:3], np.full((3, 1), -2.0)], 1), A),
    ("scatter", lambda t, x, s: x.scatter(1, t.tensor([[1, 3], [0, 2], [2, 1]]), s),
     lambda x, s: np.array([[x[0, 0], s[0, 0], x[0, 2], s[0, 1]],
                            [s[1, 0], x[1, 1], s[1, 1], x[1, 3]],
                            [x[2, 0], s[2, 1], s[2, 0], x[2, 3]]]), A, B),
    ("take_along_dim", lambda t, x: t.take_along_dim(x, t.argsort(x, 1), 1),
     lambda x: np.sort(x, 1), A),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_values_against_numpy(case):
    name, call, ref, *inputs = case
    want = ref(*inputs)
    close(call(flow, *[T(a) for a in inputs]), want)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_values_and_grads_against_torch(case):
    torch = pytest.importorskip("torch")
    name, call, ref, *inputs = case
    fx = [T(a, requires_grad=True) for a in inputs]
    tx = [torch.tensor(a, requires_grad=True) for a in inputs]
    fo, to = call(flow, *fx), call(torch, *tx)
    close(fo, to.detach().numpy())
    assert str(fo.dtype).split(".")[-1] == str(to.dtype).split(".")[-1]
    if not to.requires_grad or name in ("nan_to_num", "nan_to_num_args", "logaddexp_inf"):
        return
    w = np.asarray(RNG.standard_normal(tuple(to.shape)))
    w_f, w_t = T(w), torch.tensor(w)
    try:
        (to * w_t).sum().backward()
    except RuntimeError:  # no derivative in torch (floor_divide), or torch's own error
        return
    (fo * w_f).sum().backward()
    for f, t in zip(fx, tx):
        if t.grad is None or name == "quantile_vec" and f is fx[1]:  # q: no gradient here
            continue
        g = np.nan_to_num(t.grad.numpy(), nan=1234.5)
        close(np.nan_to_num(f.grad.numpy(), nan=1234.5), g)


def test_dtypes_as_torch():
    torch = pytest.importorskip("torch")
    ints = np.array([[1, -2, 3], [4, 5, -6]])
    for fn in ("exp2", "logit", "float_power"):
        args = (2,) if fn == "float_power" else ()
        f = getattr(flow, fn)(T(ints), *args)
        t = getattr(torch, fn)(torch.tensor(ints), *args)
        assert str(f.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], fn
    assert flow.nan_to_num(T(ints)).dtype == flow.int64
    assert flow.nansum(T(ints)).dtype == flow.int64
    assert flow.isposinf(T(ints)).dtype == flow.bool
    close(flow.floor_divide(T(ints), 4), torch.floor_divide(torch.tensor(ints), 4).numpy())
    h = flow.nan_to_num(T(np.array([INF, -INF])).half())
    close(h, torch.nan_to_num(torch.tensor([INF, -INF]).half()).float().numpy())


def test_index_results_against_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[3.0, NAN, 1.0, 2.0], [2.0, 1.0, 0.0, 5.0], [4.0, 9.0, -1.0, 6.0]])
    f, t = T(x), torch.tensor(x)
    for name, args in (("median", (1,)), ("nanmedian", (1,)), ("kthvalue", (2, 1)),
                       ("cummax", (1,)), ("cummin", (1,)), ("cummax", (0,))):
        fo, to = getattr(f, name)(*args), getattr(t, name)(*args)
        assert type(fo).__name__ == name
        close(fo.values, to.values.numpy())
        close(fo.indices, to.indices.numpy())
    ties = np.array([1.0, 3.0, 3.0, NAN, 5.0, NAN, 0.0])
    for name in ("cummax", "cummin"):
        fo, to = getattr(T(ties), name)(0), getattr(torch.tensor(ties), name)(0)
        close(fo.values, to.values.numpy())
        close(fo.indices, to.indices.numpy())
    ints = np.array([3, 1, 5, 5, 2, 1])
    fo, to = T(ints).cummin(0), torch.tensor(ints).cummin(0)
    close(fo.indices, to.indices.numpy())
    m = flow.aminmax(T(A))
    assert type(m).__name__ == "aminmax" and m.min.dim() == 0
    close(m.max, A.max())
    assert tuple(flow.aminmax(T(A), keepdim=True).min.shape) == (1, 1)


def test_quantile_interpolations_against_torch():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((4, 7))
    q = np.array([0.0, 0.1, 0.5, 0.55, 0.75, 1.0])
    for how in ("linear", "lower", "higher", "midpoint", "nearest"):
        for dim in (None, 1, 0):
            fo = flow.quantile(T(x), T(q), dim=dim, keepdim=dim is not None, interpolation=how)
            to = torch.quantile(torch.tensor(x), torch.tensor(q), dim=dim,
                                keepdim=dim is not None, interpolation=how)
            close(fo, to.numpy(), rtol=1e-12)
            close(fo, np.quantile(x, q, axis=dim, keepdims=dim is not None, method=how)
                  if how != "nearest" else to.numpy(), rtol=1e-12)
        fo = flow.nanquantile(T(WITH_NAN), T(q), 1, interpolation=how)
        to = torch.nanquantile(torch.tensor(WITH_NAN), torch.tensor(q), 1, interpolation=how)
        close(fo, to.numpy(), rtol=1e-12)


def test_var_std_mean():
    for dim, kw in ((None, {}), (1, {"keepdim": True}), ((0, 1), {"correction": 0}),
                    (0, {"unbiased": False})):
        c = kw.get("correction", 0 if kw.get("unbiased") is False else 1)
        v, m = flow.var_mean(T(C3), dim, **kw)
        axis = dim if dim is None or isinstance(dim, int) else tuple(dim)
        keep = kw.get("keepdim", False)
        close(v, np.var(C3, axis=axis, ddof=c, keepdims=keep))
        close(m, np.mean(C3, axis=axis, keepdims=keep))
        s, m2 = flow.std_mean(T(C3), dim, **kw)
        close(s, np.std(C3, axis=axis, ddof=c, keepdims=keep))
    v, _ = flow.var_mean(T(A), False)
    close(v, np.var(A))
    with pytest.raises(RuntimeError):
        flow.var_mean(T(A), 0, unbiased=True, correction=1)


def test_shape_helpers():
    x = T(C3)
    assert tuple(x.reshape_as(T(np.zeros((4, 6)))).shape) == (4, 6)
    parts = flow.tensor_split(T(np.arange(10.0)), 3)
    assert [tuple(p.shape) for p in parts] == [(4,), (3,), (3,)]
    for spec, dim in ((3, 2), ([1, -1, 5], 1), (flow.tensor([0, 2]), 2), (flow.tensor(2), 0),
                      ([3, 1], 2)):
        got = x.tensor_split(spec, dim)
        want = np.array_split(C3, spec if isinstance(spec, int) else
                              (int(spec.item()) if isinstance(spec, flow.Tensor) and spec.dim() == 0
                               else list(spec.tolist() if isinstance(spec, flow.Tensor) else spec)),
                              axis=dim) if not (isinstance(spec, list) and spec == [1, -1, 5]) \
            else [C3[:, :1], C3[:, 1:2], C3[:, 2:3], C3[:, 3:]]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w)
    idx = np.array([[0, 2], [1, 1], [3, 0]])
    close(flow.take_along_dim(T(A), T(idx), 1), np.take_along_axis(A, idx, 1))
    close(flow.take_along_dim(T(A), T(np.array([0, 5, 11]))), A.ravel()[[0, 5, 11]])
    # broadcast of indices over the other dims
    close(T(C3).take_along_dim(T(np.array([[[1], [0], [2]]])), 2),
          np.take_along_axis(C3, np.broadcast_to(np.array([[[1], [0], [2]]]), (2, 3, 1)), 2))


def test_unique():
    x = np.array([[3, 1, 2], [1, 3, 7]])
    out, inv, cnt = flow.unique(T(x), return_inverse=True, return_counts=True)
    close(out, [1, 2, 3, 7])
    close(inv, [[2, 0, 1], [0, 2, 3]])
    close(cnt, [2, 1, 2, 1])
    assert out.dtype == flow.int64 and inv.dtype == flow.int64
    rows = np.array([[1, 2], [0, 5], [1, 2]])
    out, inv = T(rows).unique(dim=0, return_inverse=True)
    close(out, [[0, 5], [1, 2]])
    close(inv, [1, 0, 1])
    g = flow.unique(G(np.array([2.0, 1.0, 2.0])))
    assert g.is_global and g.placement == P
    close(g.to_local(), [1.0, 2.0])
    torch = pytest.importorskip("torch")
    f = flow.unique(T(x), return_inverse=True, return_counts=True)
    t = torch.unique(torch.tensor(x), return_inverse=True, return_counts=True)
    for a, b in zip(f, t):
        close(a, b.numpy())


def test_scatter_and_index_fill_forms():
    x = T(np.zeros((2, 3)))
    out = x.scatter(0, flow.tensor([[1, 0, 1]]), 5.0)
    close(out, [[0, 5, 0], [5, 0, 5]])
    y = x.clone()
    r = y.scatter_(1, flow.tensor([[2], [0]]), T(np.array([[1.0], [2.0]])))
    assert r is y
    close(y, [[0, 0, 1], [2, 0, 0]])
    z = T(np.arange(6).reshape(2, 3))
    assert z.index_fill_(0, flow.tensor([1]), 9) is z
    close(z, [[0, 1, 2], [9, 9, 9]])
    w = T(np.ones((3, 2)))
    w.index_add_(0, flow.tensor([0, 0]), T(np.ones((2, 2))), alpha=3)
    close(w, [[7, 7], [1, 1], [1, 1]])
    v = T(np.zeros(3))
    close(v.index_fill(0, flow.tensor([1]), flow.tensor(4.0)), [0, 4, 0])


def test_scatter_grads_against_torch():
    torch = pytest.importorskip("torch")
    idx = np.array([[1, 3], [0, 2], [2, 1]])
    for name, args in (("scatter", (1,)), ("index_fill", (1,)), ("index_add", (0,))):
        fx, tx = T(A, True), torch.tensor(A, requires_grad=True)
        fs, ts = T(B[:, :2], True), torch.tensor(B[:, :2].copy(), requires_grad=True)
        if name == "scatter":
            fo, to = fx.scatter(1, T(idx), fs), tx.scatter(1, torch.tensor(idx), ts)
        elif name == "index_fill":
            fo = fx.index_fill(1, T(np.array([3, 0])), 2.0)
            to = tx.index_fill(1, torch.tensor([3, 0]), 2.0)
        else:
            fs, ts = T(B[:2], True), torch.tensor(B[:2].copy(), requires_grad=True)
            fo = fx.index_add(0, T(np.array([2, 1])), fs, alpha=-1.5)
            to = tx.index_add(0, torch.tensor([2, 1]), ts, alpha=-1.5)
        close(fo, to.detach().numpy())
        w = RNG.standard_normal(A.shape)
        (fo * T(w)).sum().backward()
        (to * torch.tensor(w)).sum().backward()
        close(fx.grad, tx.grad.numpy())
        if ts.grad is not None:
            close(fs.grad, ts.grad.numpy())


def central(f, a, eps=1e-6):
    """The gradient of ``sum(f(a))`` by central differences."""
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        up, dn = a.copy(), a.copy()
        up[i] += eps
        dn[i] -= eps
        g[i] = (np.sum(f(up)) - np.sum(f(dn))) / (2 * eps)
    return g


def test_central_difference_grads():
    x = T(A * 3, True)
    flow.logaddexp(x, T(B)).sum().backward()
    close(x.grad, central(lambda a: np.logaddexp(a, B), A * 3), rtol=1e-6, atol=1e-8)
    p = RNG.uniform(0.1, 0.9, (3, 4))
    y = T(p, True)
    flow.logit(y).sum().backward()
    close(y.grad, central(lambda a: np.log(a / (1 - a)), p), rtol=1e-6, atol=1e-8)
    z = T(A, True)
    flow.quantile(z, 0.3, dim=1).sum().backward()
    close(z.grad, central(lambda a: np.quantile(a, 0.3, axis=1), A), rtol=1e-5, atol=1e-8)
    u = T(C3, True)
    flow.tensordot(u, T(B), ([1, 2], [0, 1])).sum().backward()
    close(u.grad, central(lambda a: np.tensordot(a, B, ([1, 2], [0, 1])), C3), rtol=1e-6,
          atol=1e-8)


def test_logaddexp_extremes_grad_finite():
    x = T(np.array([1000.0, -1000.0, 0.0]), True)
    out = flow.logaddexp(x, T(np.array([-1000.0, 1000.0, 0.0])))
    out.sum().backward()
    close(out, [1000.0, 1000.0, math.log(2)])
    close(x.grad, [1.0, 0.0, 0.5])


INPLACE = "abs neg exp log sqrt rsqrt sigmoid tanh relu sin cos floor ceil round trunc sign " \
          "reciprocal square log1p expm1".split()


@pytest.mark.parametrize("name", INPLACE + ["pow", "clamp_min", "clamp_max", "nan_to_num"])
def test_inplace_unary(name):
    a = RNG.uniform(0.2, 2.0, (2, 3)) * np.array([1, -1, 1])
    if name in ("log", "sqrt", "rsqrt"):
        a = np.abs(a)
    args = {"pow": (2.0,), "clamp_min": (0.5,), "clamp_max": (0.5,)}.get(name, ())
    x = T(a)
    want = getattr(T(a), name)(*args).numpy()
    base = T(np.zeros((4, 3)))
    view = base.narrow(0, 1, 2)
    view.copy_(x)
    r = getattr(view, name + "_")(*args)
    assert r is view
    close(view, want)
    close(base.narrow(0, 1, 2), want)  # written through the view
    close(base.narrow(0, 0, 1), np.zeros((1, 3)))
    leaf = T(a, True)
    with pytest.raises(RuntimeError):
        getattr(leaf, name + "_")(*args)
    h = T(a, True)
    y = h * 1.0
    getattr(y, name + "_")(*args)
    y.sum().backward()
    torch = pytest.importorskip("torch")
    th = torch.tensor(a, requires_grad=True)
    ty = th * 1.0
    getattr(ty, name + "_")(*args)
    ty.sum().backward()
    close(y, ty.detach().numpy())
    close(h.grad, th.grad.numpy())


def test_inplace_dtype_rules():
    with pytest.raises(RuntimeError):
        T(np.array([1, 4])).sqrt_()
    with pytest.raises(RuntimeError):
        T(np.array([1, 4])).exp_()
    i = T(np.array([-1, 4]))
    assert i.abs_() is i and i.dtype == flow.int64
    close(i, [1, 4])
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.tensor([1, 4]).sqrt_()


def test_global_tensors():
    g = G(C3)
    out = flow.movedim(g, 0, -1)
    assert out.is_global
    close(out.to_local(), np.moveaxis(C3, 0, -1))
    close(flow.tensordot(g, G(B), ([1, 2], [0, 1])).to_local(),
          np.tensordot(C3, B, ([1, 2], [0, 1])))
    close(flow.median(G(A), 1).values.to_local(), np_lower_median(A, 1))
    close(flow.quantile(G(A), 0.4, 0).to_local(), np.quantile(A, 0.4, 0))
    close(flow.nansum(G(WITH_NAN), 1).to_local(), np.nansum(WITH_NAN, 1))
    close(flow.cummax(G(A), 1).values.to_local(), np_cummax(A, 1))
    close(flow.logaddexp(G(A), G(B)).to_local(), np.logaddexp(A, B))
    s = G(A).scatter(1, G(np.array([[1], [0], [2]])), 7.0)
    close(s.to_local(), np.where(np.eye(3, 4)[[1, 0, 2]] > 0, 7.0, A))
    close(G(A).index_fill(0, G(np.array([1])), 0.0).to_local(), A * np.array([[1], [0], [1]]))


def test_bad_arguments():
    x = T(C3)
    with pytest.raises(RuntimeError):
        x.movedim((0, 1), (2,))
    with pytest.raises(RuntimeError):
        x.movedim((0, 0), (1, 2))
    with pytest.raises(IndexError):
        x.movedim(3, 0)
    with pytest.raises(RuntimeError):
        flow.tensordot(x, T(B), 1)
    with pytest.raises(RuntimeError):
        flow.tensordot(x, T(B), -1)
    with pytest.raises(RuntimeError):
        flow.mv(T(A), T(B))
    with pytest.raises(RuntimeError):
        x.tensor_split(0)
    with pytest.raises(RuntimeError):
        T(A).kthvalue(5, 1)
    with pytest.raises(RuntimeError):
        T(A).quantile(1.5)
    with pytest.raises(RuntimeError):
        T(A).quantile(0.5, interpolation="cubic")
    with pytest.raises(RuntimeError):
        T(np.array([1, 2])).quantile(0.5)
    with pytest.raises(RuntimeError):
        T(A).quantile(T(np.array([0.5], dtype=np.float32)))
    with pytest.raises(RuntimeError):
        T(np.array([1, 2])).nanmean()
    with pytest.raises(RuntimeError):
        T(A).index_add(0, flow.tensor([0]), T(B[:1].astype(np.float32)))
    with pytest.raises(RuntimeError):
        T(A).index_add(0, flow.tensor([0, 1]), T(B[:1]))
    with pytest.raises(IndexError):
        T(A).index_fill(0, flow.tensor([3]), 1.0)
    with pytest.raises(RuntimeError):
        T(A).take_along_dim(T(np.array([[0]], dtype=np.int32)), 1)
    torch = pytest.importorskip("torch")
    t = torch.tensor(C3)
    for call in (lambda: t.movedim((0, 1), (2,)), lambda: torch.tensordot(t, torch.tensor(B), 1),
                 lambda: t.tensor_split(0), lambda: torch.tensor(A).quantile(1.5),
                 lambda: torch.tensor([1, 2]).nanmean(),
                 lambda: torch.tensor(A).index_add(0, torch.tensor([0, 1]), torch.tensor(B[:1]))):
        with pytest.raises(RuntimeError):
            call()
    with pytest.raises(RuntimeError):
        torch.tensor(A).kthvalue(5, 1)
