"""Convolution, pooling and batch normalisation (``gflow/nn/conv_functional.py`` and
``gflow/nn/conv.py``): ``F.conv1d/2d/3d``, ``F.max_pool*``, ``F.avg_pool*``,
``F.adaptive_avg_pool*``, ``F.adaptive_max_pool*``, ``F.batch_norm`` and their ``nn`` modules.

Every feature is checked against a float64 NumPy reference written here with plain loops over
output positions and kernel offsets (values, and the gradients of input, weight and bias
worked out by the same loops), on local tensors and on global ones (a 1-rank placement,
broadcast and split, and a 2-process run split by batch); where torch is importable the same
calls through torch give the same values, gradients, running statistics, errors and a small
CNN's training losses."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn
import gflow.nn.functional as F

from torch_cases import KINDS, central_grad, make

RNG = np.random.default_rng(2024)


def randn(*shape):
    return RNG.standard_normal(shape)


def _torch():
    return pytest.importorskip("torch")


def close(a, b, rtol=1e-10, atol=1e-12, msg=""):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, err_msg=msg)


# --------------------------------------------------------------------------------------------
# NumPy references (float64, loops)


def ntuple(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v) * (n if len(v) == 1 else 1)


def ref_conv(x, w, b, stride=1, padding=0, dilation=1, groups=1, up=None):
    """Convolution of ``x`` (N, C, *spatial) by ``w`` (O, C / groups, *k), its value and, for
    an upstream gradient ``up``, the gradients of x, w and b: loops over output positions,
    kernel offsets and groups."""
    nd = x.ndim - 2
    ks = w.shape[2:]
    stride, dilation = ntuple(stride, nd), ntuple(dilation, nd)
    if padding == "valid":
        lo = hi = (0,) * nd
    elif padding == "same":
        total = [d * (k - 1) for k, d in zip(ks, dilation)]
        lo = tuple(t // 2 for t in total)
        hi = tuple(t - a for t, a in zip(total, lo))
    else:
        lo = hi = ntuple(padding, nd)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(lo, hi)))
    n, o_ch = x.shape[0], w.shape[0]
    cg, og = w.shape[1], o_ch // groups
    outs = [(xp.shape[2 + i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1
            for i in range(nd)]
    y = np.zeros((n, o_ch, *outs))
    gxp, gw = np.zeros_like(xp), np.zeros_like(w)
    for o in np.ndindex(*outs):
        for kk in np.ndindex(*ks):
            pos = tuple(o[i] * stride[i] + kk[i] * dilation[i] for i in range(nd))
            for g in range(groups):
                ci, oi = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
                xs = xp[(slice(None), ci) + pos]  # (N, Cg)
                ws = w[(oi, slice(None)) + kk]  # (Og, Cg)
                y[(slice(None), oi) + o] += xs @ ws.T
                if up is not None:
                    u = up[(slice(None), oi) + o]  # (N, Og)
                    gxp[(slice(None), ci) + pos] += u @ ws
                    gw[(oi, slice(None)) + kk] += u.T @ xs
    if b is not None:
        y += b.reshape(1, o_ch, *[1] * nd)
    if up is None:
        return y
    inner = tuple(slice(a, a + s) for a, s in zip(lo, x.shape[2:]))
    gx = gxp[(slice(None), slice(None)) + inner]
    gb = up.sum(axis=tuple(i for i in range(up.ndim) if i != 1))
    return y, gx, gw, gb


def pool_out(n, k, s, p, d, ceil):
    """PyTorch's pooling output size of one dim."""
    span = n + 2 * p - d * (k - 1) - 1
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def ref_max_pool(x, k, s=None, p=0, d=1, ceil=False, up=None):
    """Max pooling: the first maximum of each window (NaN wins), its flat position and the
    gradient routed to it."""
    nd = x.ndim - 2
    k = ntuple(k, nd)
    s = k if s is None else ntuple(s, nd)
    p, d = ntuple(p, nd), ntuple(d, nd)
    sp = x.shape[2:]
    outs = [pool_out(sp[i], k[i], s[i], p[i], d[i], ceil) for i in range(nd)]
    lead = x.shape[:2]
    y = np.full(lead + tuple(outs), -np.inf)
    idx = np.zeros(lead + tuple(outs), np.int64)
    gx = np.zeros(x.shape)
    for o in np.ndindex(*outs):
        best, at = np.full(lead, -np.inf), np.zeros(lead, np.int64)
        for kk in np.ndindex(*k):
            pos = [o[i] * s[i] - p[i] + kk[i] * d[i] for i in range(nd)]
            if any(q < 0 or q >= sp[i] for i, q in enumerate(pos)):
                continue
            v = x[(Ellipsis,) + tuple(pos)]
            better = (v > best) | (np.isnan(v) & ~np.isnan(best))
            best = np.where(better, v, best)
            at = np.where(better, np.ravel_multi_index(pos, sp), at)
        y[(Ellipsis,) + o], idx[(Ellipsis,) + o] = best, at
        if up is not None:
            for a in np.ndindex(*lead):
                gx[a + np.unravel_index(at[a], sp)] += up[a + o]
    return (y, idx) if up is None else (y, idx, gx)


def ref_avg_pool(x, k, s=None, p=0, ceil=False, count_include_pad=True, divisor=None,
                 up=None):
    """Average pooling: each window's sum over the input elements, divided by the window's
    size clipped to the padded input (``count_include_pad``) or its elements inside the input,
    or by ``divisor``."""
    nd = x.ndim - 2
    k = ntuple(k, nd)
    s = k if s is None else ntuple(s, nd)
    p = ntuple(p, nd)
    sp = x.shape[2:]
    outs = [pool_out(sp[i], k[i], s[i], p[i], 1, ceil) for i in range(nd)]
    y = np.zeros(x.shape[:2] + tuple(outs))
    gx = np.zeros(x.shape)
    for o in np.ndindex(*outs):
        inside, size = [], 1
        for kk in np.ndindex(*k):
            pos = tuple(o[i] * s[i] - p[i] + kk[i] for i in range(nd))
            if all(0 <= q < sp[i] for i, q in enumerate(pos)):
                inside.append(pos)
        for i in range(nd):
            start = o[i] * s[i] - p[i]
            size *= min(start + k[i], sp[i] + p[i]) - start
        div = divisor if divisor is not None else size if count_include_pad else len(inside)
        for pos in inside:
            y[(Ellipsis,) + o] += x[(Ellipsis,) + pos] / 1.0
            if up is not None:
                gx[(Ellipsis,) + pos] += up[(Ellipsis,) + o] / div
        y[(Ellipsis,) + o] /= div
    return y if up is None else (y, gx)


