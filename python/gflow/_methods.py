"""Tensor methods and functions written in Python over gflow's operators (so each is
differentiable where its parts are, and works on global tensors, every rank calling it), with
PyTorch's names and semantics: ``expand_as view_as type_as new_zeros new_ones new_full
new_empty new_tensor unbind select is_contiguous reciprocal isnan isinf isfinite norm``, the
shape, linear-algebra and math sugar ``broadcast_to roll diag diagonal trace tile
repeat_interleave unflatten dot addmm baddbmm lerp addcmul addcdiv true_divide log2 log10 sinh
cosh diff count_nonzero dist softplus nelement ndimension element_size type``, the
value-dependent ``masked_select nonzero argwhere``, and
``flow.eye outer norm equal isclose hstack vstack einsum``; and ``movedim moveaxis swapaxes
swapdims take_along_dim tensordot mv reshape_as tensor_split nan_to_num nansum nanmean isposinf
isneginf logaddexp logit clamp_min clamp_max floor_divide float_power exp2 var_mean std_mean
aminmax median nanmedian kthvalue quantile nanquantile cummax cummin unique index_add index_fill
scatter isin hypot logcumsumexp``, ``Tensor.softmax`` / ``log_softmax`` with ``dtype=``, bool
tensors to bool powers, ``index_add_ index_fill_ scatter_ hypot_`` and the in-place unary
methods ``abs_ neg_ exp_ log_ sqrt_ rsqrt_ sigmoid_ tanh_ relu_ sin_ cos_ floor_ ceil_ round_
trunc_ sign_ reciprocal_ square_ pow_ log1p_ expm1_ clamp_min_ clamp_max_ nan_to_num_`` (each
``self.copy_(op(self))``)."""

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


_FLOAT_MAX = ((_gflow.float16, 65504.0), (_gflow.bfloat16, 3.3895313892515355e38),
              (_gflow.float32, 3.4028234663852886e38))
_INT_RANGE = ((_gflow.int32, -2 ** 31, 2 ** 31 - 1), (_gflow.int64, -2 ** 63, 2 ** 63 - 1))


def _scalar_as(value, dtype, name):
    """The number ``value`` as a tensor of ``dtype`` holds it, as PyTorch casts a scalar
    argument (a fill value, ``alpha``, ...) to the tensor's dtype, so the result keeps that
    dtype: ``value != 0`` for bool, truncated toward zero for integers (7.5 is 7); NaN, an
    infinity for an integer, or a finite value beyond the dtype's range is refused, as
    PyTorch's "value cannot be converted ... without overflow"."""
    import numbers

    if dtype == _gflow.bool:
        return bool(value)
    for dt, lo, hi in _INT_RANGE:
        if dtype == dt:
            v = int(value) if isinstance(value, numbers.Integral) else float(value)
            if v != v or not lo <= v < hi + 1:
                raise _gflow.InvalidValueError(
                    f"{name}: value {value} cannot be converted to type {dtype} without overflow")
            return int(v)
    v = float(value)
    for dt, top in _FLOAT_MAX:
        if dtype == dt and math.isfinite(v) and abs(v) > top:
            raise _gflow.InvalidValueError(
                f"{name}: value {value} cannot be converted to type {dtype} without overflow")
    return v


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
    if x.dtype in (_gflow.float16, _gflow.bfloat16):
        # powers of 16-bit values pass f16's 65504 long before their norm does: in float32,
        # rounded once (as PyTorch)
        return norm(x.to(_gflow.float32), p, dim, keepdim).to(x.dtype)
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


def repeat_interleave(self, repeats=None, dim=None, *, output_size=None):
    """Each element (each slice along ``dim``; of the flattened tensor when ``dim`` is
    ``None``) repeated ``repeats`` times in place: an int, or a tensor of one count per slice
    (read to the host: the output's size depends on it). ``output_size`` is PyTorch's hint
    (checked). With no ``repeats``, ``self`` holds the counts and the result is the
    positions, each repeated as often (``repeat_interleave(tensor([1, 2]))`` is
    ``[0, 1, 1]``)."""
    if repeats is None:
        positions = _gflow.arange(self.numel(), **where(self))
        return repeat_interleave(positions, self, output_size=output_size)
    out = _repeat_interleave(self, repeats, dim)
    if output_size is not None and out.shape[0 if dim is None else _dim(dim, out.dim())] \
            != output_size:
        raise _gflow.InvalidArgumentError(
            f"repeat_interleave: output_size {output_size} differs from the result's "
            f"{out.shape[0 if dim is None else _dim(dim, out.dim())]}")
    return out


def _repeat_interleave(self, repeats, dim):
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
    out = (self * other).sum()
    # ``sum`` widens integers to int64; PyTorch's dot keeps the vectors' dtype (int32 wraps)
    return out if out.dtype == self.dtype or self.dtype == _gflow.bool else out.to(self.dtype)


def _scaled_sum(input, product, beta, alpha, name):
    """``beta * input + alpha * product``; ``input`` is ignored (NaNs too) when ``beta`` is 0,
    as PyTorch. For integer tensors ``beta`` and ``alpha`` are truncated toward zero first (0.5
    is 0), as PyTorch casts them to the result's dtype, which so stays an integer one."""
    if not input.is_floating_point() and not product.is_floating_point():
        dt = input.dtype if input.dtype == product.dtype else _gflow.int64
        beta, alpha = _scalar_as(beta, dt, name), _scalar_as(alpha, dt, name)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (input if beta == 1 else input * beta)


def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """``beta * self + alpha * (mat1 @ mat2)`` for 2-D ``mat1``, ``mat2``."""
    return _scaled_sum(self, mat1.mm(mat2), beta, alpha, "addmm")


def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """``beta * self + alpha * bmm(batch1, batch2)`` for 3-D ``batch1``, ``batch2``."""
    return _scaled_sum(self, batch1.bmm(batch2), beta, alpha, "baddbmm")


def lerp(self, end, weight):
    """``self + weight * (end - self)``, in PyTorch's two forms (``end - (end - self) * (1 -
    weight)`` for ``|weight| >= 0.5``) so ``weight == 1`` gives ``end`` exactly."""
    diff = end - self
    if isinstance(weight, Tensor):
        return _gflow.where(weight.abs() < 0.5, self + weight * diff, end - diff * (1 - weight))
    return self + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)


def addcmul(self, tensor1, tensor2, *, value=1):
    """``self + value * tensor1 * tensor2`` in the three's promoted dtype, as PyTorch: integer
    factors with a floating ``self`` are multiplied in ``self``'s dtype (float16 stays
    float16), and for an integer result ``value`` is truncated toward zero (0.5 adds nothing);
    bool refused, as PyTorch."""
    prod = tensor1 * tensor2
    if not prod.is_floating_point():
        if self.is_floating_point():
            prod = prod.to(self.dtype)
        elif self.dtype == _gflow.bool and prod.dtype == _gflow.bool:
            raise _gflow.DTypeNotImplementedError(
                '"addcmul_cpu_out" not implemented for \'Bool\'')
        else:
            dt = self.dtype if self.dtype == prod.dtype else _gflow.int64
            value = _scalar_as(value, dt, "addcmul")
    return self + (prod if value == 1 else value * prod)


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


