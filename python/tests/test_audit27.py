"""Audit 27: ``flow.comm.broadcast`` copies bit for bit from ``src`` (A8); ``reduce`` and
``scatter`` refuse a root outside the job (C1); ``nn.parallel.DistributedDataParallel`` runs
the module on each rank's own batch and returns its local outputs unchanged, of any shape, with
PyTorch DDP's gradients (A4, A5); ``copy.deepcopy`` and ``pickle`` of placements, SBPs, dtypes,
tensors and modules (d).

The multi-rank checks run this file as a script under the launcher (``python -m
gflow.distributed.launch --nproc_per_node 2 test_audit27.py [port]``): each rank prints
``check <name>: ok`` or ``check <name>: FAIL ...``, and the tests read those lines. References
are plain gflow/NumPy computations on each rank (a local replica of the module); with torch,
PyTorch's own DDP on Gloo is compared too (skipped when torch is missing)."""

import copy
import math
import pickle
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn

P0 = flow.placement("cpu", [0])


def bits(t):
    """The bytes of ``t``'s value (so -0.0 and NaN payloads compare)."""
    a = np.ascontiguousarray(t.detach().numpy())
    return a.dtype.str, a.shape, a.tobytes()


DTYPES = [flow.float32, flow.float64, flow.float16, flow.bfloat16, flow.int64, flow.int32,
          flow.bool]


def sample(dtype):
    if dtype == flow.bool:
        return flow.tensor([[True, False, True]])
    if dtype in (flow.int64, flow.int32):
        return flow.tensor([[-3, 0, 7]], dtype=dtype)
    return flow.tensor([[1.5, -0.0, float("nan")], [float("-inf"), 2.0, -3.25]], dtype=dtype)


# ------------------------------------------------------------- (d) placements, SBPs, dtypes

SIMPLE = [P0, flow.placement("cpu", [[0]]), flow.sbp.split(0), flow.sbp.split(2),
          flow.sbp.broadcast, flow.sbp.partial_sum, flow.sbp.partial_max,
          flow.sbp.partial_min] + DTYPES


@pytest.mark.parametrize("obj", SIMPLE, ids=repr)
def test_deepcopy_and_pickle_of_placement_sbp_dtype(obj):
    for copied in (copy.deepcopy(obj), pickle.loads(pickle.dumps(obj)),
                   pickle.loads(pickle.dumps(obj, protocol=2))):
        assert type(copied) is type(obj)
        assert copied == obj and repr(copied) == repr(obj)


def test_deepcopy_of_a_config_holding_placements():
    cfg = {"placement": P0, "sbp": (flow.sbp.split(1),), "dtype": flow.bfloat16, "lr": 0.1}
    for copied in (copy.deepcopy(cfg), pickle.loads(pickle.dumps(cfg))):
        assert copied == cfg
    x = flow.ones(2, 4, placement=copy.deepcopy(P0), sbp=copy.deepcopy(flow.sbp.split(1)))
    assert x.placement == P0 and x.sbp == (flow.sbp.split(1),)


# ----------------------------------------------------------------------- (d) local tensors

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_local_tensor_deepcopy_is_a_detached_copy(dtype):
    t = sample(dtype)
    c = copy.deepcopy(t)
    assert type(c) is flow.Tensor and c.dtype == dtype and bits(c) == bits(t)
    assert not c.requires_grad
    with flow.no_grad():
        t.copy_(flow.zeros(*t.shape, dtype=dtype))
    assert bits(c) != bits(t)  # its own storage


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_local_tensor_pickles_as_its_value(dtype):
    t = sample(dtype)
    for proto in (2, pickle.HIGHEST_PROTOCOL):
        u = pickle.loads(pickle.dumps(t, protocol=proto))
        assert type(u) is flow.Tensor and u.dtype == dtype and not u.is_global
        assert bits(u) == bits(t)
        assert u.requires_grad is False


