"""In-place operators (``add_ sub_ mul_ div_ zero_ fill_ copy_ clamp_ masked_fill_``, ``+= -= *=
/=``) keep the very tensor: identity, ``requires_grad``, ``.grad``, placement and SBP, as
OneFlow's manual-SGD idiom needs; a leaf that requires grad changes only under ``no_grad``."""

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])
A = np.random.default_rng(2).standard_normal((4, 3))


def make(a, global_, **kw):
    x = flow.tensor(a, **kw)
    return x.to_global(placement=P, sbp=flow.sbp.split(0)) if global_ else x


@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_manual_sgd_keeps_the_parameter(global_):
    w = make(A, global_)
    w.requires_grad = True
    w0, layout = w, (w.placement, w.sbp)
    for step in range(3):
        loss = (w * w).sum()
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy(), rtol=1e-12)
        with flow.no_grad():
            w -= 0.1 * w.grad
        w.grad.zero_()
        np.testing.assert_array_equal(w.grad.numpy(), np.zeros_like(A))
    assert w is w0 and w.requires_grad and w.is_leaf and (w.placement, w.sbp) == layout
    np.testing.assert_allclose(w.numpy(), A * 0.8**3, rtol=1e-12)


@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_each_in_place_operator(global_):
    x = make(A, global_)
    x0, data = x, x.data
    x.add_(1.0)
    x.sub_(make(A, global_), alpha=2)
    x.mul_(3)
    x.div_(2.0)
    want = (A + 1 - 2 * A) * 3 / 2
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-12)
    x += 1
    x *= make(A, global_)
    x /= 2
    x -= 0.5
    want = (want + 1) * A / 2 - 0.5
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-12)
    assert x.clamp_(-0.1, 0.2) is x0
    np.testing.assert_allclose(x.numpy(), np.clip(want, -0.1, 0.2), rtol=1e-12)
    x.masked_fill_(make(A, global_) > 0, 5.0)
    np.testing.assert_allclose(x.numpy(), np.where(A > 0, 5.0, np.clip(want, -0.1, 0.2)))
    x.copy_(flow.tensor([1.0, 2.0, 3.0]))  # broadcast, a local source for a global tensor
    np.testing.assert_array_equal(x.numpy(), np.tile([1.0, 2.0, 3.0], (4, 1)))
    assert x.fill_(2).zero_() is x0 and x.dtype == flow.float64
    np.testing.assert_array_equal(data.numpy(), np.zeros_like(A))  # `.data` shares the storage
    if global_:
        assert x.sbp == (flow.sbp.split(0),) and x.placement == P


def test_in_place_on_integers_and_the_numpy_view():
    x = flow.tensor([1, 2, 3])
    view = x.numpy()
    x += 1
    x *= 2
    np.testing.assert_array_equal(view, [4, 6, 8])
    assert x.dtype == flow.int64
    with pytest.raises(flow.DTypeError):
        x /= 2  # a float result into an int64 tensor, refused as PyTorch


def test_a_leaf_that_requires_grad_changes_only_under_no_grad():
    w = flow.ones(2, requires_grad=True)
    for f in (lambda: w.add_(1), lambda: w.zero_(), lambda: w.__imul__(2)):
        with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
            f()
    with flow.no_grad():
        w.mul_(3)
    np.testing.assert_array_equal(w.numpy(), [3.0, 3.0])


def test_in_place_on_a_recorded_result_stays_on_the_graph():
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    b = flow.tensor([3.0, 4.0], requires_grad=True)
    y = a * 2
    y0 = y
    y += b
    y.mul_(a)
    assert y is y0 and not y.is_leaf
    y.sum().backward()  # y = (2a + b) a
    np.testing.assert_allclose(a.grad.numpy(), [4 * 1 + 3, 4 * 2 + 4])
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 2.0])


def test_zeroing_one_gradient_leaves_the_others():
    a = flow.ones(2, requires_grad=True)
    b = flow.ones(2, requires_grad=True)
    (a + b).sum().backward()
    a.grad.zero_()
    np.testing.assert_array_equal(a.grad.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 1.0])
    b.grad.data.mul_(3)
    np.testing.assert_array_equal(b.grad.numpy(), [3.0, 3.0])
