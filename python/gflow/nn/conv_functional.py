"""Convolution, pooling and batch normalisation, PyTorch's functional forms (re-exported by
``gflow.nn.functional``): ``conv1d conv2d conv3d max_pool1d max_pool2d max_pool3d avg_pool1d
avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d
adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d batch_norm``.

Each is composed of gflow's operators, so it has gradients and runs on global tensors (every
rank calling it). The windows of a convolution or a pooling are read by one ``index_select``
(im2col): the input's spatial dims are flattened, one element of the padding value (zero, or
-inf for a max) is appended when a window reaches outside the input, and a table of flat
positions, worked out once per geometry on the host (NumPy, integers only) and kept, picks
every window's elements as (N, C, K, L) (K the kernel's elements, L the output's positions).
A convolution is then one matmul with the weight as (groups, out / groups, in / groups * K); a
pooling a ``max`` (first maximum, as PyTorch's gradient) or a sum over K.
"""

import functools
import math

import numpy as np

from .. import _gflow

__all__ = [
    "conv1d", "conv2d", "conv3d", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "batch_norm",
]


# --------------------------------------------------------------------------------------------
# arguments


def _ntuple(value, n, name):
    """``value`` (an int, or a sequence of 1 or ``n`` ints) as a tuple of ``n`` ints."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    try:
        out = tuple(int(v) for v in value)
    except TypeError:
        raise TypeError(f"{name} must be an int or a tuple of ints, got "
                        f"{type(value).__name__}") from None
    if len(out) == 1:
        return out * n
    if len(out) != n:
        raise _gflow.InvalidArgumentError(
            f"expected {name} to be a single integer value or a list of {n} values to match the "
            f"convolution dimensions, but got {name}={list(out)}")
    return out


def _batched(input, nd, name):
    """``input`` as (N, C, *spatial) and whether it came without the batch dim (PyTorch's
    unbatched (C, *spatial) form)."""
    if input.dim() not in (nd + 1, nd + 2):
        raise _gflow.ShapeError(
            f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got "
            f"input of size: {list(input.shape)}")
    if input.dim() == nd + 1:
        return input.unsqueeze(0), True
    return input, False


def _sizes(sizes):
    return " x ".join(str(s) for s in sizes)


# --------------------------------------------------------------------------------------------
# window tables (host integers, computed once per geometry)


def _combine(positions, in_sizes):
    """Per-dim input coordinates ``positions[i]`` (kernel_i, out_i), negative or past the edge
    meaning outside, as one table (K, L) of flat positions into the flattened spatial dims,
    ``prod(in_sizes)`` (the appended padding element) where outside; and whether any is."""
    nd = len(positions)
    flat, valid = np.zeros((), np.int64), np.ones((), bool)
    for i, p in enumerate(positions):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = p.shape
        p = p.reshape(shape)
        flat = flat * in_sizes[i] + p
        valid = valid & (p >= 0) & (p < in_sizes[i])
    k = math.prod(p.shape[0] for p in positions)
    total = math.prod(in_sizes)
    table = np.where(valid, flat, total).reshape(k, -1).astype(np.int64)
    table.setflags(write=False)
    return table, not bool(valid.all())


@functools.lru_cache(maxsize=512)
def _sliding_table(in_sizes, kernel, stride, dilation, pad_lo, out_sizes):
    """The table of sliding windows: output ``o`` and kernel offset ``j`` of each dim read
    input coordinate ``o * stride + j * dilation - pad_lo``."""
    positions = [np.arange(o)[None, :] * s + np.arange(k)[:, None] * d - p
                 for k, s, d, p, o in zip(kernel, stride, dilation, pad_lo, out_sizes)]
    table, outside = _combine(positions, in_sizes)
    identity = table.shape[0] == 1 and np.array_equal(table[0], np.arange(math.prod(in_sizes)))
    return table, outside, identity


@functools.lru_cache(maxsize=512)
def _adaptive_table(in_sizes, out_sizes):
    """The table of adaptive windows (PyTorch's ``[floor(o * in / out), ceil((o + 1) * in /
    out))`` per dim, padded to the longest with outside positions) and each output's window
    size (L,)."""
    positions, counts = [], []
    for n, m in zip(in_sizes, out_sizes):
        o = np.arange(m)
        start = (o * n) // m
        end = ((o + 1) * n + m - 1) // m
        longest = int((end - start).max())
        j = np.arange(longest)[:, None]
        positions.append(np.where(j < end - start, start + j, -1))
        counts.append(end - start)
    table, outside = _combine(positions, in_sizes)
    count = functools.reduce(np.multiply.outer, counts).reshape(-1).astype(np.float64)
    return table, outside, count


_INDEX_CACHE = {}


def _constant(array, key, like, dtype=None):
    """``array`` as a tensor where ``like`` is (broadcast on its placement when global); a
    local one is kept under ``key`` for the next call."""
    if like.is_global:
        return _gflow._constant(array, placement=like.placement,
                                sbp=[_gflow.broadcast] * len(like.sbp), dtype=dtype)
    key = (key, str(like.device), repr(dtype))
    t = _INDEX_CACHE.get(key)
    if t is None:
        if len(_INDEX_CACHE) > 256:
            _INDEX_CACHE.clear()
        t = _INDEX_CACHE[key] = _gflow.tensor(np.ascontiguousarray(array), device=like.device,
                                              dtype=dtype)
    return t


def _windows(x, table, outside, fill, key):
    """The windows of ``x`` (N, C, *spatial) picked by ``table`` (K, L): (N, C, K, L), the
    positions outside the input holding ``fill``."""
    n, c = x.shape[0], x.shape[1]
    k, l = table.shape
    flat = x.reshape(n, c, -1)
    if outside:
        flat = _gflow.cat([flat, flat.new_full((n, c, 1), fill)], 2)
    index = _constant(table.reshape(-1), key, x)
    return flat.index_select(2, index).reshape(n, c, k, l)


# --------------------------------------------------------------------------------------------
# convolution


def _conv_padding(padding, nd, kernel, stride, dilation):
    """``padding`` (an int, ints, ``"valid"`` or ``"same"``) as per-dim (before, after)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * nd, (0,) * nd
        if padding == "same":
            if any(s != 1 for s in stride):
                raise _gflow.InvalidArgumentError(
                    "padding='same' is not supported for strided convolutions")
            total = [d * (k - 1) for k, d in zip(kernel, dilation)]
            lo = tuple(t // 2 for t in total)
            return lo, tuple(t - a for t, a in zip(total, lo))
        raise _gflow.InvalidArgumentError(f"Invalid padding string: '{padding}'")
    pad = _ntuple(padding, nd, "padding")
    if any(p < 0 for p in pad):
        raise _gflow.InvalidArgumentError("negative padding is not supported")
    return pad, pad


def _conv(input, weight, bias, stride, padding, dilation, groups, nd, name):
    x, unbatched = _batched(input, nd, name)
    if weight.dim() != nd + 2:
        raise _gflow.ShapeError(
            f"Expected {nd + 2}-dimensional weight for {nd + 2}-dimensional input "
            f"{list(x.shape)}, but got {weight.dim()}-dimensional weight of size "
            f"{list(weight.shape)} instead")
    stride = _ntuple(stride, nd, "stride")
    dilation = _ntuple(dilation, nd, "dilation")
    if any(s <= 0 for s in stride):
        raise _gflow.InvalidArgumentError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise _gflow.InvalidArgumentError("dilation should be greater than zero")
    groups = int(groups)
    if groups <= 0:
        raise _gflow.InvalidArgumentError("non-positive groups is not supported")
    out_ch, group_ch = weight.shape[0], weight.shape[1]
    kernel = tuple(weight.shape[2:])
    lo, hi = _conv_padding(padding, nd, kernel, stride, dilation)
    if out_ch % groups:
        raise _gflow.InvalidArgumentError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
            f"but got weight of size [{list(weight.shape)}] instead")
    n, c = x.shape[0], x.shape[1]
    if c != group_ch * groups:
        raise _gflow.ShapeError(
            f"Given groups={groups}, weight of size {list(weight.shape)}, expected "
            f"input{list(x.shape)} to have {group_ch * groups} channels, but got {c} channels "
            "instead")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != out_ch):
        raise _gflow.ShapeError(
            f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
            f"{out_ch} elements, but got bias of size {list(bias.shape)} instead")
    in_sizes = tuple(x.shape[2:])
    padded = [s + a + b for s, a, b in zip(in_sizes, lo, hi)]
    effective = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    if any(p < e for p, e in zip(padded, effective)):
        raise _gflow.ShapeError(
            f"Calculated padded input size per channel: ({_sizes(padded)}). Kernel size: "
            f"({_sizes(effective)}). Kernel size can't be greater than actual input size")
    out_sizes = tuple((p - e) // s + 1 for p, e, s in zip(padded, effective, stride))
    key = ("conv", in_sizes, kernel, stride, dilation, lo, out_sizes)
    table, outside, identity = _sliding_table(*key[1:])
    k, l = table.shape
    g, og = groups, out_ch // groups
    # channels last, so that the windows come as rows (N * L, K * C_in) of one matmul
    if g == 1:
        flat = x.reshape(n, c, -1).transpose(1, 2)  # (N, S, C)
    else:
        flat = x.reshape(n, g, group_ch, -1).permute(1, 0, 3, 2)  # (G, N, S, C / G)
    if not identity:
        dim = flat.dim() - 2
        if outside:
            pad_shape = list(flat.shape)
            pad_shape[dim] = 1
            flat = _gflow.cat([flat, flat.new_full(pad_shape, 0.0)], dim)
        index = _constant(np.ascontiguousarray(table.T).reshape(-1), key + ("T",), x)
        flat = flat.index_select(dim, index)  # (..., L * K, C / G)
    if g == 1:
        cols = flat.reshape(n, l, k * c)  # (N kept apart: a batch split stays split)
        w = weight.reshape(out_ch, c, k).permute(0, 2, 1).reshape(out_ch, k * c)
        out = _gflow.linear(cols, w, bias).transpose(1, 2)  # (N, C_out, L)
    else:
        cols = flat.reshape(g, n * l, k * group_ch)
        w = weight.reshape(g, og, group_ch, k).permute(0, 3, 2, 1).reshape(g, k * group_ch, og)
        out = cols.matmul(w).reshape(g, n, l, og).permute(1, 0, 3, 2)  # (N, G, C_out / G, L)
        if bias is not None:
            out = out + bias.reshape(1, g, og, 1)
    out = out.reshape(n, out_ch, *out_sizes)
    return out.squeeze(0) if unbatched else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's ``conv1d`` of (N, C_in, L) (or unbatched (C_in, L)) with a weight (C_out,
    C_in / groups, k): ``stride``, ``padding`` (an int, ``"valid"`` or ``"same"``, zeros),
    ``dilation``, ``groups``, ``bias`` (C_out)."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's ``conv2d`` of (N, C_in, H, W) (or unbatched (C_in, H, W)) with a weight
    (C_out, C_in / groups, kH, kW): ``stride``, ``padding`` (ints, ``"valid"`` or ``"same"``,
    zeros), ``dilation``, ``groups``, ``bias`` (C_out)."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's ``conv3d`` of (N, C_in, D, H, W) (or unbatched) with a weight (C_out, C_in /
    groups, kD, kH, kW), as ``conv2d``."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


