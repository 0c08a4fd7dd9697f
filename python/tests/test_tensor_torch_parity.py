"""Tensor and binding behaviour as PyTorch's (values, shapes, dtypes, errors and their Python
exception types): each case is checked against hand-worked expectations, on local tensors and,
where it applies, on global tensors on ``flow.placement("cpu", [0])``; and against PyTorch
itself where it is installed (the ``*_as_torch`` tests, skipped without it)."""

import random

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])
B = flow.sbp.broadcast


def glob(t, sbp=B):
    """``t`` as a global tensor on ``P``."""
    return t.to_global(placement=P, sbp=sbp)


def both(make):
    """``make()`` as a local and as a global tensor."""
    return [make(), glob(make())]


class Data:
    """A tensor's shape, dtype name and values, comparable across gflow and PyTorch."""

    def __init__(self, t):
        self.shape = tuple(t.shape)
        self.dtype = str(t.dtype).split(".")[-1]
        self.values = t.tolist()

    def __eq__(self, other):
        return (isinstance(other, Data) and (self.shape, self.dtype) == (other.shape, other.dtype)
                and np.allclose(np.asarray(self.values, float), np.asarray(other.values, float),
                                rtol=1e-6, atol=1e-7, equal_nan=True))

    def __repr__(self):
        return f"Data({self.shape}, {self.dtype}, {self.values})"


def outcome(lib, f):
    """``f(lib)`` as comparable data (tensors as ``Data``, also inside tuples), or the
    exception raised."""
    def data(r):
        if isinstance(r, (tuple, list)) and any(hasattr(x, "dtype") for x in r):
            return tuple(data(x) for x in r)
        if hasattr(r, "dtype") and hasattr(r, "shape"):
            return Data(r)
        return r

    try:
        return data(f(lib))
    except Exception as e:  # noqa: BLE001 (compared by type)
        return e


def assert_as_torch(f):
    """``f(flow)`` gives what ``f(torch)`` gives: equal data (shapes, dtypes, values), or an
    exception that is an instance of PyTorch's exception's type."""
    torch = pytest.importorskip("torch")
    got, want = outcome(flow, f), outcome(torch, f)
    if isinstance(want, Exception):
        assert isinstance(got, type(want)), (got, want)
    else:
        assert not isinstance(got, Exception), (got, want)
        assert got == want, (got, want)


# --- integer and Bool tensors cannot require gradients --------------------------------------

GRAD_REQUESTS = {
    "tensor(requires_grad=True)": lambda L: L.tensor([1, 2], requires_grad=True),
    "bool tensor(requires_grad=True)": lambda L: L.tensor([True], requires_grad=True),
    "Tensor(int, requires_grad=True)": lambda L: L.Tensor([1.0]).long().requires_grad_(),
    "requires_grad_()": lambda L: L.tensor([1, 2]).requires_grad_(),
    "requires_grad = True": lambda L: setattr(L.tensor([1, 2]), "requires_grad", True),
    "nn.Parameter": lambda L: L.nn.Parameter(L.tensor([1, 2])),
    "zeros(int64)": lambda L: L.zeros(2, dtype=L.int64, requires_grad=True),
    "arange": lambda L: L.arange(3, requires_grad=True),
    "full(int)": lambda L: L.full((2,), 1, requires_grad=True),
    "randint": lambda L: L.randint(0, 3, (2,), requires_grad=True),
}


@pytest.mark.parametrize("ask", GRAD_REQUESTS.values(), ids=GRAD_REQUESTS.keys())
def test_integer_and_bool_tensors_cannot_require_grad(ask):
    with pytest.raises(RuntimeError, match="only Tensors of floating point") as e:
        ask(flow)
    assert isinstance(e.value, flow.DTypeError)


@pytest.mark.parametrize("ask", GRAD_REQUESTS.values(), ids=GRAD_REQUESTS.keys())
def test_integer_and_bool_tensors_cannot_require_grad_as_torch(ask):
    assert_as_torch(ask)


