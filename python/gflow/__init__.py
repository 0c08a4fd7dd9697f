"""gflow: OneFlow's global tensors over many processes, ``import gflow as flow``.

A global tensor has a placement (a device type and an array of ranks) and an SBP per placement
axis (``flow.sbp.split(d)``, ``flow.sbp.broadcast``, ``flow.sbp.partial_sum``); gflow moves data
between layouts itself. Importing gflow joins the job named by the environment (``MASTER_ADDR``,
``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, as set by
``python -m gflow.distributed.launch``); without them the world is this one process.

>>> import gflow as flow
>>> p = flow.placement("cpu", [0])
>>> x = flow.randn(4, 5, placement=p, sbp=flow.sbp.split(0))
>>> x.shape
flow.Size([4, 5])
>>> x.sbp
(flow.sbp.split(dim=0),)
"""

import functools as _functools

import sys

from . import _gflow
from ._gflow import (
    Tensor,
    placement,
    dtype,
    float32,
    float,
    float64,
    double,
    int64,
    long,
    float16,
    half,
    bfloat16,
    int32,
    int,
    bool,
    randn,
    rand,
    zeros,
    ones,
    empty,
    full,
    arange,
    linspace,
    randint,
    randperm,
    tensor,
    cat,
    stack,
    where,
    manual_seed,
    empty_cache,
    is_grad_enabled,
    Error,
    PlacementError,
    SbpError,
    ShapeError,
    DTypeError,
    DeviceError,
    CommunicationError,
    EnvironmentError,
    CheckpointError,
    IndexOutOfRangeError,
    DimOutOfRangeError,
    InvalidArgumentError,
    IndexShapeError,
    InvalidValueError,
    IndexTypeError,
    DTypeNotImplementedError,
)
from ._pyapi import Size, device
from ._methods import eye, outer, norm, equal, isclose, isin
from .serialization import save, load



def _run_as_launcher():
    """Whether this process is ``python -m gflow.distributed.launch``: the launcher starts the
    job's processes and must not join the job its environment may name (under ``srun`` or
    ``mpirun``, or with ``RANK`` exported) itself."""
    argv = list(getattr(sys, "orig_argv", []))[1:]
    for i, a in enumerate(argv):
        if a == "-m":
            return argv[i + 1 : i + 2] == ["gflow.distributed.launch"]
        if a.startswith("-m"):
            return a[2:] == "gflow.distributed.launch"
        if a == "-c" or not a.startswith("-"):
            return False
    return False


if not _run_as_launcher():
    _gflow.init()

from . import sbp, env, nn, optim, distributed, comm  # noqa: E402  (after joining the job)
from . import utils, cuda, autograd  # noqa: E402
from ._runtime import *  # noqa: E402,F401,F403  (manual_seed also seeds the data generator)
from ._methods import _install_pickling  # noqa: E402

_install_pickling(nn)  # copy.deepcopy and pickle of placements, SBPs, tensors, modules


class no_grad:
    """``with flow.no_grad():`` (or ``@flow.no_grad()``): operations inside are not recorded
    for autograd."""

    def __enter__(self):
        self._inner = _gflow.no_grad()
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def __call__(self, f):
        @_functools.wraps(f)
        def wrapped(*args, **kwargs):
            with no_grad():
                return f(*args, **kwargs)

        return wrapped


class _GradMode:
    """Sets the recording mode for its ``with`` block (or, as a decorator, for each call) and
    restores the one before."""

    def _depth(self):
        raise NotImplementedError

    def __enter__(self):
        self._before = _gflow._swap_grad_depth(self._depth())
        return self

    def __exit__(self, *exc):
        _gflow._swap_grad_depth(self._before)
        return False

    def __call__(self, f):
        @_functools.wraps(f)
        def wrapped(*args, **kwargs):
            with type(self)(*self._args):
                return f(*args, **kwargs)

        return wrapped


class enable_grad(_GradMode):
    """``with flow.enable_grad():`` records operations again inside ``no_grad``, as
    PyTorch's."""

    _args = ()

    def _depth(self):
        return 0


class inference_mode(_GradMode):
    """``with flow.inference_mode():`` (or ``@flow.inference_mode()``): no recording, as
    ``no_grad`` (``mode=False`` records)."""

    def __init__(self, mode=True):
        self._args = (mode,)

    def _depth(self):
        return 1 if self._args[0] else 0


class set_grad_enabled(_GradMode):
    """``flow.set_grad_enabled(False)`` stops recording at once (a call), or for a ``with``
    block, after which the mode before comes back, as PyTorch's."""

    def __init__(self, mode):
        self._args = (True if mode else False,)
        self._before = _gflow._swap_grad_depth(0 if mode else 1)

    def __enter__(self):
        return self

    def __call__(self, f):
        # as a decorator, the mode is set per call, not from now on
        _gflow._swap_grad_depth(self._before)
        return super().__call__(f)


