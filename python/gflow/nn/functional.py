"""Functional forms: ``flow.nn.functional.relu(x)``, ``linear``, ``mse_loss``, ``cross_entropy``,
``nll_loss``, ``binary_cross_entropy_with_logits``, ``softmax``, ``one_hot``, ``normalize``,
``pad``, ``scaled_dot_product_attention``, ... (gflow's own operators, so results match the
Rust API's), and PyTorch's everyday losses (``l1_loss smooth_l1_loss huber_loss
binary_cross_entropy kl_div``), activations (``softplus leaky_relu elu selu celu hardtanh relu6
logsigmoid glu mish hardswish hardsigmoid softsign``) and distances (``cosine_similarity
pairwise_distance``) composed of them, so they run on global tensors and have gradients.

An activation's ``inplace=True`` is accepted for PyTorch's signatures and gives a new tensor
(the input is left as it was): code that uses the returned value, as ``nn.ReLU(inplace=True)``
in a ``Sequential`` does, computes the same.
"""

import math
import warnings

from .. import _gflow
from .._methods import _dim

linear = _gflow.linear


def _legacy_reduction(size_average, reduce):
    """PyTorch's ``size_average``/``reduce`` (deprecated) as a ``reduction``, with its warning."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{ret}' "
                  "instead.", stacklevel=3)
    return ret


def _warn_size(input, target, stacklevel=3):
    """PyTorch's warning for a pointwise loss whose target's shape differs from the input's
    (they broadcast)."""
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input size "
                      f"({input.shape}). This will likely lead to incorrect results due to "
                      "broadcasting. Please ensure they have the same size.",
                      stacklevel=stacklevel)


def mse_loss(input, target, reduction="mean"):
    """PyTorch's ``mse_loss``: the squared differences (broadcasting, with PyTorch's warning
    when the shapes differ), their mean (default, gflow's own loss), their sum, or each
    (``reduction="none"``)."""
    _warn_size(input, target)
    if reduction == "mean":
        if tuple(input.shape) != tuple(target.shape):
            input, target = _broadcast(input, target)
        return _gflow.mse_loss(input, target)
    d = (input - target).square()
    if reduction == "sum":
        return d.sum()
    if reduction == "none":
        return d
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _check_reduction(reduction):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _check_class_weight(weight, n_classes, what=""):
    if weight is not None and (weight.dim() != 1 or weight.numel() != n_classes):
        raise _gflow.InvalidArgumentError(
            f"{what}weight tensor should be defined either for all {n_classes} classes or no "
            f"classes but got weight tensor of shape: {list(weight.shape)}")


def _flat_classes(input, target):
    """Logits (N, C, d1, ...) and targets (N, d1, ...) as (N * d1 * ..., C) and (N * d1 *
    ...,); (C,) and a 0-d target as (1, C) and (1,)."""
    if input.dim() == 1:
        return input.unsqueeze(0), target.reshape(1)
    if input.dim() > 2:
        c = input.shape[1]
        return input.permute(0, *range(2, input.dim()), 1).reshape(-1, c), target.reshape(-1)
    return input, target


def _cross_entropy_indices(input, target, ignore_index, reduction):
    """Cross entropy against class indices without weights or smoothing: the plain (N, C) mean
    is gflow's O(N*C) loss, which keeps a split class dim split."""
    if input.dim() == 1:
        input, target = input.unsqueeze(0), target.reshape(1)
        if reduction == "none":
            return _cross_entropy_indices(input, target, ignore_index, reduction).reshape(())
    if input.dim() > 2:
        c = input.shape[1]
        input = input.permute(0, *range(2, input.dim()), 1).reshape(-1, c)
        shape, target = tuple(target.shape), target.reshape(-1)
        if reduction == "none":
            return _cross_entropy_indices(input, target, ignore_index, reduction).reshape(*shape)
    ignored = (target == ignore_index).any().item()
    if reduction == "mean" and not ignored:
        return _gflow.cross_entropy(input, target)
    keep = target != ignore_index
    safe = _gflow.where(keep, target, 0)
    picked = input.log_softmax(1).gather(1, safe.unsqueeze(1)).squeeze(1)
    losses = _gflow.where(keep, -picked, 0.0)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / keep.sum()


def _cross_entropy_probs(input, target, weight, ignore_index, reduction, label_smoothing):
    """Cross entropy against class probabilities (``target`` of ``input``'s shape), PyTorch's
    formulas: ``-sum_c w_c t_c log_softmax(x)_c`` per sample; the mean divides by the number
    of samples (not by the weights)."""
    class_dim = 0 if input.dim() == 1 else 1
    n_classes = input.shape[class_dim]
    if not target.is_floating_point():
        raise _gflow.DTypeError(f"Expected floating point type for target with class "
                                f"probabilities, got {target.dtype}")
    if ignore_index >= 0:
        raise _gflow.InvalidArgumentError("ignore_index is not supported for floating point "
                                          "target")
    _check_class_weight(weight, n_classes, "cross_entropy: ")
    if weight is None and label_smoothing <= 0 and reduction == "mean" and input.dim() == 2:
        return _gflow.cross_entropy(input, target)
    logp = input.log_softmax(class_dim)
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    prod = logp * target
    if weight is not None:
        shape = [1] * input.dim()
        shape[class_dim] = n_classes
        prod = prod * weight.reshape(*shape)
    if reduction == "none":
        return -prod.sum(class_dim)
    if reduction == "sum":
        return -prod.sum()
    return -prod.sum() / (input.numel() / n_classes)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """PyTorch's ``cross_entropy`` of logits (N, C) (or (C,), or (N, C, d1, ...)) against
    class indices (N) (or (), or (N, d1, ...)) or against class probabilities of the logits'
    shape: ``weight`` (C,) per class, ``ignore_index`` (indices only), ``label_smoothing``
    (the target mixed with the uniform distribution), ``reduction`` ``"mean"`` (over the
    targets not ignored, weighted by their classes' weights; over the samples for
    probabilities), ``"sum"`` or ``"none"``. Without weight and smoothing, the plain (N, C)
    mean is gflow's O(N*C) loss, which keeps a split class dim split."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    _check_reduction(reduction)
    label_smoothing = float(label_smoothing)
    if label_smoothing > 1.0:
        raise _gflow.InvalidArgumentError(f"label_smoothing must be between 0.0 and 1.0. Got: "
                                          f"{label_smoothing}")
    if tuple(input.shape) == tuple(target.shape):
        return _cross_entropy_probs(input, target, weight, ignore_index, reduction,
                                    label_smoothing)
    _check_targets(input, target)
    if weight is None and label_smoothing <= 0:
        return _cross_entropy_indices(input, target, ignore_index, reduction)
    n_classes = input.shape[0 if input.dim() == 1 else 1]
    _check_class_weight(weight, n_classes)
    shape = tuple(target.shape)
    x, t = _flat_classes(input, target)
    logp = x.log_softmax(1)
    loss = nll_loss(logp, t, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing > 0:
        keep = t != ignore_index
        smooth = -(logp if weight is None else logp * weight).sum(1)
        smooth = _gflow.where(keep, smooth, 0.0)
        if reduction == "mean":
            if weight is None:
                smooth = smooth.sum() / keep.sum()
            else:
                w = _gflow.where(keep, weight.gather(0, _gflow.where(keep, t, 0)), 0.0)
                smooth = smooth.sum() / w.sum()
        elif reduction == "sum":
            smooth = smooth.sum()
        loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / n_classes)
    return loss.reshape(*shape) if reduction == "none" else loss


def _check_targets(input, target):
    """PyTorch's shape checks of class-index targets: (N,) for (N, C) inputs, (N, d1, ...) for
    (N, C, d1, ...), one index for (C,) (a ``ValueError`` for another batch size, as
    PyTorch's, so that no row is silently dropped)."""
    if input.dim() == 1:
        if target.numel() != 1:
            raise _gflow.ShapeError(f"Expected a single target for an input of shape "
                                    f"{list(input.shape)}, got {list(target.shape)}")
        return
    if target.dim() == 0 or target.shape[0] != input.shape[0]:
        got = target.shape[0] if target.dim() else 1
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target "
                         f"batch_size ({got}).")
    want = [input.shape[0], *input.shape[2:]]
    if list(target.shape) != want:
        raise _gflow.ShapeError(f"Expected target size {want}, got {list(target.shape)}")


def _reduce(losses, reduction, count=None):
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        return losses.sum() / count if count is not None else losses.mean()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """PyTorch's ``nll_loss``: ``-weight[c] * input[n, c]`` with ``c = target[n]``, of
    log-probabilities (N, C) (or (C,), or (N, C, d1, ...) with targets (N, d1, ...)); the mean
    divides by the summed weights of the targets not equal to ``ignore_index``."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    _check_class_weight(weight, input.shape[0 if input.dim() == 1 else 1])
    _check_targets(input, target)
    if input.dim() == 1:
        input, target = input.unsqueeze(0), target.reshape(1)
        if reduction == "none":
            return nll_loss(input, target, weight, ignore_index=ignore_index,
                            reduction=reduction).reshape(())
    if input.dim() > 2:
        c = input.shape[1]
        input = input.permute(0, *range(2, input.dim()), 1).reshape(-1, c)
        shape, target = tuple(target.shape), target.reshape(-1)
        if reduction == "none":
            return nll_loss(input, target, weight, ignore_index=ignore_index,
                            reduction=reduction).reshape(*shape)
    keep = target != ignore_index
    safe = _gflow.where(keep, target, 0)
    picked = input.gather(1, safe.unsqueeze(1)).squeeze(1)
    if weight is None:
        return _reduce(_gflow.where(keep, -picked, 0.0), reduction, keep.sum())
    w = _gflow.where(keep, weight.gather(0, safe), 0.0)
    return _reduce(-picked * w, reduction, w.sum())


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",
                                     pos_weight=None):
    """PyTorch's: ``-(y log sigmoid(x) + (1 - y) log(1 - sigmoid(x)))`` computed stably as
    ``max(x, 0) - x y + log(1 + e^-|x|)``; ``pos_weight`` scales the positive term, ``weight``
    each element."""
    x, y = input, target
    if tuple(y.shape) != tuple(x.shape):
        raise ValueError(f"Target size ({y.shape}) must be the same as input size "
                         f"({x.shape})")
    # -log sigmoid(-x) = softplus(x), its value by the stable form and its gradient sigmoid(x)
    # given whole: |x| and max(x, 0) have no derivative at 0, where sigmoid's is 0.5
    stable = (-x.abs()).exp().add(1.0).log() + x.clamp(min=0)
    slope = x.sigmoid().detach()
    log_sig_neg = stable.detach() + (x * slope - (x * slope).detach())
    if pos_weight is None:
        losses = log_sig_neg - x * y
    else:
        # (1 - y) x + (1 + (pw - 1) y) (-log sigmoid(x)), with -log sigmoid(x) = log_sig_neg - x
        losses = (1 - y) * x + (1 + (pos_weight - 1) * y) * (log_sig_neg - x)
    if weight is not None:
        losses = losses * weight
    return _reduce(losses, reduction)


def one_hot(tensor, num_classes=-1):
    """PyTorch's ``one_hot``: int64 class indices as int64 one-hot rows of ``num_classes``
    (from the largest index + 1 when -1), one more dim at the end; a negative class, one not
    below ``num_classes`` or a non-int64 input is an error, as PyTorch's (reading the values is
    a collective for a global tensor)."""
    if tensor.dtype != _gflow.int64:
        raise _gflow.DTypeError("one_hot is only applicable to index tensor of type LongTensor.")
    num_classes = int(num_classes)
    if tensor.numel() == 0:
        if num_classes <= 0:
            raise _gflow.InvalidArgumentError("Can not infer total number of classes from empty "
                                              "tensor.")
    else:
        if int(tensor.min().item()) < 0:
            raise _gflow.InvalidArgumentError("Class values must be non-negative.")
        top = int(tensor.max().item())
        if num_classes == -1:
            num_classes = top + 1
        elif num_classes <= top:
            raise _gflow.InvalidArgumentError("Class values must be smaller than num_classes.")
    from .._methods import where

    classes = _gflow.arange(num_classes, **where(tensor))
    return (tensor.unsqueeze(-1) == classes).to(_gflow.int64)


def _safe_norm(x, p, dim, keepdim):
    """``x.norm(p, dim, keepdim)`` whose gradient at a zero norm is 0 (PyTorch's), not NaN."""
    if x.dtype in (_gflow.float16, _gflow.bfloat16):
        return _safe_norm(x.to(_gflow.float32), p, dim, keepdim).to(x.dtype)
    if p not in ("fro", 2, 2.0) and (isinstance(p, str) or p in (0, 1, math.inf, -math.inf)):
        return x.norm(p, dim=dim, keepdim=keepdim)
    s = (x * x if p in ("fro", 2, 2.0) else x.abs().pow(p)).sum(dim, keepdim=keepdim)
    zero = s == 0
    safe = _gflow.where(zero, 1.0, s)
    root = safe.sqrt() if p in ("fro", 2, 2.0) else safe.pow(1.0 / p)
    return _gflow.where(zero, 0.0, root)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """PyTorch's ``normalize``: ``input / max(||input||_p, eps)`` along ``dim``; a zero slice
    gives zeros with the finite gradient ``1 / eps`` (PyTorch's)."""
    if out is not None:
        raise TypeError("normalize: out= is not supported (gflow tensors are not written in "
                        "place by functional calls)")
    d = _dim(dim, input.dim())
    if input.dim() == 0:
        return input / _safe_norm(input.reshape(1), p, 0, False).clamp(min=eps)
    return input / _safe_norm(input, p, d, True).clamp(min=eps)


_PAD_MODES = ("constant", "reflect", "replicate", "circular")
_PAD_COMBINATIONS = ("Supported combinations for non-constant padding:\n"
                     "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
                     "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
                     "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")


def _pad_dim(x, dim, before, after, mode, arg):
    """``x`` padded along ``dim`` by ``before``/``after`` in a non-constant ``mode`` (negative
    amounts cut), PyTorch's index maps: reflect and replicate pad from the input's own edges
    (then cut), circular cuts first, then wraps what is left."""
    n = x.shape[dim]
    size = list(x.shape)
    if mode == "circular":
        if before > n or after > n:
            raise _gflow.InvalidArgumentError("Padding value causes wrapping around more than "
                                              "once.")
        if n + before + after < 0:
            raise _gflow.InvalidArgumentError("Negative padding value is resulting in an empty "
                                              "dimension")
        if before < 0:
            x, n = x.narrow(dim, -before, n + before), n + before
        if after < 0:
            x, n = x.narrow(dim, 0, n + after), n + after
        if before > n or after > n:
            raise _gflow.InvalidArgumentError("Padding value causes wrapping around more than "
                                              "once.")
        left = x.narrow(dim, n - before, before) if before > 0 else None
        right = x.narrow(dim, 0, after) if after > 0 else None
        pieces = [t for t in (left, x, right) if t is not None]
        return _gflow.cat(pieces, dim) if len(pieces) > 1 else x
    if mode == "reflect" and not (before < n and after < n):
        raise _gflow.InvalidArgumentError(
            f"Argument #{arg}: Padding size should be less than the corresponding input "
            f"dimension, but got: padding ({before}, {after}) at dimension {dim} of input "
            f"{size}")
    if n + before + after < 1:
        raise _gflow.InvalidArgumentError(
            f"input (size {n} at dimension {dim}) is too small. Calculated output size: "
            f"{n + before + after}")
    pieces = []
    for amount, at in ((before, "left"), (after, "right")):
        if amount <= 0:
            pieces.append(None)
        elif mode == "reflect":
            start = 1 if at == "left" else n - 1 - amount
            pieces.append(x.narrow(dim, start, amount).flip(dim))
        else:
            shape = list(x.shape)
            shape[dim] = amount
            pieces.append(x.narrow(dim, 0 if at == "left" else n - 1, 1).expand(*shape))
    parts = [t for t in (pieces[0], x, pieces[1]) if t is not None]
    out = _gflow.cat(parts, dim) if len(parts) > 1 else x
    m = out.shape[dim]
    if before < 0:
        out, m = out.narrow(dim, -before, m + before), m + before
    if after < 0:
        out = out.narrow(dim, 0, m + after)
    return out


def pad(input, pad, mode="constant", value=None):
    """PyTorch's ``pad``, its order: ``(left, right)`` of the last dim, then of the one before,
    ...; negative amounts cut. ``mode`` ``"constant"`` (``value``, 0 by default), or
    ``"reflect"`` (mirrored without the edge), ``"replicate"`` (the edge repeated) and
    ``"circular"`` (wrapped around) for the last 1, 2 or 3 dims of a (batched) 1-, 2- or 3-D
    signal, as PyTorch's."""
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    pad = [int(p) for p in pad]
    if len(pad) % 2:
        raise _gflow.InvalidArgumentError("Padding length must be divisible by 2")
    if len(pad) > 2 * input.dim():
        raise _gflow.InvalidArgumentError(
            f"Padding length should be less than or equal to two times the input dimension but "
            f"got padding length {len(pad)} and input of dimension {input.dim()}")
    if mode != "constant":
        if value is not None and value != 0:
            raise _gflow.InvalidArgumentError(f'Padding mode "{mode}" doesn\'t take in value '
                                              "argument")
        k = len(pad) // 2
        if k not in (1, 2, 3) or input.dim() not in (k + 1, k + 2):
            raise NotImplementedError(f"Padding size {len(pad)} is not supported for "
                                      f"{input.dim()}D input tensor.\n{_PAD_COMBINATIONS}")
        x = input
        for i in range(k):
            x = _pad_dim(x, x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1], mode, 4 + 2 * i)
        return x
    value = 0.0 if value is None else value
    x = input
    for k in range(len(pad) // 2):
        dim = x.dim() - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        if x.shape[dim] + before + after < 0:
            raise _gflow.InvalidArgumentError(
                f"The input size {x.shape[dim]}, plus negative padding {before} and {after} "
                f"resulted in a negative output size, which is invalid. Check dimension {dim} "
                "of your input.")
        if before < 0:
            x = x.narrow(dim, -before, x.shape[dim] + before)
        if after < 0:
            x = x.narrow(dim, 0, x.shape[dim] + after)
        parts = []
        for amount in (max(before, 0), max(after, 0)):
            shape = list(x.shape)
            shape[dim] = amount
            parts.append(x.new_full(shape, value) if amount else None)
        pieces = [t for t in (parts[0], x, parts[1]) if t is not None]
        x = _gflow.cat(pieces, dim) if len(pieces) > 1 else x
    return x


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """PyTorch's ``scaled_dot_product_attention`` (scaled by ``1/sqrt(head_dim)`` unless
    ``scale``) on (batch, heads, seq, head_dim), or on (batch, seq, head_dim) as one head;
    ``enable_gqa``: key and value with fewer heads (dim -3) than the query, each of theirs
    repeated for a group of the query's (grouped-query attention)."""
    if enable_gqa and query.dim() >= 3 and key.dim() >= 3 and value.dim() >= 3:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hq % hk or hq % hv:
            raise _gflow.InvalidArgumentError(
                f"scaled_dot_product_attention: number of heads in key ({hk}) and value ({hv}) "
                f"must divide the number of heads in query ({hq}) when enable_gqa=True")
        if hk != hq:
            key = key.repeat_interleave(hq // hk, dim=-3)
        if hv != hq:
            value = value.repeat_interleave(hq // hv, dim=-3)
    if query.dim() == 3 and key.dim() == 3 and value.dim() == 3:
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(1)
        out = _gflow.scaled_dot_product_attention(
            query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1), attn_mask=attn_mask,
            dropout_p=dropout_p, is_causal=is_causal, scale=scale)
        return out.squeeze(1)
    return _gflow.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                               dropout_p=dropout_p, is_causal=is_causal,
                                               scale=scale)


def _padding_index(padding_idx, num_embeddings):
    """``padding_idx`` checked against the table's rows (PyTorch's assertions), negative from
    the end; ``None`` stays ``None``."""
    if padding_idx is None:
        return None
    padding_idx = int(padding_idx)
    if padding_idx > 0 and padding_idx >= num_embeddings:
        raise AssertionError("Padding_idx must be within num_embeddings")
    if padding_idx < 0:
        if padding_idx < -num_embeddings:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx += num_embeddings
    return padding_idx


def _index_counts(input, rows, like):
    """How often each of ``rows`` row indices occurs in ``input`` (``like``'s dtype and
    layout)."""
    from .._methods import where

    flat = input.reshape(-1)
    zeros = _gflow.zeros(rows, **where(like), dtype=like.dtype)
    ones = _gflow.ones(flat.shape[0], **where(flat), dtype=like.dtype)
    return zeros.scatter_add(0, flat, ones)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """PyTorch's ``embedding``: the rows of ``weight`` picked by the int64 ``input``.
    ``padding_idx`` (negative from the end): that row gets no gradient; ``max_norm``: each
    looked-up row whose ``norm_type``-norm exceeds it is first rescaled in place (by ``max_norm
    / (norm + 1e-7)``, under ``no_grad``); ``scale_grad_by_freq``: each row's gradient divided
    by how often it occurs in ``input``. Gradients are dense (``sparse=True`` is refused)."""
    if sparse:
        raise NotImplementedError("embedding: sparse gradients are not supported (gflow's "
                                  "gradients are dense); use sparse=False")
    padding_idx = _padding_index(padding_idx, weight.shape[0])
    if max_norm is not None:
        with _gflow.no_grad():
            used = _index_counts(input, weight.shape[0], weight) > 0
            norms = weight.norm(norm_type, dim=1)
            big = used.logical_and(norms > max_norm)
            scale = _gflow.where(big, max_norm / (norms + 1e-7), 1.0)
            weight.mul_(scale.unsqueeze(1))
    out = _gflow.embedding(input, weight)
    if scale_grad_by_freq:
        counts = _index_counts(input, weight.shape[0], out).gather(0, input.reshape(-1))
        fixed = out.detach()
        out = fixed + (out - fixed) / counts.reshape(*input.shape).unsqueeze(-1)
    if padding_idx is not None:
        out = _gflow.where((input == padding_idx).unsqueeze(-1), out.detach(), out)
    return out


def relu(x, inplace=False):
    return x.relu()


def gelu(x, approximate="none"):
    return x.gelu(approximate=approximate)


def silu(x, inplace=False):
    return x.silu()


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def _softmax_dim(name, ndim, stacklevel):
    """PyTorch's legacy implicit dim (with its deprecation warning): 0 for 0-, 1- and 3-D
    inputs, else 1."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def _softmax_of(x, dim, log):
    if x.dim() == 0:
        _dim(dim, 0)
        y = x.reshape(1)
        return (y.log_softmax(0) if log else y.softmax(0)).reshape(())
    return x.log_softmax(dim) if log else x.softmax(dim)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """PyTorch's ``softmax`` over ``dim`` (``None``: PyTorch's legacy implicit dim, with its
    warning), of the input cast to ``dtype`` first when given."""
    if dim is None:
        dim = _softmax_dim("softmax", input.dim(), _stacklevel)
    if dtype is not None:
        input = input.to(dtype)
    return _softmax_of(input, dim, False)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """PyTorch's ``softmin``: ``softmax(-input)`` over ``dim`` (``None`` as ``softmax``)."""
    if dim is None:
        dim = _softmax_dim("softmin", input.dim(), _stacklevel)
    if dtype is not None:
        input = input.to(dtype)
    return _softmax_of(-input, dim, False)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """PyTorch's ``log_softmax`` over ``dim`` (``None`` as ``softmax``), of the input cast to
    ``dtype`` first when given."""
    if dim is None:
        dim = _softmax_dim("log_softmax", input.dim(), _stacklevel)
    if dtype is not None:
        input = input.to(dtype)
    return _softmax_of(input, dim, True)