def ref_adaptive(x, out, kind, up=None):
    """Adaptive pooling over the windows ``[floor(i n / m), ceil((i + 1) n / m))``: the mean
    (``kind="avg"``) or the first maximum and its flat position (``"max"``)."""
    nd = x.ndim - 2
    sp = x.shape[2:]
    out = tuple(sp[i] if o is None else o for i, o in enumerate(ntuple(out, nd)))
    lead = x.shape[:2]
    y, idx, gx = np.zeros(lead + out), np.zeros(lead + out, np.int64), np.zeros(x.shape)
    for o in np.ndindex(*out):
        ranges = [range(math.floor(o[i] * sp[i] / out[i]),
                        math.ceil((o[i] + 1) * sp[i] / out[i])) for i in range(nd)]
        cells = [tuple(c) for c in np.array(np.meshgrid(*ranges, indexing="ij")).reshape(nd, -1).T]
        if kind == "avg":
            y[(Ellipsis,) + o] = sum(x[(Ellipsis,) + c] for c in cells) / len(cells)
            if up is not None:
                for c in cells:
                    gx[(Ellipsis,) + c] += up[(Ellipsis,) + o] / len(cells)
            continue
        best, at = np.full(lead, -np.inf), np.zeros(lead, np.int64)
        for c in cells:
            v = x[(Ellipsis,) + c]
            better = v > best
            best, at = np.where(better, v, best), np.where(better, np.ravel_multi_index(c, sp), at)
        y[(Ellipsis,) + o], idx[(Ellipsis,) + o] = best, at
        if up is not None:
            for a in np.ndindex(*lead):
                gx[a + np.unravel_index(at[a], sp)] += up[a + o]
    if kind == "avg":
        return y if up is None else (y, gx)
    return (y, idx) if up is None else (y, idx, gx)


def ref_batch_norm(x, mean, var, w, b, training, eps):
    """Batch norm's value; in training the batch's mean and biased variance (returned too)."""
    dims = tuple(i for i in range(x.ndim) if i != 1)
    shape = [1, x.shape[1]] + [1] * (x.ndim - 2)
    if training:
        mean, var = x.mean(axis=dims), x.var(axis=dims)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y, mean, var


def grads(ts):
    return [t.grad.numpy() if t.grad is not None else None for t in ts]


def run_flow(fn, arrays, kind="local", up=None, dtype=None):
    """``fn(*tensors)`` on ``arrays`` as flow tensors of layout ``kind`` that require grad,
    then backward with the upstream ``up``; the output (or outputs) and the inputs."""
    ts = [make(a if dtype is None else a.astype(dtype), kind, requires_grad=True)
          for a in arrays]
    out = fn(*ts)
    first = out[0] if isinstance(out, tuple) else out
    if up is not None:
        u = up if dtype is None else up.astype(dtype)
        (first * make(u, "broadcast" if first.is_global else "local")).sum().backward()
    return out, ts


# --------------------------------------------------------------------------------------------
# convolution


CONV2D_GRID = [(s, p, d, g) for s in (1, 2) for p in (0, 1, (2, 0), "same", "valid")
               for d in (1, 2) for g in (1, 2) if not (p == "same" and s != 1)]


@pytest.mark.parametrize("stride,padding,dilation,groups", CONV2D_GRID)
def test_conv2d_matches_numpy(stride, padding, dilation, groups):
    x, w, b = randn(2, 4, 7, 6), randn(6, 4 // groups, 3, 2), randn(6)
    want = ref_conv(x, w, b, stride, padding, dilation, groups)
    up = randn(*want.shape)
    want, gx, gw, gb = ref_conv(x, w, b, stride, padding, dilation, groups, up)
    out, ts = run_flow(lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups),
                       [x, w, b], up=up)
    assert tuple(out.shape) == want.shape and out.dtype == flow.float64
    close(out.numpy(), want)
    for got, ref, name in zip(grads(ts), (gx, gw, gb), "xwb"):
        close(got, ref, msg=f"gradient of {name}")


@pytest.mark.parametrize("stride,padding,dilation,groups",
                         [(1, 0, 1, 1), (2, 1, 1, 2), (1, "same", 2, 1), (3, 2, 2, 4),
                          (1, "same", 1, 4), (2, "valid", 3, 1)])
