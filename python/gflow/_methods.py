"""Tensor methods and functions written in Python over gflow's operators (so each is
differentiable where its parts are, and works on global tensors, every rank calling it), with
PyTorch's names and semantics: ``expand_as view_as type_as new_zeros new_ones new_full
new_empty new_tensor unbind select is_contiguous reciprocal isnan isinf isfinite norm``, the
shape, linear-algebra and math sugar ``broadcast_to roll diag diagonal trace tile
repeat_interleave unflatten dot addmm baddbmm lerp addcmul addcdiv true_divide log2 log10 sinh
cosh fmod diff count_nonzero dist softplus nelement ndimension element_size type``, the
value-dependent ``masked_select nonzero argwhere``, and
``flow.eye outer norm equal isclose hstack vstack einsum``."""

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
        return _root_of_sum((x * x).sum(**kw), Tensor.sqrt)
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
    return _root_of_sum(x.abs().pow(p).sum(**kw), lambda s: s.pow(1.0 / p))


def _root_of_sum(s, root):
    """``root(s)`` of a sum of powers of magnitudes ``s``, with PyTorch's norm gradient where
    ``s`` is 0 (zero, where the root's own derivative would make it NaN): the root is taken of
    ``1`` there and the result replaced by ``0``, so no gradient reaches that branch."""
    zero = s == 0
    return _gflow.where(zero, 0.0, root(_gflow.where(zero, 1.0, s)))


for _name in ("expand_as view_as type_as new_full new_zeros new_ones new_empty new_tensor select "
              "unbind is_contiguous reciprocal isnan isinf isfinite norm").split():
    setattr(Tensor, _name, globals()[_name])
del _name


def _dim(dim, ndim):
    """``dim`` (negative from the end) as an index into ``ndim`` dims (a 0-d tensor takes 0 and
    -1, as PyTorch), else gflow's ``DimOutOfRangeError``."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise _gflow.DimOutOfRangeError(
            f"dim: dimension {dim} is out of range for a tensor with {ndim} dimensions")
    return dim % n


def _prod(sizes):
    """The product of ``sizes`` (1 for none)."""
    out = 1
    for s in sizes:
        out *= s
    return out


def broadcast_to(self, size):
    """``self`` expanded to ``size`` (-1 keeps a dim; new leading dims allowed)."""
    return self.expand(*size)


def roll(self, shifts, dims=None):
    """Elements shifted by ``shifts`` along ``dims`` with wrap-around (the flattened tensor when
    ``dims`` is ``None``), as ``torch.roll``."""
    shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
    if dims is None:
        if len(shifts) != 1:
            raise _gflow.InvalidArgumentError(
                f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims:0")
        return roll(self.flatten(), shifts, 0).reshape(*self.shape)
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims):
        raise _gflow.InvalidArgumentError(
            f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    out = self
    for s, d in zip(shifts, dims):
        d = _dim(d, out.dim())
        n = out.shape[d]
        s = s % n if n else 0
        if s:
            out = _gflow.cat([out.narrow(d, n - s, s), out.narrow(d, 0, n - s)], d)
    return out


def _diagonal_last(x, offset):
    """The ``offset`` diagonal of the last two dims of ``x``, as a last dim: the square block
    on it read with stride ``L + 1`` (a reshape, so any dtype, and no arithmetic on the
    elements off it)."""
    *lead, rows, cols = x.shape
    r0, c0 = max(-offset, 0), max(offset, 0)
    n = max(0, min(rows - r0, cols - c0))
    if n == 0:
        return x.narrow(-1, 0, 0).reshape(*lead, 0)
    square = x.narrow(-2, r0, n).narrow(-1, c0, n).reshape(*lead, n * n)
    padded = _gflow.cat([square, new_zeros(square, *lead, n)], -1)
    return padded.reshape(*lead, n, n + 1).narrow(-1, 0, 1).squeeze(-1)


def diagonal(self, offset=0, dim1=0, dim2=1):
    """The ``offset`` diagonal over ``dim1`` and ``dim2`` (both removed, the diagonal a new
    last dim), as ``torch.diagonal``."""
    nd = self.dim()
    d1, d2 = _dim(dim1, nd), _dim(dim2, nd)
    if d1 == d2:
        raise _gflow.InvalidArgumentError(
            f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [d for d in range(nd) if d not in (d1, d2)]
    return _diagonal_last(self.permute(*rest, d1, d2), offset)


def diag(self, diagonal=0):
    """A 1-D tensor as the ``diagonal`` of a square matrix of zeros, or a 2-D tensor's
    ``diagonal`` as a 1-D tensor, as ``torch.diag``."""
    if self.dim() == 2:
        return _diagonal_last(self, diagonal)
    if self.dim() != 1:
        raise _gflow.ShapeError(f"diag(): Supports 1D or 2D tensors. Got {self.dim()}D")
    k = abs(diagonal)
    m = self.shape[0] + k
    v = _gflow.cat([self, new_zeros(self, k)]) if k else self
    idx = _gflow.arange(m, **where(self))
    on = (idx.unsqueeze(0) - idx.unsqueeze(1)) == diagonal  # [r, c]: c - r == diagonal
    values = v.unsqueeze(1) if diagonal >= 0 else v.unsqueeze(0)
    return _gflow.where(on, values, new_zeros(self, ()))


def trace(self):
    """The sum of a matrix's main diagonal."""
    if self.dim() != 2:
        raise _gflow.ShapeError(f"trace: expected a matrix, but got tensor with dim {self.dim()}")
    return _diagonal_last(self, 0).sum()


