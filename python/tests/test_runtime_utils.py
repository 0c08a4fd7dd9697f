"""The top-level non-operator functions (``gflow/_runtime.py``) and ``flow.cuda``, against
NumPy, hand-worked values and PyTorch's where torch is importable."""

import os

import numpy as np
import pytest

import gflow as flow

FLOATS = ["float16", "float32", "float64"]


@pytest.mark.parametrize("name", FLOATS)
def test_finfo_equals_numpy(name):
    f, n = flow.finfo(getattr(flow, name)), np.finfo(getattr(np, name))
    assert (f.bits, f.eps, f.max, f.min, f.tiny, f.smallest_normal) == (
        n.bits, float(n.eps), float(n.max), float(n.min), float(n.tiny), float(n.tiny))
    assert f.resolution == 10.0 ** -n.precision and f.dtype == name


def test_finfo_bfloat16_iinfo_and_default():
    b = flow.finfo(flow.bfloat16)
    assert (b.bits, b.eps, b.tiny, b.resolution) == (16, 2.0 ** -7, 2.0 ** -126, 0.01)
    assert b.max == (2 - 2.0 ** -7) * 2.0 ** 127 == -b.min
    assert flow.finfo() == flow.finfo(flow.float32)
    for name in ("int32", "int64"):
        i, n = flow.iinfo(getattr(flow, name)), np.iinfo(getattr(np, name))
        assert (i.bits, i.max, i.min, i.dtype) == (n.bits, int(n.max), int(n.min), name)
    with pytest.raises(TypeError, match="floating point input type"):
        flow.finfo(flow.int64)
    with pytest.raises(TypeError, match="integer input type"):
        flow.iinfo(flow.float32)
    assert repr(flow.finfo(flow.float16)) == (
        "finfo(resolution=0.001, min=-65504, max=65504, eps=0.000976562, "
        "smallest_normal=6.10352e-05, tiny=6.10352e-05, dtype=float16)")
    assert repr(flow.iinfo(flow.int32)) == "iinfo(min=-2.14748e+09, max=2.14748e+09, dtype=int32)"


def test_finfo_iinfo_equal_torch():
    torch = pytest.importorskip("torch")
    for name in FLOATS + ["bfloat16"]:
        f, t = flow.finfo(getattr(flow, name)), torch.finfo(getattr(torch, name))
        assert (f.bits, f.eps, f.max, f.min, f.tiny, f.resolution, f.dtype) == (
            t.bits, t.eps, t.max, t.min, t.tiny, t.resolution, t.dtype)
        assert repr(f) == repr(t)
    for name in ("int32", "int64"):
        i, t = flow.iinfo(getattr(flow, name)), torch.iinfo(getattr(torch, name))
        assert (i.bits, i.max, i.min, i.dtype, repr(i)) == (t.bits, t.max, t.min, t.dtype,
                                                          repr(t))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_equals_numpy_with_gradients(indexing):
    a, b, c = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0]), np.array([0.5, 1.5, 2.5, 3.5])
    ts = [flow.tensor(v, requires_grad=True) for v in (a, b, c)]
    grids = flow.meshgrid(*ts, indexing=indexing)
    expect = np.meshgrid(a, b, c, indexing=indexing)
    for g, e in zip(grids, expect):
        assert tuple(g.shape) == e.shape
        np.testing.assert_array_equal(g.numpy(), e)
    w = [np.random.default_rng(i).standard_normal(e.shape) for i, e in enumerate(expect)]
    sum((g * flow.tensor(wi)).sum() for g, wi in zip(grids, w)).backward()
    # d/dt_i: the weights summed over every axis but t_i's
    axis = {0: 1, 1: 0, 2: 2} if indexing == "xy" else {0: 0, 1: 1, 2: 2}
    for i, t in enumerate(ts):
        others = tuple(d for d in range(3) if d != axis[i])
        np.testing.assert_allclose(t.grad.numpy(), w[i].sum(axis=others), rtol=1e-12)
    # a list works too, and two tensors; no indexing warns and is "ij", as PyTorch
    x, y = flow.meshgrid([flow.tensor(a), flow.tensor(b)], indexing="xy")
    assert tuple(x.shape) == (2, 3)
    with pytest.warns(UserWarning, match="indexing"):
        x, y = flow.meshgrid(flow.tensor(a), flow.tensor(b))
    assert tuple(x.shape) == (3, 2)
    with pytest.raises(RuntimeError, match="0D or 1D"):
        flow.meshgrid(flow.zeros(2, 2), indexing="ij")


