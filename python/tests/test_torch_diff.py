"""Differential checks against PyTorch itself (skipped where ``torch`` is not installed): the
same inputs through ``torch`` and ``gflow``, comparing values (torch.testing's tolerances per
dtype), dtypes, shapes, whether an error is raised, and the gradients of
``(out * w).sum()``."""

import numpy as np
import pytest

import gflow as flow

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "int64", "int32", "bool", "float16", "bfloat16"]
FLOATS = ["float32", "float64", "float16", "bfloat16"]
TOL = {"float16": (1e-3, 1e-2), "bfloat16": (1.6e-2, 1e-2), "float32": (1.3e-5, 1e-5),
       "float64": (1e-7, 1e-7)}


def make(shape, dtype, seed, positive=False):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype in ("int64", "int32"):
        return rng.integers(-5, 6, size=shape).astype(dtype)
    a = rng.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.1 if positive else a


def convert(lib, a, dtype, grad):
    if dtype in ("float16", "bfloat16"):
        t = lib.tensor(np.asarray(a, np.float32)).to(getattr(lib, dtype))
    else:
        t = lib.tensor(np.asarray(a).astype(dtype))
    if grad and dtype in FLOATS:
        t.requires_grad_(True)
    return t


def host(t):
    if isinstance(t, torch.Tensor):
        name = str(t.dtype).replace("torch.", "")
        return name, tuple(t.shape), t.detach().float().numpy() if name == "bfloat16" else \
            t.detach().numpy()
    return repr(t.dtype).replace("flow.", ""), tuple(t.shape), np.asarray(t.numpy())


def flat(r):
    return [y for x in r for y in flat(x)] if isinstance(r, (tuple, list)) else [r]


def same(want, got, what, tol=None):
    """Equal dtypes and shapes, values within ``tol`` (else the dtype's tolerance)."""
    want, got = flat(want), flat(got)
    assert len(want) == len(got), what
    for a, b in zip(want, got):
        (da, sa, va), (db, sb, vb) = host(a), host(b)
        assert (da, sa) == (db, sb), f"{what}: torch {da}{sa}, gflow {db}{sb}"
        if va.dtype == np.bool_ or da not in TOL:
            assert np.array_equal(va, vb), f"{what}: torch {va}, gflow {vb}"
        else:
            rtol, atol = tol or TOL[da]
            np.testing.assert_allclose(vb.astype(np.float64), va.astype(np.float64), rtol=rtol,
                                       atol=atol, equal_nan=True, err_msg=what)


def check(what, f, arrays, dtypes, grad=True):
    """``f(lib, *tensors)`` through both libraries: the same error-or-not, result, gradients."""
    outs, errs, ins = [], [], []
    for lib in (torch, flow):
        ts = [convert(lib, a, d, grad) for a, d in zip(arrays, dtypes)]
        ins.append(ts)
        try:
            outs.append(f(lib, *ts))
            errs.append(None)
        except Exception as e:  # noqa: BLE001 (either library's error type)
            outs.append(None)
            errs.append(e)
    assert (errs[0] is None) == (errs[1] is None), f"{what}: torch {errs[0]!r}, gflow {errs[1]!r}"
    if errs[0] is not None:
        return
    same(outs[0], outs[1], what)
    ot = [o for o in flat(outs[0]) if o.requires_grad]
    of = [o for o in flat(outs[1]) if o.requires_grad]
    assert len(ot) == len(of), f"{what}: requires_grad"
    if not ot:
        return
    w = np.random.default_rng(7).standard_normal(tuple(ot[0].shape)).astype(np.float32)
    (ot[0] * torch.tensor(w).to(ot[0].dtype)).sum().backward()
    (of[0] * flow.tensor(w).to(of[0].dtype)).sum().backward()
    # a gradient is as precise as the coarser of its input's and the output's dtypes
    out = str(ot[0].dtype).replace("torch.", "")
    for i, (a, b) in enumerate(zip(*ins)):
        if a.requires_grad and a.grad is not None:
            own = str(a.dtype).replace("torch.", "")
            tol = max(TOL[own], TOL.get(out, TOL[own]))
            same(a.grad, b.grad, f"{what} grad {i}", tol)


