"""``nn.parallel.DistributedDataParallel``, as PyTorch's and OneFlow's, over global tensors.

Wrapping a module broadcasts its parameters (and, with ``broadcast_buffers``, its buffers) from
rank 0 and makes them global, broadcast over every rank: ``ddp.parameters()`` and
``state_dict()`` are global tensors, the same on every rank, and an optimizer steps them as
any. A call runs the module as PyTorch's DDP does: on this rank's own inputs, local tensors of
any shape (the batch sizes may differ between ranks), with every parameter standing in as this
rank's local copy of it, and returns the module's outputs unchanged, local tensors of whatever
shape it makes (a loss computed in ``forward`` is this rank's own loss). Each stand-in is
differentiable back into its global parameter through a ``partial_sum`` view, so a backward on
every rank leaves each parameter's gradient the mean over ranks of the ranks' gradients
(gflow's boxing of a partial-sum gradient to the parameter's broadcast SBP is the all-reduce),
identical everywhere, as PyTorch's. Buffers in the module are updated by this rank's call
(BatchNorm's running statistics from its own batch, as PyTorch's, not a synchronized batch
norm), then set to rank 0's values again after it (PyTorch broadcasts them at the start of the
next call).

Every rank calls each forward and each backward, and the backward reaches the same parameters
in the same order on every rank (a rank whose graph skips a parameter the others use is a
desync error, as PyTorch's without ``find_unused_parameters``). The module reaches its
parameters and buffers through its attributes (``self.weight``, ``self._parameters``,
``self.parameters()``), not through references kept elsewhere.
"""

import contextlib

from .. import _gflow
from .._gflow import Tensor
from ..comm import _world
from . import Module

__all__ = ["DistributedDataParallel"]


def _global_in(x):
    """Whether ``x`` (a tensor, or lists, tuples and dicts of them) holds a global tensor."""
    if isinstance(x, Tensor):
        return x.is_global
    if isinstance(x, (list, tuple)):
        return any(_global_in(v) for v in x)
    if isinstance(x, dict):
        return any(_global_in(v) for v in x.values())
    return False


class DistributedDataParallel(Module):
    """``model = DistributedDataParallel(model)``; ``model.module`` is the wrapped module.

    PyTorch's keyword arguments that concern devices, buckets or streams (``device_ids``,
    ``output_device``, ``bucket_cap_mb``, ``find_unused_parameters``, ...) are accepted and
    have no effect: gflow's boxing reduces each gradient as backward produces it.
    """

    def __init__(self, module, broadcast_buffers=True, **_torch_options):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps a Module, got {type(module).__name__}")
        self.module = module
        params = module.parameters()
        if any(p.is_global for p in params):
            raise ValueError("DistributedDataParallel wraps a module of local parameters; a "
                             "module already on global tensors needs no wrapper")
        self._placement = _world(params[0] if params else _gflow.zeros(1))
        self._world = _gflow.get_world_size()
        self.broadcast_buffers = broadcast_buffers
        module._convert(self._from_rank0, buffers=broadcast_buffers)

    def _from_rank0(self, t):
        """Rank 0's value of ``t`` (local) as a global tensor broadcast over every rank: a
        local tensor made global with ``broadcast`` takes the data of the placement's first
        rank, rank 0 (copied bit for bit)."""
        if t.is_global:
            return t
        return t.detach().to_global(placement=self._placement, sbp=_gflow.broadcast)

    def _local_param(self, p):
        """``p`` (a global, broadcast parameter) as this rank's local tensor of the same value,
        whose gradient (when recorded) reaches ``p`` as the mean over ranks of every rank's
        gradient of its stand-in: ``p`` as ``partial_sum`` (rank 0 holding it, the others
        zeros) divided by the world size, to its local part ``w``; the stand-in is
        ``value - (w.detach() - w)``, so its value is ``p``'s bit for bit (the difference is
        ``+0.0``) and its gradient passes to ``w`` whole. Backward boxes the partial-sum
        gradient to ``p``'s broadcast SBP: the all-reduce. (A parameter entry that is
        infinite or NaN gives NaN on rank 0: ``inf - inf``.)"""
        value = p.detach().to_local()
        if not (p.requires_grad and _gflow.is_grad_enabled()):
            return value
        w = p.to_global(sbp=_gflow.partial_sum).to_local()
        return value - (w.detach() - w) / self._world

    @staticmethod
    def _swap(kind, entries):
        """Sets ``m.<kind>[name]`` and the attribute ``name`` of each ``(m, name, t)``."""
        for m, name, t in entries:
            getattr(m, kind)[name] = t
            object.__setattr__(m, name, t)

    def _check_input(self, args, kwargs):
        if _global_in(args) or _global_in(kwargs):
            raise TypeError("DistributedDataParallel: the inputs are this rank's own local "
                            "tensors (each rank's batch, as PyTorch's DDP); got a global "
                            "tensor (a global program needs no wrapper: call ddp.module)")

    def forward(self, *args, **kwargs):
        self._check_input(args, kwargs)
        views, params, bufs = {}, [], []
        for m in self.module.modules():
            for name, p in m._parameters.items():
                if p is not None and p.is_global:
                    if id(p) not in views:  # a tied parameter: one stand-in for both places
                        views[id(p)] = self._local_param(p)
                    params.append((m, name, p))
            for name, b in m._buffers.items():
                if b is not None and b.is_global:
                    if id(b) not in views:
                        views[id(b)] = b.to_local()
                    bufs.append((m, name, b))
        self._swap("_parameters", [(m, n, views[id(p)]) for m, n, p in params])
        self._swap("_buffers", [(m, n, views[id(b)]) for m, n, b in bufs])
        try:
            out = self.module(*args, **kwargs)
        except BaseException:
            # no collective on the way out of a failed call (another rank may not fail)
            self._swap("_parameters", params)
            self._swap("_buffers", bufs)
            raise
        self._swap("_parameters", params)
        self._restore_buffers(bufs, views)
        return out

    def _restore_buffers(self, bufs, views):
        """Each global buffer back in its module, holding rank 0's value after the call (the
        call may have updated this rank's part in place, or assigned a new local tensor)."""
        done = {}
        with _gflow.no_grad():
            for m, name, b in bufs:
                now = m._buffers.get(name)
                if now is views[id(b)]:
                    # updated in place, or not at all: the global buffer's own part is the
                    # stand-in's storage; every rank takes rank 0's
                    if id(b) not in done:
                        b.copy_(self._from_rank0(now))
                        done[id(b)] = b
                    new = b
                elif isinstance(now, Tensor) and not now.is_global:
                    if id(now) not in done:
                        done[id(now)] = self._from_rank0(now)
                    new = done[id(now)]
                else:
                    new = now
                m._buffers[name] = new
                object.__setattr__(m, name, new)

    @contextlib.contextmanager
    def no_sync(self):
        """PyTorch's gradient-accumulation context: here gradients are reduced by every
        backward inside it too (the same values, the reduction being linear; only PyTorch's
        deferral is not copied)."""
        yield
