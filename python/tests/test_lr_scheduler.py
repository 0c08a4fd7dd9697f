"""``flow.optim.lr_scheduler``: every scheduler's learning rates over 30 steps on three param
groups against the closed-form formula (plain Python, float64) and, where torch is installed,
against ``torch.optim.lr_scheduler`` on a torch optimizer with the same groups (to 1e-12); a
resume through ``state_dict()`` continues the same sequence; a real model steps with the
scheduled learning rate (and cycled momentum / betas); bad input fails as in PyTorch."""

import math
import warnings

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn
from gflow.optim import lr_scheduler as S

BASE = [0.1, 0.05, 0.02]
N = 30
# the scheduler warns when stepped before the optimizer, as PyTorch's; these tests step it alone
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")


def gflow_opt(kind="sgd"):
    groups = [{"params": [nn.Parameter(flow.zeros(1))], "lr": b} for b in BASE]
    if kind == "adam":
        return flow.optim.Adam(groups, lr=0.1)
    return flow.optim.SGD(groups, lr=0.1, momentum=0.9)


def torch_opt(torch, kind="sgd"):
    groups = [{"params": [torch.zeros(1, requires_grad=True)], "lr": b} for b in BASE]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.1)
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9)


def run(sched, opt, steps, metrics=None, key=None):
    """The learning rates (or the group values of ``key``) after the constructor and after
    each of ``steps`` steps: an array [steps + 1, groups]."""
    def now():
        if key is None:
            lrs = list(sched.get_last_lr())
            assert lrs == [g["lr"] for g in opt.param_groups]
            return lrs
        return [key(g) for g in opt.param_groups]

    out = [now()]
    for t in range(steps):
        if metrics is None:
            sched.step()
        else:
            sched.step(metrics[t])
        out.append(now())
    return np.array(out, dtype=np.float64)


def table(ref, steps=N, bases=BASE):
    """``ref(t, i, base)`` for every step and group."""
    return np.array([[ref(t, i, b) for i, b in enumerate(bases)] for t in range(steps + 1)])


# --- closed forms, written from the schedules' definitions --------------------------------

LAMBDAS = [lambda t: 0.95 ** t, lambda t: 1.0 / (1 + t), lambda t: 1.0 + 0.1 * t]


def mult_factor(t):
    return 0.9 if t % 2 else 0.97


def cos_anneal(base, low, t, period):
    return low + (base - low) * (1 + math.cos(math.pi * t / period)) / 2


def cyclic_ref(t, i, up, down, scale):
    lo, hi = CYC_BASE[i], CYC_MAX[i]
    pos = t % (up + down)
    frac = pos / up if pos <= up else 1 - (pos - up) / down
    return lo + (hi - lo) * frac * scale(t)


def cyclic_momentum_ref(t, up, down, scale):
    pos = t % (up + down)
    frac = pos / up if pos <= up else 1 - (pos - up) / down
    return 0.9 - (0.9 - 0.8) * frac * scale(t)


def onecycle_ref(t, high, three_phase=False, linear=False, low_m=0.85, high_m=0.95):
    """(lr, momentum) of the 1cycle policy: piecewise annealing between the phase ends."""
    start_lr, total, pct = high / 25.0, 30, 0.3
    end_lr = start_lr / 1e4
    if three_phase:
        phases = [(pct * total - 1, start_lr, high, high_m, low_m),
                  (2 * pct * total - 2, high, start_lr, low_m, high_m),
                  (total - 1, start_lr, end_lr, high_m, high_m)]
    else:
        phases = [(pct * total - 1, start_lr, high, high_m, low_m),
                  (total - 1, high, end_lr, low_m, high_m)]
    begin = 0.0
    for k, (end, a, b, ma, mb) in enumerate(phases):
        if t <= end or k == len(phases) - 1:
            p = (t - begin) / (end - begin)
            if linear:
                return a + (b - a) * p, ma + (mb - ma) * p
            w = (1 + math.cos(math.pi * p)) / 2
            return b + (a - b) * w, mb + (ma - mb) * w
        begin = end


def warm_restart_ref(t, base, T0=5, mult=2, low=0.01):
    period = T0
    while t >= period:
        t -= period
        period *= mult
    return cos_anneal(base, low, t, period)


