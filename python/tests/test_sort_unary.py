"""``sort``, ``argsort``, ``topk`` (stable; NaN above every number) and ``sign``, ``log1p``,
``expm1`` against plain-Python and NumPy float64 references, local and global, with gradients;
and against PyTorch where it is installed."""

import math

import numpy as np
import pytest

import gflow as flow


def stable_order(line, descending):
    """Positions sorting ``line`` stably, NaN above every number (Python's sort is stable, also
    with ``reverse=True``)."""
    key = [(math.isnan(v), 0.0 if math.isnan(v) else v) for v in line]
    return sorted(range(len(line)), key=lambda j: key[j], reverse=descending)


def reference(a, dim, descending):
    a = np.asarray(a, dtype=np.float64)
    moved = np.moveaxis(a, dim, -1)
    idx = np.empty(moved.shape, dtype=np.int64)
    for pos in np.ndindex(moved.shape[:-1]):
        idx[pos] = stable_order(list(moved[pos]), descending)
    idx = np.moveaxis(idx, -1, dim)
    return np.take_along_axis(a, idx, dim), idx


def grid(shape, seed):
    """Values on a coarse grid (ties) with a NaN, -0.0 and infinities."""
    rng = np.random.default_rng(seed)
    v = rng.integers(-4, 5, size=shape).astype(np.float64) / 2
    flat = v.reshape(-1)
    flat[1] = np.nan
    flat[3] = -0.0
    flat[5] = np.inf
    flat[-2] = -np.inf
    return v


