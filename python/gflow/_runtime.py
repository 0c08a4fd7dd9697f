"""Top-level functions training scripts call besides operators, as PyTorch 2.x's: seeding
(``manual_seed``, ``seed``, ``initial_seed``, ``Generator``, ``default_generator``), the default
dtype, ``finfo`` / ``iinfo``, ``is_floating_point``, ``is_nonzero``, the CPU thread count,
``meshgrid``, ``logspace``, ``as_tensor``, ``concat`` / ``concatenate``.

gflow's random tensors (``randn``, ``rand``, ``nn.init``, ...) come from its counter-based
generator, which the extension seeds but does not otherwise expose (so there is no
``get_rng_state`` / ``set_rng_state`` here). The data utilities (``flow.utils.data``: shuffles,
samplers, ``random_split``) draw from host ``Generator`` objects instead, whose stream is
PyTorch's CPU generator's: ``flow.manual_seed(s)`` seeds both, and a ``Generator`` seeded with
``s`` gives the permutations ``torch.Generator().manual_seed(s)`` gives."""

import math
import os
import warnings

import numpy as np

from . import _gflow
from ._gflow import Tensor
from ._pyapi import device as _device

__all__ = [
    "Generator", "default_generator", "manual_seed", "seed", "initial_seed",
    "get_default_dtype", "set_default_dtype", "finfo", "iinfo", "is_floating_point",
    "is_nonzero", "get_num_threads", "set_num_threads", "meshgrid", "logspace", "as_tensor",
    "concat", "concatenate",
]

_U64 = 1 << 64


def _seed_value(seed):
    """``seed`` as PyTorch takes it: an int in [-2**63, 2**64), negative ones modulo 2**64."""
    seed = int(seed)
    if not -(1 << 63) <= seed < _U64:
        raise ValueError("Overflow when unpacking long long")
    return seed % _U64


def _fresh_seed():
    """A non-deterministic 64-bit seed (the operating system's randomness)."""
    return int.from_bytes(os.urandom(8), "little")