def matmul(input, other):
    """The matrix product ``input @ other`` as PyTorch's (2-D, batched with broadcasting, 1-D
    operands), local or global."""
    return input.matmul(other)


def is_tensor(obj):
    """Whether ``obj`` is a ``flow.Tensor``."""
    return isinstance(obj, Tensor)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether ``|a - b| <= atol + rtol * |b|`` everywhere (a collective for global tensors,
    as ``numpy()``)."""
    import builtins

    import numpy as np

    return builtins.bool(np.allclose(a.numpy(), b.numpy(), rtol=rtol, atol=atol,
                                     equal_nan=equal_nan))


def _like(make):
    def f(input, *, dtype=None, placement=None, sbp=None, requires_grad=False, **kwargs):
        if placement is None and sbp is None and input.is_global:
            placement = input.placement
            # A partial SBP describes a sum of components, not a layout to fill: broadcast.
            sbp = tuple(s if s.dim is not None or s == _gflow.broadcast else _gflow.broadcast
                        for s in input.sbp)
        return make(input.shape, dtype=input.dtype if dtype is None else dtype,
                    placement=placement, sbp=sbp, requires_grad=requires_grad, **kwargs)

    f.__name__ = make.__name__ + "_like"
    f.__doc__ = (f"``flow.{f.__name__}(x)``: ``flow.{make.__name__}`` of ``x``'s shape, dtype, "
                 "placement and SBP (a partial SBP becomes broadcast).")
    return f


zeros_like = _like(zeros)
ones_like = _like(ones)
empty_like = _like(empty)
randn_like = _like(randn)
rand_like = _like(rand)


def full_like(input, fill_value, *, dtype=None, placement=None, sbp=None, requires_grad=False):
    """``flow.full`` of ``x``'s shape, dtype, placement and SBP (a partial SBP becomes
    broadcast)."""
    return _like(lambda shape, **kw: full(shape, fill_value, **kw))(
        input, dtype=dtype, placement=placement, sbp=sbp, requires_grad=requires_grad)


def from_numpy(array):
    """A local tensor holding ``array``'s elements (its dtype kept: float64, float32, float16,
    int64, int32, bool), copied once straight into gflow's storage (gflow owns its buffers, so
    the tensor does not share ``array``'s memory; ``t.numpy()`` does share the tensor's)."""
    return tensor(array)


def _method(name):
    def f(x, *args, **kwargs):
        return getattr(x, name)(*args, **kwargs)

    f.__name__ = name
    f.__doc__ = f"``flow.{name}(x, ...)`` is ``x.{name}(...)``."
    return f


for _name in (
    "add sub mul div neg exp log sqrt square relu gelu sigmoid tanh sum mean amax max "
    "softmax log_softmax reshape transpose narrow flatten squeeze unsqueeze "
    "abs rsqrt sin cos silu erf pow clamp clip min amin logsumexp argmax argmin maximum "
    "minimum eq ne lt le gt ge masked_fill tril triu permute split chunk gather index_select "
    "view expand mm bmm t clone any all scatter_add logical_not logical_and logical_or "
    "logical_xor remainder var std flip cumsum cumprod prod topk multinomial floor ceil round trunc "
    "isnan isinf isfinite unbind reciprocal numel sort argsort sign log1p expm1 broadcast_to roll "
    "diag diagonal trace tile repeat_interleave unflatten dot addmm baddbmm lerp addcmul addcdiv "
    "true_divide log2 log10 sinh cosh fmod diff count_nonzero dist select masked_select "
    "nonzero argwhere bitwise_and bitwise_or bitwise_xor movedim moveaxis swapaxes swapdims "
    "take_along_dim tensordot mv tensor_split nan_to_num nansum nanmean isposinf isneginf "
    "logaddexp logit clamp_min clamp_max floor_divide float_power exp2 var_mean std_mean aminmax "
    "median nanmedian kthvalue quantile nanquantile cummax cummin unique index_add index_fill "
    "scatter hypot logcumsumexp"
).split():
    globals()[_name] = _method(_name)
del _name


def pow(input, exponent):
    """``flow.pow(x, e)`` is ``x ** e`` (``e`` a number or a tensor); ``flow.pow(b, x)`` with a
    number ``b`` is ``b ** x``, as ``torch.pow``."""
    if isinstance(input, Tensor):
        return input.pow(exponent)
    return exponent.__rpow__(input)


from ._methods import einsum, hstack, vstack  # noqa: E402  (flow-level only, as torch's)
from ._methods import float_power  # noqa: E402  (its base may be a number)

__all__ = [n for n in dir() if not n.startswith("_")]