def test_conv1d_matches_numpy(stride, padding, dilation, groups):
    x, w, b = randn(3, 4, 11), randn(8, 4 // groups, 4), randn(8)
    want = ref_conv(x, w, b, stride, padding, dilation, groups)
    up = randn(*want.shape)
    want, gx, gw, gb = ref_conv(x, w, b, stride, padding, dilation, groups, up)
    out, ts = run_flow(lambda x, w, b: F.conv1d(x, w, b, stride=stride, padding=padding,
                                                dilation=dilation, groups=groups),
                       [x, w, b], up=up)
    close(out.numpy(), want)
    for got, ref in zip(grads(ts), (gx, gw, gb)):
        close(got, ref)


def test_conv3d_without_bias_and_unbatched_inputs_match_numpy():
    x, w = randn(2, 4, 4, 5, 3), randn(4, 2, 2, 3, 2)
    want = ref_conv(x, w, None, (1, 2, 1), 1, (1, 1, 2), 2)
    close(F.conv3d(flow.tensor(x), flow.tensor(w), None, (1, 2, 1), 1, (1, 1, 2), 2).numpy(),
          want)
    # (C, *spatial) without the batch dim, as PyTorch
    x2, w2, b2 = randn(3, 5, 5), randn(2, 3, 3, 3), randn(2)
    out = F.conv2d(flow.tensor(x2), flow.tensor(w2), flow.tensor(b2), padding=1)
    assert tuple(out.shape) == (2, 5, 5)
    close(out.numpy(), ref_conv(x2[None], w2, b2, 1, 1)[0])
    x1, w1 = randn(3, 9), randn(5, 3, 3)
    close(F.conv1d(flow.tensor(x1), flow.tensor(w1), stride=2).numpy(),
          ref_conv(x1[None], w1, None, 2)[0])
    # a 1x1 kernel reads the input as it is (no window gather)
    w11 = randn(5, 3, 1, 1)
    close(F.conv2d(flow.tensor(x2), flow.tensor(w11)).numpy(), ref_conv(x2[None], w11, None)[0])


def test_conv2d_float32():
    x, w, b = randn(2, 3, 8, 8), randn(4, 3, 3, 3), randn(4)
    want = ref_conv(x, w, b, 2, 1)
    up = randn(*want.shape)
    want, gx, gw, gb = ref_conv(x, w, b, 2, 1, up=up)
    out, ts = run_flow(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), [x, w, b],
                       up=up, dtype=np.float32)
    assert out.dtype == flow.float32 and ts[0].grad.dtype == flow.float32
    close(out.numpy(), want, rtol=1e-5, atol=1e-5)
    for got, ref in zip(grads(ts), (gx, gw, gb)):
        close(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_conv_and_pools_on_global_layouts(kind):
    """Global inputs (a 1-rank placement, broadcast or split by batch) give the local values
    and gradients; a batch split stays split."""
    x, w, b = randn(4, 4, 6, 5), randn(6, 2, 3, 3), randn(6)
    up = randn(4, 6, 3, 5)
    want, gx, gw, gb = ref_conv(x, w, b, (2, 1), 1, 1, 2, up)
    out, ts = run_flow(lambda x, w, b: F.conv2d(x, w, b, (2, 1), 1, 1, 2), [x, w, b], kind, up)
    close(out.numpy(), want)
    for got, ref in zip(grads(ts), (gx, gw, gb)):
        close(got, ref)
    w1 = randn(5, 4, 3, 3)
    out1 = F.conv2d(make(x, kind), make(w1, "broadcast" if kind != "local" else "local"),
                    padding="same")
    close(out1.numpy(), ref_conv(x, w1, None, 1, "same"))
    if kind == "split":
        assert out.sbp == (flow.sbp.split(0),) and out1.sbp == (flow.sbp.split(0),)
    yv, yi, gxm = ref_max_pool(x, 3, 2, 1, up=np.ones((4, 4, 3, 3)))
    (v, i), ts = run_flow(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), [x], kind,
                          np.ones((4, 4, 3, 3)))
    close(v.numpy(), yv)
    np.testing.assert_array_equal(i.numpy(), yi)
    close(ts[0].grad.numpy(), gxm)
    close(F.avg_pool2d(make(x, kind), 2, 1, 1, count_include_pad=False).numpy(),
          ref_avg_pool(x, 2, 1, 1, count_include_pad=False))
    close(F.adaptive_avg_pool2d(make(x, kind), (4, 3)).numpy(), ref_adaptive(x, (4, 3), "avg"))
    close(F.adaptive_max_pool2d(make(x, kind), (4, 3)).numpy(),
          ref_adaptive(x, (4, 3), "max")[0])