class Generator:
    """A host random generator for the data utilities (``DataLoader(shuffle=True)``, the
    samplers, ``random_split``), as ``torch.Generator``: ``g = flow.Generator().manual_seed(42)``.

    Its stream is PyTorch's CPU generator's (MT19937 seeded from the seed's low 32 bits), and
    the samplers draw from it as PyTorch's do, so the same seed gives PyTorch's indices.
    gflow's tensor functions do not take it: they use gflow's own generator
    (``flow.manual_seed``)."""

    def __init__(self, device="cpu"):
        self.device = device if isinstance(device, _device) else _device(device)
        self.manual_seed(67280421310721)  # PyTorch's default seed

    def manual_seed(self, seed):
        """Reseeds this generator (an int in [-2**63, 2**64)); returns it."""
        seed = _seed_value(seed)
        key = np.empty(624, dtype=np.uint32)
        x = seed & 0xFFFFFFFF
        key[0] = x
        for i in range(1, 624):  # MT19937's init_genrand, as at::mt19937
            x = (1812433253 * (x ^ (x >> 30)) + i) & 0xFFFFFFFF
            key[i] = x
        self._seed = seed
        self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": 624}}
        return self

    def seed(self):
        """Reseeds this generator from the operating system's randomness; returns the seed."""
        s = _fresh_seed()
        self.manual_seed(s)
        return s

    def initial_seed(self):
        """The seed this generator was last seeded with."""
        return self._seed

    def get_state(self):
        """This generator's whole state, an int64 tensor (the seed, the MT19937 position and
        its 624 words), for ``set_state``."""
        st = self._bits.state["state"]
        seed = self._seed - _U64 if self._seed >= 1 << 63 else self._seed
        return _gflow.tensor(np.concatenate([[seed, st["pos"]], st["key"].astype(np.int64)]))

    def set_state(self, new_state):
        """Restores a state from ``get_state``; returns this generator."""
        a = new_state.numpy() if isinstance(new_state, Tensor) else np.asarray(new_state)
        a = a.astype(np.int64).ravel()
        if a.size != 626:
            raise ValueError(f"Generator.set_state: expected 626 values (get_state's), got "
                             f"{a.size}")
        self._seed = int(a[0]) % _U64
        self._bits.state = {"bit_generator": "MT19937",
                            "state": {"key": a[2:].astype(np.uint32), "pos": int(a[1])}}
        return self

    def _random32(self, n):
        """``n`` 32-bit draws (PyTorch's ``random()``), as uint64."""
        return self._bits.random_raw(n)

    def _random64(self, n):
        """``n`` 64-bit draws (PyTorch's ``random64()``: two 32-bit draws, the first high)."""
        r = self._random32(2 * n).reshape(n, 2)
        return (r[:, 0] << np.uint64(32)) | r[:, 1]

    def _int64(self):
        """One non-negative int64, as ``torch.empty((), dtype=torch.int64).random_(g)``."""
        return int(self._random64(1)[0]) % (1 << 63)

    def _uniform(self, n):
        """``n`` doubles in [0, 1) from 53 random bits each, as PyTorch's for float64."""
        return (self._random64(n) & np.uint64((1 << 53) - 1)).astype(np.float64) * 2.0 ** -53

    def _randint(self, high, n):
        """``n`` ints in [0, high), as ``torch.randint(high, (n,), generator=g)``."""
        r = self._random64(n) if high >= 1 << 32 else self._random32(n)
        return (r % np.uint64(high)).astype(np.int64)

    def _randperm(self, n):
        """A random permutation of ``range(n)`` (a list), as ``torch.randperm(n,
        generator=g)``: Fisher-Yates swaps drawn from 32-bit values (64-bit from 2**32 / 20
        on)."""
        perm = list(range(n))
        if n > 1:
            draw = self._random32 if n < 0xFFFFFFFF // 20 else self._random64
            z = (draw(n - 1) % np.arange(n, 1, -1, dtype=np.uint64)).tolist()
            for i, zi in enumerate(z):
                j = i + zi
                perm[i], perm[j] = perm[j], perm[i]
        return perm

    def __repr__(self):
        return f"<flow.Generator seed={self._seed}>"


# The generator the data utilities use when given none; gflow's own starts at seed 0 too.
default_generator = Generator().manual_seed(0)


def manual_seed(seed):
    """Seeds gflow's random generator (random tensors, ``nn.init``, dropout) and
    ``flow.default_generator`` (the data utilities' shuffles) with ``seed``; returns
    ``default_generator``, as ``torch.manual_seed``. Call it with the same seed on every rank."""
    seed = _seed_value(seed)
    _gflow.manual_seed(seed)
    return default_generator.manual_seed(seed)


def seed():
    """Seeds as ``manual_seed`` with a non-deterministic 64-bit number and returns it, as
    ``torch.seed``. In a job of several ranks rank 0's number is broadcast, so every rank
    must call it (a collective)."""
    s = _fresh_seed() >> 1  # 63 bits: it travels as an int64
    if _gflow.get_world_size() > 1:
        from . import comm

        t = _gflow.tensor([s], dtype=_gflow.int64)
        comm.broadcast(t, 0)
        s = int(t.item())
    manual_seed(s)
    return s


def initial_seed():
    """The seed last given to ``flow.manual_seed`` (or ``flow.seed``); 0, gflow's default,
    before any."""
    return default_generator.initial_seed()


def get_default_dtype():
    """The dtype of floating-point tensors made without a ``dtype=``: ``flow.float32``."""
    return _gflow.float32


def set_default_dtype(d):
    """As ``torch.set_default_dtype``, for ``flow.float32`` (already the default). Only
    floating-point dtypes are accepted, as PyTorch; another float dtype is a ``DTypeError``:
    gflow's creation functions, ``flow.Tensor`` and ``nn`` layers make float32 themselves, so
    pass ``dtype=`` or convert (``x.double()``, ``model.double()``)."""
    if not isinstance(d, _gflow.dtype) or not d.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    if d != _gflow.float32:
        raise _gflow.DTypeError(
            f"set_default_dtype({d!r}): gflow's default floating dtype is flow.float32 and "
            "cannot change (creation functions, flow.Tensor and nn layers make float32); pass "
            f"dtype={d!r} where tensors are made, or convert them (x.to({d!r}), "
            "model.to(...))")


