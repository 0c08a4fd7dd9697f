"""``x[key]`` against NumPy's indexing of the same array, forward and backward (the gradient of
a weighted sum of the result, scattered back by ``np.add.at``), on local tensors and on a global
tensor; out-of-range indices raise ``flow.IndexOutOfRangeError``, which is an ``IndexError``."""

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])
A = np.arange(60, dtype=np.float64).reshape(3, 4, 5) / 7.0

KEYS = [
    1, -1, (0, 2), (2, -1, 4), slice(1, 3), slice(None, None, 2), (slice(None), slice(1, None, 2)),
    (Ellipsis, 3), (Ellipsis, slice(0, 5, 3)), (1, Ellipsis, 0), (slice(-2, None), 1, slice(4)),
    [2, 0, 2], (slice(None), [3, 0]), (1, [3, 3, -4]), np.array([1, 2]), (slice(10, 20),),
    (slice(3, 1),), flow.tensor([0, 2]), (0, flow.tensor(3)), np.int64(2),
]
VIEW_KEYS = [None, (None, 1), (Ellipsis, None), (1, None, slice(None), None)]


def np_key(key):
    if isinstance(key, tuple):
        return tuple(np_key(k) for k in key)
    if isinstance(key, flow.Tensor):
        return key.numpy()
    return key


@pytest.mark.parametrize("key", KEYS + VIEW_KEYS, ids=repr)
@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_getitem_matches_numpy(key, global_):
    x = flow.tensor(A)
    if global_:
        x = x.to_global(placement=P, sbp=flow.sbp.split(1))
    y = x[key]
    want = A[np_key(key)]
    assert tuple(y.shape) == want.shape and y.is_global == global_
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("key", KEYS, ids=repr)
@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_getitem_gradient_scatters_back(key, global_):
    x = flow.tensor(A, requires_grad=True)
    src = x.to_global(placement=P, sbp=flow.sbp.split(0)) if global_ else x
    want = A[np_key(key)]
    w = np.random.default_rng(0).standard_normal(want.shape)
    wt = flow.tensor(w)
    if global_:
        wt = wt.to_global(placement=P, sbp=flow.sbp.broadcast)
    (src[key] * wt).sum().backward()
    g = np.zeros_like(A)
    np.add.at(g, np_key(key), w)
    np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-12, atol=1e-12)


def test_none_and_ellipsis_are_differentiable():
    x = flow.tensor(A, requires_grad=True)
    x[None, ..., 2, None].sum().backward()
    g = np.zeros_like(A)
    g[..., 2] = 1
    np.testing.assert_array_equal(x.grad.numpy(), g)


@pytest.mark.parametrize("key", [3, -4, (0, 4), (0, 0, 5), [0, 3], (Ellipsis, -6),
                                 flow.tensor([1, 7])], ids=repr)
def test_out_of_range_is_a_typed_index_error(key):
    x = flow.tensor(A)
    with pytest.raises(flow.IndexOutOfRangeError, match="out of range") as e:
        x[key]
    assert isinstance(e.value, IndexError) and isinstance(e.value, flow.Error)


@pytest.mark.parametrize("key, exc, text", [
    ((0, 0, 0, 0), flow.IndexOutOfRangeError, "too many indices"),
    ((Ellipsis, 0, Ellipsis), flow.IndexOutOfRangeError, "single ellipsis"),
    (slice(None, None, -1), ValueError, "step must be greater than zero"),
    (1.5, TypeError, "not float"),
    (True, TypeError, "bool"),
    # a mask alone selects (test_torch_parity); inside a tuple it is refused
    ((flow.tensor([True, False, True]), 0), TypeError, "int64 or int32"),
    (([0], [1]), TypeError, "only one index list"),
    ([[0, 1]], TypeError, "1-D"),
], ids=repr)
def test_bad_keys_are_refused(key, exc, text):
    with pytest.raises(exc, match=text):
        flow.tensor(A)[key]


def test_iteration_walks_the_first_dim():
    x = flow.tensor(A)
    rows = list(x)
    assert len(rows) == 3
    np.testing.assert_array_equal(rows[2].numpy(), A[2])
    with pytest.raises(TypeError, match="0-d"):
        iter(x.sum())