def plateau_ref(metrics, bases, factor, patience, threshold, cooldown, min_lrs, eps=1e-8):
    """ReduceLROnPlateau's rule ('min', relative threshold) as a plain loop."""
    lrs, best, bad, cool = list(bases), math.inf, 0, 0
    out = [list(lrs)]
    for m in metrics:
        if m < best * (1 - threshold):
            best, bad = m, 0
        else:
            bad += 1
        if cool > 0:
            cool, bad = cool - 1, 0
        if bad > patience:
            for i, lr in enumerate(lrs):
                new = max(lr * factor, min_lrs[i])
                if lr - new > eps:
                    lrs[i] = new
            cool, bad = cooldown, 0
        out.append(list(lrs))
    return np.array(out)


CYC_BASE = [0.01, 0.005, 0.002]
CYC_MAX = [0.1, 0.05, 0.02]
ONE_MAX = [1.0, 0.5, 0.2]
METRICS = [10, 9, 9.95, 9.5, 9.2, 9.1, 8, 8, 8, 8, 8, 8, 7.99, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6,
           6, 6, 6, 6, 6]
PLATEAU_MIN = [0.01, 0.0, 0.001]

# name: (factory(module, optimizer), closed form ref(t, i, base), steps)
CASES = {
    "lambda": (lambda M, o: M.LambdaLR(o, LAMBDAS), lambda t, i, b: b * LAMBDAS[i](t), N),
    "multiplicative": (lambda M, o: M.MultiplicativeLR(o, mult_factor),
                       lambda t, i, b: b * math.prod(mult_factor(k) for k in range(1, t + 1)), N),
    "step": (lambda M, o: M.StepLR(o, 7, gamma=0.5), lambda t, i, b: b * 0.5 ** (t // 7), N),
    "multistep": (lambda M, o: M.MultiStepLR(o, [3, 8, 8, 20], gamma=0.5),
                  lambda t, i, b: b * 0.5 ** sum(m <= t for m in [3, 8, 8, 20]), N),
    "constant": (lambda M, o: M.ConstantLR(o, factor=0.25, total_iters=6),
                 lambda t, i, b: b * (0.25 if t < 6 else 1.0), N),
    "linear": (lambda M, o: M.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=10),
               lambda t, i, b: b * (0.2 + 0.7 * min(t, 10) / 10), N),
    "exponential": (lambda M, o: M.ExponentialLR(o, gamma=0.93), lambda t, i, b: b * 0.93 ** t,
                    N),
    "polynomial": (lambda M, o: M.PolynomialLR(o, total_iters=12, power=2.0),
                   lambda t, i, b: b * (1 - min(t, 12) / 12) ** 2, N),
    "cosine": (lambda M, o: M.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
               lambda t, i, b: cos_anneal(b, 0.001, t, 10), N),
    "chained": (lambda M, o: M.ChainedScheduler([M.ConstantLR(o, factor=0.5, total_iters=4),
                                                 M.ExponentialLR(o, gamma=0.9)]),
                lambda t, i, b: b * 0.9 ** t * (0.5 if t < 4 else 1.0), N),
    "sequential": (lambda M, o: M.SequentialLR(
        o, [M.LinearLR(o, start_factor=0.1, total_iters=5), M.CosineAnnealingLR(o, T_max=20)],
        milestones=[5]),
        lambda t, i, b: b * (0.1 + 0.9 * t / 5) if t < 5 else cos_anneal(b, 0.0, t - 5, 20), N),
    "cyclic": (lambda M, o: M.CyclicLR(o, CYC_BASE, CYC_MAX, step_size_up=4, step_size_down=6),
               lambda t, i, b: cyclic_ref(t, i, 4, 6, lambda t: 1.0), N),
    "cyclic_triangular2": (lambda M, o: M.CyclicLR(o, CYC_BASE, CYC_MAX, step_size_up=5,
                                                   mode="triangular2"),
                           lambda t, i, b: cyclic_ref(t, i, 5, 5, lambda t: 0.5 ** (t // 10)), N),
    "cyclic_exp_range": (lambda M, o: M.CyclicLR(o, CYC_BASE, CYC_MAX, step_size_up=3,
                                                 mode="exp_range", gamma=0.95),
                         lambda t, i, b: cyclic_ref(t, i, 3, 3, lambda t: 0.95 ** t), N),
    "onecycle": (lambda M, o: M.OneCycleLR(o, max_lr=ONE_MAX, total_steps=30),
                 lambda t, i, b: onecycle_ref(t, ONE_MAX[i])[0], N - 1),
    "onecycle_3phase_linear": (lambda M, o: M.OneCycleLR(o, max_lr=ONE_MAX, total_steps=30,
                                                         anneal_strategy="linear",
                                                         three_phase=True),
                               lambda t, i, b: onecycle_ref(t, ONE_MAX[i], True, True)[0], N - 1),
    "warm_restarts": (lambda M, o: M.CosineAnnealingWarmRestarts(o, T_0=5, T_mult=2,
                                                                 eta_min=0.01),
                      lambda t, i, b: warm_restart_ref(t, b), N),
    "warm_restarts_t_mult_1": (lambda M, o: M.CosineAnnealingWarmRestarts(o, T_0=7),
                               lambda t, i, b: cos_anneal(b, 0.0, t % 7, 7), N),
}


def cosine_decay(t, b, steps=20, alpha=0.1):
    if t >= steps:
        return b * alpha
    return b * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * t / steps)) + alpha)


# OneFlow's own: no torch counterpart
ONEFLOW_CASES = {
    "cosine_decay": (lambda o: S.CosineDecayLR(o, decay_steps=20, alpha=0.1),
                     lambda t, i, b: cosine_decay(t, b)),
    "warmup_linear": (lambda o: S.WarmupLR(o, warmup_factor=0.5, warmup_iters=5),
                      lambda t, i, b: b * (0.5 + 0.5 * t / 5) if t < 5 else b),
    "warmup_constant": (lambda o: S.WarmupLR(o, warmup_factor=0.25, warmup_iters=6,
                                             warmup_method="constant"),
                        lambda t, i, b: b * 0.25 if t < 6 else b),
    # the linear warmup rises to where the wrapped scheduler is at step warmup_iters
    "warmup_cosine_decay": (
        lambda o: S.WarmupLR(S.CosineDecayLR(o, decay_steps=20, alpha=0.1), warmup_factor=0.5,
                             warmup_iters=4),
        lambda t, i, b: (b * (0.5 + (cosine_decay(4, b) / b - 0.5) * t / 4) if t < 4
                         else cosine_decay(t, b))),
    # warmup_prefix: the wrapped scheduler starts its own step 0 when the warmup ends
    "warmup_prefix_cosine_decay": (
        lambda o: S.WarmupLR(S.CosineDecayLR(o, decay_steps=20, alpha=0.1), warmup_factor=0.5,
                             warmup_iters=4, warmup_prefix=True),
        lambda t, i, b: b * (0.5 + 0.5 * t / 4) if t < 4 else cosine_decay(t - 4, b)),
    "warmup_constant_step": (
        lambda o: S.WarmupLR(S.StepLR(o, 7, gamma=0.5), warmup_factor=0.1, warmup_iters=3,
                             warmup_method="constant"),
        lambda t, i, b: b * 0.1 if t < 3 else b * 0.5 ** (t // 7)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sequence_against_closed_form(name):
    factory, ref, steps = CASES[name]
    opt = gflow_opt()
    got = run(factory(S, opt), opt, steps)
    # the recursive (chainable) forms gather rounding over the steps: 1e-9 relative
    np.testing.assert_allclose(got, table(ref, steps), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("name", sorted(ONEFLOW_CASES))
def test_oneflow_sequence_against_closed_form(name):
    factory, ref = ONEFLOW_CASES[name]
    opt = gflow_opt()
    np.testing.assert_allclose(run(factory(opt), opt, N), table(ref), rtol=1e-12, atol=1e-15)


def test_oneflow_documented_examples():
    # OneFlow's WarmupLR docstring: lr 0.001, warmup_factor 0.5 over 5 steps, linear
    opt = flow.optim.SGD([nn.Parameter(flow.zeros(1))], lr=0.001)
    got = run(S.WarmupLR(opt, warmup_factor=0.5, warmup_iters=5), opt, 6)[:, 0]
    np.testing.assert_allclose(got, [0.0005, 0.0006, 0.0007, 0.0008, 0.0009, 0.001, 0.001])
    # ... and its CosineDecayLR(decay_steps=5, alpha=0.1) after 2 warmup steps: 0.000689 and
    # 0.000410 at steps 2 and 3 (six digits, truncated)
    opt = flow.optim.SGD([nn.Parameter(flow.zeros(1))], lr=0.001)
    sched = S.WarmupLR(S.CosineDecayLR(opt, decay_steps=5, alpha=0.1), warmup_factor=0.5,
                       warmup_iters=2)
    got = run(sched, opt, 3)[:, 0]
    assert got[0] == 0.0005
    np.testing.assert_allclose(got[2:], [0.000689, 0.000410], atol=1e-6)  # as printed there


@pytest.mark.parametrize("name", sorted(CASES))
def test_sequence_as_torch(name):
    torch = pytest.importorskip("torch")
    factory, _, steps = CASES[name]
    opt, topt = gflow_opt(), torch_opt(torch)
    ours = run(factory(S, opt), opt, steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = run(factory(torch.optim.lr_scheduler, topt), topt, steps)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kind,key", [("sgd", lambda g: g["momentum"]),
                                      ("adam", lambda g: g["betas"][0])])
@pytest.mark.parametrize("name", ["cyclic", "cyclic_triangular2", "onecycle",
                                  "onecycle_3phase_linear"])
def test_cycled_momentum(name, kind, key):
    factory, _, steps = CASES[name]
    opt = gflow_opt(kind)
    got = run(factory(S, opt), opt, steps, key=key)
    if name.startswith("cyclic"):
        up, scale = (4, lambda t: 1.0) if name == "cyclic" else (5, lambda t: 0.5 ** (t // 10))
        down = 6 if name == "cyclic" else 5
        ref = table(lambda t, i, b: cyclic_momentum_ref(t, up, down, scale), steps)
    else:
        three = name != "onecycle"
        ref = table(lambda t, i, b: onecycle_ref(t, ONE_MAX[i], three, three)[1], steps)
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    if kind == "adam":
        assert all(g["betas"][1] == 0.999 for g in opt.param_groups)
    torch = pytest.importorskip("torch")
    topt = torch_opt(torch, kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = run(factory(torch.optim.lr_scheduler, topt), topt, steps, key=key)
    np.testing.assert_allclose(got, theirs, rtol=1e-12, atol=0)


def plateau(M, opt, **kw):
    kw = dict(dict(factor=0.5, patience=2, threshold=0.01, cooldown=1, min_lr=PLATEAU_MIN), **kw)
    return M.ReduceLROnPlateau(opt, **kw)


def test_plateau_against_reference():
    opt = gflow_opt()
    got = run(plateau(S, opt), opt, N, metrics=METRICS)
    np.testing.assert_allclose(got, plateau_ref(METRICS, BASE, 0.5, 2, 0.01, 1, PLATEAU_MIN),
                               rtol=1e-15)
    assert got[-1][1] < got[0][1] / 8  # it did reduce, several times


@pytest.mark.parametrize("kw", [{}, {"mode": "max", "threshold_mode": "abs", "cooldown": 0},
                                {"min_lr": 0.03, "eps": 1e-3}])
def test_plateau_as_torch(kw):
    torch = pytest.importorskip("torch")
    metrics = METRICS if kw.get("mode") != "max" else [-m for m in METRICS]
    metrics = [flow.tensor(m) for m in metrics] if kw else metrics  # a 0-d tensor as metric
    opt, topt = gflow_opt(), torch_opt(torch)
    ours = run(plateau(S, opt, **kw), opt, N, metrics=metrics)
    theirs = run(plateau(torch.optim.lr_scheduler, topt, **kw), topt, N,
                 metrics=[float(m) for m in metrics])
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)


ALL = {**{k: (lambda f: lambda o: f(S, o))(f) for k, (f, _, _) in CASES.items()},
       **{k: f for k, (f, _) in ONEFLOW_CASES.items()},
       "plateau": lambda o: plateau(S, o)}


@pytest.mark.parametrize("name", sorted(ALL))
def test_resume_continues_the_sequence(name):
    factory = ALL[name]
    steps = CASES[name][2] if name in CASES else N
    metrics = METRICS if name == "plateau" else None
    opt = gflow_opt()
    sched = factory(opt)
    whole = run(sched, opt, steps, metrics=metrics)
    # the first 12 steps again, then a fresh optimizer and scheduler take their state dicts
    opt1 = gflow_opt()
    sched1 = factory(opt1)
    run(sched1, opt1, 12, metrics=metrics)
    opt2 = gflow_opt()
    sched2 = factory(opt2)
    opt2.load_state_dict(opt1.state_dict())
    sched2.load_state_dict(sched1.state_dict())
    assert getattr(sched2, "last_epoch", 12) == 12
    rest = run(sched2, opt2, steps - 12, metrics=metrics[12:] if metrics else None)
    np.testing.assert_array_equal(rest, whole[12:])


def test_resume_with_last_epoch():
    # PyTorch's other way: the optimizer's groups carry initial_lr and the scheduler is made
    # with last_epoch; its constructor's step keeps the loaded lr and counts on (PyTorch 2.x)
    opt = gflow_opt()
    run(S.CosineAnnealingLR(opt, T_max=10), opt, 7)
    saved = opt.state_dict()
    opt2 = gflow_opt()
    opt2.load_state_dict(saved)
    assert [g["initial_lr"] for g in opt2.param_groups] == BASE
    sched = S.CosineAnnealingLR(opt2, T_max=10, last_epoch=7)
    assert sched.last_epoch == 8
    got = run(sched, opt2, 5)
    np.testing.assert_allclose(got[0], [cos_anneal(b, 0.0, 7, 10) for b in BASE], rtol=1e-12)
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(gflow_opt(), 3, last_epoch=4)
    torch = pytest.importorskip("torch")
    topt = torch_opt(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=10), topt, 7)
        topt2 = torch_opt(torch)
        topt2.load_state_dict(topt.state_dict())
        theirs = run(torch.optim.lr_scheduler.CosineAnnealingLR(topt2, T_max=10, last_epoch=7),
                     topt2, 5)
    np.testing.assert_allclose(got, theirs, rtol=1e-12, atol=0)


def test_step_with_epoch_uses_closed_form():
    opt = gflow_opt()
    sched = S.StepLR(opt, 3, gamma=0.5)
    with pytest.warns(UserWarning, match="epoch parameter"):
        sched.step(7)
    assert sched.get_last_lr() == [b * 0.25 for b in BASE] and sched.last_epoch == 7


def test_warnings_as_torch():
    opt = gflow_opt()
    sched = S.ExponentialLR(opt, 0.5)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()
    with pytest.warns(UserWarning, match="get_last_lr"):
        sched.get_lr()
    opt = gflow_opt()
    sched = S.ExponentialLR(opt, 0.5)
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()


def test_lambda_state_of_callable_objects():
    class Decay:
        def __init__(self):
            self.rate = 0.5

        def __call__(self, t):
            return self.rate ** t

    opt = gflow_opt()
    fn = Decay()
    sched = S.LambdaLR(opt, fn)
    fn.rate = 0.25
    state = sched.state_dict()
    assert state["lr_lambdas"] == [{"rate": 0.25}] * 3 and "optimizer" not in state
    fresh = Decay()
    again = S.LambdaLR(gflow_opt(), fresh)
    again.load_state_dict(state)
    assert fresh.rate == 0.25
    assert S.LambdaLR(gflow_opt(), LAMBDAS).state_dict()["lr_lambdas"] == [None] * 3


def linear_model():
    flow.manual_seed(0)  # the same weights whatever ran before (float32 error depends on them)
    model = nn.Linear(3, 2)
    x = flow.tensor(np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float32))
    return model, x


def test_model_steps_with_the_scheduled_lr():
    model, x = linear_model()
    opt = flow.optim.SGD(model.parameters(), lr=0.2)
    sched = S.LambdaLR(opt, lambda t: 1.0 / (t + 1))
    for t in range(5):
        lr = opt.param_groups[0]["lr"]
        assert lr == pytest.approx(0.2 / (t + 1), rel=1e-15)
        opt.zero_grad()
        (model(x) ** 2).sum().backward()
        before = [p.numpy().copy() for p in model.parameters()]
        grads = [p.grad.numpy().copy() for p in model.parameters()]
        opt.step()
        for p, b, g in zip(model.parameters(), before, grads):
            np.testing.assert_allclose(p.numpy(), b - np.float32(lr) * g, rtol=1e-6, atol=1e-7)
        sched.step()
    group = opt.param_groups[0]
    assert group["initial_lr"] == 0.2 and group["lr"] == pytest.approx(0.2 / 6, rel=1e-15)
    assert opt.param_groups[0] is group  # the same dict each time, as PyTorch's


def test_cycled_momentum_reaches_the_update():
    # OneCycleLR cycles SGD's momentum each step: the update follows PyTorch's rule with that
    # step's momentum on the running buffer: b = mu_t b + g, p -= lr_t b
    model, x = linear_model()
    opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=0.5, total_steps=8)
    params = [p.numpy().astype(np.float64) for p in model.parameters()]
    bufs = [None, None]
    for _ in range(8):
        lr, mu = opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]
        opt.zero_grad()
        (model(x) ** 2).sum().backward()
        grads = [p.grad.numpy().astype(np.float64) for p in model.parameters()]
        opt.step()
        for k, g in enumerate(grads):
            bufs[k] = g if bufs[k] is None else mu * bufs[k] + g
            params[k] = params[k] - lr * bufs[k]
        sched.step()
        for p, ref in zip(model.parameters(), params):
            np.testing.assert_allclose(p.numpy(), ref, rtol=1e-4, atol=1e-5)
    assert opt.param_groups[0]["momentum"] != 0.9


def test_cycled_betas_as_torch_adam():
    torch = pytest.importorskip("torch")
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]])
    w = nn.Parameter(flow.tensor(w0))
    tw = torch.tensor(w0, requires_grad=True)
    opt = flow.optim.Adam([w], lr=0.01)
    topt = torch.optim.Adam([tw], lr=0.01)
    sched = S.OneCycleLR(opt, max_lr=0.05, total_steps=6)
    tsched = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.05, total_steps=6)
    for step in range(6):
        opt.zero_grad()
        topt.zero_grad()
        ((w * w).sum() * (step + 1)).backward()
        ((tw * tw).sum() * (step + 1)).backward()
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        assert opt.param_groups[0]["betas"] == topt.param_groups[0]["betas"]
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-10)


