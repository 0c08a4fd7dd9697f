"""``prod`` and ``cumprod`` (dtypes, empty dims, gradients exact at zeros) against NumPy, local
and global; 16-bit ``norm``, ``normalize`` and ``cosine_similarity`` computed in float32 (their
squares pass float16's 65504); ``copy_`` from another dtype casts, as PyTorch's."""

import numpy as np
import pytest

import gflow as flow
import gflow.nn.functional as F

P = flow.placement("cpu", [0])
A = np.array([[1.0, 2.0, 0.0, 4.0], [3.0, -1.0, 2.0, 5.0], [0.0, 0.0, 2.0, 1.0]])


def others_product(a, axis):
    """d/da of sum(prod(a, axis)): each element's product of the others on its line."""
    out = np.empty_like(a)
    for idx in np.ndindex(a.shape):
        line = [slice(None) if d == axis else i for d, i in enumerate(idx)]
        vals = list(a[tuple(line)])
        vals.pop(idx[axis])
        out[idx] = np.prod(vals)
    return out


@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_prod_values_and_gradients_with_zeros(global_):
    for axis in (0, 1):
        x = flow.tensor(A)
        if global_:
            x = x.to_global(placement=P, sbp=flow.sbp.split(0))
        x.requires_grad_()
        y = x.prod(axis)
        np.testing.assert_array_equal(y.numpy(), A.prod(axis))
        y.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), others_product(A, axis))
    assert flow.tensor(A).prod().item() == 0.0
    assert flow.tensor(A).prod((0, 1), keepdim=True).shape == (1, 1)


def test_cumprod_values_and_gradients():
    w = np.random.default_rng(5).standard_normal(A.shape)
    for axis in (0, 1):
        x = flow.tensor(A, requires_grad=True)
        y = x.cumprod(axis)
        np.testing.assert_allclose(y.numpy(), np.cumprod(A, axis), rtol=1e-15)
        (y * flow.tensor(w)).sum().backward()
        # d/da_k of sum_j w_j prod_{i<=j} a_i = sum_{j>=k} w_j prod_{i<=j, i!=k} a_i
        want = np.zeros_like(A)
        for idx in np.ndindex(A.shape):
            k = idx[axis]
            for j in range(k, A.shape[axis]):
                line = [slice(None) if d == axis else i for d, i in enumerate(idx)]
                vals = A[tuple(line)][: j + 1].copy()
                vals[k] = 1.0
                pos = list(idx)
                pos[axis] = j
                want[idx] += w[tuple(pos)] * vals.prod()
        np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12, atol=1e-12)


def test_product_dtypes_and_empty_dims():
    i = flow.tensor([[1, 2, 3], [4, 5, 6]], dtype=flow.int32)
    assert i.prod().item() == 720 and i.prod(1).dtype == flow.int64
    assert i.cumprod(1).tolist() == [[1, 2, 6], [4, 20, 120]]
    assert flow.prod(i, 0).tolist() == [4, 10, 18]
    assert flow.tensor([True, False]).prod().item() == 0
    assert flow.ones(0, 3).prod(0).tolist() == [1.0, 1.0, 1.0]
    assert flow.tensor([2.0, 3.0]).prod(dtype=flow.float64).dtype == flow.float64
    h = flow.full((8,), 3.0, dtype=flow.float16)
    assert h.prod().dtype == flow.float16 and h.prod().item() == 6560.0  # 3^8 = 6561, rounded once


def test_half_norms_do_not_overflow():
    for dt in (flow.float16, flow.bfloat16):
        x = flow.full((1, 100), 1000.0, dtype=dt)
        assert x.norm().item() == pytest.approx(10000.0, rel=1e-2) and x.norm().dtype == dt
        np.testing.assert_allclose(F.normalize(x, dim=1).float().numpy(), 0.1, rtol=1e-2)
        assert F.cosine_similarity(x, x).float().item() == pytest.approx(1.0, rel=1e-2)


def test_copy_from_another_dtype_casts():
    x = flow.ones(2, dtype=flow.int64)
    x.copy_(flow.tensor([1.7, -1.7]))
    assert x.tolist() == [1, -1] and x.dtype == flow.int64
    b = flow.ones(2, dtype=flow.bool)
    b.copy_(flow.tensor([0.0, 0.1]))
    assert b.tolist() == [False, True]


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(2).standard_normal((4, 6))
    a[1, 2] = 0.0
    for axis in (0, 1):
        x, t = flow.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        x.prod(axis).sum().backward()
        t.prod(axis).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)
        np.testing.assert_allclose(x.cumprod(axis).detach().numpy(),
                                   t.cumprod(axis).detach().numpy(), rtol=1e-12)