def test_tensor_deepcopy_and_pickle_keep_requires_grad_and_grad():
    t = flow.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (t * t).sum().backward()
    c = copy.deepcopy(t)
    assert c.requires_grad and c.is_leaf and c.grad is not None
    assert c.grad.tolist() == [2.0, -4.0, 6.0] and c.grad is not t.grad
    u = pickle.loads(pickle.dumps(t))
    assert u.requires_grad and u.is_leaf and u.grad is None  # pickle leaves .grad, as PyTorch
    (c * 3).sum().backward()  # a leaf of its own graph
    assert c.grad.tolist() == [5.0, -1.0, 9.0] and t.grad.tolist() == [2.0, -4.0, 6.0]
    # a tensor made by an operation copies as a detached leaf requiring a gradient
    y = t * 2
    cy = copy.deepcopy(y)
    assert cy.is_leaf and cy.requires_grad and cy.tolist() == [2.0, -4.0, 6.0]


def test_zero_dim_and_empty_tensors_copy():
    for t in (flow.tensor(3.5), flow.zeros(0, 3), flow.ones(2, 0, dtype=flow.int64)):
        for c in (copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
            assert tuple(c.shape) == tuple(t.shape) and c.dtype == t.dtype
            assert bits(c) == bits(t)


def test_parameter_stays_a_parameter():
    p = nn.Parameter(flow.tensor([0.5, -0.0]))
    frozen = nn.Parameter(flow.tensor([1.0]), requires_grad=False)
    for f in (copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))):
        q, r = f(p), f(frozen)
        assert type(q) is nn.Parameter and q.requires_grad and q.is_leaf and bits(q) == bits(p)
        assert type(r) is nn.Parameter and not r.requires_grad
    # shared references stay shared
    pair = copy.deepcopy([p, p])
    assert pair[0] is pair[1] and pair[0] is not p


# ---------------------------------------------------------------------- (d) global tensors

def test_global_tensor_deepcopy_keeps_placement_and_sbp():
    for sbp in (flow.sbp.split(0), flow.sbp.broadcast, flow.sbp.partial_sum):
        g = flow.randn(4, 3, placement=P0, sbp=sbp, requires_grad=True)
        c = copy.deepcopy(g)
        assert c.is_global and c.placement == P0 and c.sbp == g.sbp
        assert c.requires_grad and c.is_leaf
        assert np.array_equal(c.numpy(), g.numpy())
        with flow.no_grad():
            g.add_(1.0)
        assert not np.array_equal(c.numpy(), g.numpy())
    gp = nn.Parameter(flow.randn(2, placement=P0, sbp=flow.sbp.broadcast))
    cp = copy.deepcopy(gp)
    assert type(cp) is nn.Parameter and cp.is_global and cp.sbp == (flow.sbp.broadcast,)


def test_global_tensor_pickle_is_refused_with_a_pointer_to_save():
    g = flow.ones(2, placement=P0, sbp=flow.sbp.broadcast)
    with pytest.raises(TypeError, match=r"global tensor.*flow\.save"):
        pickle.dumps(g)
    with pytest.raises(TypeError, match="flow.save"):
        pickle.dumps({"w": g})


# ------------------------------------------------------------------------------ (d) modules

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.body = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.GELU(),
                                  nn.LayerNorm(6), nn.Linear(6, 4), nn.RMSNorm(4, eps=1e-3))
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("scale", flow.tensor(2.0))
        self.register_buffer("cache", flow.zeros(3), persistent=False)
        self.note = {"kind": "net", "placement": P0}

    def forward(self, idx):
        return self.head(self.body(self.emb(idx)) * self.scale)