CONV_ERRORS = [
    # (what, call(lib), exception type, gflow's message)
    ("2-D input to conv2d", lambda t: t.nn.functional.conv2d(t.randn(2, 3), t.randn(4, 2, 3, 3)),
     RuntimeError, r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d, but got input "
                   r"of size: \[2, 3\]"),
    ("channels", lambda t: t.nn.functional.conv2d(t.randn(1, 2, 5, 5), t.randn(4, 3, 3, 3)),
     RuntimeError, r"expected input\[1, 2, 5, 5\] to have 3 channels, but got 2 channels"),
    ("groups vs weight", lambda t: t.nn.functional.conv2d(t.randn(1, 2, 5, 5),
                                                          t.randn(3, 1, 3, 3), groups=2),
     RuntimeError, r"expected weight to be divisible by 2 at dimension 0"),
    ("groups vs channels", lambda t: t.nn.functional.conv2d(t.randn(1, 3, 5, 5),
                                                            t.randn(4, 1, 3, 3), groups=2),
     RuntimeError, r"to have 2 channels, but got 3 channels"),
    ("kernel > padded input", lambda t: t.nn.functional.conv2d(t.randn(1, 2, 5, 5),
                                                               t.randn(4, 2, 6, 6)),
     RuntimeError, r"Calculated padded input size per channel: \(5 x 5\). Kernel size: \(6 x 6\). "
                   r"Kernel size can't be greater than actual input size"),
    ("dilated kernel > input", lambda t: t.nn.functional.conv1d(t.randn(1, 2, 5),
                                                                t.randn(4, 2, 3), dilation=3),
     RuntimeError, r"Kernel size: \(7\)"),
    ("same with stride", lambda t: t.nn.functional.conv2d(t.randn(1, 2, 5, 5),
                                                          t.randn(4, 2, 3, 3), stride=2,
                                                          padding="same"),
     RuntimeError, r"padding='same' is not supported for strided convolutions"),
    ("padding string", lambda t: t.nn.functional.conv2d(t.randn(1, 2, 5, 5), t.randn(4, 2, 3, 3),
                                                        padding="full"),
     RuntimeError, r"Invalid padding string: 'full'"),
    ("negative padding", lambda t: t.nn.functional.conv2d(t.randn(1, 2, 5, 5),
                                                          t.randn(4, 2, 3, 3), padding=-1),
     RuntimeError, r"negative padding is not supported"),
    ("zero stride", lambda t: t.nn.functional.conv2d(t.randn(1, 2, 5, 5), t.randn(4, 2, 3, 3),
                                                     stride=0),
     RuntimeError, r"non-positive stride is not supported"),
    ("bias size", lambda t: t.nn.functional.conv2d(t.randn(1, 2, 5, 5), t.randn(4, 2, 3, 3),
                                                   t.randn(3)),
     RuntimeError, r"expected bias to be 1-dimensional with 4 elements, but got bias of size "
                   r"\[3\]"),
    ("module in_channels", lambda t: t.nn.Conv2d(3, 4, 3, groups=2), ValueError,
     r"in_channels must be divisible by groups"),
    ("module out_channels", lambda t: t.nn.Conv2d(4, 3, 3, groups=2), ValueError,
     r"out_channels must be divisible by groups"),
    ("module groups", lambda t: t.nn.Conv1d(4, 4, 3, groups=0), ValueError,
     r"groups must be a positive integer"),
    ("module padding string", lambda t: t.nn.Conv2d(4, 4, 3, padding="full"), ValueError,
     r"Invalid padding string 'full'"),
    ("module same stride", lambda t: t.nn.Conv2d(4, 4, 3, stride=2, padding="same"), ValueError,
     r"padding='same' is not supported for strided convolutions"),
    ("module padding_mode", lambda t: t.nn.Conv2d(4, 4, 3, padding_mode="mirror"), ValueError,
     r"padding_mode must be one of"),
    ("module input rank", lambda t: t.nn.Conv2d(2, 3, 3)(t.randn(2, 5)), RuntimeError,
     r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d"),
    ("max_pool rank", lambda t: t.nn.functional.max_pool2d(t.randn(2, 5), 2), RuntimeError,
     r"Expected 3D \(unbatched\) or 4D \(batched\) input to max_pool2d"),
    ("max_pool padding", lambda t: t.nn.functional.max_pool2d(t.randn(1, 2, 5, 5), 3, padding=2),
     RuntimeError, r"pad should be at most half of effective kernel size, but got pad=2, "
                   r"kernel_size=3 and dilation=1"),
    ("avg_pool padding", lambda t: t.nn.functional.avg_pool1d(t.randn(1, 2, 5), 3, padding=2),
     RuntimeError, r"pad should be at most half"),
    ("max_pool too small", lambda t: t.nn.functional.max_pool2d(t.randn(1, 3, 2, 2), 3),
     RuntimeError, r"Given input size: \(3x2x2\). Calculated output size: \(3x0x0\). Output "
                   r"size is too small"),
    ("avg_pool too small", lambda t: t.nn.functional.avg_pool2d(t.randn(1, 3, 2, 2), 3),
     RuntimeError, r"Output size is too small"),
    ("max_pool stride 0", lambda t: t.nn.functional.max_pool2d(t.randn(1, 2, 5, 5), 2, stride=0),
     RuntimeError, r"stride should not be zero"),
    ("adaptive rank", lambda t: t.nn.functional.adaptive_avg_pool2d(t.randn(5, 5), 2),
     RuntimeError, r"adaptive_avg_pool2d\(\): Expected 3D or 4D tensor"),
    ("adaptive empty", lambda t: t.nn.functional.adaptive_avg_pool2d(t.randn(1, 2, 0, 5), 2),
     RuntimeError, r"Expected input to have non-zero size for non-batch dimensions"),
    ("adaptive max rank", lambda t: t.nn.functional.adaptive_max_pool2d(t.randn(5, 5), 2),
     RuntimeError, r"adaptive_max_pool2d\(\): Expected 3D or 4D tensor"),
    ("batch_norm one value", lambda t: t.nn.functional.batch_norm(t.randn(1, 3), None, None,
                                                                  training=True),
     ValueError, r"Expected more than 1 value per channel when training, got input size"),
    ("batch_norm eval without stats", lambda t: t.nn.functional.batch_norm(t.randn(2, 3), None,
                                                                           None),
     RuntimeError, r"running_mean must be defined in evaluation mode"),
    ("batch_norm stats size", lambda t: t.nn.functional.batch_norm(t.randn(2, 3), t.zeros(4),
                                                                   t.ones(4)),
     RuntimeError, r"running_mean should contain 3 elements not 4"),
    ("batch_norm weight size", lambda t: t.nn.functional.batch_norm(
        t.randn(2, 3), t.zeros(3), t.ones(3), weight=t.ones(4)),
     RuntimeError, r"weight should contain 3 elements not 4"),
    ("BatchNorm1d rank", lambda t: t.nn.BatchNorm1d(3)(t.randn(2, 3, 4, 5)), ValueError,
     r"expected 2D or 3D input \(got 4D input\)"),
    ("BatchNorm2d rank", lambda t: t.nn.BatchNorm2d(3)(t.randn(2, 3, 4)), ValueError,
     r"expected 4D input \(got 3D input\)"),
    ("BatchNorm1d channels", lambda t: t.nn.BatchNorm1d(3)(t.randn(2, 4)), RuntimeError,
     r"running_mean should contain 4 elements not 3"),
    ("BatchNorm1d one sample", lambda t: t.nn.BatchNorm1d(3)(t.randn(1, 3)), ValueError,
     r"Expected more than 1 value per channel when training"),
]


@pytest.mark.parametrize("what,call,exc,message", CONV_ERRORS, ids=[c[0] for c in CONV_ERRORS])
def test_errors_as_pytorch(what, call, exc, message):
    with pytest.raises(exc, match=message):
        call(flow)
    try:
        import torch
    except ImportError:
        return
    import torch.nn  # noqa: F401  (t.nn.functional)
    with pytest.raises(exc):
        call(torch)


def test_conv_modules_shapes_init_repr_and_state_dict():
    flow.manual_seed(3)
    m = nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2)
    assert tuple(m.weight.shape) == (6, 2, 3, 2) and tuple(m.bias.shape) == (6,)
    bound = 1 / math.sqrt(2 * 3 * 2)  # kaiming_uniform_(a=sqrt(5)): 1/sqrt(fan_in)
    assert np.abs(m.weight.numpy()).max() <= bound and np.abs(m.bias.numpy()).max() <= bound
    assert np.abs(m.weight.numpy()).max() > bound / 2  # drawn, not zeros
    assert list(m.state_dict()) == ["weight", "bias"]
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    assert repr(m) == "Conv2d(4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), groups=2)"
    x = randn(2, 4, 7, 6)
    close(m(flow.tensor(x, dtype=flow.float32)).numpy(),
          ref_conv(x, m.weight.numpy().astype(np.float64), m.bias.numpy().astype(np.float64),
                   2, 1, 1, 2), rtol=1e-5, atol=1e-5)
    c1 = nn.Conv1d(3, 5, 4, bias=False, padding="same", dilation=2).double()
    assert c1.bias is None and tuple(c1.weight.shape) == (5, 3, 4)
    assert c1.weight.dtype == flow.float64
    assert repr(c1) == ("Conv1d(3, 5, kernel_size=(4,), stride=(1,), padding=same, "
                        "dilation=(2,), bias=False)")
    x1 = randn(2, 3, 9)
    close(c1(flow.tensor(x1)).numpy(), ref_conv(x1, c1.weight.numpy(), None, 1, "same", 2))
    c3 = nn.Conv3d(2, 2, 2)
    assert tuple(c3.weight.shape) == (2, 2, 2, 2, 2)


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"),
                                          ("circular", "wrap")])
