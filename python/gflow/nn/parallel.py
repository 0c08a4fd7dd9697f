"""``nn.parallel.DistributedDataParallel``, as PyTorch's and OneFlow's, over global tensors.

Wrapping a module broadcasts its parameters and buffers from rank 0 and makes them global
(broadcast over every rank). A call takes each rank's local batch, joins the batches as one
global tensor split by rows, runs the module on it, and gives each rank its own rows of the
output back as a local tensor: a loss on them differentiates as PyTorch's DDP does (every
parameter's gradient is the mean over ranks of the ranks' gradients, identical everywhere),
with gflow's boxing doing the reduction during backward. Every rank calls it, with batches of
the same shape past the first dim.
"""

import contextlib

from .. import _gflow
from .._gflow import Tensor
from ..comm import _world
from . import Module

__all__ = ["DistributedDataParallel"]


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
        module._convert(self._from_rank0, buffers=broadcast_buffers)

    def _from_rank0(self, t):
        """Rank 0's value of ``t`` (local) as a global tensor broadcast over every rank."""
        if t.is_global:
            return t
        mine = t.detach()
        if _gflow.get_rank() != 0:
            mine = _gflow.zeros(*t.shape, dtype=t.dtype, device=t.device)
        summed = mine.to_global(placement=self._placement, sbp=_gflow.partial_sum)
        return summed.to_global(sbp=_gflow.broadcast)

    def _in(self, x):
        if isinstance(x, Tensor) and not x.is_global:
            if x.dim() == 0:
                raise ValueError("DistributedDataParallel: a 0-d input has no batch dim to "
                                 "split over the ranks")
            return x.to_global(placement=self._placement, sbp=_gflow.split(0))
        if isinstance(x, (list, tuple)):
            return type(x)(self._in(v) for v in x)
        if isinstance(x, dict):
            return {k: self._in(v) for k, v in x.items()}
        return x

    def _out(self, y):
        if isinstance(y, Tensor) and y.is_global:
            if y.dim() > 0 and y.sbp != tuple([_gflow.split(0)]):
                y = y.to_global(sbp=_gflow.split(0))
            local = y.to_local()
            if not local.is_floating_point():
                return local
            # the value itself, its gradient divided by the number of ranks: each rank's
            # loss then contributes its mean, as DDP averages gradients
            scaled = local / self._world
            return scaled + (local - scaled).detach()
        if isinstance(y, (list, tuple)):
            return type(y)(self._out(v) for v in y)
        if isinstance(y, dict):
            return {k: self._out(v) for k, v in y.items()}
        return y

    def forward(self, *args, **kwargs):
        args = self._in(args)
        kwargs = {k: self._in(v) for k, v in kwargs.items()}
        return self._out(self.module(*args, **kwargs))

    @contextlib.contextmanager
    def no_sync(self):
        """PyTorch's gradient-accumulation context: here gradients are reduced by every
        backward inside it too (the same values; only PyTorch's deferral is not copied)."""
        yield