def test_logspace():
    np.testing.assert_allclose(flow.logspace(0, 3, 4).numpy(), [1, 10, 100, 1000])
    np.testing.assert_allclose(flow.logspace(-1.5, 2.2, 5, base=2).numpy(),
                               np.logspace(-1.5, 2.2, 5, base=2), rtol=1e-6)
    assert flow.logspace(0, 1, 3).dtype == flow.float32
    assert flow.logspace(0, 1, 3, dtype=flow.float64).dtype == flow.float64
    # integer dtypes: endpoints truncated, float powers truncated (PyTorch 2.15's values)
    assert flow.logspace(0.1, 2.9, 5, dtype=flow.int32).tolist() == [1, 3, 10, 31, 100]
    assert flow.logspace(1, 2, 1).tolist() == [10.0] and flow.logspace(1, 2, 0).numel() == 0
    assert flow.logspace(0, 2, 3, requires_grad=True).requires_grad


def test_logspace_equals_torch():
    """Within a few units in the last place of torch 2.15's values (its kernel's rounding of
    the exponents is not reproduced bit for bit; integer results truncate those values)."""
    torch = pytest.importorskip("torch")
    cases = [(0, 3, 4, 10.0), (-1.5, 2.2, 7, 2.0), (0.3, -4.1, 9, 10.0), (1, 1, 3, 3.0),
             (0.1, 2.9, 6, 10.0), (0.123, 7.77, 33, 10.0), (-3.3, 3.3, 101, np.e)]
    rtol = {"float32": 2.5e-7, "float64": 5e-16, "float16": 4e-3, "int64": 2e-7,
            "int32": 2e-7}
    for name, tol in rtol.items():
        for s, e, n, base in cases:
            ours = flow.logspace(s, e, n, base, dtype=getattr(flow, name)).numpy()
            theirs = torch.logspace(s, e, n, base, dtype=getattr(torch, name)).numpy()
            assert ours.dtype == theirs.dtype
            np.testing.assert_allclose(ours.astype(float), theirs.astype(float), rtol=tol,
                                       err_msg=f"{name} {s} {e} {n} {base}")


def test_as_tensor_concat_and_predicates():
    t = flow.tensor([1.0, 2.0])
    assert flow.as_tensor(t) is t and flow.as_tensor(t, dtype=flow.float32) is t
    assert flow.as_tensor(t, dtype=flow.float64).dtype == flow.float64
    a = np.arange(3, dtype=np.int32)
    assert flow.as_tensor(a).dtype == flow.int32 and flow.as_tensor(a).tolist() == [0, 1, 2]
    assert flow.as_tensor([1.5]).dtype == flow.float32
    assert flow.as_tensor([1, 2], dtype=flow.float64).dtype == flow.float64
    assert flow.concat([t, t]).tolist() == [1, 2, 1, 2]
    assert flow.concatenate([t.reshape(1, 2), t.reshape(1, 2)], dim=1).tolist() == [[1, 2, 1, 2]]
    assert flow.is_floating_point(t) and not flow.is_floating_point(flow.tensor([1]))
    assert flow.is_nonzero(flow.tensor([3])) and not flow.is_nonzero(flow.tensor(0.0))
    with pytest.raises(RuntimeError, match="no values"):
        flow.is_nonzero(flow.tensor([]))
    with pytest.raises(RuntimeError, match="more than one value"):
        flow.is_nonzero(t)


def test_default_dtype():
    assert flow.get_default_dtype() == flow.float32
    flow.set_default_dtype(flow.float32)
    with pytest.raises(TypeError, match="only floating-point types"):
        flow.set_default_dtype(flow.int64)
    with pytest.raises(flow.DTypeError, match="cannot change"):
        flow.set_default_dtype(flow.float64)
    assert flow.tensor([1.0]).dtype == flow.get_default_dtype()


def test_num_threads():
    n = flow.get_num_threads()
    env = os.environ.get("RAYON_NUM_THREADS", "")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert n == (int(env) if env.isdigit() and int(env) > 0 else cpus)
    flow.set_num_threads(n)
    with pytest.raises(RuntimeError, match="RAYON_NUM_THREADS"):
        flow.set_num_threads(n + 1)