def test_conv_padding_modes(mode, np_mode):
    m = nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode).double()
    x = randn(2, 2, 5, 6)
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (2, 2)], mode=np_mode)
    xt = flow.tensor(x, requires_grad=True)
    out = m(xt)
    close(out.numpy(), ref_conv(xp, m.weight.numpy(), m.bias.numpy()))
    out.sum().backward()
    assert tuple(xt.grad.shape) == x.shape
    # padding="same" with an even kernel pads more after than before, as PyTorch
    s = nn.Conv1d(2, 2, 4, padding="same", padding_mode=mode).double()
    x1 = randn(1, 2, 7)
    close(s(flow.tensor(x1)).numpy(),
          ref_conv(np.pad(x1, [(0, 0), (0, 0), (1, 2)], mode=np_mode), s.weight.numpy(),
                   s.bias.numpy()))


# --------------------------------------------------------------------------------------------
# pooling


MAX_POOL_GRID = [(k, s, p, d, c) for k in (2, 3) for s in (None, 1, 2) for p in (0, 1)
                 for d in (1, 2) for c in (False, True)]


@pytest.mark.parametrize("k,s,p,d,ceil", MAX_POOL_GRID)
def test_max_pool2d_matches_numpy(k, s, p, d, ceil):
    x = RNG.integers(-3, 4, (2, 2, 7, 8)).astype(np.float64)  # ties: the first maximum wins
    yv, yi = ref_max_pool(x, k, s, p, d, ceil)
    up = randn(*yv.shape)
    yv, yi, gx = ref_max_pool(x, k, s, p, d, ceil, up)
    (v, i), ts = run_flow(lambda x: F.max_pool2d(x, k, s, p, d, ceil, return_indices=True), [x],
                          up=up)
    close(v.numpy(), yv)
    assert i.dtype == flow.int64
    np.testing.assert_array_equal(i.numpy(), yi)
    close(ts[0].grad.numpy(), gx)


@pytest.mark.parametrize("k,s,p,d,ceil", [(2, None, 0, 1, False), (3, 2, 1, 1, True),
                                          (3, 1, 1, 2, False), (4, 3, 2, 1, True)])
def test_max_pool1d_and_3d_match_numpy(k, s, p, d, ceil):
    x = randn(2, 3, 10)
    yv, yi = ref_max_pool(x, k, s, p, d, ceil)
    up = randn(*yv.shape)
    yv, yi, gx = ref_max_pool(x, k, s, p, d, ceil, up)
    (v, i), ts = run_flow(lambda x: F.max_pool1d(x, k, s, p, d, ceil, True), [x], up=up)
    close(v.numpy(), yv)
    np.testing.assert_array_equal(i.numpy(), yi)
    close(ts[0].grad.numpy(), gx)
    close(F.max_pool1d(flow.tensor(x[0]), k, s, p, d, ceil).numpy(), yv[0])  # unbatched
    x3 = randn(1, 2, 5, 4, 6)
    close(F.max_pool3d(flow.tensor(x3), 2, 1 if s is None else s, 1, 1, ceil).numpy(),
          ref_max_pool(x3, 2, 1 if s is None else s, 1, 1, ceil)[0])


def test_max_pool_propagates_nan():
    x = randn(1, 1, 4, 4)
    x[0, 0, 0, 1] = np.nan
    out = F.max_pool2d(flow.tensor(x), 2).numpy()
    assert np.isnan(out[0, 0, 0, 0]) and not np.isnan(out[0, 0, 1]).any()


AVG_POOL_GRID = [(k, s, p, c, cip) for k in (2, 3) for s in (None, 1, 2) for p in (0, 1)
                 for c in (False, True) for cip in (True, False)]


@pytest.mark.parametrize("k,s,p,ceil,cip", AVG_POOL_GRID)
def test_avg_pool2d_matches_numpy(k, s, p, ceil, cip):
    x = randn(2, 2, 7, 8)
    want = ref_avg_pool(x, k, s, p, ceil, cip)
    up = randn(*want.shape)
    want, gx = ref_avg_pool(x, k, s, p, ceil, cip, up=up)
    out, ts = run_flow(lambda x: F.avg_pool2d(x, k, s, p, ceil, cip), [x], up=up)
    close(out.numpy(), want)
    close(ts[0].grad.numpy(), gx)


