"""``x.max(dim)`` / ``x.min(dim)`` / ``flow.max(x, dim)`` as OneFlow and PyTorch: the named
tuple ``(values, indices)``; without a dim the largest (smallest) element; with a tensor the
elementwise maximum (minimum)."""

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])
A = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)


def both(a):
    return [flow.tensor(a), flow.tensor(a).to_global(placement=P, sbp=flow.sbp.split(0))]


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_along_a_dim_give_values_and_indices(kind, dim, keepdim):
    x = both(A)[kind]
    for name, npv, npi in [("max", np.max, np.argmax), ("min", np.min, np.argmin)]:
        want_v = npv(A, axis=dim, keepdims=keepdim)
        want_i = npi(A, axis=dim)
        if keepdim:
            want_i = np.expand_dims(want_i, dim)
        for r in (getattr(x, name)(dim, keepdim=keepdim),
                  getattr(x, name)(dim=dim, keepdim=keepdim),
                  getattr(flow, name)(x, dim, keepdim)):
            values, indices = r
            assert type(r).__name__ == name and r.values is values and r[1] is indices
            np.testing.assert_array_equal(values.numpy(), want_v)
            np.testing.assert_array_equal(r[0].numpy(), want_v)
            assert indices.dtype == flow.int64
            np.testing.assert_array_equal(r.indices.numpy(), want_i)


@pytest.mark.parametrize("kind", [0, 1], ids=["local", "global"])
def test_max_min_without_dim_and_with_a_tensor(kind):
    x, y = both(A)[kind], both(A[::-1].copy())[kind]
    assert x.max().shape == () and x.max().item() == A.max()
    assert flow.min(x).item() == A.min()
    np.testing.assert_array_equal(x.max(y).numpy(), np.maximum(A, A[::-1]))
    np.testing.assert_array_equal(flow.min(x, y).numpy(), np.minimum(A, A[::-1]))
    np.testing.assert_array_equal(x.amax(dim=(0, 1)).numpy(), A.max())


def test_max_along_a_dim_is_differentiable():
    x = flow.tensor(A, requires_grad=True)
    x.max(dim=1).values.sum().backward()
    want = np.zeros_like(A)
    want[np.arange(3), A.argmax(1)] = 1
    np.testing.assert_array_equal(x.grad.numpy(), want)
