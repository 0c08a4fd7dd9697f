"""``flow.cuda``: the CUDA queries PyTorch and OneFlow scripts make (``is_available``,
``device_count``, ``current_device``, ``set_device``, ``synchronize``, ``manual_seed``,
``empty_cache``, ``get_device_name``), answered by gflow's CUDA backend.

Whether this process can use a CUDA device is asked of gflow itself: it opens its CUDA backend
on this process's device and makes a one-element tensor there (the first call may compile
gflow's kernels; later ones are cached). Counts and names come from the CUDA driver, the calls
gflow's backend lists devices with. gflow picks each process's device when the job starts:
``LOCAL_RANK % device_count()``, or the one ``GFLOW_DEVICE_OVERRIDE`` pins."""

import ctypes
import functools
import os

from . import _gflow
from ._pyapi import device as _device
from ._runtime import _seed_value

__all__ = ["is_available", "device_count", "current_device", "set_device", "synchronize",
           "manual_seed", "manual_seed_all", "empty_cache", "get_device_name"]


@functools.lru_cache(maxsize=None)
def _unavailable():
    """Why this process cannot use a CUDA device (gflow's message), or ``None`` when it can."""
    try:
        _gflow.zeros(1, device="cuda")
    except _gflow.Error as e:
        return str(e)
    return None


@functools.lru_cache(maxsize=None)
def _driver():
    """The CUDA driver library, initialised (gflow's backend has loaded it already)."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        _check(lib.cuInit(0), "cuInit")
        return lib
    raise _gflow.DeviceError("the CUDA driver library (libcuda) cannot be loaded")


def _check(status, call):
    if status != 0:
        raise _gflow.DeviceError(f"CUDA driver: {call} failed with status {status}")


def _require():
    reason = _unavailable()
    if reason is not None:
        raise _gflow.DeviceError(f"no CUDA device for this process: {reason}")


def is_available():
    """Whether this process can compute on a CUDA device through gflow."""
    return _unavailable() is None


def device_count():
    """The CUDA devices this process can use (0 where ``is_available()`` is false)."""
    if not is_available():
        return 0
    n = ctypes.c_int()
    _check(_driver().cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    return n.value


def _pinned_ordinal():
    """The CUDA ordinal ``GFLOW_DEVICE_OVERRIDE`` (``RANK:TYPE[:ORDINAL],...``, the last item
    for a rank winning) pins for this rank, if any."""
    rank, found = _gflow.get_rank(), None
    for item in os.environ.get("GFLOW_DEVICE_OVERRIDE", "").split(","):
        parts = [p.strip() for p in item.split(":")]
        if len(parts) >= 2 and parts[0].isdigit() and int(parts[0]) == rank:
            found = parts
    if found and len(found) == 3 and found[1] in ("cuda", "gpu"):
        return int(found[2])
    return None


def current_device():
    """The ordinal of the CUDA device gflow computes on in this process; a ``DeviceError``
    without one, as PyTorch raises."""
    _require()
    pinned = _pinned_ordinal()
    return pinned if pinned is not None else _gflow.get_local_rank() % device_count()


def _index(device):
    """A device ordinal from an int, ``"cuda:n"`` or a ``flow.device`` (``None``: current)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = device if isinstance(device, _device) else _device(str(device))
    if d.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {d}")
    return d.index


def set_device(device):
    """Checks that ``device`` (an ordinal, ``"cuda:n"`` or a ``flow.device``) is the CUDA
    device this process computes on; a negative ordinal is ignored, as PyTorch. gflow fixes
    each process's device when the job starts, so another valid ordinal is a ``DeviceError``
    saying how to pin it (``GFLOW_DEVICE_OVERRIDE`` before ``import gflow``), and one beyond
    ``device_count()`` a ``DeviceError`` naming the count."""
    n = _index(device)
    if n < 0:
        return
    count = device_count()
    if n >= count:
        why = f" ({_unavailable()})" if count == 0 else ""
        raise _gflow.DeviceError(f"set_device({n}): this process has {count} CUDA device"
                                 f"{'' if count == 1 else 's'}{why}")
    own = current_device()
    if n != own:
        raise _gflow.DeviceError(
            f"set_device({n}): gflow computes on cuda:{own} in this process (LOCAL_RANK % "
            f"device_count(), or GFLOW_DEVICE_OVERRIDE), fixed when the job starts; to use "
            f"cuda:{n}, set GFLOW_DEVICE_OVERRIDE={_gflow.get_rank()}:cuda:{n} before importing "
            "gflow")


def synchronize(device=None):
    """Waits until gflow's queued work on this process's CUDA device has finished (by
    reading a value back through its stream). Without a CUDA device it returns at once: gflow's
    host work is done when each call returns."""
    if not is_available():
        return
    n = _index(device)
    if not 0 <= n < device_count():
        raise _gflow.DeviceError(f"synchronize: no CUDA device {n}")
    _gflow.zeros(1, device="cuda").numpy()


def manual_seed(seed):
    """Seeds gflow's random generator, the one behind random tensors on every device (as
    PyTorch's CUDA generators; the data utilities' ``flow.default_generator`` is left as it
    is, as PyTorch's CPU generator)."""
    _gflow.manual_seed(_seed_value(seed))


manual_seed_all = manual_seed


def empty_cache():
    """Frees the buffers gflow keeps for reuse (``flow.empty_cache()``, which returns the bytes
    freed); returns ``None``, as PyTorch's."""
    _gflow.empty_cache()


def get_device_name(device=None):
    """The name the CUDA driver gives device ``device`` (default: the current one)."""
    _require()
    n = _index(device)
    if not 0 <= n < device_count():
        raise _gflow.DeviceError(f"get_device_name: no CUDA device {n} (this process has "
                                 f"{device_count()})")
    lib, dev, name = _driver(), ctypes.c_int(), ctypes.create_string_buffer(256)
    _check(lib.cuDeviceGet(ctypes.byref(dev), n), "cuDeviceGet")
    _check(lib.cuDeviceGetName(name, len(name), dev), "cuDeviceGetName")
    return name.value.decode()
