"""Training utilities, as ``torch.nn.utils``: ``clip_grad_norm_`` and ``clip_grad_value_``."""

import math

from .. import _gflow
from .._gflow import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _vector_norm(values, p):
    """``torch.linalg.vector_norm`` of a list of Python floats."""
    if not values:
        return 0.0
    if p == math.inf:
        return max(abs(v) for v in values)
    if p == -math.inf:
        return min(abs(v) for v in values)
    if p == 0:
        return float(sum(1 for v in values if v != 0))
    if p == 1:
        return math.fsum(abs(v) for v in values)
    if any(math.isnan(v) for v in values):
        return math.nan
    if p > 0 and any(math.isinf(v) for v in values):
        return math.inf
    try:
        return math.fsum(abs(v) ** p for v in values) ** (1.0 / p)
    except ZeroDivisionError:  # a zero to a negative power: the norm is 0, as torch's
        return 0.0


def _grad_norm(g, p):
    """One gradient's ``p``-norm as a Python float (a collective for a global gradient)."""
    g = g.detach()
    if p == math.inf:
        return float(g.abs().amax().item()) if g.numel() else 0.0
    if p == -math.inf:
        return float(g.abs().amin().item()) if g.numel() else math.inf
    if p == 0:
        return float((g != 0).sum().item())
    if p == 1:
        return float(g.abs().sum().item())
    if p == 2:
        return math.sqrt(float((g * g).sum().item()))
    return float(g.abs().pow(p).sum().pow(1.0 / p).item())


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients of ``parameters`` (a tensor or an iterable of them) in place so that
    their total ``norm_type``-norm (the norm of the gradients' norms, any ``p`` PyTorch's
    ``vector_norm`` takes, ``inf`` and ``"inf"`` included) is at most ``max_norm`` (by
    ``max_norm / (norm + 1e-6)`` when that is below 1), as PyTorch's; returns the norm before
    clipping as a 0-d tensor. The norm is over every parameter whatever its placement and SBP,
    the same on every rank (a collective for global parameters). ``norm_type=2`` is gflow's
    ``nn::utils::clip_grad_norm``. ``error_if_nonfinite``: a NaN or infinite norm raises
    ``RuntimeError`` before any gradient is changed.

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
    p = float(norm_type)
    max_norm = float(max_norm)
    if not (math.isfinite(max_norm) and max_norm >= 0):
        raise _gflow.InvalidArgumentError(
            f"invalid argument to clip_grad_norm: max_norm must be a finite non-negative number, "
            f"got {max_norm:g}")
    grads = [q.grad for q in parameters if q.grad is not None]
    dtype = next((g.dtype for g in grads if g.dtype.is_floating_point), _gflow.float32)
    if p == 2.0 and not error_if_nonfinite:
        norm = _gflow.clip_grad_norm(parameters, max_norm)
        return _gflow.tensor(norm, dtype=dtype)
    norm = _vector_norm([_grad_norm(g, p) for g in grads], p)
    if error_if_nonfinite and not math.isfinite(norm):
        raise RuntimeError(
            f"The total norm of order {p} for gradients from `parameters` is non-finite, so it "
            "cannot be clipped. To disable this error and scale the gradients by the non-finite "
            "norm anyway, set `error_if_nonfinite=False`")
    coef = max_norm / (norm + 1e-6)
    if not coef >= 1.0:  # NaN scales too, as PyTorch's
        with _gflow.no_grad():
            for g in grads:
                g.mul_(coef)
    return _gflow.tensor(norm, dtype=dtype)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps the gradients of ``parameters`` (a tensor or an iterable of them) in place to
    ``[-clip_value, clip_value]``, as PyTorch's; returns ``None``."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    clip_value = float(clip_value)
    with _gflow.no_grad():
        for q in parameters:
            if q.grad is not None:
                q.grad.clamp_(min=-clip_value, max=clip_value)