def params_of(m):
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_module_copy_is_an_independent_equal_model(how):
    flow.manual_seed(0)
    m = Net()
    idx = flow.tensor([[1, 2, 3], [4, 5, 6]])
    m(idx.reshape(-1))  # training mode: the running statistics move
    m.eval()
    m2 = copy.deepcopy(m) if how == "deepcopy" else pickle.loads(pickle.dumps(m))
    assert type(m2) is Net and m2 is not m and not m2.training
    before = params_of(m)
    assert list(params_of(m2)) == list(before)
    for k, v in params_of(m2).items():
        assert np.array_equal(v, before[k]), k
    assert m2.head.weight is m2.emb.weight  # still tied
    assert m2.head.weight is not m.head.weight
    assert isinstance(m2.head.weight, nn.Parameter)
    assert len(m2.parameters()) == len(m.parameters())
    assert [n for n, _ in m2.named_buffers()] == [n for n, _ in m.named_buffers()]
    assert "cache" not in m2.state_dict() and m2.cache is m2._buffers["cache"]
    assert m2.note == m.note and m2.body[5].eps == 1e-3
    x = idx.reshape(-1)
    assert np.array_equal(m2(x).detach().numpy(), m(x).detach().numpy())
    # a step on the copy leaves the original alone (an EMA copy)
    opt = flow.optim.SGD(m2.parameters(), lr=0.5)
    m2.train()
    m2(x).square().mean().backward()
    opt.step()
    assert all(p.grad is None for p in m.parameters())
    for k, v in params_of(m).items():
        assert np.array_equal(v, before[k]), k
    assert not np.array_equal(m2.emb.weight.detach().numpy(), before["emb.weight"])


def test_ema_update_from_a_deepcopy():
    flow.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    x = flow.randn(5, 3)
    ref = [p.detach().numpy().copy() for p in model.parameters()]
    for _ in range(2):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        with flow.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.9).add_(p.detach() * 0.1)
        ref = [0.9 * r + 0.1 * p.detach().numpy() for r, p in zip(ref, model.parameters())]
    for e, r in zip(ema.parameters(), ref):
        assert np.allclose(e.numpy(), r, rtol=1e-6, atol=1e-7)
        assert not e.requires_grad


# ------------------------------------------------------------------------- multi-rank job

@pytest.fixture(scope="module")
def job():
    from conftest import launch

    with socket.socket() as s:  # a free port for torch.distributed's own rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return launch(Path(__file__), 2, str(port), timeout=240)


def checks(job, prefix):
    got = {}
    for r in (0, 1):
        for line in job.out.get(r, []):
            if line.startswith("check " + prefix):
                name, _, verdict = line[len("check "):].partition(": ")
                got[(r, name)] = verdict
    assert got, f"no {prefix!r} checks printed:\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}"
    bad = {k: v for k, v in got.items() if v != "ok"}
    assert not bad, bad
    assert job.rc == 0, job.stdout[-3000:] + job.stderr[-3000:]
    return {name for _, name in got}


def test_global_tensor_deepcopy_on_two_ranks(job):
    assert checks(job, "copy.global") == {"copy.global"}


def test_comm_broadcast_is_a_bitwise_copy_from_src(job):
    assert {"comm.broadcast", "comm.broadcast.src0", "comm.scatter"} <= checks(job, "comm.b")\
        | checks(job, "comm.s")


def test_comm_reduce_and_scatter_refuse_a_root_outside_the_job(job):
    assert {"comm.root.reduce", "comm.root.scatter", "comm.root.after"} <= checks(job, "comm.root")


def test_ddp_returns_each_ranks_own_loss(job):
    assert {"ddp.loss", "ddp.loss.grad"} <= checks(job, "ddp.loss")


def test_ddp_outputs_of_any_shape_are_the_local_results(job):
    assert {"ddp.shape.t", "ddp.shape.nested", "ddp.shape.grad"} <= checks(job, "ddp.shape")


def test_ddp_trains_as_mean_of_local_gradients(job):
    assert {"ddp.train", "ddp.bn", "ddp.tied", "ddp.global_input", "ddp.deepcopy"} <= \
        checks(job, "ddp.") - {"ddp.loss", "ddp.loss.grad"}


def test_ddp_equals_torch_ddp_on_gloo(job):
    line = [v for v in job.out.get(0, []) if v.startswith("torch: ")]
    if line and line[0] == "torch: missing":
        pytest.skip("torch is not installed")
    assert {"torch.step0", "torch.step2", "torch.params", "torch.buffers"} <= \
        checks(job, "torch.")


