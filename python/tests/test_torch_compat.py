"""Everyday PyTorch/OneFlow APIs as thin wrappers over gflow's operators: ``stack``, ``mm``,
``bmm``, ``*_like``, ``empty``, ``is_tensor``, ``allclose``, the function forms of ``view`` and
``expand``, ``clone``, ``contiguous``, ``is_floating_point``, ``any``/``all``, ``number ** x``,
``split`` with a list of sizes, ``x.T`` / ``x.t()`` of any rank and 1-D ``matmul``."""

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])
RNG = np.random.default_rng(11)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((3, 4))


def both(a):
    return [flow.tensor(a), flow.tensor(a).to_global(placement=P, sbp=flow.sbp.split(0))]


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
def test_stack_mm_bmm(kind):
    x, y = both(A)[kind], both(B)[kind]
    for d in (0, 1, 2, -1):
        np.testing.assert_array_equal(flow.stack([x, y], d).numpy(), np.stack([A, B], d))
    np.testing.assert_allclose(flow.mm(x, y.T).numpy(), A @ B.T, rtol=1e-12)
    np.testing.assert_allclose(x.mm(y.t()).numpy(), A @ B.T, rtol=1e-12)
    s = flow.stack([x, y])
    np.testing.assert_allclose(flow.bmm(s, s.transpose(1, 2)).numpy(),
                               np.stack([A @ A.T, B @ B.T]), rtol=1e-12)
    with pytest.raises(flow.ShapeError):
        flow.bmm(x, y)


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
def test_like_creators(kind):
    x = both(A)[kind]
    for f, value in ((flow.zeros_like, 0.0), (flow.ones_like, 1.0), (flow.empty_like, None)):
        t = f(x)
        assert t.shape == x.shape and t.dtype == x.dtype and t.is_global == x.is_global
        assert t.sbp == x.sbp and t.placement == x.placement
        if value is not None:
            np.testing.assert_array_equal(t.numpy(), np.full(A.shape, value))
    r = flow.randn_like(x, dtype=flow.float32)
    assert r.shape == x.shape and r.dtype == flow.float32 and r.sbp == x.sbp
    np.testing.assert_array_equal(flow.full_like(x, 7).numpy(), np.full(A.shape, 7.0))
    assert flow.rand_like(x).numpy().min() >= 0
    assert flow.empty(2, 3).shape == (2, 3)
    if kind:
        p = (x * 2).to_global(sbp=flow.sbp.partial_sum)
        z = flow.ones_like(p)
        assert z.sbp == (flow.sbp.broadcast,)
        np.testing.assert_array_equal(z.numpy(), np.ones(A.shape))


def test_is_tensor_allclose_view_expand():
    x = flow.tensor(A)
    assert flow.is_tensor(x) and not flow.is_tensor(A)
    assert flow.allclose(x, flow.tensor(A + 1e-9)) and not flow.allclose(x, flow.tensor(B))
    assert type(flow.allclose(x, x)) is bool
    np.testing.assert_array_equal(flow.view(x, 4, 3).numpy(), A.reshape(4, 3))
    np.testing.assert_array_equal(flow.expand(flow.tensor(A[:1]), 3, 4).numpy(),
                                  np.broadcast_to(A[:1], (3, 4)))


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
def test_clone_contiguous_any_all(kind):
    x = both(A)[kind]
    c = x.clone()
    assert not c._same_as(x) and c.sbp == x.sbp
    np.testing.assert_array_equal(c.numpy(), A)
    c.mul_(2)  # a copy: the original is untouched
    np.testing.assert_array_equal(x.numpy(), A)
    assert x.contiguous() is x
    assert x.is_floating_point() and not flow.tensor([1]).is_floating_point()
    m = both(A > 0)[kind]
    assert m.any().dtype == flow.bool and m.any().shape == ()
    assert bool(m.any()) == (A > 0).any() and bool(m.all()) == (A > 0).all()
    np.testing.assert_array_equal(m.any(1).numpy(), (A > 0).any(1))
    np.testing.assert_array_equal(m.all(dim=0, keepdim=True).numpy(),
                                  (A > 0).all(0, keepdims=True))
    np.testing.assert_array_equal(flow.all(x != 100).numpy(), True)
    assert not flow.zeros(0).any() and flow.zeros(0).all()


def test_clone_is_differentiable():
    x = flow.tensor(A, requires_grad=True)
    (x.clone() * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(A.shape, 3.0))


def test_number_to_the_power_of_a_tensor():
    x = flow.tensor(A)
    np.testing.assert_allclose((2 ** x).numpy(), 2 ** A, rtol=1e-12)
    np.testing.assert_allclose((0.5 ** flow.tensor(A, dtype=flow.float32)).numpy(), 0.5 ** A,
                               rtol=1e-6)
    e = 3 ** flow.arange(5)
    assert e.dtype == flow.int64
    np.testing.assert_array_equal(e.numpy(), 3 ** np.arange(5))
    w = flow.tensor([1.0, 2.0], requires_grad=True)
    (2 ** w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.log(2) * 2 ** np.array([1.0, 2.0]))


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
def test_split_with_a_list_of_sizes(kind):
    x = both(A)[kind]
    parts = x.split([1, 3], dim=1)
    assert len(parts) == 2
    np.testing.assert_array_equal(parts[0].numpy(), A[:, :1])
    np.testing.assert_array_equal(parts[1].numpy(), A[:, 1:])
    a, b, c = flow.split(x, [2, 0, 1])
    assert b.shape == (0, 4)
    np.testing.assert_array_equal(c.numpy(), A[2:])
    with pytest.raises(flow.ShapeError, match="add up"):
        x.split([1, 1], dim=1)


def test_transpose_properties_of_any_rank():
    v = flow.tensor([1.0, 2.0])
    for t in (v.T, v.t(), flow.tensor(3.0).T):
        assert t.ndim <= 1
    np.testing.assert_array_equal(v.T.numpy(), [1.0, 2.0])
    assert hasattr(v, "T")
    c = flow.tensor(np.arange(24.0).reshape(2, 3, 4))
    np.testing.assert_array_equal(c.T.numpy(), np.arange(24.0).reshape(2, 3, 4).T)
    with pytest.raises(flow.ShapeError):
        c.t()


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
def test_matmul_with_vectors(kind):
    x = both(A)[kind]
    u, w = flow.tensor(A[0]), flow.tensor(A[:, 0])
    if kind:
        u = u.to_global(placement=P, sbp=flow.sbp.broadcast)
        w = w.to_global(placement=P, sbp=flow.sbp.broadcast)
    dot = u @ u
    assert dot.shape == ()
    np.testing.assert_allclose(dot.numpy(), A[0] @ A[0], rtol=1e-12)
    np.testing.assert_allclose((x @ u).numpy(), A @ A[0], rtol=1e-12)
    np.testing.assert_allclose(flow.matmul(w, x).numpy(), A[:, 0] @ A, rtol=1e-12)
    batch = flow.stack([x, x])
    np.testing.assert_allclose((batch @ u).numpy(), np.stack([A, A]) @ A[0], rtol=1e-12)