# --------------------------------------------------------------------------------------------
# pooling


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, nd):
    """Kernel, stride, dilation, padding and output sizes of a pooling, PyTorch's checks and
    output sizes (``ceil_mode``: a last window that starts inside the input or its left
    padding is kept)."""
    kernel = _ntuple(kernel_size, nd, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else _ntuple(stride, nd, "stride")
    pad = _ntuple(padding, nd, "padding")
    dilation = _ntuple(dilation, nd, "dilation")
    if any(k <= 0 for k in kernel):
        raise _gflow.InvalidArgumentError(
            f"kernel_size must be greater than zero, but got kernel_size={list(kernel)}")
    if any(s <= 0 for s in stride):
        raise _gflow.InvalidArgumentError("stride should not be zero")
    if any(d <= 0 for d in dilation):
        raise _gflow.InvalidArgumentError(
            f"dilation should be greater than zero, but got dilation={list(dilation)}")
    if any(p < 0 for p in pad):
        raise _gflow.InvalidArgumentError("pad must be non-negative")
    for k, p, d in zip(kernel, pad, dilation):
        if p > (d * (k - 1) + 1) // 2:
            raise _gflow.InvalidArgumentError(
                f"pad should be at most half of effective kernel size, but got pad={p}, "
                f"kernel_size={k} and dilation={d}")
    in_sizes = tuple(x.shape[2:])
    out_sizes = []
    for n, k, s, p, d in zip(in_sizes, kernel, stride, pad, dilation):
        span = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
        o = span // s + 1
        if ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        out_sizes.append(o)
    if any(o <= 0 for o in out_sizes):
        c = x.shape[1]
        raise _gflow.ShapeError(
            f"Given input size: ({'x'.join(str(v) for v in (c, *in_sizes))}). Calculated output "
            f"size: ({'x'.join(str(v) for v in (c, *out_sizes))}). Output size is too small")
    return in_sizes, kernel, stride, dilation, pad, tuple(out_sizes)


def _flat_indices(table, picked, like, key):
    """The input positions (flat over the spatial dims, PyTorch's ``return_indices``) of the
    window elements ``picked`` (N, C, L) (each an index into K)."""
    n, c, l = picked.shape
    k = table.shape[0]
    t = _constant(table, key + ("positions",), like)
    return t.reshape(1, 1, k, l).expand(n, c, k, l).gather(2, picked.unsqueeze(2)).squeeze(2)


def _window_max(x, table, outside, key, out_sizes, unbatched, return_indices):
    """The maximum of each window of ``table`` over (N, C, *spatial) ``x`` as (N, C,
    *out_sizes) (the first maximum, PyTorch's gradient), unbatched again if the input was, and
    with ``return_indices`` the flat spatial position of each."""
    n, c = x.shape[0], x.shape[1]
    values, picked = _windows(x, table, outside, float("-inf"), key).max(2)
    values = values.reshape(n, c, *out_sizes)
    if unbatched:
        values = values.squeeze(0)
    if not return_indices:
        return values
    indices = _flat_indices(table, picked, x, key).reshape(n, c, *out_sizes)
    return values, indices.squeeze(0) if unbatched else indices


def _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd,
              name):
    x, unbatched = _batched(input, nd, name)
    geometry = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, nd)
    in_sizes, kernel, stride, dilation, pad, out_sizes = geometry
    key = ("pool", in_sizes, kernel, stride, dilation, pad, out_sizes)
    table, outside, _ = _sliding_table(*key[1:])
    return _window_max(x, table, outside, key, out_sizes, unbatched, return_indices)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """PyTorch's ``max_pool1d`` of (N, C, L) (or (C, L)): the maximum of each window
    (``stride`` the kernel size by default, ``padding`` at most half the effective kernel,
    ignored by the maximum, ``dilation``, ``ceil_mode``); ``return_indices`` also gives each
    maximum's position in L. The gradient goes to the first maximum of a window."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices,
                     1, "max_pool1d")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """PyTorch's ``max_pool2d`` of (N, C, H, W) (or (C, H, W)), as ``max_pool1d``
    (``return_indices``: positions in the flattened H * W)."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices,
                     2, "max_pool2d")


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """PyTorch's ``max_pool3d`` of (N, C, D, H, W) (or (C, D, H, W)), as ``max_pool2d``."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices,
                     3, "max_pool3d")


@functools.lru_cache(maxsize=512)
def _avg_divisors(in_sizes, kernel, stride, pad, out_sizes, count_include_pad):
    """PyTorch's divisor of each output of an average pooling (L,): the window's size within
    the padded input, or (``count_include_pad=False``) its elements inside the input."""
    per_dim = []
    for n, k, s, p, o in zip(in_sizes, kernel, stride, pad, out_sizes):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        if count_include_pad:
            per_dim.append(end - start)
        else:
            per_dim.append(np.minimum(end, n) - np.maximum(start, 0))
    div = functools.reduce(np.multiply.outer, per_dim).reshape(-1).astype(np.float64)
    div[div <= 0] = 1.0  # a window wholly outside sums to 0
    div.setflags(write=False)
    return div


def _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override, nd, name):
    x, unbatched = _batched(input, nd, name)
    geometry = _pool_geometry(x, kernel_size, stride, padding, 1, ceil_mode, nd)
    in_sizes, kernel, stride, dilation, pad, out_sizes = geometry
    key = ("pool", in_sizes, kernel, stride, dilation, pad, out_sizes)
    table, outside, _ = _sliding_table(*key[1:])
    n, c = x.shape[0], x.shape[1]
    sums = _windows(x, table, outside, 0.0, key).sum(2)
    if divisor_override is not None:
        if divisor_override == 0:
            raise _gflow.InvalidArgumentError("divisor must be not zero")
        out = sums / float(divisor_override)
    else:
        div = _avg_divisors(in_sizes, kernel, stride, pad, out_sizes, bool(count_include_pad))
        if np.all(div == div[0]):
            out = sums / float(div[0])
        else:
            out = sums / _constant(div, ("avgdiv", geometry, bool(count_include_pad)), x,
                                   dtype=x.dtype)
    out = out.reshape(n, c, *out_sizes)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """PyTorch's ``avg_pool1d`` of (N, C, L) (or (C, L)): the mean of each window (``stride``
    the kernel size by default; ``padding`` zeros, counted in the mean unless
    ``count_include_pad=False``; ``ceil_mode``)."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1,
                     "avg_pool1d")


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """PyTorch's ``avg_pool2d`` of (N, C, H, W) (or (C, H, W)), as ``avg_pool1d``;
    ``divisor_override`` divides every window's sum instead."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 2, "avg_pool2d")


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """PyTorch's ``avg_pool3d`` of (N, C, D, H, W) (or (C, D, H, W)), as ``avg_pool2d``."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 3, "avg_pool3d")


