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

from .. import _gflow
from .._methods import _dim, _log1pexp

linear = _gflow.linear


def mse_loss(input, target, reduction="mean"):
    """PyTorch's ``mse_loss``: the squared differences (broadcasting), their mean (default,
    gflow's own loss), their sum, or each (``reduction="none"``)."""
    if reduction == "mean":
        return _gflow.mse_loss(input, target)
    d = (input - target).square()
    if reduction == "sum":
        return d.sum()
    if reduction == "none":
        return d
    raise ValueError(f"{reduction} is not a valid value for reduction")


def cross_entropy(input, target, ignore_index=-100, reduction="mean"):
    """PyTorch's ``cross_entropy`` with class-index targets: logits (N, C) (or (C,), or
    (N, C, d1, ...) with targets (N, d1, ...)), ``reduction`` ``"mean"`` (over the targets not
    equal to ``ignore_index``), ``"sum"`` or ``"none"``. The plain (N, C) mean is gflow's
    O(N*C) loss, which keeps a split class dim split."""
    if input.dim() == 1:
        input, target = input.unsqueeze(0), target.reshape(1)
        if reduction == "none":
            return cross_entropy(input, target, ignore_index, reduction).reshape(())
    if input.dim() > 2:
        c = input.shape[1]
        input = input.permute(0, *range(2, input.dim()), 1).reshape(-1, c)
        shape, target = tuple(target.shape), target.reshape(-1)
        if reduction == "none":
            return cross_entropy(input, target, ignore_index, reduction).reshape(*shape)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
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


def _reduce(losses, reduction, count=None):
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        return losses.sum() / count if count is not None else losses.mean()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """PyTorch's ``nll_loss``: ``-weight[c] * input[n, c]`` with ``c = target[n]``, of
    log-probabilities (N, C) (or (C,), or (N, C, d1, ...) with targets (N, d1, ...)); the mean
    divides by the summed weights of the targets not equal to ``ignore_index``."""
    if input.dim() == 1:
        input, target = input.unsqueeze(0), target.reshape(1)
        if reduction == "none":
            return nll_loss(input, target, weight, ignore_index, reduction).reshape(())
    if input.dim() > 2:
        c = input.shape[1]
        input = input.permute(0, *range(2, input.dim()), 1).reshape(-1, c)
        shape, target = tuple(target.shape), target.reshape(-1)
        if reduction == "none":
            return nll_loss(input, target, weight, ignore_index, reduction).reshape(*shape)
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
    log_sig_neg = (-x.abs()).exp().add(1.0).log() + x.clamp(min=0)  # -log sigmoid(-x)
    if pos_weight is None:
        losses = log_sig_neg - x * y
    else:
        # (1 - y) x + (1 + (pw - 1) y) (-log sigmoid(x)), with -log sigmoid(x) = log_sig_neg - x
        losses = (1 - y) * x + (1 + (pos_weight - 1) * y) * (log_sig_neg - x)
    if weight is not None:
        losses = losses * weight
    return _reduce(losses, reduction)


def one_hot(tensor, num_classes=-1):
    """Int64 class indices as one-hot rows of ``num_classes`` (from the largest index + 1 when
    -1), one more dim at the end."""
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    from .._methods import where

    classes = _gflow.arange(num_classes, **where(tensor))
    return (tensor.unsqueeze(-1) == classes).to(_gflow.int64)


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """``input / max(||input||_p, eps)`` along ``dim``."""
    return input / input.norm(p, dim=dim, keepdim=True).clamp(min=eps)


def pad(input, pad, mode="constant", value=0.0):
    """Constant padding, PyTorch's order: ``(left, right)`` of the last dim, then of the one
    before, ...; negative amounts cut."""
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r} (only 'constant' is supported)")
    if len(pad) % 2 or len(pad) // 2 > input.dim():
        raise ValueError(f"pad: {len(pad)} amounts for a tensor of {input.dim()} dims")
    x = input
    for k in range(len(pad) // 2):
        dim = x.dim() - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
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
                                 is_causal=False, scale=None):
    """PyTorch's ``scaled_dot_product_attention`` (scaled by ``1/sqrt(head_dim)`` unless
    ``scale``) on (batch, heads, seq, head_dim), or on (batch, seq, head_dim) as one head."""
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


def embedding(input, weight):
    """Rows of ``weight`` picked by the int64 ``input``."""
    return _gflow.embedding(input, weight)


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


def softmax(x, dim=-1):
    return x.softmax(dim)


def log_softmax(x, dim=-1):
    return x.log_softmax(dim)


__all__ = [
    "linear", "mse_loss", "cross_entropy", "embedding", "relu", "gelu", "silu", "sigmoid", "tanh",
    "softmax", "log_softmax", "scaled_dot_product_attention",
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
    """PyTorch's ``l1_loss``: ``|input - target|`` (broadcasting), reduced."""
    return _reduce((input - target).abs(), reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """PyTorch's ``smooth_l1_loss``: ``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5
    beta`` (``d = input - target``; ``beta == 0`` is ``l1_loss``)."""
    if beta < 0:
        raise _gflow.InvalidArgumentError("smooth_l1_loss does not support negative values for "
                                          "beta.")
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
    shape."""
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input "
                         f"size ({input.shape}) is deprecated. Please ensure they have the same "
                         "size.")
    losses = -(target * _clamped_log(input) + (1 - target) * _clamped_log(1 - input))
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


def softplus(input, beta=1.0, threshold=20.0):
    """PyTorch's ``softplus``: ``log(1 + e^(beta x)) / beta`` (stable), ``x`` where ``beta x >
    threshold``."""
    return input.softplus(beta, threshold)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` where ``x > 0``, else ``negative_slope * x``."""
    return _gflow.where(input > 0, input, input * negative_slope)


def _expm1_neg(x, scale):
    """``e^(x / scale) - 1`` where ``x <= 0`` (0 elsewhere, so large ``x`` cannot overflow)."""
    neg = _gflow.where(x > 0, 0.0, x)
    return (neg if scale == 1 else neg / scale).exp() - 1.0


def elu(input, alpha=1.0, inplace=False):
    """``x`` where ``x > 0``, else ``alpha (e^x - 1)``."""
    return _gflow.where(input > 0, input, _expm1_neg(input, 1) * alpha)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """``scale * elu(x, alpha)`` with the self-normalising constants of Klambauer et al."""
    return elu(input, _SELU_ALPHA) * _SELU_SCALE


def celu(input, alpha=1.0, inplace=False):
    """``x`` where ``x > 0``, else ``alpha (e^(x / alpha) - 1)``."""
    if alpha == 0:
        raise _gflow.InvalidArgumentError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _gflow.where(input > 0, input, _expm1_neg(input, alpha) * alpha)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """``input`` clamped to ``[min_val, max_val]``, its gradient 1 strictly inside, as
    PyTorch's."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _gflow.where(input <= min_val, min_val,
                        _gflow.where(input >= max_val, max_val, input))


def relu6(input, inplace=False):
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0)


def logsigmoid(input):
    """``log(sigmoid(x)) = -log(1 + e^-x)``, stable for any ``x``."""
    return -_log1pexp(-input)


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
    """``x * tanh(softplus(x))``."""
    return input * _log1pexp(input).tanh()


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