def tile(self, *dims):
    """``self`` repeated ``dims`` times per dim, ``dims`` padded with leading 1s (or ``self``
    with leading size-1 dims) to the same length, as ``torch.tile``."""
    dims = _size(dims)
    nd = self.dim()
    x = self.reshape(*([1] * (len(dims) - nd)), *self.shape) if len(dims) > nd else self
    return x.repeat(*([1] * (nd - len(dims))), *dims)


def repeat_interleave(self, repeats, dim=None):
    """Each element (each slice along ``dim``; of the flattened tensor when ``dim`` is
    ``None``) repeated ``repeats`` times in place: an int, or a tensor of one count per slice
    (read to the host: the output's size depends on it)."""
    x = self.flatten() if dim is None else self
    d = _dim(0 if dim is None else dim, x.dim())
    if isinstance(repeats, Tensor):
        counts = repeats.reshape(-1).tolist()
        if len(counts) == 1:
            repeats = counts[0]
        else:
            if len(counts) != x.shape[d]:
                raise _gflow.ShapeError(
                    f"repeat_interleave: repeats must have the same size as input along dim, "
                    f"but got repeats.size(0) = {len(counts)} and input.size({d}) = "
                    f"{x.shape[d]}")
            if any(c < 0 for c in counts):
                raise _gflow.InvalidArgumentError("repeat_interleave: repeats must be "
                                                  "non-negative")
            index = [i for i, c in enumerate(counts) for _ in range(c)]
            return x.index_select(d, new_tensor(x, index, dtype=_gflow.int64))
    if repeats < 0:
        raise _gflow.InvalidArgumentError(
            f"repeat_interleave: repeats must be non-negative, got {repeats}")
    shape = list(x.shape)
    wide = x.unsqueeze(d + 1).expand(*shape[: d + 1], repeats, *shape[d + 1:])
    return wide.reshape(*shape[:d], shape[d] * repeats, *shape[d + 1:])


def unflatten(self, dim, sizes):
    """Dim ``dim`` split into ``sizes`` (one of them may be -1), as ``torch.unflatten``."""
    d = _dim(dim, self.dim())
    sizes = [int(s) for s in sizes]
    n, known = self.shape[d], _prod(s for s in sizes if s != -1)
    if sizes.count(-1) > 1:
        raise _gflow.InvalidArgumentError("unflatten: only one dimension can be inferred")
    fits = (known and n % known == 0) if -1 in sizes else known == n
    if not sizes or not fits:
        raise _gflow.ShapeError(f"unflatten: Provided sizes {sizes} don't multiply up to the "
                                f"size of dim {dim} ({n}) in the input tensor")
    shape = list(self.shape)
    return self.reshape(*shape[:d], *sizes, *shape[d + 1:])