def test_not_requiring_grad_and_float_tensors_still_work():
    for t in both(lambda: flow.tensor([1, 2])):
        assert t.requires_grad_(False).requires_grad is False
        t.requires_grad = False
    assert flow.nn.Parameter(flow.tensor([1, 2]), requires_grad=False).dtype == flow.int64
    assert flow.tensor([1, 2], dtype=flow.float64, requires_grad=True).requires_grad
    assert flow.tensor([1.0]).requires_grad_().requires_grad
    assert flow.zeros(2, dtype=flow.float16, requires_grad=True).requires_grad
    g = glob(flow.tensor([1.0, 2.0]))
    assert g.requires_grad_().requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        flow.zeros(2, dtype=flow.int32, placement=P, sbp=B, requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        glob(flow.tensor([1, 2])).requires_grad_()


# --- 0-d tensors take dim 0 and -1 ---------------------------------------------------------

def _scalar_cases():
    """(name, f(x), expected value, expected dtype) for a 0-d float tensor x = 3."""
    return {
        "softmax(0)": (lambda x: x.softmax(0), 1.0, flow.float32),
        "log_softmax(-1)": (lambda x: x.log_softmax(-1), 0.0, flow.float32),
        "cumsum(0)": (lambda x: x.cumsum(0), 3.0, flow.float32),
        "flow.cumsum(-1)": (lambda x: flow.cumsum(x, -1), 3.0, flow.float32),
        "cumsum(0, dtype)": (lambda x: x.cumsum(0, dtype=flow.float64), 3.0, flow.float64),
        "argmax(0)": (lambda x: x.argmax(0), 0, flow.int64),
        "argmin(-1, keepdim)": (lambda x: x.argmin(-1, keepdim=True), 0, flow.int64),
        "max(-1).values": (lambda x: x.max(-1).values, 3.0, flow.float32),
        "max(0).indices": (lambda x: x.max(0).indices, 0, flow.int64),
        "min(-1, keepdim).values": (lambda x: x.min(-1, keepdim=True)[0], 3.0, flow.float32),
        "flip(0)": (lambda x: x.flip(0), 3.0, flow.float32),
        "transpose(0, -1)": (lambda x: x.transpose(0, -1), 3.0, flow.float32),
        "sum(0)": (lambda x: x.sum(0), 3.0, flow.float32),
        "mean(-1)": (lambda x: x.mean(-1), 3.0, flow.float32),
        "amax(0)": (lambda x: x.amax(0), 3.0, flow.float32),
        "sort(-1).values": (lambda x: x.sort(-1).values, 3.0, flow.float32),
        "argsort(0)": (lambda x: x.argsort(0), 0, flow.int64),
        "topk(1, 0).values": (lambda x: x.topk(1, 0).values, 3.0, flow.float32),
        "squeeze(0)": (lambda x: x.squeeze(0), 3.0, flow.float32),
        "gather(0, 0-d)": (lambda x: x.gather(0, flow.tensor(0, **_like(x))), 3.0, flow.float32),
        "index_select(0, [0])": (lambda x: x.index_select(0, flow.tensor([0], **_like(x))), 3.0,
                                 flow.float32),
        "index_select(-1, 0-d)": (lambda x: x.index_select(-1, flow.tensor(0, **_like(x))),
                                  3.0, flow.float32),
        "scatter_add(0)": (lambda x: x.scatter_add(0, flow.tensor(0, **_like(x)),
                                                   flow.tensor(2.0, **_like(x))), 5.0,
                           flow.float32),
    }


def _like(x):
    return {"placement": x.placement, "sbp": x.sbp} if x.is_global else {}


SCALAR_CASES = _scalar_cases()


@pytest.mark.parametrize("case", SCALAR_CASES.values(), ids=SCALAR_CASES.keys())
@pytest.mark.parametrize("where", ["local", "global"])
def test_0d_tensors_take_dim_0_and_minus_1(case, where):
    f, value, dtype = case
    x = flow.tensor(3.0)
    if where == "global":
        x = glob(x)
    y = f(x)
    assert y.shape == flow.Size([]) and y.dtype == dtype and y.is_global == x.is_global
    assert y.item() == value


def test_0d_dim_0_keeps_gradients():
    x = flow.tensor(3.0, requires_grad=True)
    (x.softmax(0) + x.cumsum(0) * 2 + x.max(-1).values * 3 + x.flip(0) * 4).backward()
    assert x.grad.item() == pytest.approx(0.0 + 2 + 3 + 4)


def test_0d_other_dims_still_refused():
    x = flow.tensor(3.0)
    for f in (lambda: x.softmax(1), lambda: x.transpose(0, 1), lambda: x.cumsum(-2),
              lambda: x.argmax(1), lambda: x.size(0), lambda: x.size(-1)):
        with pytest.raises(IndexError):
            f()
    with pytest.raises(RuntimeError, match="0-dim"):
        x.narrow(0, 0, 1)


@pytest.mark.parametrize("case", SCALAR_CASES.keys())
def test_0d_tensors_take_dim_0_and_minus_1_as_torch(case):
    # the same expression written for torch (the gflow cases place index tensors by `_like`)
    f = SCALAR_CASES[case][0]
    assert_as_torch(lambda L: f(L.tensor(3.0)) if L is flow else _torch_scalar(L, case))


def _torch_scalar(torch, case):
    x = torch.tensor(3.0)
    return {
        "softmax(0)": lambda: x.softmax(0),
        "log_softmax(-1)": lambda: x.log_softmax(-1),
        "cumsum(0)": lambda: x.cumsum(0),
        "flow.cumsum(-1)": lambda: torch.cumsum(x, -1),
        "cumsum(0, dtype)": lambda: x.cumsum(0, dtype=torch.float64),
        "argmax(0)": lambda: x.argmax(0),
        "argmin(-1, keepdim)": lambda: x.argmin(-1, keepdim=True),
        "max(-1).values": lambda: x.max(-1).values,
        "max(0).indices": lambda: x.max(0).indices,
        "min(-1, keepdim).values": lambda: x.min(-1, keepdim=True)[0],
        "flip(0)": lambda: x.flip(0),
        "transpose(0, -1)": lambda: x.transpose(0, -1),
        "sum(0)": lambda: x.sum(0),
        "mean(-1)": lambda: x.mean(-1),
        "amax(0)": lambda: x.amax(0),
        "sort(-1).values": lambda: x.sort(-1).values,
        "argsort(0)": lambda: x.argsort(0),
        "topk(1, 0).values": lambda: x.topk(1, 0).values,
        "squeeze(0)": lambda: x.squeeze(0),
        "gather(0, 0-d)": lambda: x.gather(0, torch.tensor(0)),
        "index_select(0, [0])": lambda: x.index_select(0, torch.tensor([0])),
        "index_select(-1, 0-d)": lambda: x.index_select(-1, torch.tensor(0)),
        "scatter_add(0)": lambda: x.scatter_add(0, torch.tensor(0), torch.tensor(2.0)),
    }[case]()


def test_0d_size_and_unsqueeze_as_torch():
    assert_as_torch(lambda L: L.tensor(3.0).size(0))
    assert_as_torch(lambda L: L.tensor(3.0).size(-1))
    assert_as_torch(lambda L: L.tensor(3.0).unsqueeze(-1))
    assert_as_torch(lambda L: L.tensor(3.0).softmax(1))
    assert_as_torch(lambda L: L.tensor(3.0).narrow(0, 0, 1))
    assert_as_torch(lambda L: L.cat([L.tensor(3.0), L.tensor(3.0)]))


# --- expand ----------------------------------------------------------------------------------

def test_expand_minus_one_on_a_new_leading_dim_is_refused():
    for x in both(lambda: flow.ones(3, 1)):
        with pytest.raises(RuntimeError, match="leading, non-existing dimension 0"):
            x.expand(-1, 3, 4)
        with pytest.raises(RuntimeError):
            x.expand(3, -2)
        assert x.expand(2, -1, 4).shape == flow.Size([2, 3, 4])
        assert x.expand(-1, 5).shape == flow.Size([3, 5])


def test_expand_as_torch():
    assert_as_torch(lambda L: L.ones(3, 1).expand(-1, 3, 4))
    assert_as_torch(lambda L: L.ones(2).expand(-1, 2))
    assert_as_torch(lambda L: L.ones(3, 1).expand(2, -1, 4))
    assert_as_torch(lambda L: L.ones(1, 2).expand(0, -1))


# --- norm's gradient at zero -----------------------------------------------------------------

def test_norm_gradient_at_zero_is_zero():
    x = flow.zeros(2, requires_grad=True)
    x.norm().backward()
    assert x.grad.tolist() == [0.0, 0.0]
    x = flow.tensor([[0.0, 0.0], [3.0, 4.0]], requires_grad=True)
    n = x.norm(dim=1)
    assert n.tolist() == [0.0, 5.0]
    n.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 0.0], [0.6, 0.8]], rtol=1e-6)
    x = flow.tensor([[0.0, 0.0], [3.0, 4.0]], requires_grad=True)
    x.norm(p=3, dim=1).sum().backward()
    want = np.array([9.0, 16.0]) / (91.0 ** (2.0 / 3.0))
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 0.0], want], rtol=1e-6)
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    flow.dist(a, a.detach()).backward()
    assert a.grad.tolist() == [0.0, 0.0]
    g = glob(flow.zeros(2, 3), flow.sbp.split(0)).requires_grad_()
    g.norm(dim=1).sum().backward()
    assert g.grad.is_global and g.grad.numpy().tolist() == [[0.0] * 3] * 2