def _powers(base, like, exact_float64):
    """The powers ``base ** k`` that ``like``'s dtype holds exactly, as ``(lowest k, a tensor
    of them in like's dtype)``: every power of 2 from the smallest subnormal to the largest
    finite one, powers of 10 from 10^0 up to 10^22 in float64 (10^10 in float32)."""
    if base == 2:
        lo, hi = (-1074, 1023) if exact_float64 else (-149, 127)
    else:
        lo, hi = 0, (22 if exact_float64 else 10)
    values = [math.ldexp(1.0, k) if base == 2 else float(10 ** k) for k in range(lo, hi + 1)]
    return lo, _gflow._constant(values, dtype=like.dtype, **where(like))


def _log_exact(self, base):
    """``log(x) / ln(base)``, and exactly ``k`` where ``x`` is ``base ** k`` (``log10(1000)``
    is 3, not 2.9999998, as PyTorch's ``log10``/``log2``, whose kernels are exact there); the
    gradient ``1 / (x ln base)`` throughout."""
    x = _float(self)
    y = x.log() * (1.0 / math.log(base))
    lo, table = _powers(base, x, x.dtype == _gflow.float64)
    k = y.detach().round()
    inside = (k >= lo).logical_and(k < lo + table.numel())
    at = _gflow.where(inside, k - lo, 0).to(_gflow.int64).reshape(-1)
    exact = inside.logical_and(table.gather(0, at).reshape(*x.shape) == x.detach())
    return y + _gflow.where(exact, k - y.detach(), 0.0)


def log2(self):
    """The base-2 logarithm, exact at powers of 2 (``log(x) / ln 2`` elsewhere)."""
    return _log_exact(self, 2)


def log10(self):
    """The base-10 logarithm, exact at powers of 10 (``log(x) / ln 10`` elsewhere)."""
    return _log_exact(self, 10)


def cosh(self):
    """``(e^x + e^-x) / 2`` as ``e^(x - ln 2) + e^(-x - ln 2)``, finite wherever the result
    is."""
    half = math.log(2.0)
    x = _float(self)
    return (x - half).exp() + (-x - half).exp()


def sinh(self):
    """``tanh(x / 2) * (1 + cosh(x))``: exact near 0, where ``(e^x - e^-x) / 2`` would cancel."""
    x = _float(self)
    return (x * 0.5).tanh() * (cosh(x) + 1.0)


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
        return tuple(_gflow._constant(h.astype(np.int64), **where(self)) for h in hits)
    if self.dim() == 0:
        return _gflow._constant(np.zeros((len(hits[0]), 0), np.int64), **where(self))
    return _gflow._constant(np.stack(hits, axis=1).astype(np.int64).reshape(-1, self.dim()),
                            **where(self))


def argwhere(self):
    """``nonzero(self)``: the ``(n, ndim)`` indices of the nonzero elements."""
    return nonzero(self)


for _name in ("broadcast_to roll diagonal diag trace tile repeat_interleave unflatten dot addmm "
              "baddbmm lerp addcmul addcdiv true_divide log2 log10 cosh sinh diff "
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
    """Where ``input == other`` or ``|input - other|`` is finite and at most ``atol + |rtol *
    other|`` (bool; NaNs equal when ``equal_nan``), as PyTorch's: bool tensors are compared as
    float32 (``-`` refuses bool), and zero tolerances mean equality."""
    if rtol < 0 or atol < 0:
        raise _gflow.InvalidArgumentError(
            f"{'rtol' if rtol < 0 else 'atol'} must be greater than or equal to zero, but got "
            f"{rtol if rtol < 0 else atol}")
    close = input == other
    if equal_nan and input.is_floating_point():
        close = close.logical_or(isnan(input).logical_and(isnan(other)))
    if rtol == 0 and atol == 0:
        return close
    a = input.to(_gflow.float32) if input.dtype == _gflow.bool else input
    b = other.to(_gflow.float32) if other.dtype == _gflow.bool else other
    actual = (a - b).abs()
    return close.logical_or(isfinite(actual).logical_and(actual <= atol + (rtol * b).abs()))


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




# --- shape and linear-algebra sugar: movedim moveaxis swapaxes swapdims take_along_dim tensordot
# mv reshape_as tensor_split ---


def _dims(dims):
    return list(dims) if isinstance(dims, (tuple, list)) else [dims]


def movedim(self, source, destination):
    """``self`` with the dims ``source`` moved to the positions ``destination`` (ints or
    sequences), the other dims keeping their order, as ``torch.movedim``."""
    src, dst = _dims(source), _dims(destination)
    nd = self.dim()
    if len(src) != len(dst):
        raise _gflow.InvalidArgumentError(
            f"movedim: Invalid source or destination dims: source ({src} dims) should contain "
            f"the same number of dims as destination ({dst} dims)")
    if nd == 0:
        # a 0-d tensor takes dims 0 and -1, and moving them changes nothing (PyTorch's)
        for d in (*src, *dst):
            _dim(d, 1)
        return self
    src = [_dim(d, nd) for d in src]
    dst = [_dim(d, nd) for d in dst]
    if len(set(src)) != len(src):
        raise _gflow.InvalidArgumentError(f"movedim: repeated dim in `source` ({source})")
    if len(set(dst)) != len(dst):
        raise _gflow.InvalidArgumentError(f"movedim: repeated dim in `destination` ({destination})")
    order = [None] * nd
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(nd) if d not in src)
    order = [next(rest) if o is None else o for o in order]
    return self.permute(*order)


def moveaxis(self, source, destination):
    """``movedim`` (NumPy's name)."""
    return movedim(self, source, destination)


def swapaxes(self, axis0, axis1):
    """``self`` with two dims exchanged (``transpose``)."""
    return self.transpose(axis0, axis1)


def swapdims(self, dim0, dim1):
    """``self`` with two dims exchanged (``transpose``)."""
    return self.transpose(dim0, dim1)


def take_along_dim(self, indices, dim=None):
    """The elements of ``self`` at ``indices`` along ``dim`` (the two broadcast over the other
    dims), or of the flattened ``self`` when ``dim`` is ``None``, as ``torch.take_along_dim``;
    differentiable in ``self``."""
    if indices.dtype != _gflow.int64:
        raise _gflow.DTypeError(
            f"take_along_dim(): dtype of indices should be int64 but got {indices.dtype}")
    if dim is None:
        flat = indices.reshape(-1)
        flat = _gflow.where(flat < 0, flat + self.numel(), flat)
        return self.reshape(-1).gather(0, flat)
    if self.dim() != indices.dim():
        raise _gflow.ShapeError(
            "take_along_dim(): input and indices should have the same number of dimensions, "
            f"but got {self.dim()} dimensions for input, and {indices.dim()} dimensions for "
            "indices")
    d = _dim(dim, self.dim())
    # negative indices count from the end of the dim, as PyTorch's
    indices = _gflow.where(indices < 0, indices + self.shape[d], indices)
    a, b = list(self.shape), list(indices.shape)
    a[d] = b[d] = 1
    shape = list(_broadcast_shape(a, b))
    sa, sb = list(shape), list(shape)
    sa[d], sb[d] = self.shape[d], indices.shape[d]
    return self.expand(*sa).gather(d, indices.expand(*sb))