def test_seeds_and_generators():
    g = flow.manual_seed(7)
    assert g is flow.default_generator and flow.initial_seed() == 7
    x = flow.randn(4).numpy().copy()
    s = flow.seed()
    assert flow.initial_seed() == s and 0 <= s < 2 ** 63
    flow.manual_seed(7)
    np.testing.assert_array_equal(flow.randn(4).numpy(), x)
    assert flow.manual_seed(-1).initial_seed() == 2 ** 64 - 1  # as PyTorch: modulo 2**64
    with pytest.raises(ValueError):
        flow.manual_seed(2 ** 64)
    g = flow.Generator().manual_seed(3)
    state = g.get_state()
    first = g._randperm(20)
    assert g._randperm(20) != first
    assert g.set_state(state)._randperm(20) == first and g.initial_seed() == 3
    # PyTorch 2.15: torch.randperm(10, generator=torch.Generator().manual_seed(7))
    assert flow.Generator().manual_seed(7)._randperm(10) == [5, 0, 3, 4, 1, 7, 9, 6, 8, 2]


def test_generator_equals_torch():
    torch = pytest.importorskip("torch")
    for seed in (0, 1, 42, 2 ** 40 + 7, 2 ** 64 - 1):
        ours, theirs = flow.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        for n in (1, 2, 10, 1000):
            assert ours._randperm(n) == torch.randperm(n, generator=theirs).tolist()
        assert ours._int64() == torch.empty((), dtype=torch.int64).random_(
            generator=theirs).item()


def test_cuda_consistent_with_devices():
    n = flow.cuda.device_count()
    flow.cuda.manual_seed_all(5)
    a = flow.randn(3).numpy().copy()
    flow.cuda.manual_seed(5)
    np.testing.assert_array_equal(flow.randn(3).numpy(), a)
    assert flow.cuda.empty_cache() is None
    flow.cuda.synchronize()
    with pytest.raises(flow.DeviceError):
        flow.cuda.set_device(n)  # one past the last
    flow.cuda.set_device(-1)  # ignored, as PyTorch
    if not flow.cuda.is_available():
        assert n == 0
        with pytest.raises(flow.DeviceError, match="no CUDA device"):
            flow.cuda.current_device()
        with pytest.raises(flow.DeviceError):
            flow.cuda.get_device_name(0)
        with pytest.raises(flow.DeviceError, match="this process has 0 CUDA devices"):
            flow.cuda.set_device(0)
        return
    own = flow.cuda.current_device()
    assert n >= 1 and 0 <= own < n
    flow.cuda.set_device(own)
    flow.cuda.set_device(f"cuda:{own}")
    assert isinstance(flow.cuda.get_device_name(), str) and flow.cuda.get_device_name(own)
    y = flow.ones(4, device="cuda") * 2
    flow.cuda.synchronize()
    assert y.numpy().tolist() == [2.0] * 4



def test_seed_and_distributed_sampler_across_ranks(tmp_path):
    from conftest import launch

    script = tmp_path / "ranks.py"
    script.write_text(
        "import gflow as flow\n"
        "from gflow.utils.data import DataLoader, DistributedSampler\n"
        "s = flow.seed()\n"
        "sampler = DistributedSampler(range(10), seed=7)\n"
        "print(s, flow.initial_seed() == s, sampler.rank, sampler.num_replicas, list(sampler))\n"
        "print([b.tolist() for b in DataLoader(range(6), batch_size=4, shuffle=True)])\n")
    job = launch(script, 2, timeout=120)
    assert job.rc == 0, job.stderr
    seeds = [job.out[r][0].split()[:2] for r in (0, 1)]
    assert seeds[0] == seeds[1] and seeds[0][1] == "True"  # rank 0's seed, on every rank
    # rank r of 2 takes every 2nd index of PyTorch's permutation for seed 7 (padded to 10)
    perm = [5, 0, 3, 4, 1, 7, 9, 6, 8, 2]
    for r in (0, 1):
        assert job.out[r][0].endswith(f" {r} 2 {perm[r::2]}")
    assert job.out[0][1] == job.out[1][1]  # every rank shuffles alike after one seed