def _adaptive_geometry(input, output_size, nd, name):
    if input.dim() not in (nd + 1, nd + 2):
        raise _gflow.ShapeError(f"{name}(): Expected {nd + 1}D or {nd + 2}D tensor, but got "
                                f"{list(input.shape)}")
    for i in range(0 if input.dim() == nd + 1 else 1, input.dim()):
        if input.shape[i] == 0:
            raise _gflow.ShapeError(
                f"{name}(): Expected input to have non-zero size for non-batch dimensions, but "
                f"input has sizes {list(input.shape)} with dimension {i} being empty")
    x, unbatched = _batched(input, nd, name)
    in_sizes = tuple(x.shape[2:])
    if isinstance(output_size, (int, np.integer)) or output_size is None:
        output_size = (output_size,) * nd
    output_size = tuple(output_size)
    if len(output_size) == 1:
        output_size = output_size * nd
    if len(output_size) != nd:
        raise _gflow.InvalidArgumentError(
            f"{name}: output_size must be {nd}, but got {len(output_size)}")
    out_sizes = tuple(n if o is None else int(o) for n, o in zip(in_sizes, output_size))
    if any(o < 0 for o in out_sizes):
        raise _gflow.InvalidArgumentError(
            f"{name}: elements of output_size must be greater than or equal to 0 but received "
            f"{{{', '.join(str(o) for o in out_sizes)}}}")
    return x, unbatched, in_sizes, out_sizes