def tensordot(a, b, dims=2, out=None):
    """The sum of products of ``a`` and ``b`` over the last ``dims`` dims of ``a`` and the first
    of ``b`` (an int), or over the dims listed in ``dims = (dims_a, dims_b)``, as
    ``torch.tensordot``: a permute, reshape and one matmul."""
    if out is not None:
        raise _gflow.InvalidArgumentError("tensordot: out= is not supported")
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise _gflow.InvalidArgumentError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > min(a.dim(), b.dim()):
            raise _gflow.InvalidArgumentError(
                f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        da, db = list(range(a.dim() - dims, a.dim())), list(range(dims))
    else:
        if len(dims) != 2:
            raise _gflow.InvalidArgumentError("tensordot expects dims to be a pair of lists")
        da, db = _dims(dims[0]), _dims(dims[1])
        if len(da) != len(db):
            raise _gflow.InvalidArgumentError(
                "both dimension lists should have same length")
        da = [_dim(d, a.dim()) for d in da]
        db = [_dim(d, b.dim()) for d in db]
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise _gflow.ShapeError(
                f"contracted dimensions need to match, but first has size {a.shape[i]} in dim "
                f"{i} and second has size {b.shape[j]} in dim {j}")
    ra = [d for d in range(a.dim()) if d not in da]
    rb = [d for d in range(b.dim()) if d not in db]
    k = _prod(a.shape[d] for d in da)
    left = a.permute(*ra, *da).reshape(_prod(a.shape[d] for d in ra), k) if a.dim() else \
        a.reshape(1, 1)
    right = b.permute(*db, *rb).reshape(k, _prod(b.shape[d] for d in rb)) if b.dim() else \
        b.reshape(1, 1)
    return left.matmul(right).reshape(*[a.shape[d] for d in ra], *[b.shape[d] for d in rb])


def mv(self, vec):
    """The matrix ``self`` (n, m) times the vector ``vec`` (m,): a vector (n,)."""
    if self.dim() != 2 or vec.dim() != 1:
        raise _gflow.ShapeError(
            f"vector + matrix @ vector expected, got {self.dim()}, {vec.dim()}")
    if self.shape[1] != vec.shape[0]:
        raise _gflow.ShapeError(
            f"size mismatch, got input ({self.shape[0]}), mat ({self.shape[0]}x{self.shape[1]}), "
            f"vec ({vec.shape[0]})")
    return self.matmul(vec)


def reshape_as(self, other):
    """``self`` reshaped to ``other``'s shape."""
    return self.reshape(*other.shape)


def tensor_split(self, indices_or_sections=None, dim=0, *, sections=None, indices=None):
    """``self`` split along ``dim`` into ``n`` near-equal parts (an int: the first ``size % n``
    one longer) or at the given indices (a sequence, or a 1-D int64 tensor; a 0-d one is a
    count), as ``torch.tensor_split``: a tuple of views (narrows)."""
    if self.dim() == 0:
        raise _gflow.ShapeError(
            "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    given = [v for v in (indices_or_sections, sections, indices) if v is not None]
    if len(given) != 1:
        raise TypeError("tensor_split() takes one of indices_or_sections, sections= or "
                        "indices=")
    d = _dim(dim, self.dim())
    n = self.shape[d]
    spec = given[0]
    if sections is not None and not isinstance(sections, int):
        raise TypeError(f"tensor_split(): sections must be an int, got {type(sections).__name__}")
    if indices is not None:
        spec = list(indices)
    if isinstance(spec, Tensor):
        if spec.dtype != _gflow.int64:
            raise _gflow.DTypeError(
                "tensor_split expected tensor_indices_or_sections to have dtype of long, but "
                f"got {spec.dtype}")
        if spec.dim() > 1:
            raise _gflow.ShapeError(
                "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                f"one-dimensional tensor, but got a tensor with {spec.dim()} dims")
        spec = spec.tolist()
    if isinstance(spec, int):
        if spec <= 0:
            raise _gflow.InvalidArgumentError(
                f"number of sections must be larger than 0, got {spec}")
        q, r = divmod(n, spec)
        bounds, at = [], 0
        for i in range(spec):
            bounds.append(at)
            at += q + (1 if i < r else 0)
        bounds.append(n)
    else:
        bounds = [0] + [int(i) for i in spec] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        lo = min(max(lo + n if lo < 0 else lo, 0), n)
        hi = min(max(hi + n if hi < 0 else hi, 0), n)
        out.append(self.narrow(d, lo, max(hi - lo, 0)))
    return tuple(out)


# --- math: nan_to_num nansum nanmean isneginf isposinf logaddexp logit clamp_min clamp_max
# floor_divide float_power exp2 ---


def _float(t):
    """``t``, as float32 when not floating (PyTorch's promotion for float-valued ops)."""
    return t if t.is_floating_point() else t.to(_gflow.float32)


def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
    """``self`` with NaN replaced by ``nan``, +inf by ``posinf`` and -inf by ``neginf`` (the
    dtype's largest and lowest finite values unless told), as ``torch.nan_to_num``; the
    gradient is zero at the replaced elements. Integer and bool tensors come back as a copy."""
    if not self.is_floating_point():
        return self.clone()
    from ._runtime import finfo

    info = finfo(self.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = _gflow.where(self == math.inf, posinf, self)
    out = _gflow.where(self == -math.inf, neginf, out)
    return _gflow.where(self != self, nan, out)


def _reduce_kw(dim, keepdim):
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return {"keepdim": keepdim} if keepdim else {}
    return {"dim": tuple(dim) if isinstance(dim, (tuple, list)) else dim, "keepdim": keepdim}


def nansum(self, dim=None, keepdim=False, *, dtype=None):
    """The sum over ``dim`` (all dims when ``None``) treating NaN as zero, as ``torch.nansum``;
    the gradient is zero at the NaNs."""
    x = self if dtype is None else self.to(dtype)
    if x.is_floating_point():
        x = _gflow.where(x != x, 0.0, x)
    return x.sum(**_reduce_kw(dim, keepdim))


def nanmean(self, dim=None, keepdim=False, *, dtype=None):
    """The mean over ``dim`` of the non-NaN elements (NaN where there are none), as
    ``torch.nanmean``; floating point only."""
    x = self if dtype is None else self.to(dtype)
    if not x.is_floating_point():
        raise _gflow.DTypeError(
            f"nanmean(): expected input to have floating point dtype but got {x.dtype}")
    kw = _reduce_kw(dim, keepdim)
    count = (x == x).to(x.dtype).sum(**kw)
    return nansum(x, dim, keepdim) / count


def isposinf(self):
    """Where ``self`` is +inf (bool; never for integers)."""
    if not self.is_floating_point():
        return self != self
    return self == math.inf


def isneginf(self):
    """Where ``self`` is -inf (bool; never for integers)."""
    if not self.is_floating_point():
        return self != self
    return self == -math.inf


def logaddexp(self, other):
    """``log(e^self + e^other)`` without overflow: ``hi + log1p(e^(lo - hi))`` of the larger
    and smaller of the two, so ``lo - hi <= 0`` everywhere (both branches finite for the
    gradient); equal infinities give themselves, as PyTorch's."""
    a, b = _float(self), other if isinstance(other, Tensor) else None
    if b is None:
        b = _gflow.full_like(a, other)
    b = _float(b)
    up = a >= b
    hi, lo = _gflow.where(up, a, b), _gflow.where(up, b, a)
    same_inf = (hi == lo).logical_and(hi.abs() == math.inf)
    gap = _gflow.where(same_inf, 0.0, lo - hi)
    return hi + gap.exp().log1p()


def logit(self, eps=None):
    """``log(p / (1 - p))`` of ``self`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given,
    as ``torch.logit`` (integers give floats)."""
    x = _float(self)
    if eps is not None:
        x = x.clamp(eps, 1.0 - eps)
    return (x / (1.0 - x)).log()


def clamp_min(self, min):
    """``self`` clamped below at ``min`` (a number or a tensor)."""
    if isinstance(min, Tensor):
        return self.maximum(min)
    return self.clamp(min=min)


def clamp_max(self, max):
    """``self`` clamped above at ``max`` (a number or a tensor)."""
    if isinstance(max, Tensor):
        return self.minimum(max)
    return self.clamp(max=max)


def floor_divide(self, other):
    """``self / other`` rounded toward minus infinity (Python's ``//``), as
    ``torch.floor_divide``."""
    return self.div(other, rounding_mode="floor")


def float_power(self, exponent):
    """``self ** exponent`` computed and returned in float64, as ``torch.float_power``
    (either may be a number, not both)."""
    if not isinstance(self, Tensor):
        base = _gflow._constant(self, dtype=_gflow.float64, **where(exponent))
        return base.pow(exponent.to(_gflow.float64))
    x = self.to(_gflow.float64)
    if isinstance(exponent, Tensor):
        exponent = exponent.to(_gflow.float64)
    return x.pow(exponent)


def exp2(self):
    """``2 ** self`` (integers give floats), exact at integers (``exp2(10)`` is 1024, not
    1023.9999, as PyTorch's), ``e^(x ln 2)`` elsewhere; the gradient ``2^x ln 2``
    throughout."""
    x = _float(self)
    y = (x * math.log(2.0)).exp()
    lo, table = _powers(2, x, x.dtype == _gflow.float64)
    k = x.detach().round()
    exact = (k == x.detach()).logical_and(k >= lo).logical_and(k < lo + table.numel())
    at = _gflow.where(exact, k - lo, 0).to(_gflow.int64).reshape(-1)
    picked = table.gather(0, at).reshape(*x.shape)
    return y + _gflow.where(exact, picked - y.detach(), 0.0)


def _correction(correction, unbiased):
    if correction is not None and unbiased is not None:
        raise _gflow.InvalidArgumentError("cannot specify both correction and unbiased")
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def var_mean(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` over ``dim`` (all dims when ``None``), as ``torch.var_mean``;
    ``correction`` 1 unless ``correction=`` or ``unbiased=False`` says otherwise (a bool as
    the second positional argument is ``unbiased``)."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    c = _correction(correction, unbiased)
    kw = _reduce_kw(dim, keepdim)
    return self.var(correction=c, **kw), self.mean(**kw)


def std_mean(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` over ``dim``, as ``torch.std_mean`` (see ``var_mean``)."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    c = _correction(correction, unbiased)
    kw = _reduce_kw(dim, keepdim)
    return self.std(correction=c, **kw), self.mean(**kw)


# --- order statistics: aminmax median nanmedian kthvalue quantile nanquantile cummax cummin
# unique ---

from collections import namedtuple  # noqa: E402

aminmax_result = namedtuple("aminmax", ("min", "max"))
median_result = namedtuple("median", ("values", "indices"))
nanmedian_result = namedtuple("nanmedian", ("values", "indices"))
kthvalue_result = namedtuple("kthvalue", ("values", "indices"))
cummax_result = namedtuple("cummax", ("values", "indices"))
cummin_result = namedtuple("cummin", ("values", "indices"))


def aminmax(self, *, dim=None, keepdim=False):
    """The named tuple ``(min, max)`` over ``dim`` (all dims when ``None``), as
    ``torch.aminmax``."""
    if self.numel() == 0 and dim is None:
        raise _gflow.InvalidArgumentError(
            "aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
            "identity")
    if dim is None:
        if keepdim:
            kw = {"dim": tuple(range(self.dim())), "keepdim": True} if self.dim() else {}
        else:
            kw = {}
    else:
        kw = {"dim": dim, "keepdim": keepdim}
    return aminmax_result(self.amin(**kw), self.amax(**kw))


def _check_nonempty(self, d, name):
    if self.dim() and self.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _pick(sorted_, order, pos, d, keepdim):
    """The values and indices of the sorted ``sorted_``/``order`` at the int64 positions
    ``pos`` (shaped as the slices with ``d`` kept as 1)."""
    v, i = sorted_.gather(d, pos), order.gather(d, pos)
    return (v, i) if keepdim else (v.squeeze(d), i.squeeze(d))


def _median(self, dim, keepdim, ignore_nan, result):
    if dim is None:
        if self.numel() == 0:
            return _gflow.full((), math.nan, **_like(self, None))
        flat = self.reshape(-1)
        v, _ = _median(flat, 0, False, ignore_nan, result)
        if not (self.is_floating_point() and self.requires_grad):
            return v
        # PyTorch's gradient: shared evenly by the elements equal to the median (the NaNs when
        # it is NaN); the value kept exact by adding a zero that carries that gradient
        v = v.detach()
        hit = (flat == v).logical_or((flat != flat).logical_and(v != v))
        carry = hit.logical_and(flat.abs() != math.inf)
        count = hit.to(flat.dtype).sum()
        zero = _gflow.where(carry, flat - flat.detach(), 0.0)
        return v + (zero / count).sum()
    nd = self.dim()
    d = _dim(dim, nd)
    x = self if nd else self.reshape(1)
    _check_nonempty(x, d, result.__name__)
    n = x.shape[d]
    values, order = x.sort(dim=d)
    if x.is_floating_point():
        nans = (x != x).to(_gflow.int64).sum(dim=d, keepdim=True)
    else:
        nans = _gflow.zeros(*values.narrow(d, 0, 1).shape, **_like(x, _gflow.int64))
    if ignore_nan:
        # the lower median of the numbers; the first NaN's position when there are none
        m = n - nans
        pos = _gflow.where(m == 0, 0, (m - 1).div(2, rounding_mode="floor"))
    else:
        # NaN propagates: the first NaN (sorted last, in their original order)
        pos = _gflow.where(nans > 0, n - nans, (n - 1) // 2 + nans * 0)
    v, i = _pick(values, order, pos, d, keepdim or nd == 0)
    if nd == 0:
        v, i = v.reshape(()), i.reshape(())
    return result(v, i)


def median(self, dim=None, keepdim=False):
    """The lower median (the ``(n - 1) // 2``-th smallest) over ``dim``, or of all elements as a
    0-d tensor when ``dim`` is ``None``; with ``dim`` the named tuple ``(values, indices)``.
    NaN propagates (the index that of the slice's first NaN), as ``torch.median``;
    differentiable through the selected elements."""
    return _median(self, dim, keepdim, False, median_result)


def nanmedian(self, dim=None, keepdim=False):
    """``median`` ignoring NaNs (NaN only where a slice holds nothing else), as
    ``torch.nanmedian``."""
    return _median(self, dim, keepdim, True, nanmedian_result)


def kthvalue(self, k, dim=-1, keepdim=False):
    """The named tuple ``(values, indices)`` of the ``k``-th smallest element along ``dim``
    (NaN counted as the largest), as ``torch.kthvalue``."""
    nd = self.dim()
    d = _dim(dim, nd)
    x = self if nd else self.reshape(1)
    n = x.shape[d]
    if not 1 <= k <= n:
        raise _gflow.IndexOutOfRangeError(
            f"kthvalue(): selected number k out of range for dimension {d}")
    values, order = x.sort(dim=d)
    v, i = values.narrow(d, k - 1, 1), order.narrow(d, k - 1, 1)
    if nd == 0:
        return kthvalue_result(v.reshape(()), i.reshape(()))
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return kthvalue_result(v, i)


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(self, q, dim, keepdim, interpolation, ignore_nan, name):
    import numpy as np

    if not self.is_floating_point() or self.dtype in (_gflow.float16, _gflow.bfloat16):
        raise _gflow.DTypeError(
            f"{name}() input tensor must be either float or double dtype, got {self.dtype}")
    if interpolation not in _INTERPOLATIONS:
        raise _gflow.InvalidArgumentError(
            f"{name}() interpolation must be one of linear, lower, higher, midpoint or "
            f"nearest. Got {interpolation}")
    scalar_q = not isinstance(q, Tensor)
    if scalar_q:
        qs = np.array([float(q)])
    else:
        if q.dtype != self.dtype:
            raise _gflow.DTypeError(
                f"{name}() q tensor must be same dtype as the input tensor, got {q.dtype}")
        if q.dim() > 1:
            raise _gflow.ShapeError(f"{name}() q must be a scalar or 1D tensor")
        scalar_q = q.dim() == 0
        qs = np.atleast_1d(q.numpy()).astype(np.float64)
    if ((qs < 0) | (qs > 1) | np.isnan(qs)).any():
        raise _gflow.InvalidValueError(f"{name}() q values must be in the range [0, 1]")
    if dim is None:
        x, d = self.reshape(-1), 0
    else:
        d = _dim(dim, self.dim())
        x = self if self.dim() else self.reshape(1)
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"{name}() input tensor must be non-empty")
    values = x.sort(dim=d).values
    outs = []
    if ignore_nan:
        # per-slice ranks over the non-NaN count: positions gathered from the sorted values
        m = (x == x).to(x.dtype).sum(dim=d, keepdim=True)
        last = (m - 1).clamp(min=0)
        for qv in qs:
            rank = last * qv
            lo, hi = rank.floor(), rank.ceil()
            if interpolation == "nearest":
                lo = hi = rank.round()
            elif interpolation == "lower":
                hi = lo
            elif interpolation == "higher":
                lo = hi
            vlo = values.gather(d, lo.to(_gflow.int64))
            vhi = values.gather(d, hi.to(_gflow.int64))
            w = (rank - lo) if interpolation == "linear" else 0.5
            out = vlo.lerp(vhi, w) if interpolation in ("linear", "midpoint") else vlo
            outs.append(_gflow.where(m == 0, math.nan, out))
    else:
        nan = (x != x).any(dim=d, keepdim=True) if x.numel() else None
        for qv in qs:
            rank = qv * (n - 1)
            lo, hi = math.floor(rank), math.ceil(rank)
            if interpolation == "nearest":
                lo = hi = int(np.round(rank))
            elif interpolation == "lower":
                hi = lo
            elif interpolation == "higher":
                lo = hi
            vlo, vhi = values.narrow(d, lo, 1), values.narrow(d, hi, 1)
            if interpolation == "linear":
                out = vlo.lerp(vhi, rank - lo) if hi != lo else vlo
            elif interpolation == "midpoint":
                out = vlo.lerp(vhi, 0.5) if hi != lo else vlo
            else:
                out = vlo
            # a slice holding NaN gives its last sorted element (a NaN), as PyTorch's
            outs.append(_gflow.where(nan, values.narrow(d, n - 1, 1), out))
    out = _gflow.stack(outs, 0)  # (nq, ... slice with d kept)
    if dim is None:
        out = out.reshape(len(qs), *([1] * self.dim() if keepdim else []))
    elif not keepdim:
        out = out.squeeze(d + 1) if self.dim() else out.reshape(len(qs))
    elif not self.dim():
        out = out.reshape(len(qs))
    return out.squeeze(0) if scalar_q else out


def quantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The ``q``-th quantiles (``q`` a number, or a 0-d or 1-D tensor of self's dtype, whose
    dim comes first in the result) over ``dim`` (the flattened tensor when ``None``), with
    PyTorch's interpolations ``linear lower higher midpoint nearest``; NaN where a slice holds
    a NaN, as ``torch.quantile``; differentiable through the selected elements."""
    return _quantile(self, q, dim, keepdim, interpolation, False, "quantile")


def nanquantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
    """``quantile`` ignoring NaNs (NaN only where a slice holds nothing else)."""
    return _quantile(self, q, dim, keepdim, interpolation, True, "nanquantile")


def _cumext(self, dim, bigger, result):
    """Running max (``bigger``) or min along ``dim`` with its index: for each position ``i``
    the extreme over ``j <= i`` (an ``(.., n, n)`` masked reduction), its index the last ``j``
    holding it (the last NaN once one is seen), as PyTorch's; the values gathered from ``self``
    at those indices, so the gradient goes where PyTorch's does."""
    nd = self.dim()
    x = self if nd else self.reshape(1)
    d = _dim(dim, nd)
    n = x.shape[d]
    if x.numel() == 0:
        empty = x.to(_gflow.int64)
        return result(self.clone(), empty.reshape(*self.shape))
    work = x.detach().to(_gflow.float64 if x.is_floating_point() else _gflow.int64)
    work = work.movedim(d, -1)  # (..., n)
    ar = _gflow.arange(n, **where(x))
    upto = ar.unsqueeze(1) >= ar.unsqueeze(0)  # [i, j]: j <= i
    fill = (-math.inf if bigger else math.inf) if work.is_floating_point() else (
        -2 ** 63 if bigger else 2 ** 63 - 1)
    grid = work.unsqueeze(-2).expand(*work.shape[:-1], n, n).masked_fill(upto.logical_not(),
                                                                          fill)
    ext = grid.amax(-1, keepdim=True) if bigger else grid.amin(-1, keepdim=True)
    cols = work.unsqueeze(-2)
    hit = (cols == ext).logical_or((cols != cols).logical_and(ext != ext)).logical_and(upto)
    idx = _gflow.where(hit, ar, -1).amax(-1)  # (..., n)
    idx = idx.movedim(-1, d)
    values = x.gather(d, idx)
    if nd == 0:
        return result(values.reshape(()), idx.reshape(()))
    return result(values, idx)


def cummax(self, dim):
    """The named tuple ``(values, indices)`` of the running maximum along ``dim``, as
    ``torch.cummax`` (ties and NaNs take the latest index; NaN propagates). O(n^2) in the
    length of ``dim``."""
    return _cumext(self, dim, True, cummax_result)


def cummin(self, dim):
    """The running minimum along ``dim`` with its indices, as ``torch.cummin`` (see
    ``cummax``)."""
    return _cumext(self, dim, False, cummin_result)


def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct elements of ``self`` in ascending order (or the distinct slices along
    ``dim``, ordered lexicographically), with the inverse indices (``self``'s shape, or
    ``dim``'s length) and counts when asked, as ``torch.unique``; the size depends on the
    values, which are read (for a global tensor a collective, as ``numpy()``), the results
    placed where ``self`` is; not differentiable. The result is always sorted."""
    import numpy as np

    a = self.detach().numpy()
    kw = {}
    if dim is not None:
        dim = _dim(dim, self.dim())
        kw["axis"] = dim
    elif a.dtype.kind == "f":
        try:
            np.unique(np.zeros(1), equal_nan=False)
            kw["equal_nan"] = False
        except TypeError:
            pass
    vals, inv, cnt = np.unique(a, return_inverse=True, return_counts=True, **kw)
    out = _gflow._constant(np.ascontiguousarray(vals), dtype=self.dtype, **where(self))
    if dim is None:
        inv = inv.reshape(a.shape)
    else:
        inv = inv.reshape(-1)
    rest = []
    if return_inverse:
        rest.append(_gflow._constant(inv.astype(np.int64), **where(self)))
    if return_counts:
        rest.append(_gflow._constant(cnt.astype(np.int64), **where(self)))
    return (out, *rest) if rest else out


# --- index_add index_fill scatter and their in-place forms ---


def _check_index(index, name, n=None):
    if index.dtype not in (_gflow.int64, _gflow.int32):
        raise _gflow.DTypeError(f"{name}(): Expected dtype int32/int64 for index, got "
                                f"{index.dtype}")
    if index.dim() > 1:
        raise _gflow.ShapeError(f"{name}(): Index is supposed to be a vector")


def _along(index, d, nd):
    """The 1-D ``index`` shaped to broadcast along dim ``d`` of ``nd`` dims."""
    shape = [1] * nd
    shape[d] = -1
    return index.reshape(*shape)


def index_add(self, dim, index, source, *, alpha=1):
    """``self`` with ``alpha * source``'s slices along ``dim`` added at the positions
    ``index`` (repeats add up), as ``torch.index_add``: a ``scatter_add``, differentiable in
    ``self`` and ``source``."""
    _check_index(index, "index_add_")
    if source.dtype != self.dtype:
        raise _gflow.DTypeError(
            f"index_add_(): self ({self.dtype}) and source ({source.dtype}) must have the same "
            "scalar type")
    nd = max(self.dim(), 1)
    d = _dim(dim, self.dim())
    x = self if self.dim() else self.reshape(1)
    src = source if source.dim() else source.reshape(1)
    if src.dim() != nd:
        raise _gflow.ShapeError(
            "index_add_(): source and self must have the same number of dimensions")
    if index.numel() != src.shape[d]:
        raise _gflow.ShapeError(
            "index_add_(): Number of indices should be equal to source.size(dim)")
    for i in range(nd):
        if i != d and src.shape[i] != x.shape[i]:
            raise _gflow.ShapeError(
                f"index_add_(): source.size({i}) = {src.shape[i]} does not match self.size({i}) "
                f"= {x.shape[i]}")
    if alpha != 1:
        src = src * alpha
    idx = _along(index.reshape(-1).to(_gflow.int64), d, nd).expand(*src.shape)
    return x.scatter_add(d, idx, src).reshape(*self.shape)


def index_fill(self, dim, index, value):
    """``self`` with its slices along ``dim`` at the positions ``index`` set to ``value`` (a
    number or a 0-d tensor, cast to ``self``'s dtype, which the result keeps: 7.5 fills an
    int32 tensor with 7, 1 a bool one with true), as ``torch.index_fill``; negative indices
    count from the end."""
    _check_index(index, "index_fill_")
    if isinstance(value, Tensor) and value.dim() != 0:
        raise _gflow.ShapeError(
            "index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
            f"{value.dim()} dimension(s).")
    d = _dim(dim, self.dim())
    x = self if self.dim() else self.reshape(1)
    n = x.shape[d]
    idx = index.reshape(-1).to(_gflow.int64)
    if idx.numel():
        lo, hi = int(idx.amin().item()), int(idx.amax().item())
        if lo < -n or hi >= n:
            raise _gflow.IndexOutOfRangeError(
                f"index_fill_(): index out of range for dim {d} of size {n}")
    idx = _gflow.where(idx < 0, idx + n, idx)
    ar = _gflow.arange(n, **where(x))
    hit = (ar.unsqueeze(1) == idx.unsqueeze(0)).any(1)
    if isinstance(value, Tensor):
        value = value if value.dtype == self.dtype else value.to(self.dtype)
    else:
        value = _scalar_as(value, self.dtype, "index_fill_")
    out = _gflow.where(_along(hit, d, x.dim()), value, x)
    return out.reshape(*self.shape)


def _last_written(index, d):
    """Where each element of ``index`` is the last along ``d`` (in index order) to name its
    position, as a bool tensor of ``index``'s shape: in a stable sort along ``d`` the last of
    each run of equal indices, scattered back; ``None`` when nothing can repeat (at most one
    index along ``d``)."""
    m = index.shape[d] if index.dim() else 1
    if m <= 1:
        return None
    order = index.argsort(dim=d, stable=True)
    ranked = index.gather(d, order)
    tail = ranked.narrow(d, m - 1, 1)
    last = _gflow.cat([ranked.narrow(d, 0, m - 1) != ranked.narrow(d, 1, m - 1), tail == tail], d)
    flags = _gflow.zeros(*index.shape, **_like(index, _gflow.int64))
    return flags.scatter_add(d, order, last.to(_gflow.int64)) > 0


def scatter(self, dim, index, src=None, value=None, *, reduce=None):
    """``self`` with ``src[i][j]`` (or the number ``value``, cast to ``self``'s dtype, which
    the result keeps) written at ``[index[i][j]][j]`` for ``dim == 0``, and so on, as
    ``torch.scatter`` without ``reduce``. Where an index repeats along ``dim`` the source
    written last in index order wins, as PyTorch's CPU loop (one of the sources, never their
    sum). Differentiable in ``self`` (zero where written) and ``src`` (the gradient at the
    position each source was written to, overwritten ones too, as PyTorch's; a non-finite
    source overwritten by a later one gets none)."""
    if reduce is not None:
        raise _gflow.InvalidArgumentError("scatter: reduce= is not supported; use scatter_add")
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() missing the src or value argument")
    if index.dtype != _gflow.int64:
        raise _gflow.DTypeError(f"scatter(): Expected dtype int64 for index, got {index.dtype}")
    d = _dim(dim, self.dim())
    if index.dim() != self.dim() and not (index.dim() <= 1 and self.dim() <= 1):
        raise _gflow.ShapeError(
            "Index tensor must have the same number of dimensions as self tensor")
    ones = _gflow.ones(*index.shape, **_like(self, _gflow.int64))
    count = _gflow.zeros(*self.shape, **_like(self, _gflow.int64)).scatter_add(d, index, ones)
    hit = count > 0
    if not isinstance(src, Tensor):
        return _gflow.where(hit, _scalar_as(src, self.dtype, "scatter"), self)
    if src.dtype != self.dtype:
        raise _gflow.DTypeError(
            f"scatter(): Expected self.dtype to be equal to src.dtype, got {self.dtype} and "
            f"{src.dtype}")
    if src.dim() != index.dim():
        raise _gflow.ShapeError(
            "Index tensor must have the same number of dimensions as src tensor")
    part = src
    for i, s in enumerate(index.shape):
        if s > src.shape[i]:
            raise _gflow.ShapeError(
                f"Expected index {tuple(index.shape)} to be smaller than src "
                f"{tuple(src.shape)} apart from dimension {d}")
        if s != src.shape[i]:
            part = part.narrow(i, 0, s)
    # each written position receives its winner plus zeros (the sources overwritten), so the
    # sum is the winner exactly
    floating = self.is_floating_point()
    zero = 0.0 if floating else (False if self.dtype == _gflow.bool else 0)
    keep = _last_written(index, d)
    if keep is not None:
        loser = zero
        if floating and part.requires_grad:
            # a zero that carries the overwritten source's gradient (scatter_add's: gathered)
            v = part.detach()
            loser = _gflow.where(isfinite(v), part - v, zero)
        part = _gflow.where(keep, part, loser)
    placed = _gflow.zeros(*self.shape, **_like(self, None)).scatter_add(d, index, part)
    if floating:
        # a sum gives +0.0 for a winning -0.0: those positions get it back
        v = part.detach()
        neg = (v == 0).logical_and(1.0 / v < 0).to(_gflow.int64)
        neg = _gflow.zeros(*self.shape, **_like(self, _gflow.int64)).scatter_add(d, index, neg)
        placed = _gflow.where(neg > 0, -0.0, placed)
    return _gflow.where(hit, placed, self)


def _inplace(self, out):
    """``self`` overwritten with ``out`` through ``copy_`` (so views, version counters and
    autograd's in-place rules hold), refusing, as PyTorch, a result type that cannot be cast
    back to ``self``'s (a float result into an integer tensor, an integer one into bool)."""
    if out.dtype != self.dtype:
        if out.is_floating_point() and not self.is_floating_point() or (
                self.dtype == _gflow.bool and out.dtype != _gflow.bool):
            raise _gflow.DTypeError(
                f"result type {out.dtype} can't be cast to the desired output type "
                f"{self.dtype}")
        out = out.to(self.dtype)
    if tuple(out.shape) != tuple(self.shape):
        out = out.expand(*self.shape)
    return self.copy_(out)


def index_add_(self, dim, index, source, *, alpha=1):
    """In-place ``index_add``."""
    return _inplace(self, index_add(self, dim, index, source, alpha=alpha))


def index_fill_(self, dim, index, value):
    """In-place ``index_fill``."""
    return _inplace(self, index_fill(self, dim, index, value))


def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
    """In-place ``scatter``."""
    return _inplace(self, scatter(self, dim, index, src, value, reduce=reduce))


def _make_inplace(name):
    def f(self, *args, **kwargs):
        return _inplace(self, getattr(self, name)(*args, **kwargs))

    f.__name__ = name + "_"
    f.__doc__ = f"In-place ``{name}``: ``self.copy_(self.{name}(...))``, returning ``self``."
    return f


for _name in ("movedim moveaxis swapaxes swapdims take_along_dim tensordot mv reshape_as "
              "tensor_split nan_to_num nansum nanmean isposinf isneginf logaddexp logit clamp_min "
              "clamp_max floor_divide float_power exp2 var_mean std_mean aminmax median nanmedian "
              "kthvalue quantile nanquantile cummax cummin unique index_add index_fill scatter "
              "index_add_ index_fill_ scatter_").split():
    setattr(Tensor, _name, globals()[_name])
for _name in ("abs neg exp log sqrt rsqrt sigmoid tanh relu sin cos floor ceil round trunc sign "
              "reciprocal square pow log1p expm1 clamp_min clamp_max nan_to_num").split():
    if not hasattr(Tensor, _name + "_"):
        setattr(Tensor, _name + "_", _make_inplace(_name))
del _name


# --- isin hypot logcumsumexp, Tensor.softmax / log_softmax with dtype=, bool ** bool ---

_tensor_softmax, _tensor_log_softmax = Tensor.softmax, Tensor.log_softmax
_tensor_pow, _tensor_dunder_pow = Tensor.pow, Tensor.__pow__


def _softmax(self, dim, dtype=None):
    """PyTorch's ``Tensor.softmax``: over ``dim``, of ``self`` cast to ``dtype`` first when
    given (a float16 input normalised in float32, say)."""
    return _tensor_softmax(self if dtype is None else self.to(dtype), dim)


def _log_softmax(self, dim, dtype=None):
    """PyTorch's ``Tensor.log_softmax``: over ``dim``, of ``self`` cast to ``dtype`` first
    when given."""
    return _tensor_log_softmax(self if dtype is None else self.to(dtype), dim)


def _bool_power(self, exponent):
    """``b ** True`` is ``b`` and ``b ** False`` all true for a bool ``b``, which PyTorch keeps
    bool (gflow's ``pow`` refuses bool tensors); ``None`` for anything else."""
    if self.dtype != _gflow.bool or not isinstance(exponent, bool):
        return None
    return self.clone() if exponent else self == self


def _pow(self, exponent):
    """``self ** exponent`` (``pow``), a bool tensor to a bool power as PyTorch's."""
    out = _bool_power(self, exponent)
    return _tensor_pow(self, exponent) if out is None else out


def _dunder_pow(self, exponent, modulo=None):
    out = _bool_power(self, exponent)
    return _tensor_dunder_pow(self, exponent) if out is None else out


_dunder_pow.__doc__ = _pow.__doc__

_ISIN_PAIRS = 1 << 22  # compare every pair up to this many, else sort


def isin(elements, test_elements, assume_unique=False, invert=False):
    """Where each of ``elements`` equals one of ``test_elements`` (either may be a number, not
    both), a bool tensor of ``elements``' shape, as ``torch.isin``: dtypes promoted as for
    ``==``, NaN in nothing, ``invert`` the negation, ``assume_unique`` a hint that changes
    nothing here, bool refused as PyTorch's. Few pairs are all compared; otherwise one sort of
    both marks the runs of equal values that hold a test element."""
    if not isinstance(elements, Tensor):
        if not isinstance(test_elements, Tensor):
            raise TypeError("isin() expected elements or test_elements to be a Tensor")
        elements = _gflow._constant(elements, **where(test_elements))
    if not isinstance(test_elements, Tensor):
        test_elements = _gflow._constant(test_elements, **where(elements))
    for t in (elements, test_elements):
        if t.dtype == _gflow.bool:
            raise _gflow.DTypeNotImplementedError(
                "Unsupported input type encountered for isin(): Bool")
    e, t = elements.detach(), test_elements.detach().reshape(-1)
    n, m = e.numel(), t.numel()
    if n == 0 or m == 0:
        hit = _gflow.zeros(*e.shape, **_like(e, _gflow.bool))
    elif n * m <= _ISIN_PAIRS:
        hit = (e.unsqueeze(-1) == t).any(-1)
    else:
        # the test elements first, then all sorted: a run of equal values (NaNs each alone)
        # holds an element of the test set when some member came from the first m
        values, order = _gflow.cat([t, e.reshape(-1)]).sort()
        step = (values.narrow(0, 1, n + m - 1) != values.narrow(0, 0, n + m - 1))
        zero = _gflow.zeros(1, **_like(values, _gflow.int64))
        run = _gflow.cat([zero, step.to(_gflow.int64).cumsum(0)])
        tests = _gflow.zeros(n + m, **_like(values, _gflow.int64)).scatter_add(
            0, run, (order < m).to(_gflow.int64))
        found = (tests.gather(0, run) > 0).to(_gflow.int64)
        back = _gflow.zeros(n + m, **_like(values, _gflow.int64)).scatter_add(0, order, found)
        hit = (back.narrow(0, m, n) > 0).reshape(*e.shape)
    return hit.logical_not() if invert else hit


def _isin(self, test_elements, *, assume_unique=False, invert=False):
    """``flow.isin(self, test_elements)``."""
    return isin(self, test_elements, assume_unique=assume_unique, invert=invert)


def _low_precision(x):
    return x.dtype in (_gflow.float16, _gflow.bfloat16)


def hypot(self, other):
    """``sqrt(self^2 + other^2)`` elementwise (broadcast, the dtypes promoted), as
    ``torch.hypot``, with no overflow or underflow in the squares: 16-bit and float32 inputs
    are worked in float64 (whose squares cannot overflow or underflow) and rounded once;
    float64 ones scaled by the larger magnitude first. An infinity in either gives +inf, even
    with a NaN. The gradient is ``self / hypot`` (the scale held constant: the result does
    not depend on it). Integer inputs refused, as PyTorch's."""
    if not isinstance(other, Tensor):
        raise TypeError(f"hypot(): argument 'other' (position 1) must be Tensor, not "
                        f"{type(other).__name__}")
    m = self.detach().abs().maximum(other.detach().abs())
    dtype = m.dtype
    if not m.is_floating_point():
        raise _gflow.DTypeNotImplementedError(f'"hypot_cpu" not implemented for {dtype}')
    a, b = self.to(_gflow.float64), other.to(_gflow.float64)
    inf = (a.detach().abs() == math.inf).logical_or(b.detach().abs() == math.inf)
    if dtype == _gflow.float64:
        scale = _gflow.where((m == 0).logical_or(m != m).logical_or(inf), 1.0, m)
        out = scale * ((a / scale).square() + (b / scale).square()).sqrt()
    else:
        out = (a.square() + b.square()).sqrt()
    out = _gflow.where(inf, math.inf, out)
    return out if out.dtype == dtype else out.to(dtype)


def logcumsumexp(self, dim):
    """``log(cumsum(exp(self), dim))`` without overflow or underflow, as
    ``torch.logcumsumexp``: a parallel prefix scan of the stable ``logaddexp`` (``log2(n)``
    steps, each joining a position with the one ``2^k`` before it), so every position is as
    exact as a ``logsumexp`` of its prefix (``[-1e9, 0]`` gives ``[-1e9, 0]``) and a prefix of
    ``-inf`` gives ``-inf``, not NaN; 16-bit floats worked in float32 and rounded once;
    differentiable; integers refused, as PyTorch's."""
    if not self.is_floating_point():
        raise _gflow.DTypeNotImplementedError(
            f'"logcumsumexp_out_cpu" not implemented for {self.dtype}')
    d = _dim(dim, self.dim())
    y = self if self.dim() else self.reshape(1)
    if _low_precision(y):
        y = y.to(_gflow.float32)
    n, step = y.shape[d], 1
    while step < n:
        later = logaddexp(y.narrow(d, step, n - step), y.narrow(d, 0, n - step))
        y = _gflow.cat([y.narrow(d, 0, step), later], d)
        step *= 2
    return y.to(self.dtype).reshape(*self.shape)


Tensor.softmax, Tensor.log_softmax = _softmax, _log_softmax
Tensor.pow, Tensor.__pow__ = _pow, _dunder_pow
Tensor.isin = _isin
for _name in ("hypot logcumsumexp").split():
    setattr(Tensor, _name, globals()[_name])
Tensor.hypot_ = _make_inplace("hypot")
del _name

__all__ = ["eye", "outer", "norm", "equal", "isclose", "hstack", "vstack", "einsum", "isin"]


# --- copy.deepcopy and pickle (placements, SBPs, dtypes, tensors, modules) -------------------
#
# gflow's Rust types have no pickle support of their own: each is rebuilt from its Python
# description (``copyreg`` for placements, SBPs and dtypes; methods for tensors, so
# ``nn.Parameter`` and other subclasses follow).

_SBP_NAMES = ("broadcast", "partial_sum", "partial_max", "partial_min")
_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool")


def _rebuild_placement(kind, ranks):
    return _gflow.placement(kind, ranks)


def _reduce_placement(p):
    return _rebuild_placement, (p.type, p.ranks.tolist())


def _rebuild_sbp(what):
    return _gflow.split(what) if isinstance(what, int) else getattr(_gflow, what)


def _reduce_sbp(s):
    if s.dim is not None:
        return _rebuild_sbp, (int(s.dim),)
    for name in _SBP_NAMES:
        if s == getattr(_gflow, name):
            return _rebuild_sbp, (name,)
    raise TypeError(f"cannot pickle {s!r}")


def _dtype_name(dtype):
    name = str(dtype).rsplit(".", 1)[-1]
    if name not in _DTYPE_NAMES:
        raise TypeError(f"cannot pickle {dtype!r}")
    return name


def _rebuild_dtype(name):
    return getattr(_gflow, name)


def _reduce_dtype(dtype):
    return _rebuild_dtype, (_dtype_name(dtype),)


def _as_kind(cls, new, requires_grad):
    """``new`` (a fresh tensor) as a ``cls`` (``nn.Parameter`` stays one), requiring a gradient
    as ``requires_grad``."""
    if cls is Tensor:
        return new.requires_grad_(requires_grad) if requires_grad else new
    return cls(new, requires_grad=requires_grad)


def _tensor_deepcopy(self, memo):
    """``copy.deepcopy``: a detached copy of the data (a global tensor's with the same
    placement and SBP, a partial one's components as they are), requiring a gradient as
    ``self`` does, of ``self``'s class (a ``Parameter`` stays one); its ``.grad`` and
    attributes deep-copied too, as PyTorch's. On a global tensor every rank of the job calls
    it, as any operation on one."""
    import copy

    with _gflow.no_grad():
        if self.is_global and any(s.dim is None and s != _gflow.broadcast for s in self.sbp):
            # a partial tensor: each rank's component copied as it is (a clone would box it)
            new = self.detach().to_local().clone().to_global(placement=self.placement,
                                                              sbp=self.sbp)
        else:
            new = self.detach().clone()
    new = _as_kind(type(self), new, self.requires_grad)
    memo[id(self)] = new
    if self.grad is not None:
        new.grad = copy.deepcopy(self.grad, memo)
    extra = getattr(self, "__dict__", None)
    if extra:
        new.__dict__.update(copy.deepcopy(extra, memo))
    return new


def _rebuild_tensor(cls, array, dtype, requires_grad, kind, extra=None):
    t = _gflow.tensor(array, dtype=getattr(_gflow, dtype))
    if kind != "cpu":
        t = t.to(kind)  # this process's device of that type
    t = _as_kind(cls, t, requires_grad)
    if extra:
        t.__dict__.update(extra)
    return t


def _tensor_reduce_ex(self, protocol):
    """``pickle``: a local tensor as its value (a NumPy array), dtype, ``requires_grad``, class
    and device type, as PyTorch's (no ``.grad``); a global tensor is refused, each rank holding
    only its part of it."""
    if self.is_global:
        raise TypeError(
            "cannot pickle a global tensor (each rank holds only its part of it): save it with "
            "flow.save({name: tensor}, path), which every rank calls, and read it back with "
            "flow.load(path); copy.deepcopy copies one in memory")
    import numpy as np

    kind = str(self.device).split(":")[0]
    array = np.array(self.detach().numpy(), copy=True)
    extra = dict(self.__dict__) if getattr(self, "__dict__", None) else None
    return _rebuild_tensor, (type(self), array, _dtype_name(self.dtype), self.requires_grad,
                             kind, extra)


def _norm_getstate(self):
    """A LayerNorm's or RMSNorm's state without its gflow layer (rebuilt from the shape and
    eps by [`_norm_setstate`]; the parameters are the module's own)."""
    state = dict(self.__dict__)
    state.pop("_impl", None)
    return state


def _norm_setstate(self, state):
    self.__dict__.update(state)
    shape, eps = tuple(state["normalized_shape"]), state["eps"]
    if len(state["_names"]) == 2:
        impl = _gflow._Norm.layer_norm(list(shape), float(eps))
    else:
        impl = _gflow._Norm.rms_norm(shape[0], float(1e-6 if eps is None else eps))
    object.__setattr__(self, "_impl", impl)


def _install_pickling(nn):
    """Registers the above (called by ``gflow/__init__.py`` once ``nn`` is imported):
    ``copy.deepcopy`` and ``pickle`` of placements, SBPs, dtypes, tensors and modules (a
    module's own ``__dict__`` is copied as any object's, its tensors by the rules above)."""
    import copyreg

    copyreg.pickle(_gflow.placement, _reduce_placement)
    copyreg.pickle(_gflow.sbp, _reduce_sbp)
    copyreg.pickle(_gflow.dtype, _reduce_dtype)
    Tensor.__deepcopy__ = _tensor_deepcopy
    Tensor.__reduce_ex__ = _tensor_reduce_ex
    nn._Norm.__getstate__ = _norm_getstate
    nn._Norm.__setstate__ = _norm_setstate
