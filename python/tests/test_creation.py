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


# torch.linspace's values (PyTorch 2.15, recorded): float32 computed in float32 with fused
# multiply-adds, counted from both ends.
@pytest.mark.parametrize("args, kw, want", [
    ((-2, 3, 15), {}, np.array([
        -2.0, -1.6428570747375488, -1.2857142686843872, -0.9285714030265808,
        -0.5714285373687744, -0.21428567171096802, 0.14285719394683838, 0.4999999403953552,
        0.8571428060531616, 1.2142856121063232, 1.5714285373687744, 1.9285714626312256,
        2.2857141494750977, 2.642857074737549, 3.0], dtype=np.float32)),
    ((0.1, 0.7, 6), {}, np.array([
        0.10000000149011612, 0.2199999988079071, 0.3399999737739563, 0.46000000834465027,
        0.5799999833106995, 0.699999988079071], dtype=np.float32)),
    ((3, 7, 1), {}, np.array([3.0], dtype=np.float32)),
    ((0, 1, 7), {"dtype": flow.float64}, np.array([
        0.0, 0.16666666666666666, 0.3333333333333333, 0.5, 0.6666666666666667,
        0.8333333333333334, 1.0])),
    ((0, 10, 4), {"dtype": flow.int64}, np.array([0, 3, 6, 10])),
])
def test_linspace_as_torch(args, kw, want):
    got = flow.linspace(*args, **kw).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    g = flow.linspace(*args, **kw, placement=P, sbp=flow.sbp.split(0))
    assert g.is_global
    np.testing.assert_array_equal(g.numpy(), want)
    with pytest.raises(ValueError, match="steps must be non-negative"):
        flow.linspace(0, 1, -1)


def test_randint_forms_range_and_errors():
    flow.manual_seed(3)
    a = flow.randint(10, (400,)).numpy()
    assert a.dtype == np.int64 and a.min() >= 0 and a.max() <= 9
    assert sorted(set(a.tolist())) == list(range(10))
    b = flow.randint(-3, 3, (2, 3))
    assert b.shape == flow.Size([2, 3]) and -3 <= b.numpy().min() and b.numpy().max() < 3
    c = flow.randint(low=2, high=4, size=(50,), dtype=flow.int32).numpy()
    assert c.dtype == np.int32 and set(c.tolist()) == {2, 3}
    # Global ones are placement-invariant, as randn.
    flow.manual_seed(5)
    one = flow.randint(0, 100, (6, 4), placement=P, sbp=flow.sbp.broadcast).numpy()
    flow.manual_seed(5)
    split = flow.randint(0, 100, (6, 4), placement=P, sbp=flow.sbp.split(1)).numpy()
    np.testing.assert_array_equal(one, split)
    # A RuntimeError, as PyTorch's.
    with pytest.raises(flow.InvalidArgumentError, match="low < high"):
        flow.randint(5, 5, (2,))
    with pytest.raises(TypeError, match="randint takes"):
        flow.randint(5)
