"""Creation as PyTorch spells it: ``flow.arange(start, end, step)``, ``device=`` as a
``flow.device``, ``x.to(...)``'s forms, ``flow.Tensor(flow.Size(...))`` and NumPy scalars that
keep their dtype."""

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])


@pytest.mark.parametrize("args, kw, want", [
    ((5,), {}, np.arange(5)),
    ((2, 9), {}, np.arange(2, 9)),
    ((1, 10, 3), {}, np.arange(1, 10, 3)),
    ((5, 0, -2), {}, np.arange(5, 0, -2)),
    ((3, 3), {}, np.arange(3, 3)),
    ((0, 1, 0.25), {}, np.arange(0, 1, 0.25, dtype=np.float32)),
    ((1.5,), {}, np.arange(1.5, dtype=np.float32)),
    ((-1.0, 1.0, 0.5), {"dtype": flow.float64}, np.arange(-1.0, 1.0, 0.5)),
    ((6,), {"dtype": flow.float32}, np.arange(6, dtype=np.float32)),
    ((2, 8, 2), {"dtype": flow.int32}, np.arange(2, 8, 2, dtype=np.int32)),
])
def test_arange_start_end_step(args, kw, want):
    got = flow.arange(*args, **kw).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    g = flow.arange(*args, **kw, placement=P, sbp=flow.sbp.split(0))
    assert g.is_global and g.sbp == (flow.sbp.split(0),)
    np.testing.assert_array_equal(g.numpy(), want)


def test_arange_keywords_and_errors():
    np.testing.assert_array_equal(flow.arange(start=1, end=4).numpy(), [1, 2, 3])
    np.testing.assert_array_equal(flow.arange(0, 6, step=2).numpy(), [0, 2, 4])
    assert flow.arange(3, requires_grad=True, dtype=flow.float32).requires_grad
    with pytest.raises(ValueError, match="non-zero step"):
        flow.arange(0, 3, 0)


def test_device_objects():
    cpu = flow.device("cpu")
    for x in (flow.zeros(2, device=cpu), flow.ones(2, 3, device=cpu),
              flow.randn(2, device="cpu:0"), flow.full((2,), 1.0, device=cpu),
              flow.arange(3, device=cpu), flow.tensor([1.0], device=cpu),
              flow.Tensor(2, 3, device=cpu), flow.Tensor([1.0, 2.0], device=cpu)):
        assert x.is_local and x.device == flow.device("cpu", 0)
    assert flow.Tensor(2, 3, device=cpu).shape == (2, 3)


def test_to_forms():
    x = flow.tensor([[1.5, -2.0]])
    assert x.to("cpu") is x and x.to(flow.device("cpu")) is x and x.to(x.dtype) is x
    assert x.to(dtype=flow.float64).dtype == flow.float64
    y = x.to("cpu", flow.float64)
    assert y.dtype == flow.float64
    np.testing.assert_array_equal(y.numpy(), [[1.5, -2.0]])
    assert x.to(flow.device("cpu"), dtype=flow.int64).dtype == flow.int64
    z = x.to(flow.tensor([1, 2]))  # another tensor's dtype and device
    assert z.dtype == flow.int64
    np.testing.assert_array_equal(z.numpy(), [[1, -2]])
    c = x.to(copy=True)
    assert c is not x and not c._same_as(x)
    np.testing.assert_array_equal(c.numpy(), x.numpy())
    g = x.to_global(placement=P, sbp=flow.sbp.broadcast)
    assert g.to(flow.float64).is_global and g.to("cpu") is g


def test_tensor_of_a_size_is_a_shape():
    t = flow.Tensor(flow.Size([2, 3]))
    assert t.shape == (2, 3) and t.dtype == flow.float32
    assert flow.Tensor(flow.zeros(4, 5).shape).shape == (4, 5)
    assert flow.Tensor().shape == (0,)
    np.testing.assert_array_equal(flow.Tensor((2, 3)).numpy(), [2.0, 3.0])  # a tuple is data
    np.testing.assert_array_equal(flow.Tensor([4]).numpy(), [4.0])
    g = flow.Tensor(flow.Size([4, 2]), placement=P, sbp=flow.sbp.split(0))
    assert g.shape == (4, 2) and g.is_global


@pytest.mark.parametrize("scalar, want", [
    (np.float64(2.0), flow.float64), (np.float32(2.0), flow.float32),
    (np.float16(2.0), flow.float16), (np.int32(2), flow.int32), (np.int64(2), flow.int64),
    (np.bool_(True), flow.bool), (2.0, flow.float32), (2, flow.int64),
])
def test_numpy_scalars_keep_their_dtype(scalar, want):
    t = flow.tensor(scalar)
    assert t.dtype == want and t.shape == () and t.item() == scalar