def test_norm_gradient_at_zero_as_torch():
    torch = pytest.importorskip("torch")
    for p in (2, "fro", 3, 1.5):
        got, want = [], []
        for L, out in ((flow, got), (torch, want)):
            x = L.tensor([[0.0, 0.0], [3.0, -4.0]], requires_grad=True)
            n = x.norm(p=p, dim=1)
            n.sum().backward()
            out += [n.tolist(), x.grad.tolist()]
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-7)


# --- item, creation arguments ----------------------------------------------------------------

def test_item_of_not_one_element_is_runtime_error():
    for x in both(lambda: flow.tensor([1.0, 2.0])):
        with pytest.raises(RuntimeError, match="2 elements cannot be converted to Scalar"):
            x.item()
    with pytest.raises(RuntimeError, match="0 elements"):
        flow.tensor([]).item()
    with pytest.raises(ValueError, match="only one element tensors"):
        float(flow.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="only one element tensors"):
        int(flow.tensor([1, 2]))
    assert flow.tensor([[7]]).item() == 7 and glob(flow.tensor([2.5])).item() == 2.5


def test_item_as_torch():
    for f in (lambda L: L.tensor([]).item(), lambda L: L.tensor([1.0, 2.0]).item(),
              lambda L: float(L.tensor([1.0, 2.0])), lambda L: int(L.tensor([1, 2])),
              lambda L: L.tensor([[7]]).item()):
        assert_as_torch(f)


CREATION_ERRORS = {
    "arange(0, 5, 0)": lambda L: L.arange(0, 5, 0),
    "arange(0, 5, -1)": lambda L: L.arange(0, 5, -1),
    "arange(0, 5, -1.5)": lambda L: L.arange(0, 5, -1.5),
    "arange(0, inf)": lambda L: L.arange(0, float("inf")),
    "linspace(0, 1, -1)": lambda L: L.linspace(0, 1, -1),
    "zeros(-1)": lambda L: L.zeros(-1),
    "zeros((2, -1))": lambda L: L.zeros((2, -1)),
    "ones(-1)": lambda L: L.ones(-1),
    "randn(-1)": lambda L: L.randn(-1),
    "empty(-1)": lambda L: L.empty(-1),
    "full((-1,), 1.0)": lambda L: L.full((-1,), 1.0),
    "Tensor(-1)": lambda L: L.Tensor(-1),
    "randint(0, 3, (-1,))": lambda L: L.randint(0, 3, (-1,)),
}


@pytest.mark.parametrize("f", CREATION_ERRORS.values(), ids=CREATION_ERRORS.keys())
def test_bad_creation_arguments_are_runtime_errors(f):
    with pytest.raises(RuntimeError) as e:
        f(flow)
    assert isinstance(e.value, flow.Error)


@pytest.mark.parametrize("f", CREATION_ERRORS.values(), ids=CREATION_ERRORS.keys())
def test_bad_creation_arguments_as_torch(f):
    assert_as_torch(f)


def test_good_creation_arguments_still_work():
    assert flow.arange(5, 0, -1).tolist() == [5, 4, 3, 2, 1]
    assert flow.arange(5, 5, -1).tolist() == [] and flow.arange(5, 5).tolist() == []
    assert flow.linspace(0, 1, 0).shape == flow.Size([0])
    assert flow.zeros(0, 2).shape == flow.Size([0, 2]) and flow.full(3, 2.0).tolist() == [2.0] * 3
    assert flow.Tensor(2).shape == flow.Size([2])
    with pytest.raises(TypeError):
        flow.zeros("a")


# --- cat, index_select, x[float] ------------------------------------------------------------

def test_cat_of_nothing_is_value_error():
    with pytest.raises(ValueError, match="non-empty list") as e:
        flow.cat([])
    assert isinstance(e.value, flow.InvalidArgumentError)
    with pytest.raises(RuntimeError):
        flow.stack([])