def dot(self, other):
    """The inner product of two 1-D tensors of one length and dtype."""
    if self.dim() != 1 or other.dim() != 1:
        raise _gflow.ShapeError(
            f"1D tensors expected, but got {self.dim()}D and {other.dim()}D tensors")
    if self.shape[0] != other.shape[0]:
        raise _gflow.ShapeError(
            f"inconsistent tensor size, expected tensor [{self.shape[0]}] and src "
            f"[{other.shape[0]}] to have the same number of elements, but got "
            f"{self.shape[0]} and {other.shape[0]} elements respectively")
    if self.dtype != other.dtype:
        raise _gflow.DTypeError(f"dot : expected both vectors to have same dtype, but found "
                                f"{self.dtype} and {other.dtype}")
    return (self * other).sum()


def _scaled_sum(input, product, beta, alpha):
    """``beta * input + alpha * product``; ``input`` is ignored (NaNs too) when ``beta`` is 0,
    as PyTorch."""
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (input if beta == 1 else input * beta)


def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """``beta * self + alpha * (mat1 @ mat2)`` for 2-D ``mat1``, ``mat2``."""
    return _scaled_sum(self, mat1.mm(mat2), beta, alpha)


def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """``beta * self + alpha * bmm(batch1, batch2)`` for 3-D ``batch1``, ``batch2``."""
    return _scaled_sum(self, batch1.bmm(batch2), beta, alpha)


def lerp(self, end, weight):
    """``self + weight * (end - self)``, in PyTorch's two forms (``end - (end - self) * (1 -
    weight)`` for ``|weight| >= 0.5``) so ``weight == 1`` gives ``end`` exactly."""
    diff = end - self
    if isinstance(weight, Tensor):
        return _gflow.where(weight.abs() < 0.5, self + weight * diff, end - diff * (1 - weight))
    return self + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)


def addcmul(self, tensor1, tensor2, *, value=1):
    """``self + value * tensor1 * tensor2``."""
    return self + (tensor1 * tensor2 if value == 1 else value * tensor1 * tensor2)


def addcdiv(self, tensor1, tensor2, *, value=1):
    """``self + value * tensor1 / tensor2`` (integer ``tensor1`` and ``tensor2`` refused, as
    PyTorch)."""
    if not tensor1.is_floating_point() and not tensor2.is_floating_point():
        raise _gflow.DTypeError("Integer division with addcdiv is no longer supported; use "
                                "(input + value * tensor1 / tensor2) for a true division")
    return self + (tensor1 / tensor2 if value == 1 else value * tensor1 / tensor2)


def true_divide(self, other):
    """``self / other`` (integers give floats)."""
    return self / other


def log2(self):
    """The base-2 logarithm (``log(x) / ln 2``)."""
    return self.log() * (1.0 / math.log(2.0))


def log10(self):
    """The base-10 logarithm (``log(x) / ln 10``)."""
    return self.log() * (1.0 / math.log(10.0))


def cosh(self):
    """``(e^x + e^-x) / 2`` as ``e^(x - ln 2) + e^(-x - ln 2)``, finite wherever the result
    is."""
    half = math.log(2.0)
    return (self - half).exp() + (-self - half).exp()


def sinh(self):
    """``tanh(x / 2) * (1 + cosh(x))``: exact near 0, where ``(e^x - e^-x) / 2`` would cancel."""
    return (self * 0.5).tanh() * (cosh(self) + 1.0)


def fmod(self, other):
    """The remainder of ``self / other`` with the sign of the dividend (C's ``fmod``), unlike
    ``remainder``'s sign of the divisor: ``self - trunc(self / other) * other``."""
    return self - self.div(other, rounding_mode="trunc") * other