def _dtype_name(d):
    return str(d).split(".")[-1]


class finfo:
    """Machine limits of a floating dtype, as ``torch.finfo``: ``bits``, ``eps``, ``max``,
    ``min``, ``tiny`` (= ``smallest_normal``), ``resolution`` and ``dtype`` (its name);
    ``flow.finfo()`` is the default dtype's."""

    _BF16 = dict(bits=16, eps=2.0 ** -7, max=float.fromhex("0x1.fep127"), tiny=2.0 ** -126,
                 resolution=0.01)

    def __init__(self, type=None):
        type = get_default_dtype() if type is None else type
        if not isinstance(type, _gflow.dtype) or not type.is_floating_point:
            raise TypeError(f"flow.finfo() requires a floating point input type. Use "
                            f"flow.iinfo to handle '{type}'")
        self.dtype = _dtype_name(type)
        if self.dtype == "bfloat16":
            v = self._BF16
        else:
            f = np.finfo(getattr(np, self.dtype))
            v = dict(bits=f.bits, eps=float(f.eps), max=float(f.max),
                     tiny=float(f.tiny), resolution=10.0 ** -int(f.precision))
        self.bits = v["bits"]
        self.eps = v["eps"]
        self.max = v["max"]
        self.min = -v["max"]
        self.tiny = self.smallest_normal = v["tiny"]
        self.resolution = v["resolution"]

    def __eq__(self, other):
        return isinstance(other, finfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("finfo", self.dtype))

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype, as ``torch.iinfo``: ``bits``, ``max``, ``min`` and ``dtype``
    (its name)."""

    def __init__(self, type):
        name = _dtype_name(type) if isinstance(type, _gflow.dtype) else None
        if name not in ("int32", "int64"):
            raise TypeError(f"flow.iinfo() requires an integer input type. Use flow.finfo to "
                            f"handle '{type}'")
        i = np.iinfo(getattr(np, name))
        self.dtype = name
        self.bits = i.bits
        self.max = int(i.max)
        self.min = int(i.min)

    def __eq__(self, other):
        return isinstance(other, iinfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("iinfo", self.dtype))

    def __repr__(self):
        return f"iinfo(min={float(self.min):g}, max={float(self.max):g}, dtype={self.dtype})"


def is_floating_point(input):
    """Whether ``input``'s dtype is a floating-point one."""
    return input.is_floating_point()


def is_nonzero(input):
    """Whether a one-element tensor's value is not zero (``False`` for ``0``, ``0.0``,
    ``False``); more or fewer elements are a ``RuntimeError``, as PyTorch."""
    n = input.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return input.item() != 0


def get_num_threads():
    """The threads gflow's CPU kernels run on: rayon's global pool, ``RAYON_NUM_THREADS``
    when that is set, else the CPUs this process may run on (its affinity mask; a cgroup CPU
    quota, which rayon also honours, is not read here)."""
    v = os.environ.get("RAYON_NUM_THREADS", "")
    if v.isdigit() and int(v) > 0:
        return int(v)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def set_num_threads(n):
    """Accepts the thread count gflow already uses (``get_num_threads()``). Any other is a
    ``RuntimeError``: gflow's CPU kernels run on rayon's global pool, whose size is fixed when
    the pool starts, so set ``RAYON_NUM_THREADS`` in the environment before starting Python."""
    n = int(n)
    if n <= 0:
        raise ValueError("set_num_threads expects a positive integer")
    have = get_num_threads()
    if n != have:
        raise RuntimeError(
            f"set_num_threads({n}): gflow's CPU kernels run on {have} threads, a pool sized "
            f"once when it starts; start the process with RAYON_NUM_THREADS={n} instead")