# ------------------------------------------------------------------ run by the launcher

def _rank_main(port):
    r, n = flow.env.get_rank(), flow.env.get_world_size()

    def check(name, ok, detail=""):
        print(f"check {name}: {'ok' if ok else 'FAIL ' + str(detail)}", flush=True)

    def attempt(name, f):
        try:
            f()
        except Exception as ex:  # a failure is reported, the other checks still run
            import traceback

            check(name, False, f"{type(ex).__name__}: {ex} {traceback.format_exc()[-600:]!r}")

    # ---- A8: broadcast copies bit for bit (and costs no sum)
    def comm_broadcast():
        payload = np.array([0x7FC00123], dtype=np.uint32).view(np.float32)[0]
        mine = np.array([-0.0, payload, 1.0 + r, -0.0 if r else 0.0], dtype=np.float32)
        t = flow.tensor(mine)
        src_bits = bits(flow.tensor(np.array([-0.0, payload, 2.0, -0.0], np.float32)))
        flow.comm.broadcast(t, 1)
        check("comm.broadcast", bits(t) == src_bits, t.numpy().view(np.uint32))
        u = flow.tensor([-0.0, 5.0 * r], dtype=flow.bfloat16)
        flow.comm.broadcast(u, 0)
        ok = np.signbit(u.numpy()).tolist() == [True, False] and u.tolist() == [-0.0, 0.0]
        i = flow.tensor([r, -r, 2 ** 40 + r], dtype=flow.int64)
        flow.comm.broadcast(i, 0)
        check("comm.broadcast.src0", ok and i.tolist() == [0, 0, 2 ** 40], (u, i))

    def comm_scatter():
        s = flow.full((2,), 9.0)
        parts = [flow.tensor([-0.0, 10.0 * k]) for k in range(n)] if r == 1 else None
        flow.comm.scatter(s, parts, src=1)
        check("comm.scatter", np.signbit(s.numpy()).tolist() == [True, False]
              and s.tolist() == [0.0, 10.0 * r], s)

    # ---- C1: a root outside the job is a ValueError, as broadcast's
    def comm_root():
        t = flow.ones(2)
        msgs = []
        for bad in (5, n, -1):
            try:
                flow.comm.reduce(t, bad)
            except ValueError as ex:
                msgs.append(str(ex))
        check("comm.root.reduce", len(msgs) == 3 and all(
            m == f"reduce: dst {b} is not a rank of a job of {n}" for m, b in zip(msgs, (5, n, -1)))
              and t.tolist() == [1.0, 1.0], msgs)
        u = flow.zeros(2)
        msgs = []
        for bad in (7, -1):
            try:
                flow.comm.scatter(u, None, src=bad)
            except ValueError as ex:
                msgs.append(str(ex))
        check("comm.root.scatter", msgs == [f"scatter: src {b} is not a rank of a job of {n}"
                                            for b in (7, -1)] and u.tolist() == [0.0, 0.0], msgs)
        try:
            flow.comm.broadcast(t, 9)
            bmsg = None
        except ValueError as ex:
            bmsg = str(ex)
        # nothing was half-sent: the next collectives line up
        a = flow.tensor([1.0 + r])
        flow.comm.all_reduce(a)
        d = flow.tensor([2.0 * r])
        flow.comm.reduce(d, 1)
        check("comm.root.after", bmsg == f"broadcast: src 9 is not a rank of a job of {n}"
              and a.tolist() == [n * (n + 1) / 2]
              and d.tolist() == ([float(n * (n - 1))] if r == 1 else [2.0 * r]), (bmsg, a, d))

    def replica_of(ddp, make):
        """A local copy of ``make()`` holding ``ddp``'s (rank 0's) parameters and buffers."""
        rep = make()
        with flow.no_grad():
            for a, b in zip(rep.state_dict(keep_vars=True).values(),
                            ddp.module.state_dict(keep_vars=True).values()):
                a.copy_(b.to_local())
        return rep

    def mean_grads(rep):
        """Each replica parameter's gradient averaged over the ranks (all_reduce / n)."""
        out = []
        for p in rep.parameters():
            g = p.grad.detach().clone()
            flow.comm.all_reduce(g)
            out.append((g / n).numpy())
        return out

    rng = np.random.default_rng(100 + r)  # each rank's own batches
    rows = 3 + 2 * r  # uneven batch sizes

    # ---- A4: a loss computed in forward is the rank's own
    class LossIn(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x, y):
            return ((self.lin(x) - y) ** 2).mean()

    def ddp_loss():
        flow.manual_seed(3)
        make = LossIn
        ddp = nn.parallel.DistributedDataParallel(make())
        rep = replica_of(ddp, make)
        x = flow.tensor(rng.standard_normal((rows, 3)).astype(np.float32))
        y = flow.tensor(rng.standard_normal((rows, 2)).astype(np.float32))
        loss = ddp(x, y)
        ref = rep(x, y)
        check("ddp.loss", not loss.is_global and loss.dim() == 0
              and bits(loss) == bits(ref), (float(loss), float(ref)))
        loss.backward()
        ref.backward()
        want = mean_grads(rep)
        got = [p.grad.to_local().numpy() for p in ddp.module.parameters()]
        check("ddp.loss.grad", all(p.grad.sbp == (flow.sbp.broadcast,)
                                   for p in ddp.module.parameters())
              and all(np.allclose(a, b, rtol=1e-6, atol=1e-7) for a, b in zip(got, want)),
              (got, want))

    # ---- A5: outputs whose dim 0 is not the batch come back as computed
    class Shapes(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x, scale=1.0):
            y = self.lin(x) * scale
            return {"t": y.t(), "pair": (y.sum(0), y.mean()), "rows": x.shape[0], "y": y}

    def ddp_shape():
        flow.manual_seed(4)
        ddp = nn.parallel.DistributedDataParallel(Shapes())
        rep = replica_of(ddp, Shapes)
        x = flow.tensor(rng.standard_normal((rows, 3)).astype(np.float32))
        out = ddp(x, scale=flow.tensor(2.0))
        ref = rep(x, scale=flow.tensor(2.0))
        check("ddp.shape.t", tuple(out["t"].shape) == (2, rows) and not out["t"].is_global
              and bits(out["t"]) == bits(ref["t"]), (out["t"].shape, ref["t"].shape))
        check("ddp.shape.nested", out["rows"] == rows and isinstance(out["pair"], tuple)
              and tuple(out["pair"][0].shape) == (2,) and out["pair"][1].dim() == 0
              and bits(out["pair"][0]) == bits(ref["pair"][0])
              and bits(out["pair"][1]) == bits(ref["pair"][1]), out)
        loss = out["t"].square().sum() + out["pair"][1]
        loss.backward()
        (ref["t"].square().sum() + ref["pair"][1]).backward()
        want = mean_grads(rep)
        got = [p.grad.to_local().numpy() for p in ddp.module.parameters()]
        check("ddp.shape.grad", all(np.allclose(a, b, rtol=1e-6, atol=1e-6)
                                    for a, b in zip(got, want)), (got, want))

    # ---- training: several SGD steps equal the mean-of-local-gradients reference
    def make_mlp():
        return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))

    def ddp_train():
        flow.manual_seed(5 + r)  # every rank builds its own: DDP takes rank 0's
        ddp = nn.parallel.DistributedDataParallel(make_mlp())
        rep = replica_of(ddp, make_mlp)
        opt = flow.optim.SGD(ddp.parameters(), lr=0.1)
        ok = True
        for step in range(3):
            x = flow.tensor(rng.standard_normal((rows, 4)).astype(np.float32))
            y = flow.tensor(rng.standard_normal((rows, 2)).astype(np.float32))
            opt.zero_grad()
            out = ddp(x)
            ok &= tuple(out.shape) == (rows, 2) and not out.is_global
            nn.MSELoss()(out, y).backward()
            opt.step()
            rep.zero_grad()
            nn.MSELoss()(rep(x), y).backward()
            with flow.no_grad():
                for p, g in zip(rep.parameters(), mean_grads(rep)):
                    p.sub_(flow.tensor(g) * 0.1)
        same = all(np.allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
                   for a, b in zip(rep.parameters(), ddp.module.parameters()))
        check("ddp.train", ok and same)

    # ---- BatchNorm: this rank's batch statistics; buffers rank 0's after the call
    def ddp_bn():
        def make():
            return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))

        flow.manual_seed(6)
        ddp = nn.parallel.DistributedDataParallel(make())
        rep = replica_of(ddp, make)
        ok = True
        for _ in range(2):
            x = flow.tensor(rng.standard_normal((rows, 3)).astype(np.float32))
            out, ref = ddp(x), rep(x)
            ok &= np.allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
            for b, rb in zip(ddp.module.buffers(), rep.buffers()):
                ok &= b.is_global and b.sbp == (flow.sbp.broadcast,)
                zero = rb.detach().clone()
                flow.comm.broadcast(zero, 0)  # rank 0's replica
                ok &= np.allclose(b.to_local().numpy(), zero.numpy(), rtol=1e-6)
                with flow.no_grad():
                    rb.copy_(zero)  # PyTorch's broadcast at the next forward
            ok &= ddp.module[1].running_mean is ddp.module[1]._buffers["running_mean"]
        check("ddp.bn", ok)

    # ---- tied parameters: one gradient, summed over both uses
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3, bias=False)
            self.b = nn.Linear(3, 3, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x).relu())

    def ddp_tied():
        flow.manual_seed(7)
        ddp = nn.parallel.DistributedDataParallel(Tied())
        rep = replica_of(ddp, Tied)
        x = flow.tensor(rng.standard_normal((rows, 3)).astype(np.float32))
        ddp(x).sum().backward()
        rep(x).sum().backward()
        (want,) = mean_grads(rep)
        w = ddp.module.a.weight
        check("ddp.tied", w is ddp.module.b.weight and isinstance(w, nn.Parameter)
              and np.allclose(w.grad.to_local().numpy(), want, rtol=1e-6, atol=1e-6))

    def ddp_global_input():
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(2, 2))
        g = flow.ones(2 * n, 2, placement=flow.placement("cpu", list(range(n))),
                      sbp=flow.sbp.split(0))
        try:
            ddp(g)
            check("ddp.global_input", False, "accepted")
        except TypeError as ex:
            check("ddp.global_input", "local" in str(ex), ex)
        # the module's parameters are back in place after the refusal
        check("ddp.global_input", isinstance(ddp.module.weight, nn.Parameter)
              and ddp.module.weight.is_global)

    def ddp_deepcopy():
        flow.manual_seed(8)
        ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(2, 3),
                                                                nn.BatchNorm1d(3)))
        c = copy.deepcopy(ddp)
        ok = all(q.is_global and q.placement == p.placement and q.sbp == p.sbp and q is not p
                 and np.array_equal(q.numpy(), p.numpy())
                 for p, q in zip(ddp.parameters(), c.parameters()))
        x = flow.tensor(rng.standard_normal((rows, 2)).astype(np.float32))
        ok &= np.array_equal(c(x).detach().numpy(), ddp(x).detach().numpy())
        check("ddp.deepcopy", ok)

    # ---- (d) deepcopy of global tensors: same placement, SBP and components
    def copy_global():
        world = flow.placement("cpu", list(range(n)))
        ok = True
        for sbp in (flow.sbp.split(0), flow.sbp.broadcast, flow.sbp.partial_sum,
                    flow.sbp.partial_max, flow.sbp.partial_min):
            x = flow.tensor([[1.0 + r, -0.0], [2.0 * r, 3.0]]).to_global(placement=world,
                                                                        sbp=sbp)
            x.requires_grad_(True)
            c = copy.deepcopy(x)
            ok &= c.placement == world and c.sbp == (sbp,) and c.requires_grad and c.is_leaf
            ok &= bits(c.to_local()) == bits(x.to_local()) and np.array_equal(c.numpy(),
                                                                              x.numpy())
        one = flow.placement("cpu", [1])  # rank 0 holds no part
        y = flow.ones(3, placement=one, sbp=flow.sbp.broadcast)
        c = copy.deepcopy(y)
        ok &= c.placement == one and c.numpy().tolist() == ([1.0] * 3 if r == 1 else [])
        check("copy.global", ok)

    for name, f in [("copy.global", copy_global), ("comm.broadcast", comm_broadcast), ("comm.scatter", comm_scatter),
                    ("comm.root", comm_root), ("ddp.loss", ddp_loss), ("ddp.shape", ddp_shape),
                    ("ddp.train", ddp_train), ("ddp.bn", ddp_bn), ("ddp.tied", ddp_tied),
                    ("ddp.global_input", ddp_global_input), ("ddp.deepcopy", ddp_deepcopy)]:
        attempt(name, f)

    # ---- PyTorch's own DDP on Gloo, the same model, batches and steps
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("torch: missing", flush=True)
        return
    print("torch: present", flush=True)
    attempt("torch.step0", lambda: _against_torch(torch, dist, port, r, n, check))