def test_avg_pool_1d_3d_divisor_override_and_float32():
    x = randn(2, 3, 11)
    for args in [(3,), (3, 2, 1), (4, 3, 2, True, False), (2, 1, 1, True, True)]:
        close(F.avg_pool1d(flow.tensor(x), *args).numpy(), ref_avg_pool(x, *args))
    x2 = randn(2, 2, 7, 7)
    close(F.avg_pool2d(flow.tensor(x2), 3, 2, 1, divisor_override=5).numpy(),
          ref_avg_pool(x2, 3, 2, 1, divisor=5))
    x3 = randn(1, 2, 4, 5, 6)
    close(F.avg_pool3d(flow.tensor(x3), (2, 3, 2), 2, 1, True, False).numpy(),
          ref_avg_pool(x3, (2, 3, 2), 2, 1, True, False))
    out = F.avg_pool2d(flow.tensor(x2.astype(np.float32)), 2)
    assert out.dtype == flow.float32
    close(out.numpy(), ref_avg_pool(x2, 2), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("out", [1, 2, 3, 5, (3, None), (4, 7), 8, (7, 8)])
def test_adaptive_pools_2d_match_numpy(out):
    x = randn(2, 3, 7, 8)
    want = ref_adaptive(x, out, "avg")
    up = randn(*want.shape)
    want, gx = ref_adaptive(x, out, "avg", up)
    got, ts = run_flow(lambda x: F.adaptive_avg_pool2d(x, out), [x], up=up)
    close(got.numpy(), want)
    close(ts[0].grad.numpy(), gx)
    yv, yi, gxm = ref_adaptive(x, out, "max", up)
    (v, i), ts = run_flow(lambda x: F.adaptive_max_pool2d(x, out, True), [x], up=up)
    close(v.numpy(), yv)
    np.testing.assert_array_equal(i.numpy(), yi)
    close(ts[0].grad.numpy(), gxm)


def test_adaptive_pools_1d_3d_and_unbatched_match_numpy():
    x = randn(2, 3, 10)
    for o in (1, 3, 4, 7, 10, 13):
        close(F.adaptive_avg_pool1d(flow.tensor(x), o).numpy(), ref_adaptive(x, o, "avg"))
        v, i = F.adaptive_max_pool1d(flow.tensor(x), o, return_indices=True)
        yv, yi = ref_adaptive(x, o, "max")
        close(v.numpy(), yv)
        np.testing.assert_array_equal(i.numpy(), yi)
    close(F.adaptive_avg_pool1d(flow.tensor(x[0]), 4).numpy(), ref_adaptive(x, 4, "avg")[0])
    x3 = randn(1, 2, 5, 4, 6)
    close(F.adaptive_avg_pool3d(flow.tensor(x3), (2, 3, 4)).numpy(),
          ref_adaptive(x3, (2, 3, 4), "avg"))
    close(F.adaptive_max_pool3d(flow.tensor(x3), 3).numpy(), ref_adaptive(x3, 3, "max")[0])
    x2 = randn(3, 6, 5)
    close(F.adaptive_avg_pool2d(flow.tensor(x2), (4, 2)).numpy(),
          ref_adaptive(x2[None], (4, 2), "avg")[0])


def test_pool_modules():
    x = randn(2, 3, 8, 7)
    t = flow.tensor(x)
    close(nn.MaxPool2d(3, 2, 1)(t).numpy(), ref_max_pool(x, 3, 2, 1)[0])
    v, i = nn.MaxPool2d(2, return_indices=True, ceil_mode=True)(t)
    yv, yi = ref_max_pool(x, 2, None, 0, 1, True)
    close(v.numpy(), yv)
    np.testing.assert_array_equal(i.numpy(), yi)
    close(nn.MaxPool1d(3)(flow.tensor(x[:, :, 0])).numpy(), ref_max_pool(x[:, :, 0], 3)[0])
    close(nn.AvgPool2d(3, 2, 1, count_include_pad=False)(t).numpy(),
          ref_avg_pool(x, 3, 2, 1, count_include_pad=False))
    close(nn.AvgPool1d(2, 1, 1)(flow.tensor(x[:, :, 0])).numpy(),
          ref_avg_pool(x[:, :, 0], 2, 1, 1))
    close(nn.AdaptiveAvgPool2d((3, None))(t).numpy(), ref_adaptive(x, (3, None), "avg"))
    close(nn.AdaptiveAvgPool1d(3)(flow.tensor(x[:, :, 0])).numpy(),
          ref_adaptive(x[:, :, 0], 3, "avg"))
    close(nn.AdaptiveMaxPool2d(3)(t).numpy(), ref_adaptive(x, 3, "max")[0])
    assert repr(nn.MaxPool2d(2)) == ("MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, "
                                     "ceil_mode=False)")
    assert repr(nn.AvgPool2d(3, 1)) == "AvgPool2d(kernel_size=3, stride=1, padding=0)"
    assert repr(nn.AdaptiveAvgPool2d((1, 1))) == "AdaptiveAvgPool2d(output_size=(1, 1))"
    assert list(nn.MaxPool2d(2).state_dict()) == []


# --------------------------------------------------------------------------------------------
# batch normalisation


def test_batch_norm_functional_matches_numpy():
    x, w, b = randn(4, 3, 2, 2), randn(3), randn(3)
    rm, rv = randn(3), RNG.uniform(0.5, 2.0, 3)
    for training in (True, False):
        ref = lambda x, w, b: ref_batch_norm(x, rm, rv, w, b, training, 1e-3)[0]  # noqa: E731
        want = ref(x, w, b)
        up = randn(*want.shape)
        mean_t, var_t = flow.tensor(rm), flow.tensor(rv)
        out, ts = run_flow(lambda x, w, b: F.batch_norm(x, mean_t, var_t, w, b, training, 0.2,
                                                        1e-3), [x, w, b], up=up)
        close(out.numpy(), want)
        for i, got in enumerate(grads(ts)):
            close(got, central_grad(lambda *a: (ref(*a) * up).sum(), [x, w, b], i), rtol=1e-6,
                  atol=1e-7)
        if training:  # the running statistics move towards the batch's, the variance unbiased
            close(mean_t.numpy(), 0.8 * rm + 0.2 * x.mean(axis=(0, 2, 3)))
            close(var_t.numpy(), 0.8 * rv + 0.2 * x.var(axis=(0, 2, 3), ddof=1))
        else:
            close(mean_t.numpy(), rm)
            close(var_t.numpy(), rv)
    # no running statistics and no affine: the batch's statistics only
    x1 = randn(5, 4)
    close(F.batch_norm(flow.tensor(x1), None, None, training=True).numpy(),
          ref_batch_norm(x1, None, None, None, None, True, 1e-5)[0])
    out32 = F.batch_norm(flow.tensor(x1.astype(np.float32)), None, None, training=True)
    assert out32.dtype == flow.float32
    close(out32.numpy(), ref_batch_norm(x1, None, None, None, None, True, 1e-5)[0], rtol=1e-5,
          atol=1e-5)


def test_batch_norm_modules_buffers_and_modes():
    bn = nn.BatchNorm2d(3, momentum=0.3).double()
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                     "num_batches_tracked"]
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var",
                                                  "num_batches_tracked"]
    assert bn.num_batches_tracked.dtype == flow.int64 and bn.running_var.dtype == flow.float64
    close(bn.running_var.numpy(), np.ones(3))
    mean, var = np.zeros(3), np.ones(3)
    for step in range(3):
        x = randn(4, 3, 3, 2) * (step + 1) + step
        out = bn(flow.tensor(x))
        close(out.numpy(), ref_batch_norm(x, None, None, None, None, True, 1e-5)[0])
        mean = 0.7 * mean + 0.3 * x.mean(axis=(0, 2, 3))
        var = 0.7 * var + 0.3 * x.var(axis=(0, 2, 3), ddof=1)
    close(bn.running_mean.numpy(), mean)
    close(bn.running_var.numpy(), var)
    assert bn.num_batches_tracked.item() == 3
    bn.eval()
    x = randn(2, 3, 2, 2)
    close(bn(flow.tensor(x)).numpy(), ref_batch_norm(x, mean, var, None, None, False, 1e-5)[0])
    assert bn.num_batches_tracked.item() == 3  # eval leaves the statistics alone
    # the state round-trips through load_state_dict
    other = nn.BatchNorm2d(3).double()
    other.load_state_dict(bn.state_dict())
    other.eval()
    close(other(flow.tensor(x)).numpy(), bn(flow.tensor(x)).numpy())
    assert other.num_batches_tracked.item() == 3
    # momentum=None: the cumulative average of the batches' statistics
    cum = nn.BatchNorm1d(2, momentum=None).double()
    xs = [randn(5, 2) for _ in range(3)]
    for a in xs:
        cum(flow.tensor(a))
    close(cum.running_mean.numpy(), np.mean([a.mean(0) for a in xs], axis=0))
    close(cum.running_var.numpy(), np.mean([a.var(0, ddof=1) for a in xs], axis=0))
    # untracked: batch statistics in eval too, no buffers; affine=False: no parameters
    free = nn.BatchNorm1d(2, affine=False, track_running_stats=False).double().eval()
    assert list(free.state_dict()) == [] and free.parameters() == []
    x3 = randn(4, 2, 3)
    close(free(flow.tensor(x3)).numpy(), ref_batch_norm(x3, None, None, None, None, True, 1e-5)[0])
    assert repr(free) == ("BatchNorm1d(2, eps=1e-05, momentum=0.1, affine=False, "
                          "track_running_stats=False)")
    bn.reset_running_stats()
    close(bn.running_mean.numpy(), np.zeros(3))
    assert bn.num_batches_tracked.item() == 0
    assert tuple(nn.BatchNorm3d(2)(flow.randn(2, 2, 2, 2, 2)).shape) == (2, 2, 2, 2, 2)


