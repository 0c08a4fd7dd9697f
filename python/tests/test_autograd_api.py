"""``flow.autograd.grad`` (gradients returned, no ``.grad`` changed), ``backward(inputs=)`` and
``flow.autograd.backward`` against hand-derived gradients, local and global; and against
PyTorch where it is installed."""

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])


def leaf(values, global_):
    t = flow.tensor(np.asarray(values, np.float64))
    if global_:
        t = t.to_global(placement=P, sbp=flow.sbp.broadcast)
    return t.requires_grad_()


@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_grad_returns_gradients_and_leaves_grad_alone(global_):
    x, w = leaf([1.0, 2.0, 3.0], global_), leaf([0.5, -1.0, 2.0], global_)
    y = (x * w).sum()
    gx, gw = flow.autograd.grad(y, [x, w], retain_graph=True)
    assert gx.tolist() == [0.5, -1.0, 2.0] and gw.tolist() == [1.0, 2.0, 3.0]
    assert x.grad is None and w.grad is None
    if global_:
        assert gx.placement == P and gx.sbp == (flow.sbp.broadcast,)
    # several outputs sum; a seed per output; a single input gives a 1-tuple
    z = (x * x).sum()
    (g,) = flow.autograd.grad([y, z], x, retain_graph=True)
    assert g.tolist() == [2.5, 3.0, 8.0]
    v = x * w
    (g,) = flow.autograd.grad(v, x, grad_outputs=leaf([1.0, 0.0, 2.0], global_).detach())
    assert g.tolist() == [0.5, 0.0, 4.0]


def test_unused_inputs_and_refusals():
    x, u = leaf([1.0, 2.0], False), leaf([3.0], False)
    with pytest.raises(RuntimeError, match="not to have been used"):
        flow.autograd.grad((x * x).sum(), [x, u], retain_graph=True)
    gx, gu = flow.autograd.grad((x * x).sum(), [x, u], allow_unused=True, retain_graph=True)
    assert gx.tolist() == [2.0, 4.0] and gu is None
    gx, gu = flow.autograd.grad((x * x).sum(), [x, u], materialize_grads=True)
    assert gu.tolist() == [0.0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        flow.autograd.grad((x * 2).sum(), [flow.ones(2)])
    with pytest.raises(RuntimeError, match="create_graph"):
        flow.autograd.grad((x * 2).sum(), x, create_graph=True)
    y = (x * 2).sum()
    flow.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="second time"):
        flow.autograd.grad(y, x)


def test_backward_into_chosen_inputs_only():
    x, w = leaf([1.0, 2.0, 3.0], False), leaf([0.5, -1.0, 2.0], False)
    (x * w).sum().backward(inputs=[w])
    assert x.grad is None and w.grad.tolist() == [1.0, 2.0, 3.0]
    h = x * 2  # a non-leaf input gets its .grad; the leaf below it nothing
    (h * h).sum().backward(inputs=[h])
    assert h.grad.tolist() == [4.0, 8.0, 12.0] and x.grad is None
    flow.autograd.backward([(x * x).sum(), (w * 3).sum()])
    assert x.grad.tolist() == [2.0, 4.0, 6.0] and w.grad.tolist() == [4.0, 5.0, 6.0]


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(3).standard_normal((4, 5))
    b = np.random.default_rng(4).standard_normal((5, 3))
    x, w = flow.tensor(a, requires_grad=True), flow.tensor(b, requires_grad=True)
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    got = flow.autograd.grad((x @ w).tanh().sum(), [x, w])
    want = torch.autograd.grad((tx @ tw).tanh().sum(), [tx, tw])
    for g, t in zip(got, want):
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-12)