def _against_torch(torch, dist, port, r, n, check):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r,
                            world_size=n)

    class F(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.bn, self.l2 = nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)

        def forward(self, x, y):
            out = self.l2(self.bn(self.l1(x)).relu())
            return out.t(), ((out - y) ** 2).mean()

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(5, 8)
            self.bn = torch.nn.BatchNorm1d(8)
            self.l2 = torch.nn.Linear(8, 2)

        def forward(self, x, y):
            out = self.l2(torch.relu(self.bn(self.l1(x))))
            return out.t(), ((out - y) ** 2).mean()

    flow.manual_seed(11 + r)
    fd = nn.parallel.DistributedDataParallel(F())
    tm = T()
    with torch.no_grad():
        for (k, p) in tm.state_dict(keep_vars=True).items():
            p.copy_(torch.from_numpy(np.array(fd.module.state_dict()[k].to_local().numpy())))
    td = torch.nn.parallel.DistributedDataParallel(tm)
    fo = flow.optim.SGD(fd.parameters(), lr=0.1, momentum=0.9)
    to = torch.optim.SGD(td.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(500 + r)
    for step in range(3):
        rows = 4 + 2 * r
        x = rng.standard_normal((rows, 5)).astype(np.float32)
        y = rng.standard_normal((rows, 2)).astype(np.float32)
        fo.zero_grad()
        to.zero_grad()
        fout, floss = fd(flow.tensor(x), flow.tensor(y))
        tout, tloss = td(torch.from_numpy(x), torch.from_numpy(y))
        ok = tuple(fout.shape) == tuple(tout.shape) == (2, rows)
        ok &= np.allclose(fout.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
        ok &= math.isclose(float(floss), float(tloss.detach()), rel_tol=1e-5, abs_tol=1e-7)
        (fout.sum() * 0.1 + floss).backward()
        (tout.sum() * 0.1 + tloss).backward()
        for k, p in td.module.named_parameters():
            q = dict(fd.module.named_parameters())[k]
            ok &= np.allclose(q.grad.to_local().numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-6)
        fo.step()
        to.step()
        check(f"torch.step{step}", ok, (float(floss), float(tloss.detach())))
    fp = dict(fd.module.named_parameters())
    check("torch.params", all(
        np.allclose(fp[k].to_local().numpy(), p.detach().numpy(), rtol=1e-4, atol=1e-6)
        for k, p in td.module.named_parameters()))
    ok = True
    for k, b in td.module.named_buffers():
        b = b.clone()
        dist.broadcast(b, 0)  # PyTorch's DDP broadcasts rank 0's at its next forward
        got = dict(fd.module.named_buffers())[k].to_local().numpy()
        ok &= np.allclose(got, b.numpy(), rtol=1e-5, atol=1e-6)
    check("torch.buffers", ok)
    del td, to, tm  # PyTorch's DDP before its process group
    import gc

    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]) if len(sys.argv) > 1 else 29611)
