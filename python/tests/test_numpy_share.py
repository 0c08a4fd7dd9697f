"""NumPy interop without needless copies: ``numpy()`` of a local CPU tensor (a global tensor's
``to_local()`` component included) views the tensor's own storage, and stays valid and shared
through gflow's in-place updates; ``from_numpy``/``tensor`` copy an array once, with no NumPy
temporary; where sharing would be unsound (a global tensor's gathered value, bfloat16) a fresh
array comes back."""

import gc
import tracemalloc

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn

P = flow.placement("cpu", [0])
DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.bool_]


def sample(dtype, shape=(3, 4)):
    a = np.arange(int(np.prod(shape))).reshape(shape) % 5
    return (a > 2) if dtype is np.bool_ else a.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_views_the_tensors_storage(dtype):
    t = flow.from_numpy(sample(dtype))
    a, b = t.numpy(), t.numpy()
    assert a.dtype == np.dtype(dtype) and a.flags.writeable and a.flags.c_contiguous
    assert np.shares_memory(a, b), "two numpy() calls see one buffer"
    # A write through the array is what gflow's kernels read next.
    a[1, 2] = 1
    assert (t + 0).numpy()[1, 2] == 1 and t.tolist()[1][2] == 1
    assert type(a.base).__name__ == "_Storage" or type(a.base.base).__name__ == "_Storage"


def test_the_array_keeps_the_storage_alive_after_the_tensor_is_gone():
    t = flow.tensor(np.arange(1000, dtype=np.float64))
    a = t.numpy()
    del t
    gc.collect()
    flow.randn(1000, dtype=flow.float64)  # reuse freed memory, if any were freed
    np.testing.assert_array_equal(a, np.arange(1000, dtype=np.float64))


def test_in_place_updates_are_seen_through_the_view():
    flow.manual_seed(0)
    model = nn.Linear(3, 2)
    w = model.weight.numpy()
    before = w.copy()
    opt = flow.optim.SGD(model.parameters(), lr=0.5)
    model(flow.ones(4, 3)).sum().backward()
    grad = model.weight.grad.numpy().copy()
    opt.step()  # updates the parameter's buffer in place
    np.testing.assert_allclose(w, before - 0.5 * grad, rtol=1e-6)
    # load_state_dict writes into the same buffer, so the view shows the loaded value.
    target = {"weight": flow.full([2, 3], 7.0), "bias": flow.zeros(2)}
    model.load_state_dict(target)
    np.testing.assert_array_equal(w, np.full((2, 3), 7.0, np.float32))


def test_a_global_tensors_local_component_is_a_view_of_its_storage():
    g = flow.tensor(np.zeros((4, 3), np.float32), placement=P, sbp=flow.sbp.split(0))
    a = g.to_local().numpy()
    a[2, 1] = 5.0
    assert g.numpy()[2, 1] == 5.0, "the global tensor reads the component the array wrote"
    # The whole value of a global tensor is gathered into a new array (as OneFlow's numpy()).
    assert not np.shares_memory(g.numpy(), g.numpy())


def test_bfloat16_comes_out_as_a_float32_copy():
    t = flow.tensor([1.5, -2.25, 3.0]).bfloat16()
    a = t.numpy()
    assert a.dtype == np.float32 and not np.shares_memory(a, t.numpy())
    np.testing.assert_array_equal(a, [1.5, -2.25, 3.0])


def numpy_bytes_allocated_by(f):
    """Peak bytes NumPy allocated (NumPy reports its buffers to tracemalloc) while ``f`` ran."""
    gc.collect()
    tracemalloc.start()
    try:
        out = f()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("strided", [False, True])
def test_from_numpy_copies_once_without_a_numpy_temporary(dtype, strided):
    big = sample(dtype, (512, 1024))
    a = big[:, ::2] if strided else big
    t, peak = numpy_bytes_allocated_by(lambda: flow.from_numpy(a))
    assert peak < a.nbytes // 4, f"a NumPy temporary of {peak} bytes for {a.nbytes} of data"
    assert t.dtype == getattr(flow, np.dtype(dtype).name)
    out = t.numpy()
    np.testing.assert_array_equal(out, a)
    assert not np.shares_memory(out, a), "gflow's storage is its own copy"
    a[0, 0] = 1 - a[0, 0]
    assert out[0, 0] != a[0, 0], "later writes to the input do not reach the tensor"


def test_tensor_of_lists_and_conversions_still_work():
    assert flow.tensor([[1, 2], [3, 4]]).dtype == flow.int64
    assert flow.tensor([1.0, 2.0]).dtype == flow.float32
    assert flow.tensor(np.arange(3), dtype=flow.float32).numpy().dtype == np.float32
    t = flow.tensor(np.arange(6, dtype=np.float64).reshape(2, 3).T)  # Fortran order in
    np.testing.assert_array_equal(t.numpy(), np.arange(6.0).reshape(2, 3).T)