__all__ = [
    "linear", "mse_loss", "cross_entropy", "embedding", "relu", "gelu", "silu", "sigmoid", "tanh",
    "softmax", "softmin", "log_softmax", "scaled_dot_product_attention",
]


def dropout(input, p=0.5, training=True, inplace=False):
    """PyTorch's ``dropout``: with ``training``, each element zeroed with probability ``p``
    and the others scaled by ``1 / (1 - p)``; otherwise (or with ``p == 0``) the input."""
    from .. import rand

    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    kw = {}
    if input.is_global:
        kw = {"placement": input.placement,
              "sbp": tuple(s if s.dim is not None else _gflow.broadcast for s in input.sbp)}
    keep = rand(*input.shape, **kw) >= p
    return input * keep.to(input.dtype) * (1.0 / (1.0 - p))


def _norm_params(x, shape, given, fill):
    """The norm's parameters: those given, else fixed ones (zeros) in ``x``'s dtype and
    layout."""
    from .. import ones, zeros

    out = []
    for p, v in zip(given, fill):
        if p is None:
            p = (ones if v == 1.0 else zeros)(*shape, dtype=x.dtype)
            if x.is_global:
                p = p.to_global(placement=x.placement, sbp=[_gflow.broadcast] * len(x.sbp))
        out.append(p)
    return out


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """PyTorch's ``layer_norm``: ``(x - mean) / sqrt(var + eps) * weight + bias`` over the
    trailing ``normalized_shape`` (biased variance), gflow's fused LayerNorm."""
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    norm = _gflow._Norm.layer_norm(shape, float(eps))
    return norm.forward(input, _norm_params(input, shape, (weight, bias), (1.0, 0.0)))


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """PyTorch's ``rms_norm``: ``x / sqrt(mean(x^2) + eps) * weight`` over the trailing
    ``normalized_shape`` (``eps`` None: the dtype's machine epsilon, as PyTorch)."""
    import numpy as np

    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    if eps is None:
        name = repr(input.dtype).split(".")[-1]
        eps = 2.0 ** -7 if name == "bfloat16" else float(np.finfo(getattr(np, name)).eps)
    n = 1
    for d in shape:
        n *= d
    lead = list(input.shape)[: input.dim() - len(shape)]
    x = input.reshape(*lead, n) if len(shape) != 1 else input
    w = weight.reshape(n) if weight is not None and len(shape) != 1 else weight
    norm = _gflow._Norm.rms_norm(n, float(eps))
    out = norm.forward(x, _norm_params(x, [n], (w,), (1.0,)))
    return out.reshape(*input.shape) if len(shape) != 1 else out