def test_index_select_with_a_matrix_index_is_index_error():
    for x in both(lambda: flow.ones(3)):
        i = flow.tensor([[0]])
        if x.is_global:
            i = glob(i)
        with pytest.raises(IndexError, match="supposed to be a vector") as e:
            x.index_select(0, i)
        assert isinstance(e.value, flow.ShapeError)
    x = flow.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.index_select(1, flow.tensor(1)).tolist() == [[2.0], [5.0]]


def test_float_index_is_index_error():
    for x in both(lambda: flow.ones(3)):
        with pytest.raises(IndexError, match="valid indices"):
            x[1.0]
    with pytest.raises(TypeError):
        flow.ones(3)["a"]


def test_cat_index_select_and_float_index_as_torch():
    assert_as_torch(lambda L: L.cat([]))
    assert_as_torch(lambda L: L.stack([]))
    assert_as_torch(lambda L: L.ones(3).index_select(0, L.tensor([[0]])))
    assert_as_torch(lambda L: L.ones(2, 3).index_select(1, L.tensor(1)))
    assert_as_torch(lambda L: L.ones(3)[1.0])


# --- clamp_, narrow, squeeze -----------------------------------------------------------------

def test_clamp_in_place_takes_tensor_bounds():
    for x in both(lambda: flow.tensor([1.0, 5.0, 3.0])):
        lo = flow.tensor([2.0, 2.0, 4.0])
        if x.is_global:
            lo = glob(lo)
        same = x.clamp_(min=lo, max=4.5)
        assert same is x and x.tolist() == [2.0, 4.5, 4.0]
    x = flow.tensor([1.0, 5.0])
    x.clamp_(max=flow.tensor(3.0))
    assert x.tolist() == [1.0, 3.0]
    x.clip_(flow.tensor([2.0, 0.0]))
    assert x.tolist() == [2.0, 3.0]
    x.clamp_(0.0, 2.5)
    assert x.tolist() == [2.0, 2.5]


def test_clamp_in_place_as_torch():
    def clamped(L, **kw):
        x = L.tensor([1.0, 5.0, 3.0])
        x.clamp_(**kw)
        return x
    assert_as_torch(lambda L: clamped(L, min=L.tensor([2.0, 2.0, 4.0])))
    assert_as_torch(lambda L: clamped(L, max=L.tensor(3.0)))
    assert_as_torch(lambda L: clamped(L, min=L.tensor([2, 2, 2]), max=L.tensor([4.0])))


def test_narrow_takes_a_negative_start():
    for x in both(lambda: flow.arange(5)):
        assert x.narrow(0, -2, 2).tolist() == [3, 4]
        assert x.narrow(0, -5, 2).tolist() == [0, 1]
        assert x.narrow(-1, 5, 0).tolist() == []
        with pytest.raises(IndexError, match="start out of range"):
            x.narrow(0, -6, 2)
        with pytest.raises(IndexError, match="start out of range"):
            x.narrow(0, 6, 0)
        with pytest.raises(RuntimeError, match="non-negative"):
            x.narrow(0, 1, -1)


def test_narrow_as_torch():
    for start, length in ((-2, 2), (-5, 2), (5, 0), (-6, 2), (6, 0), (4, 2), (2, -1)):
        assert_as_torch(lambda L, s=start, n=length: L.arange(5).narrow(0, s, n))


def test_squeeze_takes_a_tuple_of_dims():
    for x in both(lambda: flow.zeros(1, 2, 1)):
        assert x.squeeze((0, 2)).shape == flow.Size([2])
        assert x.squeeze([0, 1]).shape == flow.Size([2, 1])
        assert x.squeeze((-1,)).shape == flow.Size([1, 2])
        assert x.squeeze(()).shape == flow.Size([1, 2, 1])
        with pytest.raises(IndexError):
            x.squeeze((0, 3))
    assert flow.tensor(3.0).squeeze((0,)).shape == flow.Size([])


def test_squeeze_as_torch():
    for dims in ((0, 2), [0, 1], (-1,), (), (0, 3), (0, 0)):
        assert_as_torch(lambda L, d=dims: L.zeros(1, 2, 1).squeeze(d))


# --- sum / mean dtype=, axis= ----------------------------------------------------------------

def test_sum_and_mean_take_dtype_and_axis():
    for x in both(lambda: flow.tensor([[1, 2, 3], [4, 5, 6]])):
        s = x.sum(dtype=flow.float64)
        assert s.dtype == flow.float64 and s.item() == 21.0
        assert x.sum(1, True, dtype=flow.int32).tolist() == [[6], [15]]
        assert x.sum(1, dtype=flow.int32).dtype == flow.int32
        assert x.sum(axis=0).tolist() == [5, 7, 9]
        m = x.mean(dtype=flow.float64)
        assert m.dtype == flow.float64 and m.item() == 3.5
        assert x.mean(axis=1, dtype=flow.float32).tolist() == [2.0, 5.0]
        assert x.amax(axis=1).tolist() == [3, 6]
        with pytest.raises(NotImplementedError, match="floating point") as e:
            x.mean(dtype=flow.int64)
        assert isinstance(e.value, flow.DTypeError)
        with pytest.raises(TypeError):
            x.sum(dim=0, axis=0)
    assert flow.sum(flow.tensor([1.5, 2.0]), dtype=flow.int64).item() == 3
    assert flow.tensor([True, True]).sum().dtype == flow.int64
    assert flow.cat([flow.ones(1), flow.zeros(1)], axis=0).tolist() == [1.0, 0.0]
    assert flow.stack([flow.ones(1), flow.zeros(1)], axis=1).tolist() == [[1.0, 0.0]]
    g = glob(flow.ones(2, 2), flow.sbp.split(0))
    assert flow.cat([g, g], axis=1).shape == flow.Size([2, 4])