@pytest.mark.parametrize("shape,dim", [((9,), 0), ((3, 10), 1), ((10, 3), 0), ((2, 7, 3), -2)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_equal_a_stable_sort(shape, dim, descending):
    v = grid(shape, 1)
    want_v, want_i = reference(v, dim, descending)
    for dtype in (flow.float64, flow.float32, flow.bfloat16):
        x = flow.tensor(v, dtype=dtype)
        out = x.sort(dim=dim, descending=descending)
        assert out.indices.dtype == flow.int64
        np.testing.assert_array_equal(out.indices.numpy(), want_i)
        np.testing.assert_array_equal(out.values.double().numpy(), want_v)
        values, indices = flow.sort(x, dim, descending)
        np.testing.assert_array_equal(indices.numpy(), want_i)
        np.testing.assert_array_equal(x.argsort(dim, descending=descending).numpy(), want_i)
        np.testing.assert_array_equal(flow.argsort(x, dim=dim, descending=descending).numpy(),
                                      want_i)
    ints = np.nan_to_num(v, posinf=9, neginf=-9) * 2
    want_v, want_i = reference(ints, dim, descending)
    x = flow.tensor(ints.astype(np.int64))
    out = x.sort(dim=dim, descending=descending, stable=True)
    assert out.values.dtype == flow.int64
    np.testing.assert_array_equal(out.values.numpy(), want_v.astype(np.int64))
    np.testing.assert_array_equal(out.indices.numpy(), want_i)


def test_sort_of_bool_and_a_0d_tensor():
    b = flow.tensor([True, False, True, False])
    out = b.sort()
    np.testing.assert_array_equal(out.values.numpy(), [False, False, True, True])
    np.testing.assert_array_equal(out.indices.numpy(), [1, 3, 0, 2])
    s = flow.tensor(5.0).sort()
    assert s.values.shape == flow.Size([]) and s.indices.item() == 0


def test_topk_smallest_leaves_nan_last_as_pytorch():
    x = flow.tensor([1.0, float("nan"), 0.0, 2.0])
    out = x.topk(2, largest=False)
    np.testing.assert_array_equal(out.values.numpy(), [0.0, 1.0])
    np.testing.assert_array_equal(out.indices.numpy(), [2, 0])
    out = x.topk(2)
    assert math.isnan(out.values.numpy()[0]) and out.indices.numpy().tolist() == [1, 3]


def test_sort_gradient_goes_where_each_value_came_from():
    v = grid((4, 6), 3)
    v = np.nan_to_num(v, posinf=7.0, neginf=-7.0)
    w = np.arange(24, dtype=np.float64).reshape(4, 6) + 1
    _, idx = reference(v, 1, True)
    want = np.zeros_like(v)
    np.put_along_axis(want, idx, w, 1)
    x = flow.tensor(v, requires_grad=True)
    values, _ = x.sort(dim=1, descending=True)
    (values * flow.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_sort_of_global_tensors_keeps_a_split_elsewhere():
    p = flow.placement("cpu", [0])
    v = grid((6, 5), 4)
    want_v, want_i = reference(v, 1, False)
    for sbp in (flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast):
        x = flow.tensor(v).to_global(placement=p, sbp=sbp)
        values, indices = x.sort(dim=1)
        assert values.is_global and indices.is_global
        if sbp == flow.sbp.split(0):
            assert values.sbp == (flow.sbp.split(0),)
        np.testing.assert_array_equal(values.numpy(), want_v)
        np.testing.assert_array_equal(indices.numpy(), want_i)


def test_bad_dims_raise_index_errors():
    x = flow.tensor([[1.0, 2.0]])
    with pytest.raises(IndexError):
        x.sort(dim=2)
    with pytest.raises(IndexError):
        x.argsort(dim=-3)


def test_sign_log1p_expm1_against_float64():
    v = np.array([-2.5, -1e-12, -0.0, 0.0, 3e-9, 0.7, 4.0, np.nan])
    x = flow.tensor(v)
    np.testing.assert_array_equal(x.sign().numpy(), [-1, -1, 0, 0, 1, 1, 1, 0])
    np.testing.assert_array_equal(flow.sign(flow.tensor([-3, 0, 7])).numpy(), [-1, 0, 1])
    assert flow.tensor([True, False]).sign().dtype == flow.bool
    small = np.array([1e-12, -3e-9, 2.5e-6, -1e-4, 0.01, -0.3, 0.9, 5.0])
    for name, f in (("log1p", np.log1p), ("expm1", np.expm1)):
        got = getattr(flow.tensor(small), name)().numpy()
        np.testing.assert_allclose(got, f(small), rtol=1e-15, atol=0)
        got32 = getattr(flow, name)(flow.tensor(small, dtype=flow.float32)).numpy()
        np.testing.assert_allclose(got32, f(small), rtol=2e-6, atol=0)


def test_log1p_expm1_gradients_and_sign_gradient_zero():
    v = np.array([-0.5, 0.0, 0.25, 2.0])
    for name, d in (("log1p", lambda t: 1 / (1 + t)), ("expm1", np.exp), ("sign", np.zeros_like)):
        x = flow.tensor(v, requires_grad=True)
        getattr(x, name)().sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), d(v), rtol=1e-15)


def test_same_as_pytorch():
    torch = pytest.importorskip("torch")
    v = grid((5, 8), 7)
    for dim in (0, 1):
        for desc in (False, True):
            t = torch.sort(torch.tensor(v), dim=dim, descending=desc, stable=True)
            g = flow.tensor(v).sort(dim=dim, descending=desc)
            np.testing.assert_array_equal(g.values.numpy(), t.values.numpy())
            np.testing.assert_array_equal(g.indices.numpy(), t.indices.numpy())
    r = np.random.default_rng(2).standard_normal((4, 9))
    for largest in (True, False):
        t = torch.topk(torch.tensor(r), 3, dim=1, largest=largest)
        g = flow.tensor(r).topk(3, dim=1, largest=largest)
        np.testing.assert_array_equal(g.indices.numpy(), t.indices.numpy())
    small = np.array([1e-12, -3e-9, 0.5, -0.75, 3.0])
    for name in ("log1p", "expm1", "sign"):
        want = getattr(torch, name)(torch.tensor(small)).numpy()
        np.testing.assert_allclose(getattr(flow, name)(flow.tensor(small)).numpy(), want,
                                   rtol=1e-15, atol=0)