def _adaptive_avg_pool(input, output_size, nd, name):
    x, unbatched, in_sizes, out_sizes = _adaptive_geometry(input, output_size, nd, name)
    n, c = x.shape[0], x.shape[1]
    spatial = tuple(range(2, 2 + nd))
    if all(o == 1 for o in out_sizes):
        out = x.mean(spatial, keepdim=True)
    elif out_sizes == in_sizes:
        out = x.clone()
    elif 0 in out_sizes:
        out = x.new_zeros((n, c, *out_sizes))
    else:
        key = ("adaptive", in_sizes, out_sizes)
        table, outside, count = _adaptive_table(in_sizes, out_sizes)
        sums = _windows(x, table, outside, 0.0, key).sum(2)
        if np.all(count == count[0]):
            out = sums / float(count[0])
        else:
            out = sums / _constant(count, ("adaptivediv", in_sizes, out_sizes), x, dtype=x.dtype)
        out = out.reshape(n, c, *out_sizes)
    return out.squeeze(0) if unbatched else out


def adaptive_avg_pool1d(input, output_size):
    """PyTorch's ``adaptive_avg_pool1d`` of (N, C, L) (or (C, L)): ``output_size`` means over
    the windows ``[floor(i L / out), ceil((i + 1) L / out))``."""
    return _adaptive_avg_pool(input, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input, output_size):
    """PyTorch's ``adaptive_avg_pool2d`` of (N, C, H, W) (or (C, H, W)): ``output_size`` an
    int or (h, w), ``None`` keeping that dim's size."""
    return _adaptive_avg_pool(input, output_size, 2, "adaptive_avg_pool2d")