def test_sum_and_mean_as_torch():
    x = [[1, 2, 3], [4, 5, 6]]
    for f in (lambda L: L.tensor(x).sum(dtype=L.float64),
              lambda L: L.tensor(x).sum(1, True, dtype=L.int32),
              lambda L: L.tensor(x).sum(axis=0),
              lambda L: L.tensor(x).sum(axis=(0, 1)),
              lambda L: L.tensor(x).mean(dtype=L.float64),
              lambda L: L.tensor(x).mean(axis=1, dtype=L.float32),
              lambda L: L.tensor(x).mean(dtype=L.int64),
              lambda L: L.tensor(x).amax(axis=1),
              lambda L: L.tensor([1.5, 2.0]).sum(dtype=L.int64),
              lambda L: L.tensor([True, True]).sum(),
              lambda L: L.tensor([1, 2], dtype=L.int32).sum(),
              lambda L: L.cat([L.ones(1), L.zeros(1)], axis=0),
              lambda L: L.stack([L.ones(1), L.zeros(1)], axis=1)):
        assert_as_torch(f)


# --- argmax / argmin keepdim without a dim ---------------------------------------------------

def test_argmax_without_dim_keepdim_keeps_every_dim():
    for x in both(lambda: flow.tensor([[1.0, 9.0, 3.0], [4.0, 5.0, 6.0]])):
        a = x.argmax(keepdim=True)
        assert a.shape == flow.Size([1, 1]) and a.tolist() == [[1]]
        assert x.argmin(dim=None, keepdim=True).tolist() == [[0]]
        assert x.argmax().shape == flow.Size([])
    assert flow.tensor(3.0).argmax(None, True).shape == flow.Size([])


def test_argmax_keepdim_as_torch():
    x = [[1.0, 9.0, 3.0], [4.0, 5.0, 6.0]]
    assert_as_torch(lambda L: L.tensor(x).argmax(keepdim=True))
    assert_as_torch(lambda L: L.tensor(x).argmin(None, True))
    assert_as_torch(lambda L: L.tensor(3.0).argmax(None, True))
    assert_as_torch(lambda L: L.ones(2, 1, 3).argmax(keepdim=True))


# --- Python ints wrap to an integer tensor's dtype --------------------------------------------

def test_python_ints_wrap_to_the_tensors_dtype():
    for x in both(lambda: flow.tensor([1, 2], dtype=flow.int32)):
        y = x + 2**40
        assert y.dtype == flow.int32 and y.tolist() == [1, 2]
        assert (x + 2**31).tolist() == [-2147483647, -2147483646]
        assert (x * 2**40).tolist() == [0, 0]
    big = flow.tensor([1]) + (2**60 + 1)
    assert big.dtype == flow.int64 and big.tolist() == [2**60 + 2]
    assert (flow.tensor([1.5], dtype=flow.float64) + 2**40).tolist() == [2.0**40 + 1.5]
    assert (flow.tensor([1]) - 2**63).tolist() == [1 - 2**63]  # 2**63: its uint64 bits
    with pytest.raises(OverflowError):
        flow.tensor([1]) + 2**64


def test_python_ints_wrap_as_torch():
    for f in (lambda L: L.tensor([1, 2], dtype=L.int32) + 2**40,
              lambda L: L.tensor([1, 2], dtype=L.int32) + 2**31,
              lambda L: L.tensor([1, 2], dtype=L.int32) * 2**40,
              lambda L: L.tensor([1]) + (2**60 + 1),
              lambda L: L.tensor([1]) - 2**63,
              lambda L: L.tensor([True]) + 2**40):
        assert_as_torch(f)


# --- __index__, tensors inside lists ---------------------------------------------------------

def test_integer_tensors_are_python_indices():
    items = [10, 20, 30]
    assert items[flow.tensor(1)] == 20
    assert items[flow.tensor([2])] == 30
    assert items[flow.tensor(1, dtype=flow.int32)] == 20
    assert items[flow.tensor(True)] == 20
    assert items[glob(flow.tensor(2))] == 30
    assert list(range(flow.tensor(3))) == [0, 1, 2]
    with pytest.raises(TypeError, match="single element"):
        items[flow.tensor(1.0)]
    with pytest.raises(TypeError, match="single element"):
        items[flow.tensor([0, 1])]
    # a one-element index tensor still indexes a tensor as a tensor (keeping its dim)
    x = flow.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x[flow.tensor([1])].shape == flow.Size([1, 2])
    assert x[flow.tensor(1)].shape == flow.Size([2])


def test_tensors_inside_lists_become_elements():
    t = flow.tensor([flow.tensor(1.0), flow.tensor(2.0)])
    assert t.dtype == flow.float32 and t.tolist() == [1.0, 2.0]
    assert flow.tensor([flow.tensor(1), flow.tensor(2)]).dtype == flow.int64
    i32 = flow.tensor([flow.tensor(1, dtype=flow.int32), flow.tensor(2, dtype=flow.int32)])
    assert i32.dtype == flow.int32
    mixed = flow.tensor([flow.tensor(1), 2.5])
    assert mixed.dtype == flow.float32 and mixed.tolist() == [1.0, 2.5]
    wide = flow.tensor([flow.tensor(1), flow.tensor(2.5, dtype=flow.float64)])
    assert wide.dtype == flow.float64
    nested = flow.tensor([[flow.tensor(1.0), 2], [3, flow.tensor([4.0])]])
    assert nested.shape == flow.Size([2, 2]) and nested.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert flow.tensor((flow.tensor(True), flow.tensor(False))).dtype == flow.bool
    assert flow.tensor([flow.tensor(1)], dtype=flow.float64).dtype == flow.float64
    assert flow.Tensor([flow.tensor(1), flow.tensor(2)]).dtype == flow.float32
    g = flow.tensor([glob(flow.tensor(1.0)), 2.0], placement=P, sbp=B)
    assert g.is_global and g.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="only one element tensors"):
        flow.tensor([flow.tensor([1.0, 2.0]), flow.tensor([1.0, 2.0])])