def test_optimizer_state_with_a_scheduler(tmp_path):
    model, x = linear_model()
    opt = flow.optim.Adam(model.parameters(), lr=0.01)
    sched = S.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    for _ in range(3):
        opt.zero_grad()
        (model(x) ** 2).sum().backward()
        opt.step()
        sched.step()
    group = opt.param_groups[0]
    # keys a scheduler (or a user) adds stay, however they are written
    group.setdefault("note", 1)
    group.update(tag=2.5)
    assert opt.param_groups[0]["note"] == 1 and opt.param_groups[0]["tag"] == 2.5
    sd = opt.state_dict()
    assert {"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"} <= set(
        sd["param_groups"][0])
    assert sd["param_groups"][0]["betas"][0] == group["betas"][0] != 0.9
    del group["note"]
    flow.save({"optim": opt.state_dict(), "epoch": sched.last_epoch}, tmp_path / "c")
    fresh_model, _ = linear_model()
    fresh = flow.optim.Adam(fresh_model.parameters(), lr=1.0)
    loaded = flow.load(tmp_path / "c")
    fresh.load_state_dict(loaded["optim"])
    g2 = fresh.param_groups[0]
    assert g2["lr"] == group["lr"] and g2["initial_lr"] == group["initial_lr"]
    assert g2["betas"] == group["betas"] and isinstance(g2["betas"], tuple)
    for i, k in ((0, "exp_avg"), (1, "exp_avg_sq"), (0, "step")):
        np.testing.assert_array_equal(fresh.state_dict()["state"][i][k].numpy(),
                                      sd["state"][i][k].numpy())
    # the resumed pair takes the same next step
    resumed = S.OneCycleLR(fresh, max_lr=0.1, total_steps=10, last_epoch=loaded["epoch"])
    sched.step()
    assert resumed.get_last_lr() == sched.get_last_lr()
    # state: per parameter, as PyTorch's optimizer.state
    p0 = model.weight
    np.testing.assert_array_equal(opt.state[p0]["exp_avg"].numpy(),
                                  sd["state"][0]["exp_avg"].numpy())