def adaptive_avg_pool3d(input, output_size):
    """PyTorch's ``adaptive_avg_pool3d`` of (N, C, D, H, W) (or (C, D, H, W))."""
    return _adaptive_avg_pool(input, output_size, 3, "adaptive_avg_pool3d")


def _adaptive_max_pool(input, output_size, return_indices, nd, name):
    x, unbatched, in_sizes, out_sizes = _adaptive_geometry(input, output_size, nd, name)
    if 0 in out_sizes:
        raise _gflow.InvalidArgumentError(f"{name}(): output_size must be positive, got "
                                          f"{list(out_sizes)}")
    key = ("adaptive", in_sizes, out_sizes)
    table, outside, _ = _adaptive_table(in_sizes, out_sizes)
    return _window_max(x, table, outside, key, out_sizes, unbatched, return_indices)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """PyTorch's ``adaptive_max_pool1d``: the maximum of each adaptive window (as
    ``adaptive_avg_pool1d``'s); ``return_indices`` also gives its position."""
    return _adaptive_max_pool(input, output_size, return_indices, 1, "adaptive_max_pool1d")


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """PyTorch's ``adaptive_max_pool2d`` of (N, C, H, W) (or (C, H, W))."""
    return _adaptive_max_pool(input, output_size, return_indices, 2, "adaptive_max_pool2d")


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """PyTorch's ``adaptive_max_pool3d`` of (N, C, D, H, W) (or (C, D, H, W))."""
    return _adaptive_max_pool(input, output_size, return_indices, 3, "adaptive_max_pool3d")


