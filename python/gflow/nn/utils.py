"""Training utilities, as ``torch.nn.utils``: ``clip_grad_norm_``."""

import math

from .. import _gflow
from .._gflow import Tensor

__all__ = ["clip_grad_norm_"]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients of ``parameters`` (a tensor or an iterable of them) in place so that
    their global 2-norm is at most ``max_norm`` (by ``max_norm / (norm + 1e-6)`` when that is
    below 1), as PyTorch's; returns the norm before clipping as a 0-d tensor. The norm is over
    every parameter whatever its placement and SBP, the same on every rank (a collective for
    global parameters). gflow's ``nn::utils::clip_grad_norm``; only ``norm_type=2``.

    >>> import gflow as flow
    >>> w = flow.nn.Parameter(flow.tensor([3.0, 4.0]))
    >>> (w * w).sum().backward()                 # grad = 2w = (6, 8), norm 10
    >>> float(flow.nn.utils.clip_grad_norm_([w], 5.0))
    10.0
    >>> [round(v, 4) for v in w.grad.tolist()]
    [3.0, 4.0]
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    parameters = list(parameters)
    if float(norm_type) != 2.0:
        raise _gflow.InvalidArgumentError(
            f"clip_grad_norm_: only norm_type=2 is supported, got {norm_type}")
    norm = _gflow.clip_grad_norm(parameters, float(max_norm))
    if error_if_nonfinite and not math.isfinite(norm):
        raise RuntimeError(f"clip_grad_norm_: the total norm of the gradients is {norm}")
    dtype = next((p.grad.dtype for p in parameters
                  if p.grad is not None and p.grad.dtype.is_floating_point), _gflow.float32)
    return _gflow.tensor(norm, dtype=dtype)
