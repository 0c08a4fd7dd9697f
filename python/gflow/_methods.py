"""Tensor methods and functions written in Python over gflow's operators (so each is
differentiable where its parts are, and works on global tensors, every rank calling it), with
PyTorch's names and semantics: ``expand_as view_as type_as new_zeros new_ones new_full
new_empty new_tensor unbind select is_contiguous reciprocal isnan isinf isfinite norm``, and
``flow.eye outer norm equal isclose``."""

import math

from . import _gflow
from ._gflow import Tensor


def where(t):
    """Creation keywords for a new tensor where ``t`` is: its placement (broadcast) or its
    device."""
    if t.is_global:
        return {"placement": t.placement, "sbp": [_gflow.broadcast] * len(t.sbp)}
    return {"device": t.device}


def _like(t, dtype):
    """[`where`]'s keywords and ``t``'s dtype unless ``dtype``."""
    return dict(where(t), dtype=t.dtype if dtype is None else dtype)


def _size(size):
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size


def expand_as(self, other):
    """``self`` expanded to ``other``'s shape."""
    return self.expand(*other.shape)


def view_as(self, other):
    """``self`` viewed with ``other``'s shape."""
    return self.view(*other.shape)


def type_as(self, other):
    """``self`` cast to ``other``'s dtype."""
    return self.to(other.dtype)


def new_full(self, size, fill_value, *, dtype=None, requires_grad=False):
    """A tensor of ``size`` filled with ``fill_value``, of ``self``'s dtype and placement (or
    device) unless told."""
    return _gflow.full(tuple(size), fill_value, requires_grad=requires_grad, **_like(self, dtype))


def new_zeros(self, *size, dtype=None, requires_grad=False):
    """Zeros of ``size``, where ``self`` is and of its dtype unless told."""
    return new_full(self, _size(size), 0, dtype=dtype, requires_grad=requires_grad)


def new_ones(self, *size, dtype=None, requires_grad=False):
    """Ones of ``size``, where ``self`` is and of its dtype unless told."""
    return new_full(self, _size(size), 1, dtype=dtype, requires_grad=requires_grad)


def new_empty(self, *size, dtype=None, requires_grad=False):
    """A tensor of ``size`` where ``self`` is (gflow fills it with zeros)."""
    return new_zeros(self, *size, dtype=dtype, requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, requires_grad=False):
    """``data`` as a tensor where ``self`` is (a global one broadcast on its placement)."""
    t = _gflow.tensor(data, dtype=dtype if dtype is not None else self.dtype,
                      requires_grad=requires_grad)
    if self.is_global:
        t = t.to_global(placement=self.placement, sbp=[_gflow.broadcast] * len(self.sbp))
    return t


def select(self, dim, index):
    """The slice at ``index`` of ``dim``, that dim removed."""
    n = self.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"select: index {index} is out of range for dim {dim} of size {n}")
    return self.narrow(dim, index % n, 1).squeeze(dim)


def unbind(self, dim=0):
    """The slices along ``dim``, each without it, as a tuple."""
    return tuple(select(self, dim, i) for i in range(self.shape[dim]))


def is_contiguous(self, memory_format=None):
    """Always true: gflow tensors are dense and row-major."""
    return True


def reciprocal(self):
    """``1 / self`` (integers give floats, as PyTorch)."""
    x = self if self.is_floating_point() else self.to(_gflow.float32)
    return 1.0 / x


def isnan(self):
    """Where ``self`` is NaN (bool)."""
    return self != self


def isinf(self):
    """Where ``self`` is infinite (bool; never for integers)."""
    if not self.is_floating_point():
        return self != self
    return self.abs() == math.inf


def isfinite(self):
    """Where ``self`` is neither NaN nor infinite (bool)."""
    return (self == self).logical_and(isinf(self).logical_not())


def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
    """The vector ``p``-norm over ``dim`` (all dims when ``None``): ``"fro"`` and 2 the
    Euclidean, 1 the sum of magnitudes, ``inf``/``-inf`` the largest/smallest magnitude, 0 the
    count of non-zeros, any other ``p`` ``sum(|x|^p)^(1/p)``."""
    x = self if dtype is None else self.to(dtype)
    if not x.is_floating_point():
        raise TypeError(f"norm: expected a floating point tensor, got {x.dtype}")
    dims = dim if dim is None or isinstance(dim, (tuple, list)) else (dim,)
    kw = {"keepdim": keepdim} if dims is None else {"dim": tuple(dims), "keepdim": keepdim}
    if p in ("fro", 2, 2.0):
        return (x * x).sum(**kw).sqrt()
    if p in (1, 1.0):
        return x.abs().sum(**kw)
    if p == math.inf:
        return x.abs().amax(**kw)
    if p == -math.inf:
        return x.abs().amin(**kw)
    if p == 0:
        return (x != 0).to(x.dtype).sum(**kw)
    if isinstance(p, str):
        raise ValueError(f"norm: unsupported p {p!r} (vector norms only: numbers and 'fro')")
    return x.abs().pow(p).sum(**kw).pow(1.0 / p)


for _name in ("expand_as view_as type_as new_full new_zeros new_ones new_empty new_tensor select "
              "unbind is_contiguous reciprocal isnan isinf isfinite norm").split():
    setattr(Tensor, _name, globals()[_name])
del _name


def eye(n, m=None, *, dtype=None, placement=None, sbp=None, device=None, requires_grad=False):
    """The ``n`` x ``m`` (square when ``m`` is ``None``) identity: ones on the diagonal."""
    m = n if m is None else m
    kw = {"placement": placement, "sbp": sbp} if placement is not None else {"device": device}
    rows = _gflow.arange(n, **kw).unsqueeze(1)
    cols = _gflow.arange(m, **kw).unsqueeze(0)
    out = (rows == cols).to(_gflow.float32 if dtype is None else dtype)
    out.requires_grad = requires_grad
    return out


def outer(input, vec2):
    """The outer product of two vectors: ``input[i] * vec2[j]``."""
    return input.unsqueeze(1) * vec2.unsqueeze(0)


def equal(input, other):
    """Whether the two tensors have one shape and equal elements (a global one's comparison is
    collective)."""
    return tuple(input.shape) == tuple(other.shape) and bool((input == other).all().item())


def isclose(input, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    """Where ``|input - other| <= atol + rtol * |other|`` (bool; NaNs equal when
    ``equal_nan``), as PyTorch."""
    close = (input - other).abs() <= atol + rtol * other.abs()
    close = close.logical_or(input == other)
    if equal_nan:
        close = close.logical_or(isnan(input).logical_and(isnan(other)))
    return close


__all__ = ["eye", "outer", "norm", "equal", "isclose"]