def test_index_and_tensor_lists_as_torch():
    for f in (lambda L: [10, 20][L.tensor(1)], lambda L: [10, 20][L.tensor([1])],
              lambda L: [10, 20][L.tensor(1.0)], lambda L: [10, 20][L.tensor(True)],
              lambda L: [10, 20][L.tensor([0, 1])],
              lambda L: L.tensor([L.tensor(1.0), L.tensor(2.0)]),
              lambda L: L.tensor([L.tensor(1), L.tensor(2)]),
              lambda L: L.tensor([L.tensor(1, dtype=L.int32), L.tensor(2, dtype=L.int32)]),
              lambda L: L.tensor([L.tensor(1, dtype=L.int32), 2]),
              lambda L: L.tensor([L.tensor(True), 2]),
              lambda L: L.tensor([L.tensor(1), 2.5]),
              lambda L: L.tensor([L.tensor(1), L.tensor(2.5, dtype=L.float64)]),
              lambda L: L.tensor([L.tensor(1.0, dtype=L.float16), 2.5]),
              lambda L: L.tensor([[L.tensor(1.0), 2], [3, L.tensor([4.0])]]),
              lambda L: L.tensor([L.tensor([1.0, 2.0]), L.tensor([1.0, 2.0])]),
              lambda L: L.Tensor([L.tensor(1), L.tensor(2)])):
        assert_as_torch(f)


# --- bitwise operators -----------------------------------------------------------------------

M = 2**63
EDGES = [0, 1, -1, M - 1, -M, 2**53 + 1, -(2**53) - 3, 12345678901234567, -98765432109876543]


def _pairs(n, lo, hi, seed):
    rng = random.Random(seed)
    return [rng.randrange(lo, hi) for _ in range(n)]


