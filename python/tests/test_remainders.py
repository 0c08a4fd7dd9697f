"""``%``, ``//``, ``fmod``, ``remainder``, ``floor_divide`` and ``div(rounding_mode=)`` against
NumPy and Python's own float and integer arithmetic (exact remainders: ``1e8 % 3`` is 1 in
float32, where ``a - floor(a / b) * b`` gives 0), at the edges (signed zeros, infinities, zero
divisors, NaN), for floats of every width and integers, with gradients; and against PyTorch where
it is installed."""

import math

import numpy as np
import pytest

import gflow as flow

INF = math.inf
DIVIDENDS = [5.5, -5.5, 1e8, -1e8, 123456789.0, 1e30, 0.0, -0.0, INF, -INF, math.nan, 7.0, -7.0,
             3.75, -0.3]
DIVISORS = [2.0, -2.0, 3.0, -3.0, 7.0, 3.3, INF, -INF, 0.5]


def python_floor_divide(a, b):
    """CPython's ``float.__floordiv__`` (NumPy's ``floor_divide`` follows it), NaN where Python
    raises."""
    try:
        return a // b
    except (ZeroDivisionError, OverflowError):
        return math.nan


def same(got, want, zero_sign=True):
    """Equal values, NaN where NaN, and equal signs (of zeros too unless ``zero_sign`` is
    false: a zero remainder keeps fmod's sign in PyTorch, takes the divisor's in NumPy)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    both_nan = np.isnan(got) & np.isnan(want)
    assert ((got == want) | both_nan).all(), (got, want)
    signed = ~both_nan if zero_sign else ~both_nan & (want != 0)
    assert ((np.signbit(got) == np.signbit(want)) | ~signed).all(), (got, want)


@pytest.mark.parametrize("dtype,np_dtype", [(flow.float32, np.float32), (flow.float64, np.float64)])
def test_float_remainders_are_exact_at_every_edge(dtype, np_dtype):
    a = np.array(DIVIDENDS, np_dtype).reshape(-1, 1)
    b = np.array(DIVISORS, np_dtype)
    x, y = flow.tensor(a, dtype=dtype), flow.tensor(b, dtype=dtype)
    with np.errstate(all="ignore"):
        same((x % y).numpy(), np.remainder(a, b), zero_sign=False)
        same(x.remainder(y).numpy(), np.remainder(a, b), zero_sign=False)
        same(flow.fmod(x, y).numpy(), np.fmod(a, b))
        same((x // y).numpy(), np.floor_divide(a, b))
        same(x.div(y, rounding_mode="floor").numpy(), np.floor_divide(a, b))
        same(x.div(y, rounding_mode="trunc").numpy(), np.trunc(a / b))
    # Python's own float arithmetic (float64) for the finite divisors
    if dtype == flow.float64:
        for i, p in enumerate(DIVIDENDS):
            for j, q in enumerate(DIVISORS):
                if math.isfinite(p) and math.isfinite(q):
                    assert (x % y).numpy()[i, j] == p % q
                    assert (x // y).numpy()[i, j] == python_floor_divide(p, q)


def test_float32_large_quotients_keep_the_remainder():
    x = flow.tensor([1e8, -1e8, 123456789.0], dtype=flow.float32)
    assert (x % 3.0).tolist() == [1.0, 2.0, 0.0]
    assert flow.fmod(x, 7.0).tolist() == [2.0, -2.0, 4.0]


def test_zero_divisors_give_ieee_values():
    x = flow.tensor([5.0, -5.0, 0.0])
    with np.errstate(all="ignore"):
        same((x // 0.0).numpy(), np.array([INF, -INF, math.nan]))
        same((x % 0.0).numpy(), np.array([math.nan] * 3))


@pytest.mark.parametrize("dtype", [flow.float16, flow.bfloat16])
def test_half_floats_compute_as_float32_and_round_once(dtype):
    a = flow.tensor([5.5, -5.5, 1000.0, -7.25], dtype=dtype)
    b = flow.tensor([2.0, 2.0, -3.0, 0.5], dtype=dtype)
    got = [(a % b).float().tolist(), flow.fmod(a, b).float().tolist(), (a // b).float().tolist()]
    assert got == [[1.5, 0.5, -2.0, 0.25], [1.5, -1.5, 1.0, -0.25], [2.0, -3.0, -334.0, -15.0]]
    assert (a % b).dtype == dtype


@pytest.mark.parametrize("dtype", [flow.int64, flow.int32])
def test_integers_divide_exactly(dtype):
    big = 123456789012 if dtype == flow.int64 else 1234567
    av = [7, -7, 0, big, -big, -9]
    bv = [2, -3, 5, 7, -1]
    x = flow.tensor(av, dtype=dtype).reshape(-1, 1)
    y = flow.tensor(bv, dtype=dtype)
    floor = [[p // q for q in bv] for p in av]
    rem = [[p % q for q in bv] for p in av]
    trunc = [[int(p / q) if abs(p) < 2**52 else None for q in bv] for p in av]
    fmod = [[p - t * q for t, q in zip(row, bv)] for p, row in zip(av, trunc)]
    assert (x // y).tolist() == floor and (x // y).dtype == dtype
    assert (x % y).tolist() == rem and (x % y).dtype == dtype
    assert x.div(y, rounding_mode="trunc").tolist() == trunc
    assert flow.fmod(x, y).tolist() == fmod
    if dtype == flow.int64:
        huge = flow.tensor([2**62 + 1, -(2**62) - 3])
        assert (huge // 3).tolist() == [(2**62 + 1) // 3, (-(2**62) - 3) // 3]
        assert huge.div(3, rounding_mode="trunc").tolist() == [(2**62 + 1) // 3, -((2**62 + 3) // 3)]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        x % flow.zeros(1, dtype=dtype)


def test_gradients_hold_the_quotient_constant():
    a = flow.tensor([5.5, -7.5, 1000.0], dtype=flow.float64, requires_grad=True)
    b = flow.tensor([2.0, 3.0, -7.0], dtype=flow.float64, requires_grad=True)
    for name, q in [("remainder", np.floor), ("fmod", np.trunc)]:
        a.grad = b.grad = None
        getattr(a, name)(b).sum().backward()
        assert a.grad.tolist() == [1.0, 1.0, 1.0]
        av, bv = np.array([5.5, -7.5, 1000.0]), np.array([2.0, 3.0, -7.0])
        assert b.grad.tolist() == (-q(av / bv)).tolist()
    a.grad = b.grad = None
    (a // b).sum().backward()
    assert a.grad.tolist() == [0.0, 0.0, 0.0]


def test_global_tensors_split_and_broadcast():
    p = flow.placement("cpu", ranks=[0])
    a = np.array(DIVIDENDS[:7], np.float32).reshape(-1, 1) * np.ones((1, 4), np.float32)
    x = flow.tensor(a).to_global(placement=p, sbp=flow.sbp.split(0))
    y = flow.tensor(np.array([2.0, -3.0, 7.0, 0.5], np.float32)).to_global(
        placement=p, sbp=flow.sbp.broadcast)
    with np.errstate(all="ignore"):
        same((x % y).numpy(), np.remainder(a, np.array([2.0, -3.0, 7.0, 0.5], np.float32)),
             zero_sign=False)


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    a = torch.tensor(DIVIDENDS).reshape(-1, 1)
    b = torch.tensor(DIVISORS + [0.0, -0.0])
    x, y = flow.tensor(a.numpy()), flow.tensor(b.numpy())
    same((x % y).numpy(), (a % b).numpy())
    same((x // y).numpy(), (a // b).numpy())
    same(flow.fmod(x, y).numpy(), torch.fmod(a, b).numpy())
    same(x.div(y, rounding_mode="trunc").numpy(), a.div(b, rounding_mode="trunc").numpy())
