"""PyTorch's everyday extras, written over gflow's operators, against NumPy in float64:
``expand_as view_as type_as new_* unbind select reciprocal isnan isinf isfinite norm``,
``flow.eye outer equal isclose``, and ``F.nll_loss binary_cross_entropy_with_logits one_hot
normalize pad`` (each also checked against torch 2.15 when it was written)."""

import math

import numpy as np
import pytest

import gflow as flow
import gflow.nn.functional as F

RNG = np.random.default_rng(4)
A = RNG.standard_normal((3, 4))
P = flow.placement("cpu", [0])


def both(a):
    return [flow.tensor(a), flow.tensor(a).to_global(placement=P, sbp=flow.sbp.split(1))]


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
def test_shape_and_creation_sugar(kind):
    x = both(A)[kind]
    assert flow.ones(1, 4).expand_as(flow.zeros(3, 4)).shape == flow.Size([3, 4])
    np.testing.assert_array_equal(x.view_as(flow.zeros(4, 3)).numpy(), A.reshape(4, 3))
    assert x.type_as(flow.zeros(1, dtype=flow.float32)).dtype == flow.float32
    z = x.new_zeros(2, 3)
    assert z.shape == flow.Size([2, 3]) and z.dtype == x.dtype and z.is_global == x.is_global
    np.testing.assert_array_equal(x.new_ones((2,)).numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(x.new_full((2,), 7).numpy(), [7.0, 7.0])
    assert x.new_tensor([1, 2]).dtype == x.dtype and x.new_empty(3).shape == flow.Size([3])
    parts = x.unbind(1)
    assert len(parts) == 4 and all(np.array_equal(p.numpy(), A[:, i]) for i, p in enumerate(parts))
    np.testing.assert_array_equal(x.select(0, -1).numpy(), A[-1])
    with pytest.raises(IndexError):
        x.select(0, 3)
    assert x.is_contiguous()


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
def test_elementwise_checks_and_norms(kind):
    x = both(A)[kind]
    np.testing.assert_allclose(x.reciprocal().numpy(), 1 / A, rtol=1e-12)
    assert flow.tensor([2, 4]).reciprocal().numpy().tolist() == [0.5, 0.25]
    v = flow.tensor([1.0, math.nan, math.inf, -math.inf])
    assert v.isnan().numpy().tolist() == [False, True, False, False]
    assert v.isinf().numpy().tolist() == [False, False, True, True]
    assert v.isfinite().numpy().tolist() == [True, False, False, False]
    assert not flow.tensor([1, 2]).isinf().numpy().any()
    for p in ("fro", 2, 1, math.inf, -math.inf, 0, 3.5):
        q = 2 if p == "fro" else p
        np.testing.assert_allclose(x.norm(p).numpy(), np.linalg.norm(A.ravel(), q), rtol=1e-12)
        np.testing.assert_allclose(flow.norm(x, p, dim=1, keepdim=True).numpy(),
                                   np.linalg.norm(A, q, axis=1, keepdims=True), rtol=1e-12)
    with pytest.raises(TypeError):
        flow.tensor([1, 2]).norm()


def test_eye_outer_equal_isclose():
    np.testing.assert_array_equal(flow.eye(3, 4).numpy(), np.eye(3, 4))
    assert flow.eye(2, dtype=flow.int64).dtype == flow.int64
    g = flow.eye(3, placement=P, sbp=flow.sbp.broadcast)
    assert g.is_global and np.array_equal(g.numpy(), np.eye(3))
    a, b = flow.tensor(A[0]), flow.tensor(A[1])
    np.testing.assert_allclose(flow.outer(a, b).numpy(), np.outer(A[0], A[1]), rtol=1e-12)
    x = flow.tensor(A)
    assert flow.equal(x, x) and not flow.equal(x, x + 1) and not flow.equal(x, x[0])
    c = flow.isclose(flow.tensor([1.0, 1.0, math.nan]), flow.tensor([1.0 + 1e-9, 1.1, math.nan]))
    assert c.numpy().tolist() == [True, False, False]
    assert flow.isclose(flow.tensor([math.nan]), flow.tensor([math.nan]), equal_nan=True).item()


def test_functional_losses_and_helpers():
    x = flow.tensor(A, requires_grad=True)
    lp = F.log_softmax(x, 1)
    target = flow.tensor([1, -100, 3])
    ref_lp = A - np.log(np.exp(A).sum(1, keepdims=True))
    np.testing.assert_allclose(F.nll_loss(lp, target).numpy(), -(ref_lp[0, 1] + ref_lp[2, 3]) / 2,
                               rtol=1e-12)
    np.testing.assert_allclose(F.nll_loss(lp, flow.tensor([0, 1, 2]), reduction="none").numpy(),
                               -ref_lp[[0, 1, 2], [0, 1, 2]], rtol=1e-12)
    y = (RNG.random((3, 4)) > 0.5).astype(np.float64)
    pw = np.array([1.0, 2.0, 0.5, 3.0])
    sig = 1 / (1 + np.exp(-A))
    ref = -(y * np.log(sig) + (1 - y) * np.log(1 - sig))
    np.testing.assert_allclose(
        F.binary_cross_entropy_with_logits(x, flow.tensor(y)).numpy(), ref.mean(), rtol=1e-10)
    ref_pw = -(pw * y * np.log(sig) + (1 - y) * np.log(1 - sig))
    np.testing.assert_allclose(
        F.binary_cross_entropy_with_logits(x, flow.tensor(y), pos_weight=flow.tensor(pw),
                                           reduction="none").numpy(), ref_pw, rtol=1e-10)
    big = flow.tensor([100.0, -100.0])  # stable where log(sigmoid) would overflow
    np.testing.assert_allclose(
        F.binary_cross_entropy_with_logits(big, flow.tensor([0.0, 1.0]), reduction="none").numpy(),
        [100.0, 100.0])
    np.testing.assert_array_equal(F.one_hot(flow.tensor([0, 2, 1])).numpy(), np.eye(3)[[0, 2, 1]])
    assert F.one_hot(flow.tensor([0, 2]), 4).shape == flow.Size([2, 4])
    np.testing.assert_allclose(F.normalize(x).numpy(),
                               A / np.linalg.norm(A, axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(F.normalize(x, p=1, dim=0).numpy(),
                               A / np.abs(A).sum(0, keepdims=True), rtol=1e-12)
    np.testing.assert_array_equal(F.pad(x, (1, 2)).numpy(), np.pad(A, ((0, 0), (1, 2))))
    np.testing.assert_array_equal(F.pad(x, (1, -1, 2, 0), value=3.0).numpy(),
                                  np.pad(A[:, :-1], ((2, 0), (1, 0)), constant_values=3.0))
    F.pad(x, (1, 1)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((3, 4)))
    with pytest.raises((NotImplementedError, ValueError, RuntimeError)):
        F.pad(x, (1, 1), mode="no such mode")