OPS = {"&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b}


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("where", ["local", "global"])
def test_int64_bitwise_is_exact(name, where):
    f = OPS[name]
    a = EDGES + _pairs(60, -M, M, 1)
    b = _pairs(len(a), -M, M, 2)
    x, y = flow.tensor(a), flow.tensor(b)
    if where == "global":
        x, y = glob(x, flow.sbp.split(0)), glob(y)
    r = f(x, y)
    assert r.dtype == flow.int64 and r.is_global == (where == "global")
    assert r.tolist() == [f(p, q) for p, q in zip(a, b)]
    # with Python ints on either side
    assert f(x, 0x0F0F).tolist() == [f(p, 0x0F0F) for p in a]
    assert f(-5, x).tolist() == [f(-5, p) for p in a]


def test_int32_bool_and_mixed_bitwise_dtypes():
    a, b = _pairs(50, -2**31, 2**31, 3), _pairs(50, -2**31, 2**31, 4)
    x, y = flow.tensor(a, dtype=flow.int32), flow.tensor(b, dtype=flow.int32)
    r = x ^ y
    assert r.dtype == flow.int32 and r.tolist() == [p ^ q for p, q in zip(a, b)]
    assert (x & 2**40).tolist() == [0] * 50  # the int wraps to int32 first, as PyTorch
    assert (x | flow.tensor(1)).dtype == flow.int32  # a 0-d int64 tensor keeps int32
    assert (x | flow.tensor([1])).dtype == flow.int64
    t, f = flow.tensor([True, False, True]), flow.tensor([True, True, False])
    assert (t & f).dtype == flow.bool and (t & f).tolist() == [True, False, False]
    assert (t | f).tolist() == [True, True, True] and (t ^ f).tolist() == [False, True, True]
    assert (t & True).tolist() == [True, False, True] and (t ^ True).dtype == flow.bool
    assert (t & 3).dtype == flow.int64 and (t & 3).tolist() == [1, 0, 1]
    assert (t & flow.tensor([3, 3, 2])).tolist() == [1, 0, 0]
    assert (flow.tensor([[1], [2]]) | flow.tensor([4, 8])).tolist() == [[5, 9], [6, 10]]
    assert flow.tensor([12]).bitwise_and(10).tolist() == [8]
    assert flow.tensor([12]).bitwise_or(3).tolist() == [15]
    assert flow.tensor([12]).bitwise_xor(10).tolist() == [6]
    assert flow.tensor([12]).bitwise_not().tolist() == [-13]
    with pytest.raises(TypeError) as e:
        flow.tensor([1.0]) & flow.tensor([1.0])
    assert isinstance(e.value, NotImplementedError) and isinstance(e.value, flow.DTypeError)
    with pytest.raises(NotImplementedError):
        flow.tensor([1]) | 1.5


def test_bitwise_in_place():
    for x in both(lambda: flow.tensor([12, -7])):
        x &= flow.tensor([10, 3]) if x.is_local else glob(flow.tensor([10, 3]))
        assert x.tolist() == [8, 1]
        x |= 6
        assert x.tolist() == [14, 7]
        x ^= -1
        assert x.tolist() == [-15, -8] and x.dtype == flow.int64
    b = flow.tensor([True, False])
    b ^= True
    assert b.dtype == flow.bool and b.tolist() == [False, True]
    i = flow.tensor([1], dtype=flow.int32)
    assert i.bitwise_or_(2) is i and i.tolist() == [3] and i.dtype == flow.int32
    i.bitwise_and_(flow.tensor([2])).bitwise_xor_(7)
    assert i.tolist() == [5]
    with pytest.raises(RuntimeError):
        b &= flow.tensor([3, 3])  # int64 cannot be written into a Bool tensor, as PyTorch
    with pytest.raises(NotImplementedError):
        f = flow.tensor([1.0])
        f &= flow.tensor([1])


def test_bitwise_as_torch():
    a = EDGES + _pairs(20, -M, M, 5)
    b = _pairs(len(a), -M, M, 6)
    for op in OPS.values():
        assert_as_torch(lambda L, op=op: op(L.tensor(a), L.tensor(b)))
        assert_as_torch(lambda L, op=op: op(L.tensor(b[:9], dtype=L.int64).int(), L.tensor(3)))
        assert_as_torch(lambda L, op=op: op(L.tensor([True, False]), L.tensor([3, 3])))
        assert_as_torch(lambda L, op=op: op(L.tensor([True, False]), 1))
        assert_as_torch(lambda L, op=op: op(5, L.tensor(a)))
        assert_as_torch(lambda L, op=op: op(L.tensor([1.0]), L.tensor([1.0])))
        assert_as_torch(lambda L, op=op: op(L.tensor([True]), 1.5))

    def inplace(L, start, other, op):
        x = L.tensor(start)
        return op(x, other(L))
    assert_as_torch(lambda L: inplace(L, [True], lambda L: L.tensor([3]), lambda x, y: x.__iand__(y)))
    assert_as_torch(lambda L: inplace(L, [12, -7], lambda L: L.tensor([10, 3]),
                                      lambda x, y: x.__ixor__(y)))


# --- masks, conditions and sources of the wrong dtype ---------------------------------------

def test_masks_conditions_and_sources_of_the_wrong_dtype_are_refused():
    for x in both(lambda: flow.ones(2)):
        like = (lambda t: glob(t)) if x.is_global else (lambda t: t)
        for mask in (flow.tensor([1, 0]), flow.tensor([1.0, 0.0])):
            with pytest.raises(RuntimeError, match="only supports boolean masks") as e:
                x.masked_fill(like(mask), 0.0)
            assert isinstance(e.value, flow.DTypeError)
            with pytest.raises(RuntimeError, match="only supports boolean masks"):
                x.masked_fill_(like(mask), 0.0)
            with pytest.raises(RuntimeError, match="condition to be a boolean tensor"):
                flow.where(like(mask), x, 0.0)
            with pytest.raises(RuntimeError, match="condition to be a boolean tensor"):
                x.where(like(mask), 0.0)
        with pytest.raises(RuntimeError, match="self.dtype to be equal to src.dtype"):
            x.scatter_add(0, like(flow.tensor([0])), like(flow.tensor([1.0],
                                                                       dtype=flow.float64)))
        ok = flow.tensor([True, False])
        assert x.masked_fill(like(ok), 0.0).tolist() == [0.0, 1.0]
        assert flow.where(like(ok), x, 0.0).tolist() == [1.0, 0.0]
        assert x.scatter_add(0, like(flow.tensor([1])), like(flow.tensor([2.0]))).tolist() == [
            1.0, 3.0]


def test_masks_conditions_and_sources_as_torch():
    for f in (lambda L: L.ones(2).masked_fill(L.tensor([1, 0]), 0.0),
              lambda L: L.ones(2).masked_fill(L.tensor([1.0, 0.0]), 0.0),
              lambda L: L.ones(2).masked_fill_(L.tensor([1, 0]), 0.0),
              lambda L: L.where(L.tensor([1.0, 0.0]), L.ones(2), L.zeros(2)),
              lambda L: L.where(L.tensor([1, 0]), L.ones(2), L.zeros(2)),
              lambda L: L.ones(2).where(L.tensor([1, 0]), 2.0),
              lambda L: L.zeros(3).scatter_add(0, L.tensor([0]),
                                               L.tensor([1.0], dtype=L.float64)),
              lambda L: L.zeros(3, dtype=L.int64).scatter_add(0, L.tensor([0]),
                                                              L.tensor([1], dtype=L.int32)),
              lambda L: L.ones(2).masked_fill(L.tensor([True, False]), 0.0)):
        assert_as_torch(f)


# --- detach_, numpy(force=) ------------------------------------------------------------------

def test_detach_in_place_and_numpy_force():
    for x in both(lambda: flow.ones(2)):
        x.requires_grad_()
        y = x * 2
        assert y.detach_() is y
        assert not y.requires_grad and y.is_leaf and y.grad_fn is None
        assert y.tolist() == [2.0, 2.0] and y.is_global == x.is_global
        assert x.numpy(force=True).tolist() == [1.0, 1.0]
        x.detach_()
        assert not x.requires_grad
    with pytest.raises(TypeError):
        flow.ones(2).numpy(True)  # keyword-only, as PyTorch's


def test_detach_in_place_as_torch():
    def detached(L):
        y = L.ones(2, requires_grad=True) * 2
        y.detach_()
        return (y.requires_grad, y.is_leaf, y.grad_fn is None, y.tolist())
    assert_as_torch(detached)
    assert_as_torch(lambda L: L.ones(2, requires_grad=True).numpy(force=True).tolist())


def test_integer_division_by_zero_is_an_error_as_pytorchs():
    for f in (lambda: flow.tensor([-7, 3]) // 0, lambda: flow.tensor([5]) % 0,
              lambda: flow.tensor([5, 2]).div(flow.tensor([1, 0]), rounding_mode="trunc"),
              lambda: flow.tensor([5], dtype=flow.int32).remainder(flow.tensor([0]))):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            f()
    np.testing.assert_array_equal((flow.tensor([7, -7]) // flow.tensor([2, 2])).numpy(), [3, -4])
    np.testing.assert_array_equal((flow.tensor([7, -7]) % 3).numpy(), [1, 2])
    assert np.isinf((flow.tensor([5.0]) // 0).numpy()[0])


def test_masked_select_nonzero_argwhere_as_pytorchs():
    a = np.array([[1.0, 0.0, 3.0], [0.0, 5.0, 6.0]])
    x = flow.tensor(a, requires_grad=True)
    np.testing.assert_array_equal(x.masked_select(x > 2).numpy(), [3.0, 5.0, 6.0])
    # the mask broadcasts over rows
    row = flow.tensor([True, False, True])
    np.testing.assert_array_equal(flow.masked_select(x, row).numpy(), [1.0, 3.0, 0.0, 6.0])
    x.masked_select(x > 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), a > 2)
    want = np.argwhere(a)
    np.testing.assert_array_equal(flow.nonzero(x).numpy(), want)
    np.testing.assert_array_equal(x.argwhere().numpy(), want)
    rows, cols = x.nonzero(as_tuple=True)
    np.testing.assert_array_equal(rows.numpy(), want[:, 0])
    np.testing.assert_array_equal(cols.numpy(), want[:, 1])
    assert flow.tensor(3.0).nonzero().shape == flow.Size([1, 0])
    g = flow.tensor(a).to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.split(0))
    np.testing.assert_array_equal(g.nonzero().numpy(), want)
    np.testing.assert_array_equal(g.masked_select(g > 2).numpy(), [3.0, 5.0, 6.0])
    with pytest.raises(RuntimeError):
        x.masked_select(flow.tensor([1, 0, 1]))


def _view_cases(lib):
    """In-place changes through views (basic indexing, narrow, view, transpose, t, permute,
    chains of them), each returning the base after the change."""
    def zeros(*s):
        return lib.zeros(*s, dtype=lib.float64)

    out = []
    x = lib.ones(2, 2, dtype=lib.float64)
    x[:, 0].zero_()
    out.append(x)
    x = zeros(2, 2)
    x[0].add_(1)
    out.append(x)
    x = zeros(2, 2)
    x.view(4).fill_(3.0)
    out.append(x)
    x = zeros(2, 3)
    x.t()[1].fill_(5)
    out.append(x)
    x = zeros(2, 3)
    x.transpose(0, 1)[2, 1] = 7
    out.append(x)
    x = zeros(2, 3, 4)
    x.permute(2, 0, 1)[3].fill_(1)
    out.append(x)
    x = zeros(3, 4)
    x.narrow(1, 1, 2).mul_(0).add_(2)
    x[1:2, ::2].fill_(9)
    x.reshape(12)[5:7].sub_(1)
    out.append(x)
    x = zeros(3)
    x[[0, 2]].fill_(1)  # an index list gives a copy: x stays
    out.append(x)
    x = zeros(2, 3)
    x.unsqueeze(0).squeeze(0).flatten()[4] += 8
    out.append(x)
    return out


def test_in_place_changes_of_views_reach_their_base_as_pytorchs():
    got = _view_cases(flow)
    assert got[0].numpy().tolist() == [[0.0, 1.0], [0.0, 1.0]]
    assert got[-2].numpy().tolist() == [0.0, 0.0, 0.0]
    torch = pytest.importorskip("torch")
    for g, t in zip(got, _view_cases(torch)):
        np.testing.assert_array_equal(g.numpy(), t.numpy())


def test_views_of_leaves_and_gradients_through_view_changes():
    w = flow.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="view of a leaf"):
        w[0].fill_(1)
    with flow.no_grad():
        w[1].fill_(2)
        flow.nn.init.ones_(w[2:])
    assert w.numpy().tolist() == [0.0, 2.0, 1.0] and w.is_leaf and w.requires_grad
    a = flow.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 2
    b[0].mul_(10)
    b.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [20.0, 2.0, 2.0])
    g = flow.zeros(2, 3).to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.split(1))
    g[:, 1].fill_(4)
    assert g.numpy().tolist() == [[0.0, 4.0, 0.0], [0.0, 4.0, 0.0]]