UNARY = ["neg", "abs", "relu", "exp", "log", "sqrt", "sigmoid", "tanh", "rsqrt", "sin", "cos",
         "erf", "square"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, dtype):
    positive = name in ("log", "sqrt", "rsqrt")
    for shape in [(3, 4), (), (0, 3)]:
        check(f"{name} {dtype} {shape}", lambda L, x: getattr(x, name)(),
              [make(shape, dtype, 1, positive)], [dtype],
              grad=(name, dtype) != ("rsqrt", "bfloat16"))


BINARY = {
    "add": lambda L, a, b: a + b, "sub": lambda L, a, b: a - b,
    "floordiv": lambda L, a, b: a // b if b.dtype.is_floating_point or a.dtype.is_floating_point
    else a // (b * 0 + 3), "mul": lambda L, a, b: a * b, "div": lambda L, a, b: a / b,
    "maximum": lambda L, a, b: L.maximum(a, b), "minimum": lambda L, a, b: L.minimum(a, b),
    "eq": lambda L, a, b: a == b, "lt": lambda L, a, b: a < b, "ge": lambda L, a, b: a >= b,
}


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("db", DTYPES)
def test_binary_promotes_and_broadcasts(name, da, db):
    for sa, sb in [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (3, 4)), ((2, 3, 4), ())]:
        a, b = make(sa, da, 2), make(sb, db, 3)
        if name == "div" and db in ("int64", "int32"):
            b = np.where(b == 0, 1, b).astype(db)
        check(f"{name} {da}{sa} {db}{sb}", BINARY[name], [a, b], [da, db],
              # torch's floor_divide has no derivative
              grad=name != "floordiv" and (name != "div" or "float16" not in (da, db)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [2, 2.5, True, -3])
def test_python_scalars(dtype, scalar):
    a = make((3, 4), dtype, 4)
    for name, f in [("add", lambda L, x: x + scalar), ("rmul", lambda L, x: scalar * x),
                    ("div", lambda L, x: x / scalar), ("eq", lambda L, x: x == scalar),
                    ("lt", lambda L, x: x < scalar),
                    ("where", lambda L, x: L.where(x > 0 if x.dtype != L.bool else x, x, scalar))]:
        check(f"{name} {dtype} {scalar!r}", f, [a], [dtype])


@pytest.mark.parametrize("dtype", FLOATS + ["int64", "int32"])
def test_powers(dtype):
    a = make((3, 4), dtype, 5)
    if dtype in FLOATS:
        check("pow 2", lambda L, x: x ** 2, [a], [dtype])
        check("pow 0.5", lambda L, x: x.abs() ** 0.5, [a], [dtype])
        check("rpow", lambda L, x: 2 ** x, [a], [dtype])
        check("pow tensor", lambda L, x, e: x.abs() ** e, [a, make((1, 4), dtype, 6)],
              [dtype, dtype], grad=dtype != "bfloat16")
        check("neg base", lambda L, x: (-2.0) ** x, [np.array([2.0, 3.0, 0.5], np.float32)],
              [dtype])
    else:
        check("int pow", lambda L, x: x ** 3, [a], [dtype])
        check("int pow tensor", lambda L, x, e: x ** e, [a, np.abs(make((3, 4), dtype, 6))],
              [dtype, dtype])
        check("int pow float", lambda L, x: x ** 2.0, [a], [dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions(dtype):
    a = make((2, 3, 4), dtype, 8)
    for d in [0, -1, (0, 2), 1]:
        for keepdim in [False, True]:
            for name in ["sum", "amax", "amin", "logsumexp", "any", "all"]:
                check(f"{name}({d}, {keepdim}) {dtype}",
                      lambda L, x: getattr(x, name)(d, keepdim=keepdim), [a], [dtype])
            if isinstance(d, int):
                for name in ["max", "min"]:
                    check(f"{name}({d}) {dtype}",
                          lambda L, x: tuple(getattr(x, name)(d, keepdim=keepdim)), [a], [dtype])
                if dtype != "bool":
                    check(f"argmax({d}) {dtype}", lambda L, x: x.argmax(d, keepdim=keepdim),
                          [a], [dtype])
    check(f"sum 0-d {dtype}", lambda L, x: x.sum(0), [make((), dtype, 9)], [dtype])


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "bfloat16"])
def test_shapes(dtype):
    a = make((2, 3, 4), dtype, 10)
    cases = {
        "reshape": lambda L, x: x.reshape(4, -1), "permute": lambda L, x: x.permute(2, 0, 1),
        "transpose": lambda L, x: x.transpose(0, -1), "squeeze": lambda L, x: x[:, :1].squeeze(1),
        "unsqueeze": lambda L, x: x.unsqueeze(-1), "flatten": lambda L, x: x.flatten(1),
        "flatten 0-d": lambda L, x: x[0, 0, 0].flatten(), "cat": lambda L, x: L.cat([x, x], -1),
        "stack": lambda L, x: L.stack([x, x], 1), "split": lambda L, x: x.split([1, 3], -1),
        "chunk": lambda L, x: x.chunk(3, 2), "expand": lambda L, x: x[:, :1].expand(2, 5, 4),
        "expand new dims": lambda L, x: x.expand(3, 2, 3, 4), "narrow": lambda L, x: x.narrow(2, 1, 2),
        "getitem": lambda L, x: x[1, ::2, -1], "mask": lambda L, x: x[x > 0] if x.dtype != L.bool else x[x],
    }
    for name, f in cases.items():
        check(f"{name} {dtype}", f, [a], [dtype])


@pytest.mark.parametrize("sa, sb", [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)),
                                    ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)),
                                    ((5, 1, 2, 3), (4, 3, 2)), ((3,), (5, 3, 4))])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_matmul(sa, sb, dtype):
    check(f"matmul {sa} {sb}", lambda L, a, b: a @ b, [make(sa, dtype, 11), make(sb, dtype, 12)],
          [dtype, dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_nn_functional(dtype):
    F = "nn.functional"

    def fn(L):
        return getattr(L, "nn").functional

    x = make((2, 3, 5), dtype, 13)
    w, b = make((5,), dtype, 14), make((5,), dtype, 15)
    check(F + ".softmax", lambda L, x: fn(L).softmax(x, dim=1), [x], [dtype])
    check(F + ".log_softmax", lambda L, x: fn(L).log_softmax(x, dim=-1), [x], [dtype])
    check(F + ".layer_norm", lambda L, x, w, b: fn(L).layer_norm(x, (5,), w, b), [x, w, b],
          [dtype] * 3)
    check(F + ".rms_norm", lambda L, x, w: fn(L).rms_norm(x, (5,), w, eps=1e-6), [x, w],
          [dtype] * 2, grad=dtype != "bfloat16")
    logits, target = make((4, 7), dtype, 16), np.array([0, 6, 3, -100])
    for red in ["mean", "sum", "none"]:
        check(F + ".cross_entropy " + red,
              lambda L, x, t: fn(L).cross_entropy(x, t, reduction=red), [logits, target],
              [dtype, "int64"])
    q, k, v = make((2, 3, 4, 8), dtype, 17), make((2, 3, 6, 8), dtype, 18), \
        make((2, 3, 6, 8), dtype, 19)
    check(F + ".sdpa", lambda L, q, k, v: fn(L).scaled_dot_product_attention(q, k, v),
          [q, k, v], [dtype] * 3)
    check(F + ".sdpa 3-d", lambda L, q, k, v: fn(L).scaled_dot_product_attention(q, k, v),
          [q[0], k[0], v[0]], [dtype] * 3)