def test_bad_input_as_torch():
    opt = gflow_opt()
    with pytest.raises(TypeError, match="is not an Optimizer"):
        S.StepLR(object(), 3)
    with pytest.raises(TypeError, match="is not an Optimizer"):
        S.LambdaLR([1, 2], lambda t: 1.0)
    with pytest.raises(ValueError, match="mode avg is unknown"):
        S.ReduceLROnPlateau(opt, mode="avg")
    with pytest.raises(ValueError, match="threshold mode"):
        S.ReduceLROnPlateau(opt, threshold_mode="x")
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        S.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="expected 3 min_lrs"):
        S.ReduceLROnPlateau(opt, min_lr=[0.1])
    sched = S.OneCycleLR(gflow_opt(), max_lr=0.1, total_steps=4)
    for _ in range(4):
        sched.step()
    with pytest.raises(ValueError, match="Tried to step 5 times"):
        sched.step()
    with pytest.raises(ValueError, match="total_steps OR"):
        S.OneCycleLR(opt, max_lr=0.1)
    with pytest.raises(ValueError, match="pct_start"):
        S.OneCycleLR(opt, max_lr=0.1, total_steps=10, pct_start=1)
    with pytest.raises(ValueError, match="anneal_strategy"):
        S.OneCycleLR(opt, max_lr=0.1, total_steps=10, anneal_strategy="step")
    with pytest.raises(ValueError, match="max_lr must have the same length"):
        S.OneCycleLR(opt, max_lr=[0.1, 0.2], total_steps=10)
    with pytest.raises(ValueError, match="mode is invalid"):
        S.CyclicLR(opt, 0.01, 0.1, mode="saw")
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        S.LinearLR(opt, start_factor=0)
    with pytest.raises(ValueError, match="Constant multiplicative factor"):
        S.ConstantLR(opt, factor=2)
    with pytest.raises(ValueError, match="positive integer T_0"):
        S.CosineAnnealingWarmRestarts(opt, T_0=0)
    with pytest.raises(ValueError, match="Expected 3 lr_lambdas"):
        S.LambdaLR(opt, [lambda t: 1.0])
    with pytest.raises(TypeError, match="lr_lambda should be a function"):
        S.MultiplicativeLR(opt, 0.5)
    with pytest.raises(ValueError, match="number of milestone"):
        S.SequentialLR(opt, [S.StepLR(opt, 2), S.StepLR(opt, 3)], milestones=[])
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        S.ChainedScheduler([S.ReduceLROnPlateau(opt)])
    with pytest.raises(ValueError, match="same optimizer"):
        S.SequentialLR(opt, [S.StepLR(gflow_opt(), 2)], milestones=[])
    with pytest.raises(ValueError, match="at least one"):
        S.ChainedScheduler([])


