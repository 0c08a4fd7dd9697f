"""Functional forms: ``flow.nn.functional.relu(x)``, ``linear``, ``mse_loss``, ``cross_entropy``,
``nll_loss``, ``binary_cross_entropy_with_logits``, ``softmax``, ``one_hot``, ``normalize``,
``pad``, ``scaled_dot_product_attention``, ... (gflow's own operators, so results match the
Rust API's)."""

from .. import _gflow

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


def nll_loss(input, target, ignore_index=-100, reduction="mean"):
    """PyTorch's ``nll_loss``: ``-input[n, target[n]]`` of log-probabilities (N, C) (or (C,)),
    averaged over the targets not equal to ``ignore_index``."""
    if input.dim() == 1:
        input, target = input.unsqueeze(0), target.reshape(1)
    keep = target != ignore_index
    safe = _gflow.where(keep, target, 0)
    picked = input.gather(1, safe.unsqueeze(1)).squeeze(1)
    losses = _gflow.where(keep, -picked, 0.0)
    return _reduce(losses, reduction, keep.sum())


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


def relu(x):
    return x.relu()


def gelu(x, approximate="none"):
    return x.gelu(approximate=approximate)


def silu(x):
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