__all__ += ["layer_norm", "rms_norm", "dropout"]


def l1_loss(input, target, reduction="mean"):
    """PyTorch's ``l1_loss``: ``|input - target|`` (broadcasting, with PyTorch's warning when
    the shapes differ), reduced."""
    _warn_size(input, target)
    return _reduce((input - target).abs(), reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """PyTorch's ``smooth_l1_loss``: ``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5
    beta`` (``d = input - target``; ``beta == 0`` is ``l1_loss``)."""
    if beta < 0:
        raise _gflow.InvalidArgumentError("smooth_l1_loss does not support negative values for "
                                          "beta.")
    _warn_size(input, target)
    d = input - target
    if beta == 0:
        return _reduce(d.abs(), reduction)
    a = d.abs()
    return _reduce(_gflow.where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """PyTorch's ``huber_loss``: ``0.5 d^2`` where ``|d| < delta``, else ``delta (|d| - 0.5
    delta)`` (``d = input - target``)."""
    if delta <= 0:
        raise _gflow.InvalidArgumentError("huber_loss does not support non-positive values for "
                                          "delta.")
    _warn_size(input, target)
    d = input - target
    a = d.abs()
    return _reduce(_gflow.where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta), reduction)


def _clamped_log(p):
    """``max(log(p), -100)`` as PyTorch's BCE takes it; ``p <= 0`` gives -100 with a zero
    (not NaN) gradient."""
    pos = p > 0
    return _gflow.where(pos, _gflow.where(pos, p, 1.0).log(), -100.0).clamp(min=-100.0)


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """PyTorch's ``binary_cross_entropy`` of probabilities: ``-(y log(x) + (1 - y) log(1 - x))``
    with each log clamped at -100, times ``weight`` (broadcast); ``target`` of ``input``'s
    shape. The gradient for ``input`` is PyTorch's ``(x - y) / max(x (1 - x), 1e-12)`` (0 or
    +-1e12 at probabilities 0 and 1)."""
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input "
                         f"size ({input.shape}) is deprecated. Please ensure they have the same "
                         "size.")
    x = input.detach()
    # the value, with the gradient for target (and weight) only
    losses = -(target * _clamped_log(x) + (1 - target) * _clamped_log(1 - x))
    # plus zero whose gradient for input is PyTorch's
    slope = (x - target.detach()) / (x * (1 - x)).clamp(min=1e-12)
    tangent = input * slope
    losses = losses + (tangent - tangent.detach())
    if weight is not None:
        losses = losses * weight
    return _reduce(losses, reduction)