def test_bad_input_oneflow():
    opt = gflow_opt()
    with pytest.raises(ValueError, match="LRScheduler or an Optimizer"):
        S.WarmupLR(object())
    with pytest.raises(ValueError, match="'linear' or 'constant'"):
        S.WarmupLR(opt, warmup_method="cosine")
    with pytest.raises(ValueError, match="warmup_iters can't be equal to 0"):
        S.WarmupLR(opt, warmup_iters=0)
    with pytest.raises(TypeError, match="closed form"):
        S.WarmupLR(S.MultiplicativeLR(opt, mult_factor))
    with pytest.raises(ValueError, match="decay_steps"):
        S.CosineDecayLR(opt, decay_steps=0)


def test_cycle_momentum_needs_momentum():
    # an optimizer with neither momentum nor betas (as PyTorch's check, on defaults)
    params = [nn.Parameter(flow.zeros(1))]
    bare = flow.optim.Optimizer(params, flow._gflow.Optimizer.sgd, 0.1)
    with pytest.raises(ValueError, match="momentum or beta1"):
        S.CyclicLR(bare, 0.01, 0.1)
    with pytest.raises(ValueError, match="momentum or beta1"):
        S.OneCycleLR(bare, 0.1, total_steps=5)
    sched = S.CyclicLR(bare, 0.01, 0.1, step_size_up=2, cycle_momentum=False)
    sched.step()
    assert sched.get_last_lr() == [pytest.approx(0.055)] and "momentum" not in bare.param_groups[0]


def test_exports():
    assert flow.optim.lr_scheduler is S
    assert issubclass(S._LRScheduler, S.LRScheduler)
    for name in S.__all__:
        assert isinstance(getattr(S, name), type)