# --------------------------------------------------------------------------------------------
# batch normalisation


def _check_stat(t, name, c):
    if t is not None and t.numel() != c:
        raise _gflow.ShapeError(f"{name} should contain {c} elements not {t.numel()}")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """PyTorch's ``batch_norm`` of (N, C, *) over every dim but C: with ``training`` the
    batch's mean and biased variance normalise, and the running statistics given are updated in
    place (``(1 - momentum) * running + momentum * batch``, the variance unbiased); otherwise
    ``running_mean`` and ``running_var`` normalise. ``weight`` and ``bias`` (C) scale and
    shift."""
    c = input.shape[1] if input.dim() >= 2 else 0
    _check_stat(running_mean, "running_mean", c)
    _check_stat(running_var, "running_var", c)
    _check_stat(weight, "weight", c)
    _check_stat(bias, "bias", c)
    if input.dim() < 2:
        raise _gflow.ShapeError(f"batch_norm: expected an input (N, C, *) of at least 2 dims, "
                                f"got size {list(input.shape)}")
    shape = [1, c] + [1] * (input.dim() - 2)
    dims = tuple(d for d in range(input.dim()) if d != 1)
    if training:
        count = input.numel() // c
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {input.shape}")
        mean = input.mean(dims, keepdim=True)
        centred = input - mean
        var = centred.square().mean(dims, keepdim=True)
        out = centred * (var + eps).rsqrt()
        if running_mean is not None or running_var is not None:
            m = float(momentum)
            with _gflow.no_grad():
                if running_mean is not None:
                    running_mean.mul_(1.0 - m).add_(
                        mean.detach().reshape(c).to(running_mean.dtype) * m)
                if running_var is not None:
                    unbiased = var.detach().reshape(c) * (count / (count - 1))
                    running_var.mul_(1.0 - m).add_(unbiased.to(running_var.dtype) * m)
    else:
        if running_mean is None or running_var is None:
            raise _gflow.InvalidArgumentError(
                f"running_{'mean' if running_mean is None else 'var'} must be defined in "
                "evaluation mode")
        rm = running_mean.to(input.dtype).reshape(*shape)
        rv = running_var.to(input.dtype).reshape(*shape)
        out = (input - rm) * (rv + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(*shape)
    if bias is not None:
        out = out + bias.reshape(*shape)
    return out