def diff(self, n=1, dim=-1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (``out[i] = x[i + 1] - x[i]``, XOR for
    bool), after joining ``prepend`` and ``append`` along it, as ``torch.diff``."""
    if self.dim() == 0:
        raise _gflow.ShapeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise _gflow.InvalidArgumentError(f"order must be non-negative but got {n}")
    d = _dim(dim, self.dim())
    parts = [t for t in (prepend, self, append) if t is not None]
    x = _gflow.cat(parts, d) if len(parts) > 1 else self
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi, lo = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
        x = hi.logical_xor(lo) if x.dtype == _gflow.bool else hi - lo
    return x


def count_nonzero(self, dim=None):
    """The number of non-zero elements (over ``dim``, an int or a tuple), int64."""
    nonzero = self != 0
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return nonzero.sum()
    return nonzero.sum(dim)


def dist(self, other, p=2):
    """The ``p``-norm of ``self - other`` (broadcast), a 0-d tensor."""
    return norm(self - other, p)


def _log1pexp(z):
    """``log(1 + e^z)`` without overflow: ``relu(z) + log(1 + e^-|z|)``, its two kinks written so
    that the gradient at 0 is sigmoid(0) = 0.5, as PyTorch's."""
    up = z > 0
    return _gflow.where(up, z, 0.0) + _gflow.where(up, -z, z).exp().add(1.0).log()


def softplus(self, beta=1.0, threshold=20.0):
    """``log(1 + e^(beta x)) / beta`` computed stably, and ``x`` itself where ``beta x >
    threshold``, as PyTorch's."""
    z = self * beta if beta != 1 else self
    soft = _log1pexp(z) if beta == 1 else _log1pexp(z) / beta
    return _gflow.where(z > threshold, self, soft)


def nelement(self):
    """The number of elements (``numel``)."""
    return self.numel()


def ndimension(self):
    """The number of dims (``dim``)."""
    return self.dim()


_TYPE_NAMES = (
    (_gflow.float32, "FloatTensor", 4), (_gflow.float64, "DoubleTensor", 8),
    (_gflow.float16, "HalfTensor", 2), (_gflow.bfloat16, "BFloat16Tensor", 2),
    (_gflow.int64, "LongTensor", 8), (_gflow.int32, "IntTensor", 4),
    (_gflow.bool, "BoolTensor", 1),
)


def element_size(self):
    """Bytes per element of ``self``'s dtype."""
    return next(size for dt, _, size in _TYPE_NAMES if dt == self.dtype)


def _type(self, dtype=None, non_blocking=False):
    """Without ``dtype``, the tensor type's name, OneFlow's way with gflow's package name:
    ``"gflow.FloatTensor"``, ``"gflow.cuda.LongTensor"``; with one, ``self`` cast to it (a
    ``flow.dtype``, or a name such as ``"torch.DoubleTensor"`` or ``"gflow.cuda.HalfTensor"``,
    which also moves a local tensor to that device type); ``non_blocking`` is PyTorch's, and
    without effect here."""
    if dtype is None:
        kind = self.device.type
        name = next(n for dt, n, _ in _TYPE_NAMES if dt == self.dtype)
        return "gflow." + ("" if kind == "cpu" else kind + ".") + name
    if not isinstance(dtype, str):
        return self.to(dtype)
    *package, name = dtype.split(".")
    target = next((dt for dt, n, _ in _TYPE_NAMES if n == name), None)
    if target is None or len(package) not in (1, 2):
        raise ValueError(f"invalid type: {dtype!r}")
    kind = package[1] if len(package) == 2 else "cpu"
    out = self.to(target)
    if kind != self.device.type:
        if self.is_global:
            raise _gflow.DeviceError(f"type({dtype!r}): a global tensor on a {self.device.type} "
                                     f"placement stays there; use to_global(placement=...)")
        out = out.to(kind)
    return out


def _broadcast_shape(a, b):
    """NumPy's broadcast shape of two shapes (PyTorch's ``RuntimeError`` when they clash)."""
    import numpy as np

    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError as e:
        raise _gflow.ShapeError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast") from e


def masked_select(self, mask):
    """The elements of ``self`` where ``mask`` (Bool, broadcasting with ``self``) is true, as a
    1-D tensor, as ``torch.masked_select``; differentiable (an ``index_select`` of positions
    read from the mask: for a global mask a collective, as ``numpy()``)."""
    if mask.dtype != _gflow.bool:
        raise _gflow.DTypeError(f"masked_select: expected a bool mask, got {mask.dtype}")
    shape = _broadcast_shape(self.shape, mask.shape)
    return self.expand(*shape)[mask.expand(*shape)]


def nonzero(self, *, as_tuple=False):
    """The indices of the nonzero elements, as ``torch.nonzero``: an int64 tensor of shape
    ``(n, ndim)`` in row-major order, or with ``as_tuple`` one 1-D tensor per dim. The count
    depends on the values, which are read (for a global tensor a collective, as ``numpy()``);
    the result is placed where ``self`` is (broadcast)."""
    import numpy as np

    hits = np.nonzero(np.atleast_1d(self.numpy()))
    if as_tuple:
        return tuple(_gflow.tensor(h.astype(np.int64), **where(self)) for h in hits)
    if self.dim() == 0:
        return _gflow.tensor(np.zeros((len(hits[0]), 0), np.int64), **where(self))
    return _gflow.tensor(np.stack(hits, axis=1).astype(np.int64).reshape(-1, self.dim()),
                         **where(self))


def argwhere(self):
    """``nonzero(self)``: the ``(n, ndim)`` indices of the nonzero elements."""
    return nonzero(self)


for _name in ("broadcast_to roll diagonal diag trace tile repeat_interleave unflatten dot addmm "
              "baddbmm lerp addcmul addcdiv true_divide log2 log10 cosh sinh fmod diff "
              "count_nonzero dist softplus nelement ndimension element_size masked_select nonzero "
              "argwhere").split():
    setattr(Tensor, _name, globals()[_name])
del _name
Tensor.type = _type


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


def hstack(tensors):
    """The tensors joined along dim 1 (along dim 0 when they are 1-D; 0-d ones become 1-D),
    as ``torch.hstack``."""
    parts = [t.reshape(1) if t.dim() == 0 else t for t in tensors]
    return _gflow.cat(parts, 0 if parts[0].dim() == 1 else 1)


def vstack(tensors):
    """The tensors joined along dim 0, each made at least 2-D first (``(n,)`` as ``(1, n)``),
    as ``torch.vstack``."""
    return _gflow.cat([t.reshape(1, -1) if t.dim() < 2 else t for t in tensors], 0)


def _einsum_error(message):
    return _gflow.InvalidArgumentError("einsum(): " + message)


def _einsum_term(term, where_):
    """A term's letters before and after its ellipsis, and whether it has one."""
    if term.count("...") > 1 or "." in term.replace("...", "", 1):
        raise _einsum_error(f"found '.' for {where_} that is not part of any ellipsis")
    head, dots, tail = term.partition("...")
    for c in head + tail:
        if not (c.isascii() and c.isalpha()):
            raise _einsum_error(f"invalid subscript {c!r} given for {where_}, subscripts must "
                                "be in [a-zA-Z]")
    return list(head), bool(dots), list(tail)


def _einsum_diagonals(x, ls, i):
    """Operand ``i`` with each label repeated in it (``"ii"``) taken once, as its diagonal."""
    for l in [l for l in dict.fromkeys(ls) if ls.count(l) > 1]:
        while ls.count(l) > 1:
            p = ls.index(l)
            q = ls.index(l, p + 1)
            if x.shape[p] != x.shape[q]:
                raise _einsum_error(f"subscript {l} is repeated for operand {i} but the sizes "
                                    f"don't match, {x.shape[q]} != {x.shape[p]}")
            x = diagonal(x, 0, p, q)
            ls = [m for j, m in enumerate(ls) if j not in (p, q)] + [l]
    return x, ls


def _einsum_reduce(x, ls, keep):
    """``x`` summed over its labels not in ``keep``."""
    dims = [j for j, l in enumerate(ls) if l not in keep]
    if not dims:
        return x, ls
    return x.sum(tuple(dims)), [l for l in ls if l in keep]


def _einsum_contract(a, la, b, lb, keep, sizes):
    """Operands ``a`` and ``b`` (their labels ``la``, ``lb``) as one: labels in both are
    summed over unless in ``keep`` (later operands and the output), with a (batched) matmul,
    or multiplied elementwise when none are summed."""
    batch = [l for l in la if l in lb and l in keep]
    summed = [l for l in la if l in lb and l not in keep]
    only_a = [l for l in la if l not in lb]
    only_b = [l for l in lb if l not in la]
    a = a.permute(*[la.index(l) for l in batch + only_a + summed]) if la else a
    b = b.permute(*[lb.index(l) for l in batch + summed + only_b]) if lb else b
    nb, na, ns = len(batch), len(only_a), len(summed)
    if not summed:
        a = a.reshape(*a.shape, *[1] * len(only_b))
        b = b.reshape(*b.shape[:nb], *[1] * na, *b.shape[nb:])
        return a * b, batch + only_a + only_b
    # the summed dims are broadcast to one size in both, then flattened into one
    a = a.expand(*a.shape[: nb + na], *[sizes[l] for l in summed])
    b = b.expand(*b.shape[:nb], *[sizes[l] for l in summed], *b.shape[nb + ns:])
    a_rows, b_cols = list(a.shape[nb: nb + na]), list(b.shape[nb + ns:])
    k = _prod(sizes[l] for l in summed)
    a = a.reshape(*a.shape[:nb], _prod(a_rows), k)
    b = b.reshape(*b.shape[:nb], k, _prod(b_cols))
    out = a.matmul(b)
    return out.reshape(*out.shape[:nb], *a_rows, *b_cols), batch + only_a + only_b


def einsum(equation, *operands):
    """``torch.einsum``: the sum of products of ``operands`` over the labels of ``equation``
    not in its output (``"ij,jk->ik"``; without ``->`` the output is the labels seen once, in
    alphabetical order; ``...`` stands for broadcast dims; a label repeated in one operand takes
    its diagonal), from left to right with permutes, reshapes, sums, elementwise products and
    matmuls, so it runs on global tensors and is differentiable."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise _einsum_error(f"the equation has {len(terms)} operands, but {len(operands)} were "
                            "provided")
    parsed = [_einsum_term(t, f"operand {i}") for i, t in enumerate(terms)]
    spans = []
    for i, ((head, dots, tail), x) in enumerate(zip(parsed, operands)):
        span = x.dim() - len(head) - len(tail)
        if span < 0 or (span and not dots):
            raise _einsum_error(
                f"the number of subscripts in the equation ({len(head) + len(tail)}) does not "
                f"match the number of dimensions ({x.dim()}) for operand {i}"
                + ("" if dots else " and no ellipsis was given"))
        spans.append(span)
    # an ellipsis' dims are labels 0.. (ints), aligned from the right across operands
    width = max(spans)
    labels = [head + list(range(width - s, width)) + tail
              for (head, _, tail), s in zip(parsed, spans)]
    if arrow:
        head, dots, tail = _einsum_term(rhs, "the output")
        out = head + (list(range(width)) if dots else []) + tail
        for l in set(out):
            if out.count(l) > 1:
                raise _einsum_error(f"output subscript {l} appears more than once in the output")
            if not any(l in ls for ls in labels):
                raise _einsum_error(f"output subscript {l} does not appear in the equation for "
                                    "any input operand")
    else:
        counts = {}
        for ls in labels:
            for l in ls:
                counts[l] = counts.get(l, 0) + 1
        out = list(range(width)) + sorted(l for l, c in counts.items()
                                          if c == 1 and isinstance(l, str))
    xs = [_einsum_diagonals(x, list(ls), i) for i, (x, ls) in enumerate(zip(operands, labels))]
    sizes = {}
    for i, (x, ls) in enumerate(xs):
        for l, n in zip(ls, x.shape):
            seen = sizes.get(l, 1)
            if n != seen and 1 not in (n, seen):
                raise _einsum_error(f"subscript {l} has size {n} for operand {i} which does not "
                                    f"broadcast with previously seen size {seen}")
            sizes[l] = max(n, seen) if 0 not in (n, seen) else 0
    # each step keeps the labels of the output and of the operands not yet taken in
    needed = [set(out).union(*(ls for _, ls in xs[i:])) for i in range(1, len(xs) + 1)]
    x, ls = _einsum_reduce(*xs[0], needed[0])
    for i in range(1, len(xs)):
        y, ly = _einsum_reduce(*xs[i], needed[i] | set(ls))
        x, ls = _einsum_contract(x, ls, y, ly, needed[i], sizes)
    return x.permute(*[ls.index(l) for l in out]) if out else x


__all__ = ["eye", "outer", "norm", "equal", "isclose", "hstack", "vstack", "einsum"]