# --------------------------------------------------------------------------------------------
# a small CNN


def cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 5))


CNN_X = RNG.standard_normal((6, 3, 8, 8)).astype(np.float32)
CNN_Y = RNG.integers(0, 5, 6)


def ref_cnn_loss(params, x, y):
    w, b, lw, lb = [np.asarray(p, np.float64) for p in params]
    h = np.maximum(ref_conv(x.astype(np.float64), w, b, 1, 1), 0)
    h = ref_max_pool(h, 2)[0].reshape(len(x), -1) @ lw.T + lb
    h = h - h.max(1, keepdims=True)
    logp = h - np.log(np.exp(h).sum(1, keepdims=True))
    return -logp[np.arange(len(y)), y].mean()


def test_small_cnn_training_step_numpy():
    flow.manual_seed(0)
    model = cnn()
    opt = flow.optim.SGD(model.parameters(), lr=0.2)
    x, y = flow.tensor(CNN_X), flow.tensor(CNN_Y)
    losses = []
    for step in range(4):
        params = [p.numpy().copy() for p in model.parameters()]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.item())
        close(losses[-1], ref_cnn_loss(params, CNN_X, CNN_Y), rtol=1e-5, atol=1e-6)
        opt.step()
    assert losses[-1] < losses[0] - 0.05, losses


def test_small_cnn_training_matches_torch():
    torch = _torch()
    flow.manual_seed(1)
    model = cnn()
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 4 * 4, 5))
    with torch.no_grad():
        for (name, p), (tname, tp) in zip(model.named_parameters(), ref.named_parameters()):
            assert name == tname and tuple(p.shape) == tuple(tp.shape)
            tp.copy_(torch.tensor(p.numpy()))
    opt = flow.optim.SGD(model.parameters(), lr=0.2)
    topt = torch.optim.SGD(ref.parameters(), lr=0.2)
    x, y = flow.tensor(CNN_X), flow.tensor(CNN_Y)
    tx, ty = torch.tensor(CNN_X), torch.tensor(CNN_Y)
    losses = []
    for step in range(3):
        opt.zero_grad()
        topt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        tloss = torch.nn.functional.cross_entropy(ref(tx), ty)
        loss.backward()
        tloss.backward()
        close(loss.item(), tloss.item(), rtol=1e-5)
        for p, tp in zip(model.parameters(), ref.parameters()):
            close(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5)
        losses.append(loss.item())
        opt.step()
        topt.step()
    assert losses[-1] < losses[0]


# --------------------------------------------------------------------------------------------
# against PyTorch


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv_matches_torch():
    torch = _torch()
    tf = torch.nn.functional
    cases = [(tf.conv2d, F.conv2d, (2, 4, 7, 6), (6, 2, 3, 2), dict(stride=2, padding=1,
                                                                     groups=2)),
             (tf.conv2d, F.conv2d, (2, 4, 6, 6), (4, 4, 3, 3), dict(padding="same", dilation=2)),
             (tf.conv2d, F.conv2d, (2, 4, 6, 6), (8, 1, 3, 3), dict(padding=(0, 1), groups=4)),
             (tf.conv1d, F.conv1d, (2, 4, 9), (6, 4, 4), dict(padding="same")),
             (tf.conv1d, F.conv1d, (2, 6, 12), (6, 2, 3), dict(stride=3, dilation=2, groups=3)),
             (tf.conv3d, F.conv3d, (1, 2, 4, 5, 4), (3, 2, 2, 2, 3), dict(padding=1))]
    for tfn, ffn, xs, ws, kw in cases:
        for dtype, rtol in ((np.float64, 1e-10), (np.float32, 1e-4)):
            x, w, b = randn(*xs).astype(dtype), randn(*ws).astype(dtype), randn(ws[0]).astype(dtype)
            tt = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
            r = tfn(*tt, **kw)
            up = randn(*r.shape).astype(dtype)
            (r * torch.tensor(up)).sum().backward()
            out, ts = run_flow(lambda x, w, b: ffn(x, w, b, **kw), [x, w, b], up=up)
            close(out.numpy(), r.detach().numpy(), rtol=rtol, atol=rtol)
            for got, t in zip(grads(ts), tt):
                close(got, t.grad.numpy(), rtol=rtol, atol=rtol, msg=f"{kw} {dtype}")