def test_creation_keywords_as_pytorchs():
    assert flow.full((2, 3), fill_value=1.5).numpy().tolist() == [[1.5] * 3] * 2
    assert flow.full(size=(2,), fill_value=3).dtype == flow.int64
    for make in (flow.ones, flow.zeros, flow.empty, flow.randn, flow.rand):
        assert make(size=(2, 3)).shape == flow.Size([2, 3])
        with pytest.raises(TypeError, match="unexpected keyword"):
            make(2, bad=1)
        with pytest.raises(TypeError, match="both"):
            make(2, size=(2,))
    assert flow.arange(end=3).numpy().tolist() == [0, 1, 2]
    assert flow.arange(start=1, end=4).numpy().tolist() == [1, 2, 3]


def _base_change_cases(lib):
    """Views taken before an in-place change of their base (or of a sibling view) see it."""
    def zeros(*s):
        return lib.zeros(*s, dtype=lib.float64)

    out = []
    x = zeros(2, 3)
    h = x[:, 0]
    x.add_(1)
    out.append(h)
    x = zeros(2, 3)
    v, t = x.view(6), x.t()
    x[1, 2] = 5
    out += [v, t]
    x = zeros(2, 3)
    a, b = x[0], x[0]
    a.fill_(7)
    out.append(b)
    x = zeros(4)
    c = x[1:3]
    d = c[0:1]
    x.mul_(0).add_(2)
    out.append(d)
    x = zeros(2, 3, 4)
    p, n = x.permute(2, 0, 1), x.narrow(2, 1, 2)
    x[:, :, 1] = 3
    out += [p, n]
    return out


def test_views_see_later_changes_of_their_base_as_pytorchs():
    got = _base_change_cases(flow)
    assert got[0].numpy().tolist() == [1.0, 1.0]
    assert got[3].numpy().tolist() == [7.0, 7.0, 7.0]
    torch = pytest.importorskip("torch")
    for g, t in zip(got, _base_change_cases(torch)):
        np.testing.assert_array_equal(g.numpy(), t.numpy())