def meshgrid(*tensors, indexing=None):
    """Coordinate grids of 0-d or 1-d tensors, as ``torch.meshgrid`` (``indexing="ij"``:
    output ``i`` varies along dim ``i``; ``"xy"``: the first two dims swapped, as NumPy's
    default); each is a reshape and an expand of its input, so gradients flow back.
    ``indexing`` left out is ``"ij"`` with PyTorch's warning."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    if indexing is None:
        warnings.warn("meshgrid: in an upcoming release, it will be required to pass the "
                      "indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise ValueError(f'meshgrid: indexing must be one of "xy" or "ij", but received: '
                         f"{indexing}")
    for t in tensors:
        if t.dim() > 1:
            raise RuntimeError(f"meshgrid: Expected 0D or 1D tensor in the tensor list but "
                               f"got: {t.dim()}D")
        if t.dtype != tensors[0].dtype:
            raise RuntimeError("meshgrid: Expected all tensors in the tensor list to have "
                               "the same dtype.")
    ts = list(tensors)
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = [t.numel() for t in ts]
    grids = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = -1
        grids.append(t.reshape(*view).expand(*shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def _at_dtype(v, name):
    """``v`` rounded to dtype ``name``, as PyTorch's ``Scalar.to<scalar_t>()``."""
    if name in ("int32", "int64"):
        return float(math.trunc(v))
    if name == "bfloat16":  # round to nearest even on float32's upper 16 bits
        bits = int(np.array(v, dtype=np.float32).view(np.uint32))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return float(np.array(bits, dtype=np.uint32).view(np.float32))
    return float(getattr(np, name)(v))


def logspace(start, end, steps, base=10.0, *, dtype=None, placement=None, sbp=None,
             device=None, requires_grad=False):
    """``steps`` values from ``base ** start`` to ``base ** end``, exponents evenly spaced, as
    ``torch.logspace`` (its arithmetic: endpoints rounded to ``dtype``, exponents from both
    ends, float powers for integer dtypes); ``dtype`` defaults to float32."""
    start, end, steps = float(start), float(end), int(steps)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dtype = get_default_dtype() if dtype is None else dtype
    name = _dtype_name(dtype)
    if name == "bool":
        raise RuntimeError("logspace: not implemented for 'Bool'")
    i = np.arange(steps, dtype=np.float64)
    low = i < steps // 2  # PyTorch steps up from start for the first half, down from end after
    if steps == 1:
        v = np.array([float(base) ** start])
        v = np.trunc(v) if name in ("int32", "int64") else v
    elif name in ("int32", "int64"):  # PyTorch computes integer logspace in float
        f = np.float32
        s, e = f(_at_dtype(start, name)), f(_at_dtype(end, name))
        step = f((e - s) / f(steps - 1))
        ex = np.where(low, s + step * i.astype(f), e - step * (steps - 1 - i).astype(f))
        v = np.trunc(np.power(f(base), ex.astype(f)).astype(np.float64))
    else:
        s, e = _at_dtype(start, name), _at_dtype(end, name)
        step = (e - s) / (steps - 1)
        v = np.power(float(base), np.where(low, s + step * i, e - step * (steps - 1 - i)))
    out = _gflow.tensor(v, dtype=dtype, placement=placement, sbp=sbp)
    if device is not None and placement is None and _device(str(device)).type != "cpu":
        out = out.to(device)
    return out.requires_grad_() if requires_grad else out


def as_tensor(data, dtype=None, device=None):
    """``data`` as a tensor, as ``torch.as_tensor``: a tensor of the asked dtype and device is
    returned as is, another tensor converted; NumPy arrays keep their dtype, Python floats
    become float32. gflow owns its storage, so an array's data is copied, not shared."""
    if isinstance(data, Tensor):
        if dtype is not None and data.dtype != dtype:
            data = data.to(dtype)
        if device is not None and data.is_local and data.device.type != _device(str(device)).type:
            data = data.to(device)
        return data
    out = _gflow.tensor(data, dtype=dtype)
    if device is not None and _device(str(device)).type != "cpu":
        out = out.to(device)
    return out


concat = concatenate = _gflow.cat