def test_conv_modules_padding_modes_match_torch():
    torch = _torch()
    for mode in ("zeros", "reflect", "replicate", "circular"):
        m = nn.Conv2d(2, 4, 3, padding=(1, 2), padding_mode=mode, groups=2)
        t = torch.nn.Conv2d(2, 4, 3, padding=(1, 2), padding_mode=mode, groups=2)
        with torch.no_grad():
            t.weight.copy_(torch.tensor(m.weight.numpy()))
            t.bias.copy_(torch.tensor(m.bias.numpy()))
        x = randn(2, 2, 5, 6).astype(np.float32)
        close(m(flow.tensor(x)).numpy(), t(torch.tensor(x)).detach().numpy(), rtol=1e-5,
              atol=1e-5)
        assert repr(m) == repr(t)
    s = torch.nn.Conv1d(3, 5, 4, bias=False, padding="same", dilation=2)
    assert repr(nn.Conv1d(3, 5, 4, bias=False, padding="same", dilation=2)) == repr(s)


def test_pools_match_torch():
    torch = _torch()
    tf = torch.nn.functional
    x = RNG.integers(-3, 4, (2, 3, 9, 8)).astype(np.float64)
    calls = [
        ("max_pool2d", (3, 2, 1, 1, True, True)), ("max_pool2d", ((2, 3), (1, 2), (1, 0), 2)),
        ("avg_pool2d", (3, 2, 1, True, False)), ("avg_pool2d", ((3, 2), 2, (1, 1), False, True,
                                                                 4)),
        ("adaptive_avg_pool2d", ((4, 5),)), ("adaptive_max_pool2d", ((5, 3), True)),
    ]
    calls1 = [("max_pool1d", (4, 3, 2, 1, True, True)), ("avg_pool1d", (3, 2, 1, True, False)),
              ("adaptive_avg_pool1d", (5,)), ("adaptive_max_pool1d", (6, True))]
    for a, group in ((x, calls), (x[:, :, 0], calls1)):
        for name, args in group:
            tt = torch.tensor(a, requires_grad=True)
            t = flow.tensor(a, requires_grad=True)
            r, out = getattr(tf, name)(tt, *args), getattr(F, name)(t, *args)
            if isinstance(r, tuple):
                np.testing.assert_array_equal(out[1].numpy(), r[1].numpy())
                out, r = out[0], r[0]
            close(out.numpy(), r.detach().numpy(), msg=name)
            up = randn(*r.shape)
            (r * torch.tensor(up)).sum().backward()
            (out * flow.tensor(up)).sum().backward()
            close(t.grad.numpy(), tt.grad.numpy(), msg=name)


def test_batch_norm_matches_torch():
    torch = _torch()
    for cls, tcls, shape in ((nn.BatchNorm1d, torch.nn.BatchNorm1d, (6, 3)),
                             (nn.BatchNorm1d, torch.nn.BatchNorm1d, (4, 3, 5)),
                             (nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 3, 2))):
        for momentum, affine, track in ((0.1, True, True), (None, True, True),
                                        (0.3, False, True), (0.1, True, False)):
            m = cls(3, eps=1e-3, momentum=momentum, affine=affine, track_running_stats=track)
            t = tcls(3, eps=1e-3, momentum=momentum, affine=affine, track_running_stats=track)
            if affine:
                with torch.no_grad():  # not the ones and zeros they start with
                    w, b = randn(3).astype(np.float32), randn(3).astype(np.float32)
                    m.weight.data = flow.tensor(w)
                    m.bias.data = flow.tensor(b)
                    t.weight.copy_(torch.tensor(w))
                    t.bias.copy_(torch.tensor(b))
            for mode in ("train", "train", "eval", "train"):
                getattr(m, mode)()
                getattr(t, mode)()
                x = (randn(*shape) * 2 + 1).astype(np.float32)
                up = randn(*shape).astype(np.float32)
                xt = flow.tensor(x, requires_grad=True)
                tx = torch.tensor(x, requires_grad=True)
                out, r = m(xt), t(tx)
                close(out.numpy(), r.detach().numpy(), rtol=1e-5, atol=1e-5)
                (out * flow.tensor(up)).sum().backward()
                (r * torch.tensor(up)).sum().backward()
                close(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
                if affine:
                    close(m.weight.grad.numpy(), t.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
                    close(m.bias.grad.numpy(), t.bias.grad.numpy(), rtol=1e-4, atol=1e-5)
                    m.zero_grad()
                    t.zero_grad()
                if track:
                    close(m.running_mean.numpy(), t.running_mean.numpy(), rtol=1e-5, atol=1e-6)
                    close(m.running_var.numpy(), t.running_var.numpy(), rtol=1e-5, atol=1e-6)
                    assert m.num_batches_tracked.item() == t.num_batches_tracked.item()
            assert list(m.state_dict()) == list(t.state_dict())


# --------------------------------------------------------------------------------------------
# two ranks


def test_two_ranks(run_job):
    job = run_job(Path(__file__), 2, "--two-ranks")
    assert job.rc == 0, job.stdout[-3000:] + job.stderr[-3000:]
    for r in (0, 1):
        lines = [line for line in job.out[r] if ": " in line]
        assert lines == ["cnn: True"], job.out[r]


def _run_two_ranks():
    """Under the launcher with 2 processes: a Conv-BatchNorm-ReLU-MaxPool-grouped Conv-
    AdaptiveAvgPool-Linear model, broadcast on both ranks, on a batch split over them gives the
    loss, gradients and running statistics of the whole batch in one process."""
    p2 = flow.placement("cpu", {0: range(2)})

    def model():
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, groups=2),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5)).double()

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 3, 8, 8)), rng.integers(0, 5, 4)
    m = model().to_global(placement=p2, sbp=flow.sbp.broadcast)
    state = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    xt = flow.tensor(x, placement=p2, sbp=flow.sbp.split(0))
    yt = flow.tensor(y, placement=p2, sbp=flow.sbp.split(0))
    loss = F.cross_entropy(m(xt), yt)
    loss.backward()
    one = model()
    one.load_state_dict({k: flow.tensor(v) for k, v in state.items()})
    ref = F.cross_entropy(one(flow.tensor(x)), flow.tensor(y))
    ref.backward()
    ok = abs(loss.item() - ref.item()) < 1e-12
    for p, q in zip(m.parameters(), one.parameters()):
        ok = ok and np.allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, atol=1e-12)
    ok = ok and np.allclose(m[1].running_var.numpy(), one[1].running_var.numpy(), rtol=1e-12)
    print(f"cnn: {ok}", flush=True)


if __name__ == "__main__" and "--two-ranks" in sys.argv:
    _run_two_ranks()