def kl_div(input, target, reduction="mean", log_target=False):
    """PyTorch's ``kl_div`` of log-probabilities ``input`` against probabilities ``target``
    (log-probabilities with ``log_target``): ``target * (log(target) - input)``, 0 where
    ``target`` is 0; ``reduction="batchmean"`` divides the sum by the batch size (the true KL
    divergence), ``"mean"`` by the element count."""
    if log_target:
        losses = target.exp() * (target - input)
    else:
        zero = target == 0
        xlogx = _gflow.where(zero, 0.0, target * _gflow.where(zero, 1.0, target).log())
        losses = xlogx - target * input
    if reduction == "batchmean":
        return losses.sum() / input.shape[0] if input.dim() else losses.sum()
    return _reduce(losses, reduction)


def _log1pexp_exact(z):
    """``log(1 + e^z)`` without overflow or underflow: ``relu(z) + log1p(e^-|z|)`` (``log1p``
    keeps the tail: 1.4e-11 at -25), its two kinks written so that the gradient at 0 is
    sigmoid(0) = 0.5, as PyTorch's."""
    up = z > 0
    return _gflow.where(up, z, 0.0) + _gflow.where(up, -z, z).exp().log1p()


def softplus(input, beta=1.0, threshold=20.0):
    """PyTorch's ``softplus``: ``log(1 + e^(beta x)) / beta`` (stable, exact in the tail), ``x``
    where ``beta x > threshold``."""
    z = input * beta if beta != 1 else input
    over = z > threshold
    soft = _log1pexp_exact(_gflow.where(over, 0.0, z))
    return _gflow.where(over, input, soft if beta == 1 else soft / beta)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` where ``x > 0``, else ``negative_slope * x``."""
    return _gflow.where(input > 0, input, input * negative_slope)


def _expm1_neg(x, input_scale=1.0):
    """``expm1(x * input_scale)`` where ``x <= 0`` (0 elsewhere, so large ``x`` cannot
    overflow): exact near 0, and -0.0 stays -0.0."""
    neg = _gflow.where(x > 0, 0.0, x)
    return (neg if input_scale == 1 else neg * input_scale).expm1()


def elu(input, alpha=1.0, inplace=False):
    """``x`` where ``x > 0``, else ``alpha * expm1(x)``."""
    return _gflow.where(input > 0, input, _expm1_neg(input) * alpha)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """``scale * elu(x, alpha)`` with the self-normalising constants of Klambauer et al."""
    return _gflow.where(input > 0, input * _SELU_SCALE,
                        _expm1_neg(input) * (_SELU_ALPHA * _SELU_SCALE))


def celu(input, alpha=1.0, inplace=False):
    """``x`` where ``x > 0``, else ``alpha * expm1(x / alpha)``."""
    if alpha == 0:
        raise _gflow.InvalidArgumentError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _gflow.where(input > 0, input, _expm1_neg(input, 1.0 / alpha) * alpha)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """``input`` clamped to ``[min_val, max_val]`` (-0.0 kept, NaN propagated), its gradient 1
    strictly inside and 0 elsewhere, as PyTorch's."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    inside = (input > min_val).logical_and(input < max_val)
    return _gflow.where(inside, input, input.detach().clamp(min_val, max_val))


def relu6(input, inplace=False):
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0)


def logsigmoid(input):
    """``log(sigmoid(x)) = -log(1 + e^-x)``, stable for any ``x`` and exact in the tail."""
    return -_log1pexp_exact(-input)


def glu(input, dim=-1):
    """The gated linear unit: ``a * sigmoid(b)`` for the halves ``a``, ``b`` of ``dim``."""
    if input.dim() == 0:
        raise _gflow.ShapeError("glu does not support scalars because halving size must be even")
    d = _dim(dim, input.dim())
    n = input.shape[d]
    if n % 2:
        raise _gflow.ShapeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    return input.narrow(d, 0, n // 2) * input.narrow(d, n // 2, n // 2).sigmoid()


def mish(input, inplace=False):
    """``x * tanh(softplus(x))`` (exact in the tail)."""
    return input * _log1pexp_exact(input).tanh()


def hardsigmoid(input, inplace=False):
    """``relu6(x + 3) / 6``: 0 up to -3, 1 from 3, linear between (gradient 1/6 strictly
    inside)."""
    return _gflow.where(input <= -3.0, 0.0, _gflow.where(input >= 3.0, 1.0, input / 6.0 + 0.5))


def hardswish(input, inplace=False):
    """``x * hardsigmoid(x)``."""
    return input * hardsigmoid(input)


def softsign(input):
    """``x / (1 + |x|)``."""
    return input / (input.abs() + 1.0)


def _broadcast(a, b):
    """``a`` and ``b`` expanded to their broadcast shape (a ``ShapeError`` when there is
    none)."""
    if tuple(a.shape) == tuple(b.shape):
        return a, b
    n = max(a.dim(), b.dim())
    sa = [1] * (n - a.dim()) + list(a.shape)
    sb = [1] * (n - b.dim()) + list(b.shape)
    if any(x != y and 1 not in (x, y) for x, y in zip(sa, sb)):
        raise _gflow.ShapeError(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast")
    shape = [y if x == 1 else x for x, y in zip(sa, sb)]
    return a.expand(*shape), b.expand(*shape)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """PyTorch's ``cosine_similarity``: ``sum(x1 / ||x1|| * x2 / ||x2||)`` along ``dim``
    (broadcasting), each norm at least ``eps``."""
    x1, x2 = _broadcast(x1, x2)
    half = (_gflow.float16, _gflow.bfloat16)
    if x1.dtype in half and x2.dtype in half:
        # squares of 16-bit values overflow: in float32, rounded once (as PyTorch)
        out = cosine_similarity(x1.to(_gflow.float32), x2.to(_gflow.float32), dim, eps)
        return out.to(x1.dtype if x1.dtype == x2.dtype else _gflow.float32)
    d = _dim(dim, x1.dim())
    n1 = (x1 * x1).sum(d, keepdim=True).clamp(min=eps * eps).sqrt()
    n2 = (x2 * x2).sum(d, keepdim=True).clamp(min=eps * eps).sqrt()
    return ((x1 / n1) * (x2 / n2)).sum(d)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """PyTorch's ``pairwise_distance``: the ``p``-norm of ``x1 - x2 + eps`` over the last dim."""
    return (x1 - x2 + eps).norm(p, dim=-1, keepdim=keepdim)


__all__ += ["nll_loss", "binary_cross_entropy_with_logits", "one_hot", "normalize", "pad",
            "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "kl_div",
            "softplus", "leaky_relu", "elu", "selu", "celu", "hardtanh", "relu6", "logsigmoid",
            "glu", "mish", "hardsigmoid", "hardswish", "softsign", "cosine_similarity",
            "pairwise_distance"]

from .conv_functional import *  # noqa: E402,F401,F403  (conv, pooling, batch_norm)
from .conv_functional import __all__ as _conv_all  # noqa: E402

__all__ += _conv_all
