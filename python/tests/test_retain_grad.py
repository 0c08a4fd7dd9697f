"""``retain_grad()`` is gflow's own (core ``Tensor::retain_grad``), as PyTorch's: the non-leaf
tensor itself keeps its gradient (the sum over all its uses) after backward, in its own layout."""

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])


@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_a_retained_non_leaf_keeps_its_gradient(global_):
    a = np.random.default_rng(1).standard_normal((3, 4))
    x = flow.tensor(a, requires_grad=True)
    src = x.to_global(placement=P, sbp=flow.sbp.split(0)) if global_ else x
    h = src.exp()
    other = h * 3
    handle = h._handle()
    h.retain_grad()
    assert h._same_as(handle), "retain_grad marks the tensor itself, it adds no operation"
    assert h.retains_grad and not other.retains_grad and not h.is_leaf
    # loss = sum(h * h) + sum(other): dloss/dh = 2h + 3.
    ((h * h).sum() + other.sum()).backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * np.exp(a) + 3, rtol=1e-12)
    assert other.grad is None
    if global_:
        assert h.grad.sbp == h.sbp and h.grad.placement == P
    np.testing.assert_allclose(x.grad.numpy(), (2 * np.exp(a) + 3) * np.exp(a), rtol=1e-12)


def test_retain_grad_on_a_leaf_and_on_a_constant():
    w = flow.ones(2, requires_grad=True)
    w.retain_grad()
    assert not w.retains_grad
    (w * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0])
    with pytest.raises(flow.InvalidArgumentError, match="does not require grad"):
        flow.ones(2).retain_grad()


@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_grad_is_one_object_that_accumulates_in_place(global_):
    """As PyTorch's ``AccumulateGrad``: ``x.grad`` is the same object each time, and a reference
    held across backward calls sees the accumulated sum; after ``x.grad = None`` (or any
    assignment) the old reference keeps its value and backward starts a new gradient."""
    x = flow.ones(3, requires_grad=True)
    if global_:
        x = x.to_global(placement=P, sbp=flow.sbp.broadcast).detach().requires_grad_()
    (x * 2).sum().backward()
    held = x.grad
    assert held is x.grad
    (x * 3).sum().backward()
    assert held.tolist() == [5.0, 5.0, 5.0] and held is x.grad
    x.grad = None
    (x * 4).sum().backward()
    assert held.tolist() == [5.0, 5.0, 5.0] and x.grad.tolist() == [4.0, 4.0, 4.0]
    # an in-place zero through one handle is the gradient's (as zero_grad(set_to_none=False))
    live = x.grad
    live.zero_()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
    (x * 5).sum().backward()
    assert live.tolist() == [5.0, 5.0, 5.0]
    x.grad += 1
    assert x.grad.tolist() == [6.0, 6.0, 6.0] and live.tolist() == [6.0, 6.0, 6.0]
