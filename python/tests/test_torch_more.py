"""PyTorch's everyday surface composed in Python over gflow's operators: the losses
``l1_loss smooth_l1_loss huber_loss binary_cross_entropy kl_div nll_loss`` (weights, K-dim),
the activations ``softplus leaky_relu elu selu celu hardtanh relu6 logsigmoid glu mish
hardswish hardsigmoid softsign``, ``cosine_similarity pairwise_distance``, their ``nn``
modules, ``ParameterList``/``ParameterDict``, and ``broadcast_to hstack vstack roll diag
diagonal trace tile repeat_interleave unflatten dot addmm baddbmm lerp addcmul addcdiv
true_divide log2 log10 sinh cosh fmod diff count_nonzero dist einsum type``.

Each call's value and gradients are checked against an independent float64 NumPy reference
(gradients by central differences of it) on local tensors and on global ones (a 1-rank
placement, broadcast and split); where torch is importable, the same call through torch gives
the same values and gradients; a 2-process run checks a few of them on tensors split over two
ranks."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn
import gflow.nn.functional as F

from torch_cases import KINDS, P, central_grad, check_case, make

RNG = np.random.default_rng(11)


def randn(*shape):
    return RNG.standard_normal(shape)


def away(a, *points, gap=0.05):
    """``a`` with values near a kink moved ``gap`` from it, so central differences see one
    smooth piece."""
    for p in points:
        a = np.where(np.abs(a - p) < gap, p + np.where(a >= p, gap, -gap), a)
    return a


class Lib:
    """The tensor library a case's call runs on: ``lib.t`` (``flow`` or ``torch``) and
    ``lib.F`` (its ``nn.functional``)."""

    def __init__(self, t, functional):
        self.t, self.F = t, functional


FLOW = Lib(flow, F)


class Case:
    """``call(lib, *tensors)`` against ``ref(*arrays)`` (float64 NumPy); gradients for the
    float inputs (those in ``grad`` when given: torch has no gradient for a loss's ``weight``);
    ``torch=False`` when torch has no such call, ``torch_rtol`` how close torch's gradients
    are."""

    def __init__(self, name, call, ref, *inputs, grad=None, torch=True, torch_rtol=1e-9):
        self.name, self.call, self.ref, self.inputs = name, call, ref, inputs
        floats = [i for i, a in enumerate(inputs) if a.dtype == np.float64]
        self.grad = floats if grad is None else grad
        self.torch, self.torch_rtol = torch, torch_rtol


def reduce(losses, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction](losses)


def xlogy0(y):
    return np.where(y == 0, 0.0, y * np.log(np.where(y == 0, 1.0, y)))


def log1pexp(x):
    return np.logaddexp(0.0, x)


SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
A, B = randn(3, 4), randn(3, 4)
PROB, TGT = RNG.uniform(0.05, 0.95, (3, 4)), RNG.uniform(0, 1, (3, 4))
LOGP = np.log(RNG.dirichlet(np.ones(4), 3))
PT = RNG.dirichlet(np.ones(4), 3)
PT[0, 1] = 0.0  # a zero target contributes 0
CLS = np.array([2, 0, 3])
W4 = RNG.uniform(0.5, 2.0, 4)
X = away(randn(3, 4) * 4, 0.0)

CASES = []
for red in ("mean", "sum", "none"):
    CASES += [
        Case(f"l1_loss-{red}", lambda L, a, b, r=red: L.F.l1_loss(a, b, reduction=r),
             lambda a, b, r=red: reduce(np.abs(a - b), r), A, B),
        Case(f"smooth_l1_loss-{red}",
             lambda L, a, b, r=red: L.F.smooth_l1_loss(a, b, reduction=r, beta=0.5),
             lambda a, b, r=red: reduce(np.where(np.abs(a - b) < 0.5, (a - b) ** 2,
                                                 np.abs(a - b) - 0.25), r), A, B),
        Case(f"huber_loss-{red}", lambda L, a, b, r=red: L.F.huber_loss(a, b, reduction=r,
                                                                        delta=0.7),
             lambda a, b, r=red: reduce(np.where(np.abs(a - b) < 0.7, 0.5 * (a - b) ** 2,
                                                 0.7 * (np.abs(a - b) - 0.35)), r), A, B),
        Case(f"binary_cross_entropy-{red}",
             lambda L, p, y, w, r=red: L.F.binary_cross_entropy(p, y, w, reduction=r),
             lambda p, y, w, r=red: reduce(-w * (y * np.log(p) + (1 - y) * np.log(1 - p)), r),
             PROB, TGT, W4, grad=[0, 1]),
        Case(f"kl_div-{red}", lambda L, x, y, r=red: L.F.kl_div(x, y, reduction=r),
             lambda x, y, r=red: reduce(xlogy0(y) - y * x, r), LOGP, PT, grad=[0]),
        Case(f"nll_loss-weight-{red}",
             lambda L, x, t, w, r=red: L.F.nll_loss(x, t, w, reduction=r, ignore_index=0),
             lambda x, t, w, r=red: (lambda l, k: l if r == "none" else
                                     l.sum() / (k.sum() if r == "mean" else 1))(
                 -x[np.arange(3), t] * w[t] * (t != 0), w[t] * (t != 0)),
             LOGP, CLS, W4, grad=[0]),
    ]
LOGP4 = np.log(RNG.dirichlet(np.ones(3), (2, 4))).transpose(0, 2, 1)  # (N, C, d)
CLS4 = RNG.integers(0, 3, (2, 4))
CASES += [
    Case("smooth_l1_loss-beta0", lambda L, a, b: L.F.smooth_l1_loss(a, b, beta=0.0),
         lambda a, b: np.abs(a - b).mean(), A, B),
    Case("kl_div-batchmean-log_target",
         lambda L, x, y: L.F.kl_div(x, y, reduction="batchmean", log_target=True),
         lambda x, y: (np.exp(y) * (y - x)).sum() / 3, LOGP, np.log(RNG.dirichlet(np.ones(4), 3))),
    Case("kl_div-batchmean", lambda L, x, y: L.F.kl_div(x, y, reduction="batchmean"),
         lambda x, y: (xlogy0(y) - y * x).sum() / 3, LOGP, PT, grad=[0]),
    Case("nll_loss-kdim", lambda L, x, t: L.F.nll_loss(x, t, reduction="none"),
         lambda x, t: -np.take_along_axis(x, t[:, None], 1)[:, 0], LOGP4, CLS4),
    Case("nll_loss-kdim-mean", lambda L, x, t: L.F.nll_loss(x, t),
         lambda x, t: -np.take_along_axis(x, t[:, None], 1).mean(), LOGP4, CLS4),
    Case("softplus", lambda L, x: L.F.softplus(x), lambda x: log1pexp(x), X),
    Case("softplus-beta", lambda L, x: L.F.softplus(x, beta=2.0, threshold=1.0),
         lambda x: np.where(2 * x > 1, x, log1pexp(2 * x) / 2), away(X / 4, 0.5)),
    Case("leaky_relu", lambda L, x: L.F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x),
         X),
    Case("elu", lambda L, x: L.F.elu(x, alpha=1.5),
         lambda x: np.where(x > 0, x, 1.5 * np.expm1(np.minimum(x, 0))), X),
    Case("selu", lambda L, x: L.F.selu(x),
         lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(np.minimum(x, 0))), X),
    Case("celu", lambda L, x: L.F.celu(x, alpha=0.5),
         lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0) / 0.5)), X),
    Case("hardtanh", lambda L, x: L.F.hardtanh(x, -2.0, 3.0), lambda x: np.clip(x, -2.0, 3.0),
         away(X, -2.0, 3.0)),
    Case("relu6", lambda L, x: L.F.relu6(x), lambda x: np.clip(x, 0.0, 6.0), away(X * 2, 0.0, 6.0)),
    Case("logsigmoid", lambda L, x: L.F.logsigmoid(x), lambda x: -log1pexp(-x), X),
    Case("glu", lambda L, x: L.F.glu(x), lambda x: x[:, :2] / (1 + np.exp(-x[:, 2:])), A),
    Case("glu-dim0", lambda L, x: L.F.glu(x, 0), lambda x: x[:2] / (1 + np.exp(-x[2:])), B.T),
    Case("mish", lambda L, x: L.F.mish(x), lambda x: x * np.tanh(log1pexp(x)), X),
    Case("hardswish", lambda L, x: L.F.hardswish(x),
         lambda x: x * np.clip(x + 3, 0, 6) / 6, away(X, -3.0, 3.0)),
    # torch's float64 hardsigmoid gradient uses 1/6 rounded to float32
    Case("hardsigmoid", lambda L, x: L.F.hardsigmoid(x), lambda x: np.clip(x + 3, 0, 6) / 6,
         away(X, -3.0, 3.0), torch_rtol=1e-7),
    Case("softsign", lambda L, x: L.F.softsign(x), lambda x: x / (1 + np.abs(x)), X),
    Case("cosine_similarity", lambda L, a, b: L.F.cosine_similarity(a, b),
         lambda a, b: (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1),
         A, B),
    Case("cosine_similarity-broadcast", lambda L, a, b: L.F.cosine_similarity(a, b, dim=-1),
         lambda a, b: (a @ b) / np.linalg.norm(a, axis=1) / np.linalg.norm(b), A, B[0]),
    Case("pairwise_distance", lambda L, a, b: L.F.pairwise_distance(a, b),
         lambda a, b: np.linalg.norm(a - b + 1e-6, axis=-1), A, B),
    Case("pairwise_distance-p1-keepdim",
         lambda L, a, b: L.F.pairwise_distance(a, b, p=1.0, keepdim=True),
         lambda a, b: np.abs(a - b + 1e-6).sum(-1, keepdims=True), A, B),
]

V, U = randn(4), randn(4)
M3 = randn(2, 3, 4)
POS = RNG.uniform(0.2, 3.0, (3, 4))
LERP_W = RNG.uniform(-0.2, 1.2, (3, 4))
CASES += [
    Case("broadcast_to", lambda L, v: L.t.broadcast_to(v, (2, 3, 4)),
         lambda v: np.broadcast_to(v, (2, 3, 4)), V),
    Case("hstack", lambda L, a, b: L.t.hstack([a, b[:, :2]]), lambda a, b: np.hstack([a, b[:, :2]]),
         A, B),
    Case("hstack-1d", lambda L, v, u: L.t.hstack([v, u]), lambda v, u: np.hstack([v, u]), V, U),
    Case("vstack", lambda L, a, v: L.t.vstack([a, v]), lambda a, v: np.vstack([a, v]), A, V),
    Case("roll-flat", lambda L, a: L.t.roll(a, 5), lambda a: np.roll(a, 5), A),
    Case("roll-dims", lambda L, a: L.t.roll(a, (1, -3), (0, 1)),
         lambda a: np.roll(a, (1, -3), (0, 1)), A),
    Case("roll-method", lambda L, a: a.roll(-1, 0), lambda a: np.roll(a, -1, 0), A),
    Case("diag-vector", lambda L, v: L.t.diag(v, 1), lambda v: np.diag(v, 1), V),
    Case("diag-vector-neg", lambda L, v: v.diag(-2), lambda v: np.diag(v, -2), V),
    Case("diag-matrix", lambda L, a: L.t.diag(a), lambda a: np.diag(a), A),
    Case("diag-matrix-offset", lambda L, a: a.diag(1), lambda a: np.diag(a, 1), A),
    Case("diag-matrix-neg", lambda L, a: L.t.diag(a, -2), lambda a: np.diag(a, -2), A),
    Case("diagonal", lambda L, m: L.t.diagonal(m, 1, 2, 0),
         lambda m: np.diagonal(m, 1, 2, 0), M3),
    Case("diagonal-method", lambda L, m: m.diagonal(-1, -1, 1),
         lambda m: np.diagonal(m, -1, -1, 1), M3),
    Case("trace", lambda L, a: L.t.trace(a), lambda a: np.trace(a), A),
    Case("tile", lambda L, a: L.t.tile(a, (2, 1, 2)), lambda a: np.tile(a, (2, 1, 2)), A),
    Case("tile-short", lambda L, a: a.tile(2), lambda a: np.tile(a, 2), A),
    Case("repeat_interleave", lambda L, a: L.t.repeat_interleave(a, 2),
         lambda a: np.repeat(a, 2), A),
    Case("repeat_interleave-dim", lambda L, a: a.repeat_interleave(3, dim=1),
         lambda a: np.repeat(a, 3, 1), A),
    Case("repeat_interleave-tensor", lambda L, a, r: L.t.repeat_interleave(a, r, dim=0),
         lambda a, r: np.repeat(a, r, 0), A, np.array([2, 0, 1])),
    Case("unflatten", lambda L, a: a.unflatten(1, (2, -1)), lambda a: a.reshape(3, 2, 2), A),
    Case("dot", lambda L, v, u: L.t.dot(v, u), lambda v, u: v @ u, V, U),
    Case("dot-method", lambda L, v, u: v.dot(u), lambda v, u: v @ u, V, U),
    Case("addmm", lambda L, c, a, b: L.t.addmm(c, a, b, beta=0.5, alpha=2.0),
         lambda c, a, b: 0.5 * c + 2.0 * a @ b, V, A, randn(4, 4)),
    Case("addmm-method", lambda L, c, a, b: c.addmm(a, b),
         lambda c, a, b: c + a @ b, randn(3, 2), A, randn(4, 2)),
    Case("baddbmm", lambda L, c, a, b: L.t.baddbmm(c, a, b, alpha=0.5),
         lambda c, a, b: c + 0.5 * a @ b, randn(3, 5), M3, randn(2, 4, 5)),
    Case("lerp-tensor", lambda L, a, b, w: L.t.lerp(a, b, w), lambda a, b, w: a + w * (b - a),
         A, B, LERP_W),
    Case("lerp-number", lambda L, a, b: a.lerp(b, 0.75), lambda a, b: a + 0.75 * (b - a), A, B),
    Case("addcmul", lambda L, c, a, b: L.t.addcmul(c, a, b, value=0.5),
         lambda c, a, b: c + 0.5 * a * b, V, A, B),
    Case("addcdiv", lambda L, c, a, b: c.addcdiv(a, b, value=-2.0),
         lambda c, a, b: c - 2.0 * a / b, V, A, POS),
    Case("true_divide", lambda L, a, b: L.t.true_divide(a, b), lambda a, b: a / b, A, POS),
    Case("log2", lambda L, p: L.t.log2(p), np.log2, POS),
    Case("log10", lambda L, p: p.log10(), np.log10, POS),
    Case("sinh", lambda L, a: L.t.sinh(a * 3), lambda a: np.sinh(a * 3), A),
    Case("cosh", lambda L, a: a.cosh(), np.cosh, A * 3),
    Case("fmod", lambda L, a, b: L.t.fmod(a, b), np.fmod, A * 5,
         np.where(RNG.random((3, 4)) < 0.5, -1, 1) * RNG.uniform(0.7, 1.3, (3, 4))),
    Case("fmod-number", lambda L, a: a.fmod(1.5), lambda a: np.fmod(a, 1.5),
         away(A * 5, *np.arange(-15, 16) * 1.5)),
    Case("diff", lambda L, a: L.t.diff(a, 2, 0), lambda a: np.diff(a, 2, 0), A),
    Case("diff-prepend-append", lambda L, a, p, q: a.diff(dim=-1, prepend=p, append=q),
         lambda a, p, q: np.diff(a, 1, -1, prepend=p, append=q), A, B[:, :2], B[:, 3:]),
    Case("count_nonzero", lambda L, a: L.t.count_nonzero(a, dim=1),
         lambda a: np.count_nonzero(a, 1), np.array([[0.0, 1.0, 2.0], [0.0, 0.0, -3.0]]),
         grad=[]),
    Case("dist", lambda L, a, b: L.t.dist(a, b), lambda a, b: np.linalg.norm(a - b), A, V),
    Case("dist-p1", lambda L, a, b: a.dist(b, 1), lambda a, b: np.abs(a - b).sum(), A, B),
    Case("dist-inf", lambda L, a, b: a.dist(b, math.inf), lambda a, b: np.abs(a - b).max(), A, B),
    Case("softplus-method", lambda L, x: x.softplus(beta=0.5),
         lambda x: np.where(x / 2 > 20, x, log1pexp(x / 2) * 2), X, torch=False),
]

EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("ba,cb", [(2, 3), (4, 2)]),
    ("i,i", [(4,), (4,)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("...ij,...jk", [(2, 2, 3), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),
    ("i,i->i", [(1,), (3,)]),
]
CASES += [Case(f"einsum-{eq}", lambda L, *ts, eq=eq: L.t.einsum(eq, *ts),
               lambda *arrays, eq=eq: np.einsum(eq, *arrays), *[randn(*s) for s in shapes])
          for eq, shapes in EINSUM]

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_values_and_gradients_against_numpy(case, kind):
    check_case(case, kind, FLOW, RNG)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")
@pytest.mark.parametrize("case", [c for c in CASES if c.torch], ids=lambda c: c.name)
def test_same_values_and_gradients_as_torch(case):
    torch = pytest.importorskip("torch")
    lib = Lib(torch, torch.nn.functional)
    ts = [torch.tensor(a, requires_grad=i in case.grad) for i, a in enumerate(case.inputs)]
    fs = [flow.tensor(a, requires_grad=i in case.grad) for i, a in enumerate(case.inputs)]
    want, got = case.call(lib, *ts), case.call(FLOW, *fs)
    assert tuple(got.shape) == tuple(want.shape)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    if not case.grad:
        return
    up = RNG.standard_normal(tuple(want.shape))
    (want * torch.tensor(up)).sum().backward()
    (got * flow.tensor(up)).sum().backward()
    for i in case.grad:
        np.testing.assert_allclose(fs[i].grad.numpy(), ts[i].grad.numpy(), rtol=case.torch_rtol,
                                   atol=1e-12, err_msg=f"gradient of input {i}")


# Gradients at the kinks, where PyTorch picks one side (checked against torch 2.15).
KINKS = [
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.1), [-1.0, 0.0, 1.0], [0.1, 0.1, 1.0]),
    ("elu", lambda x: F.elu(x, 2.0), [0.0, 1.0], [2.0, 1.0]),
    ("celu", lambda x: F.celu(x, 2.0), [0.0], [1.0]),
    ("selu", F.selu, [0.0], [SELU_S * SELU_A]),
    ("hardtanh", F.hardtanh, [-1.0, 0.0, 1.0], [0.0, 1.0, 0.0]),
    ("relu6", F.relu6, [0.0, 3.0, 6.0], [0.0, 1.0, 0.0]),
    ("hardsigmoid", F.hardsigmoid, [-3.0, 0.0, 3.0], [0.0, 1 / 6, 0.0]),
    ("hardswish", F.hardswish, [-3.0, 0.0, 3.0, 6.0], [0.0, 0.5, 1.0, 1.0]),
    ("softplus", F.softplus, [0.0], [0.5]),
    ("logsigmoid", F.logsigmoid, [0.0], [0.5]),
    ("mish", F.mish, [0.0], [0.6]),
    ("l1_loss", lambda x: F.l1_loss(x, flow.zeros(1, dtype=flow.float64), reduction="sum"),
     [0.0], [0.0]),
    ("smooth_l1_loss", lambda x: F.smooth_l1_loss(x, flow.zeros(3, dtype=flow.float64),
                                                  reduction="none", beta=0.5),
     [-0.5, 0.0, 0.5], [-1.0, 0.0, 1.0]),
]


@pytest.mark.parametrize("name, f, at, grad", KINKS, ids=[k[0] for k in KINKS])
def test_gradients_at_kinks_are_pytorchs(name, f, at, grad):
    x = flow.tensor(np.array(at), requires_grad=True)
    f(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-12, atol=1e-15)


def test_stable_forms_stay_finite_in_float32():
    big = flow.tensor([-200.0, -30.0, 0.0, 30.0, 200.0], requires_grad=True)
    sp, ls = F.softplus(big), F.logsigmoid(big)
    np.testing.assert_allclose(sp.numpy(), [0.0, 9.357623e-14, math.log(2), 30.0, 200.0],
                               rtol=1e-6, atol=1e-13)
    np.testing.assert_allclose(ls.numpy(), [-200.0, -30.0, -math.log(2), -9.357623e-14, 0.0],
                               rtol=1e-6, atol=1e-13)
    (sp + ls + F.mish(big) + F.elu(big) + F.selu(big) + F.celu(big, 0.5)).sum().backward()
    assert np.isfinite(big.grad.numpy()).all()
    # BCE clamps its logs at -100 as PyTorch: probabilities 0 and 1 give 100, not inf or NaN
    p = flow.tensor([0.0, 1.0, 0.5], requires_grad=True)
    loss = F.binary_cross_entropy(p, flow.tensor([1.0, 0.0, 1.0]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), [100.0, 100.0, math.log(2)], rtol=1e-6)
    loss.sum().backward()
    assert np.isfinite(p.grad.numpy()).all()
    # sinh and cosh finite up to float32's limit, and sinh exact near 0
    h = flow.tensor([-89.0, -1e-20, 0.0, 1e-20, 89.0])
    np.testing.assert_allclose(h.sinh().numpy(), np.sinh(np.float32([-89, -1e-20, 0, 1e-20, 89])),
                               rtol=1e-5)
    np.testing.assert_allclose(h.cosh().numpy(), np.cosh(np.float32([-89, -1e-20, 0, 1e-20, 89])),
                               rtol=1e-5)
    # cosine similarity of a zero vector: 0, with PyTorch's finite gradient x2 / (eps ||x2||)
    z = flow.zeros(1, 3, dtype=flow.float64, requires_grad=True)
    assert F.cosine_similarity(z, flow.ones(1, 3, dtype=flow.float64)).item() == 0.0
    F.cosine_similarity(z, flow.ones(1, 3, dtype=flow.float64)).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), np.full((1, 3), 1 / (1e-8 * math.sqrt(3))),
                               rtol=1e-9)


def test_einsum_identities_and_dtypes():
    a, b = randn(2, 3), randn(3, 4)
    x, y = flow.tensor(a), flow.tensor(b)
    np.testing.assert_allclose(flow.einsum("ij,jk->ik", x, y).numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(flow.einsum("ij,jk", [x, y]).numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(flow.einsum(" i j , j k -> k i ", x, y).numpy(), (a @ b).T,
                               rtol=1e-12)
    assert flow.einsum("", flow.tensor(2.5)).item() == 2.5
    f32 = flow.einsum("ij,jk->ik", x.float(), y.float())
    assert f32.dtype == flow.float32
    np.testing.assert_allclose(f32.numpy(), a @ b, rtol=1e-5, atol=1e-6)


def test_integer_and_bool_inputs_keep_torchs_dtypes():
    i = flow.tensor([[3, -7], [7, 0]])
    assert flow.fmod(i, 3).dtype == flow.int64
    assert flow.fmod(i, 3).tolist() == [[0, -1], [1, 0]]
    assert flow.true_divide(i, 2).dtype == flow.float32
    assert flow.log2(flow.tensor([8])).dtype == flow.float32
    assert flow.count_nonzero(i).dtype == flow.int64 and flow.count_nonzero(i).item() == 3
    assert flow.diag(i).tolist() == [3, 0] and flow.diag(i).dtype == flow.int64
    assert flow.diag(flow.tensor([1, 2]), 1).tolist() == [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    assert flow.trace(i).item() == 3
    assert flow.diff(flow.tensor([True, False, False, True])).tolist() == [True, False, True]
    assert flow.roll(i, 1, 1).tolist() == [[-7, 3], [0, 7]]
    assert flow.repeat_interleave(flow.tensor([1, 2]), 2).tolist() == [1, 1, 2, 2]
    assert flow.tile(flow.tensor([1, 2]), (2,)).tolist() == [1, 2, 1, 2]
    assert flow.hstack([flow.tensor(1), flow.tensor([2, 3])]).tolist() == [1, 2, 3]
    assert flow.vstack([flow.tensor(1), flow.tensor(2)]).shape == flow.Size([2, 1])
    v = flow.tensor([1.0, math.inf, -math.inf])
    assert flow.diag(v).numpy()[0, 1] == 0.0  # not inf * 0
    assert flow.lerp(flow.tensor([1.0]), flow.tensor([3.0]), 1.0).item() == 3.0
    assert flow.addmm(flow.tensor([[math.nan]]), flow.ones(1, 2), flow.ones(2, 1),
                      beta=0).item() == 2.0


def test_flow_level_aliases_and_tensor_sugar():
    x = flow.tensor(A)
    for name in ("isnan", "isinf", "isfinite"):
        assert flow.equal(getattr(flow, name)(x), getattr(x, name)())
    assert [t.tolist() for t in flow.unbind(x, 1)] == [t.tolist() for t in x.unbind(1)]
    np.testing.assert_allclose(flow.reciprocal(x).numpy(), 1 / A, rtol=1e-12)
    assert flow.numel(x) == x.nelement() == 12 and x.ndimension() == 2
    sizes = {flow.float32: 4, flow.float64: 8, flow.float16: 2, flow.bfloat16: 2,
             flow.int64: 8, flow.int32: 4, flow.bool: 1}
    for dt, n in sizes.items():
        assert flow.zeros(2, dtype=dt).element_size() == n


def test_type_names_and_casts():
    x = flow.tensor(A)
    assert x.type() == "gflow.DoubleTensor"
    assert x.float().type() == "gflow.FloatTensor"
    names = {flow.float16: "HalfTensor", flow.bfloat16: "BFloat16Tensor", flow.int64: "LongTensor",
             flow.int32: "IntTensor", flow.bool: "BoolTensor"}
    for dt, name in names.items():
        assert x.to(dt).type() == "gflow." + name
    assert x.type(flow.float32).dtype == flow.float32
    assert x.type("torch.IntTensor").dtype == flow.int32
    assert x.type("gflow.FloatTensor").dtype == flow.float32
    g = x.to_global(placement=P, sbp=flow.sbp.split(0))
    assert g.type() == "gflow.DoubleTensor"
    cast = g.type(flow.float32)
    assert cast.is_global and cast.dtype == flow.float32 and cast.sbp == g.sbp
    with pytest.raises(ValueError, match="invalid type"):
        x.type("torch.ComplexTensor")


def test_torch_type_names_match():
    torch = pytest.importorskip("torch")
    for dt, tdt in ((flow.float32, torch.float32), (flow.float64, torch.float64),
                    (flow.float16, torch.float16), (flow.bfloat16, torch.bfloat16),
                    (flow.int64, torch.int64), (flow.int32, torch.int32),
                    (flow.bool, torch.bool)):
        mine, theirs = flow.zeros(1, dtype=dt), torch.zeros(1, dtype=tdt)
        assert mine.type().split(".", 1)[1] == theirs.type().split(".", 1)[1]
        assert mine.element_size() == theirs.element_size()


LOSSES = [
    lambda r: F.l1_loss(flow.zeros(2), flow.ones(2), reduction=r),
    lambda r: F.smooth_l1_loss(flow.zeros(2), flow.ones(2), reduction=r),
    lambda r: F.huber_loss(flow.zeros(2), flow.ones(2), reduction=r),
    lambda r: F.binary_cross_entropy(flow.full((2,), 0.5), flow.ones(2), reduction=r),
    lambda r: F.kl_div(flow.zeros(2), flow.ones(2), reduction=r),
    lambda r: F.nll_loss(flow.zeros(2, 3), flow.tensor([0, 1]), reduction=r),
    lambda r: nn.L1Loss(reduction=r)(flow.zeros(2), flow.ones(2)),
    lambda r: nn.BCELoss(reduction=r)(flow.full((2,), 0.5), flow.ones(2)),
]


@pytest.mark.parametrize("loss", LOSSES)
def test_bad_reduction_is_a_value_error_naming_it(loss):
    with pytest.raises(ValueError, match="bogus is not a valid value for reduction"):
        loss("bogus")


def test_bad_arguments_raise_clear_errors():
    x = flow.tensor(A)
    dim_errors = [
        lambda: x.diagonal(0, 0, 2), lambda: x.roll(1, 2), lambda: F.glu(x, 2),
        lambda: x.unflatten(-3, (2, 2)), lambda: x.diff(dim=2),
        lambda: F.cosine_similarity(x, x, dim=2), lambda: x.repeat_interleave(2, dim=-3),
    ]
    for f in dim_errors:
        with pytest.raises(flow.DimOutOfRangeError, match="out of range"):
            f()
    cases = [
        (flow.ShapeError, "1D tensors expected", lambda: flow.dot(x, x)),
        (flow.ShapeError, "inconsistent tensor size", lambda: flow.dot(x[0], x[0, :3])),
        (flow.DTypeError, "same dtype", lambda: flow.dot(x[0], x[0].float())),
        (flow.ShapeError, "Supports 1D or 2D", lambda: flow.diag(flow.zeros(2, 2, 2))),
        (flow.ShapeError, "expected a matrix", lambda: flow.trace(x[0])),
        (flow.InvalidArgumentError, "cannot be identical", lambda: x.diagonal(0, 1, -1)),
        (flow.InvalidArgumentError, "must align", lambda: flow.roll(x, (1, 2), 0)),
        (flow.InvalidArgumentError, "must align", lambda: flow.roll(x, (1, 2))),
        (flow.InvalidArgumentError, "non-negative", lambda: flow.diff(x, -1)),
        (flow.ShapeError, "at least one-dimensional", lambda: flow.diff(flow.tensor(1.0))),
        (flow.InvalidArgumentError, "non-negative", lambda: x.repeat_interleave(-1)),
        (flow.ShapeError, "same size as input",
         lambda: x.repeat_interleave(flow.tensor([1, 2]), dim=0)),
        (flow.ShapeError, "don't multiply up", lambda: x.unflatten(1, (3, 2))),
        (flow.InvalidArgumentError, "only one dimension", lambda: x.unflatten(1, (-1, -1))),
        (flow.DTypeError, "Integer division",
         lambda: flow.addcdiv(flow.tensor([1]), flow.tensor([1]), flow.tensor([2]))),
        (ValueError, "min_val cannot be greater", lambda: F.hardtanh(x, 1.0, -1.0)),
        (flow.InvalidArgumentError, "negative values for beta",
         lambda: F.smooth_l1_loss(x, x, beta=-1.0)),
        (flow.InvalidArgumentError, "non-positive values for delta",
         lambda: F.huber_loss(x, x, delta=0.0)),
        (flow.InvalidArgumentError, "alpha cannot be 0", lambda: F.celu(x, 0.0)),
        (flow.ShapeError, "Halving dimension must be even", lambda: F.glu(x, 0)),
        (flow.ShapeError, "scalars", lambda: F.glu(flow.tensor(1.0))),
        (ValueError, "different to the input size",
         lambda: F.binary_cross_entropy(x.sigmoid(), x.sigmoid()[0])),
        (flow.ShapeError, "do not broadcast", lambda: F.cosine_similarity(x, x[:, :3])),
        (flow.InvalidArgumentError, "does not broadcast",
         lambda: flow.einsum("ij,jk", x, x)),
        (flow.InvalidArgumentError, "does not appear", lambda: flow.einsum("ij->k", x)),
        (flow.InvalidArgumentError, "no ellipsis", lambda: flow.einsum("ijk", x)),
        (flow.InvalidArgumentError, "more than once", lambda: flow.einsum("ij->ii", x)),
        (flow.InvalidArgumentError, "sizes don't match", lambda: flow.einsum("ii", x)),
        (flow.InvalidArgumentError, "not part of any ellipsis", lambda: flow.einsum("i.j", x)),
        (flow.InvalidArgumentError, r"\[a-zA-Z\]", lambda: flow.einsum("i1", x)),
        (flow.InvalidArgumentError, "2 operands", lambda: flow.einsum("ij,jk", x)),
    ]
    for kind, message, f in cases:
        with pytest.raises(kind, match=message):
            f()
    # gflow's errors are RuntimeErrors, as PyTorch raises for these
    assert issubclass(flow.ShapeError, RuntimeError)


MODULES = [
    (nn.L1Loss(reduction="sum"), lambda a, b: F.l1_loss(a, b, reduction="sum"), 2),
    (nn.SmoothL1Loss(beta=0.3), lambda a, b: F.smooth_l1_loss(a, b, beta=0.3), 2),
    (nn.HuberLoss("none", 0.4), lambda a, b: F.huber_loss(a, b, "none", 0.4), 2),
    (nn.KLDivLoss(reduction="batchmean", log_target=True),
     lambda a, b: F.kl_div(a, b, reduction="batchmean", log_target=True), 2),
    (nn.LeakyReLU(0.3), lambda x: F.leaky_relu(x, 0.3), 1),
    (nn.ELU(alpha=0.7), lambda x: F.elu(x, 0.7), 1),
    (nn.SELU(), F.selu, 1),
    (nn.CELU(1.3), lambda x: F.celu(x, 1.3), 1),
    (nn.Softplus(beta=2.0, threshold=3.0), lambda x: F.softplus(x, 2.0, 3.0), 1),
    (nn.Mish(), F.mish, 1),
    (nn.Hardswish(), F.hardswish, 1),
    (nn.Hardsigmoid(), F.hardsigmoid, 1),
    (nn.Hardtanh(-0.5, 0.5), lambda x: F.hardtanh(x, -0.5, 0.5), 1),
    (nn.ReLU6(inplace=True), F.relu6, 1),
    (nn.ReLU(inplace=True), F.relu, 1),
    (nn.SiLU(inplace=True), F.silu, 1),
    (nn.LogSigmoid(), F.logsigmoid, 1),
    (nn.GLU(1), lambda x: F.glu(x, 1), 1),
    (nn.Softsign(), F.softsign, 1),
    (nn.CosineSimilarity(dim=0, eps=1e-6), lambda a, b: F.cosine_similarity(a, b, 0, 1e-6), 2),
    (nn.PairwiseDistance(p=3.0), lambda a, b: F.pairwise_distance(a, b, 3.0), 2),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("module, f, n", MODULES, ids=[type(m[0]).__name__ for m in MODULES])
def test_modules_call_their_functional(module, f, n, kind):
    inputs = [make(a, kind) for a in (X, B)[:n]]
    np.testing.assert_array_equal(module(*inputs).numpy(), f(*inputs).numpy())
    assert list(module.parameters()) == []
    assert type(module).__name__ in repr(module)


def test_module_settings_repr_and_signature_errors():
    assert repr(nn.LeakyReLU(0.2)) == "LeakyReLU(negative_slope=0.2, inplace=False)"
    assert repr(nn.Hardtanh(max_val=2.0)) == "Hardtanh(min_val=-1.0, max_val=2.0, inplace=False)"
    assert nn.Softplus(2.0).beta == 2.0 and nn.Softplus().threshold == 20.0
    with pytest.raises(TypeError):
        nn.GLU(0, 1)
    with pytest.raises(TypeError):
        nn.ELU(alfa=1.0)
    seq = nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True), nn.Unflatten(1, (2, 3)))
    assert seq(flow.randn(5, 4)).shape == flow.Size([5, 2, 3])
    assert repr(nn.Unflatten(1, (2, 3))) == "Unflatten(dim=1, unflattened_size=(2, 3))"


@pytest.mark.parametrize("kind", KINDS)
def test_weighted_loss_modules_keep_weights_as_buffers(kind):
    w = RNG.uniform(0.5, 2.0, 4)
    logits, y = randn(3, 4), (RNG.random((3, 4)) > 0.5).astype(np.float64)
    lp = LOGP
    modules = [
        (nn.NLLLoss(weight=flow.tensor(w), ignore_index=1),
         lambda: F.nll_loss(make(lp, kind), make(CLS, kind), make(w, kind), ignore_index=1),
         (lp, CLS)),
        (nn.BCELoss(weight=flow.tensor(w), reduction="sum"),
         lambda: F.binary_cross_entropy(make(PROB, kind), make(TGT, kind), make(w, kind),
                                        reduction="sum"), (PROB, TGT)),
        (nn.BCEWithLogitsLoss(weight=flow.tensor(w), pos_weight=flow.tensor(w[::-1].copy())),
         lambda: F.binary_cross_entropy_with_logits(make(logits, kind), make(y, kind),
                                                    make(w, kind),
                                                    pos_weight=make(w[::-1].copy(), kind)),
         (logits, y)),
    ]
    for m, f, inputs in modules:
        keys = list(m.state_dict())
        assert keys == (["weight", "pos_weight"] if "pos_weight" in keys else ["weight"])
        if kind != "local":
            m.to_global(placement=P, sbp=flow.sbp.broadcast)
            assert m.weight.is_global
        np.testing.assert_allclose(m(*[make(a, kind) for a in inputs]).numpy(), f().numpy(),
                                   rtol=1e-12)
    assert nn.BCELoss().weight is None and list(nn.BCELoss().state_dict()) == []


def test_bce_with_logits_module_matches_numpy():
    logits, y = randn(3, 4), (RNG.random((3, 4)) > 0.5).astype(np.float64)
    pw = RNG.uniform(0.5, 2.0, 4)
    sig = 1 / (1 + np.exp(-logits))
    want = -(pw * y * np.log(sig) + (1 - y) * np.log(1 - sig)).mean()
    got = nn.BCEWithLogitsLoss(pos_weight=flow.tensor(pw))(flow.tensor(logits), flow.tensor(y))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)


@pytest.mark.parametrize("kind", ["local", "split"])
def test_parameter_containers_register_their_parameters(kind):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([flow.ones(4, dtype=flow.float64), nn.Parameter(
                flow.full((4,), 0.5, dtype=flow.float64))])
            self.table = nn.ParameterDict({"w": flow.tensor(randn(4, 4)),
                                           "b": flow.zeros(4, dtype=flow.float64)})

        def forward(self, x):
            for s in self.scales:
                x = x * s + s
            return x @ self.table["w"] + self.table["b"]

    m = Model()
    names = ["scales.0", "scales.1", "table.w", "table.b"]
    assert [n for n, _ in m.named_parameters()] == names
    assert list(m.state_dict()) == names
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters())
    before = {n: p.numpy().copy() for n, p in m.named_parameters()}
    if kind != "local":
        m.to_global(placement=P, sbp=flow.sbp.broadcast)
        m.table["w"].data = m.table["w"].to_global(sbp=flow.sbp.split(0))
        assert all(p.is_global for p in m.parameters())
        assert m.table["w"].sbp == (flow.sbp.split(0),)
    opt = flow.optim.SGD(m.parameters(), lr=0.1)
    m(make(randn(3, 4), kind)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    opt.step()
    after = dict(m.named_parameters())
    assert all(not np.array_equal(before[n], after[n].numpy()) for n in names)
    fresh = Model()
    fresh.load_state_dict(m.state_dict())
    assert all(np.array_equal(p.numpy(), q.numpy())
               for p, q in zip(fresh.parameters(), m.parameters()))


def test_parameter_container_operations():
    pl = nn.ParameterList()
    pl.append(flow.ones(2)).extend([flow.zeros(3)])
    assert len(pl) == 2 and pl[-1].shape == flow.Size([3])
    pl[0] = flow.ones(1)  # in its place, made a trainable parameter as PyTorch's
    assert isinstance(pl[0], nn.Parameter) and pl[0].requires_grad
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"]
    assert len(pl[1:]) == 1 and isinstance(pl[1:], nn.ParameterList)
    assert [tuple(p.shape) for p in pl] == [(1,), (3,)]
    with pytest.raises(IndexError):
        pl[2]
    with pytest.raises(TypeError):
        pl.append(3.0)
    assert "(1): Parameter of shape (3,)" in repr(pl)
    pd = nn.ParameterDict()
    pd["a"] = flow.ones(2)
    pd.update([("b", flow.zeros(1))])
    assert list(pd) == ["a", "b"] and "a" in pd and len(pd) == 2
    assert list(pd.keys()) == ["a", "b"] and [tuple(v.shape) for v in pd.values()] == [(2,), (1,)]
    assert pd.get("c") is None and pd.pop("a").shape == flow.Size([2])
    assert list(dict(pd.items())) == ["b"] and [n for n, _ in pd.named_parameters()] == ["b"]
    del pd["b"]
    assert len(pd) == 0 and list(pd.parameters()) == []
    with pytest.raises(KeyError):
        pd["x.y"] = flow.ones(1)
    with pytest.raises(TypeError):
        pd["x"] = "not a tensor"


def test_nll_loss_reduction_none_of_one_sample_and_all_ignored():
    lp = flow.tensor(LOGP[0])
    assert F.nll_loss(lp, flow.tensor(2), reduction="none").shape == flow.Size([])
    np.testing.assert_allclose(F.nll_loss(lp, flow.tensor(2)).item(), -LOGP[0, 2], rtol=1e-12)
    out = F.nll_loss(flow.tensor(LOGP), flow.tensor([1, 1, 1]), ignore_index=1)
    assert math.isnan(out.item())  # 0 / 0, as PyTorch


def test_two_ranks(run_job):
    job = run_job(Path(__file__), 2, "--two-ranks")
    assert job.rc == 0, job.stdout[-3000:] + job.stderr[-3000:]
    for r in (0, 1):
        lines = [line for line in job.out[r] if ": " in line]
        assert len(lines) == len(TWO_RANK_CHECKS), job.out[r]
        for line in lines:
            assert line.endswith(": True"), line


def _two_rank_case(name):
    return next(c for c in CASES if c.name == name)


TWO_RANK_CHECKS = ["einsum-bn,anm,bm->ba", "einsum-bhqd,bhkd->bhqk", "cosine_similarity",
                   "kl_div-batchmean", "diag-matrix-offset", "diagonal", "roll-dims",
                   "repeat_interleave-tensor", "hardswish", "nll_loss-weight-mean",
                   "binary_cross_entropy-sum", "diff"]


def _run_two_ranks():
    """Under the launcher with 2 processes: the checks above on inputs split over both ranks
    (the first input on its first even dim, the next on its last, ...), values and gradients
    against NumPy; prints ``name: True`` per check."""
    p2 = flow.placement("cpu", {0: range(2)})
    for name in TWO_RANK_CHECKS:
        case = _two_rank_case(name)
        ts = []
        for i, a in enumerate(case.inputs):
            dims = [d for d in range(a.ndim) if a.shape[d] % 2 == 0][:: -1 if i % 2 else 1]
            sbp = flow.sbp.split(dims[0]) if dims else flow.sbp.broadcast
            ts.append(flow.tensor(a, placement=p2, sbp=sbp, requires_grad=i in case.grad))
        assert any(t.sbp != (flow.sbp.broadcast,) for t in ts), name
        out = case.call(FLOW, *ts)
        ref = np.asarray(case.ref(*case.inputs))
        ok = np.allclose(out.numpy(), ref, rtol=1e-10, atol=1e-12)
        up = np.ones(ref.shape)
        (out * flow.tensor(up, placement=p2, sbp=flow.sbp.broadcast)).sum().backward()
        for i in case.grad:
            want = central_grad(lambda *arrays: np.asarray(case.ref(*arrays)).sum(),
                                case.inputs, i)
            ok = ok and np.allclose(ts[i].grad.numpy(), want, rtol=1e-6, atol=1e-7)
        print(f"{name}: {ok}", flush=True)


if __name__ == "__main__" and "--two-ranks" in sys.argv:
    _run_two_ranks()


def test_bce_with_logits_gradient_at_zero_and_shape_checks():
    """The gradient of ``binary_cross_entropy_with_logits`` is ``sigmoid(x) - y`` also at
    ``x = 0`` (a zero-initialised head), where ``|x|`` and ``max(x, 0)`` have no derivative;
    targets of another shape or batch size are refused, as PyTorch's."""
    x = flow.tensor([0.0, 1.5, -2.0, 0.0], dtype=flow.float64, requires_grad=True)
    y = flow.tensor([1.0, 0.0, 1.0, 0.0], dtype=flow.float64)
    F.binary_cross_entropy_with_logits(x, y, reduction="sum").backward()
    xs = np.array([0.0, 1.5, -2.0, 0.0])
    np.testing.assert_allclose(x.grad.numpy(), 1 / (1 + np.exp(-xs)) - y.numpy(), rtol=1e-12)
    x.grad = None
    F.binary_cross_entropy_with_logits(x, y, pos_weight=flow.tensor(2.0, dtype=flow.float64),
                                       reduction="sum").backward()
    s = 1 / (1 + np.exp(-xs))
    np.testing.assert_allclose(x.grad.numpy(), (1 - y.numpy()) * s - 2 * y.numpy() * (1 - s),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="must be the same as input size"):
        F.binary_cross_entropy_with_logits(flow.randn(3, 4), flow.rand(4))
    with pytest.raises(ValueError, match="match target batch_size"):
        F.nll_loss(flow.randn(3, 4).log_softmax(1), flow.tensor([0, 1]))
    with pytest.raises(ValueError, match="match target batch_size"):
        F.cross_entropy(flow.randn(3, 4), flow.tensor([0, 1]), reduction="none")


def test_composed_functions_at_their_edges():
    """``float_power`` with a number base, ``take_along_dim`` with negative indices (from the
    end, as PyTorch's), ``sinh``/``cosh`` of bools (as floats) and ``movedim`` of a 0-d
    tensor."""
    t = flow.tensor([1.0, 2.0])
    assert flow.float_power(2, t).tolist() == [2.0, 4.0]
    assert flow.float_power(2, t).dtype == flow.float64
    x = flow.tensor([[1.0, 2.0, 3.0]])
    assert x.take_along_dim(flow.tensor([[-1, 0]]), 1).tolist() == [[3.0, 1.0]]
    assert x.take_along_dim(flow.tensor([-2])).tolist() == [2.0]
    b = flow.tensor([True, False])
    np.testing.assert_allclose(b.sinh().numpy(), [math.sinh(1.0), 0.0], rtol=1e-6)
    np.testing.assert_allclose(b.cosh().numpy(), [math.cosh(1.0), 1.0], rtol=1e-6)
    assert flow.tensor(1.5).movedim(0, -1).item() == 1.5


def test_repeat_interleave_and_tensor_split_keyword_forms():
    """``repeat_interleave(counts)`` (positions repeated), ``output_size=``, and
    ``tensor_split(sections=)`` / ``tensor_split(indices=)``, as PyTorch's."""
    assert flow.repeat_interleave(flow.tensor([1, 2])).tolist() == [0, 1, 1]
    x = flow.tensor([[1, 2], [3, 4]])
    assert x.repeat_interleave(2, dim=0, output_size=4).tolist() == [[1, 2], [1, 2], [3, 4],
                                                                      [3, 4]]
    with pytest.raises(RuntimeError):
        x.repeat_interleave(2, dim=0, output_size=5)
    t = flow.arange(7)
    assert [p.tolist() for p in t.tensor_split(sections=3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [p.tolist() for p in t.tensor_split(indices=[1, 5])] == [[0], [1, 2, 3, 4], [5, 6]]
    with pytest.raises(TypeError):
        t.tensor_split(3, sections=3)


def test_log2_log10_exp2_are_exact_at_powers():
    """``log10(1000)`` is 3 and ``exp2(10)`` 1024 exactly (composed through ``ln`` they were a
    few ulp off, so ``floor(log10(1000))`` gave 2), in float32 and float64; gradients are the
    functions' derivatives there too."""
    for dt in (flow.float32, flow.float64):
        x = flow.tensor([1000.0, 1e10, 1.0, 0.125, 2.0**-20, 7.0], dtype=dt)
        assert x.log10().tolist()[:3] == [3.0, 10.0, 0.0]
        assert x.log2().tolist()[3:5] == [-3.0, -20.0]
        assert flow.tensor([10.0, -3.0, 0.0], dtype=dt).exp2().tolist() == [1024.0, 0.125, 1.0]
        np.testing.assert_allclose(x.log10().numpy()[5], math.log10(7.0), rtol=1e-6)
    x = flow.tensor([1000.0, 5.0], dtype=flow.float64, requires_grad=True)
    x.log10().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 / (np.array([1000.0, 5.0]) * math.log(10)),
                               rtol=1e-12)
    e = flow.tensor([3.0, 0.5], dtype=flow.float64, requires_grad=True)
    e.exp2().sum().backward()
    np.testing.assert_allclose(e.grad.numpy(), 2 ** np.array([3.0, 0.5]) * math.log(2),
                               rtol=1e-12)
