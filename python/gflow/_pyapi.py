"""Python-side pieces the extension module calls back: `flow.Size`, `flow.device`, the named
tuples of `x.max(dim)` / `x.min(dim)`, and how a tensor prints. Kept free of imports from the
rest of the package so `_gflow` can load it early."""

from collections import namedtuple

import numpy as np

max_result = namedtuple("max", ("values", "indices"))
max_result.__doc__ = "``x.max(dim)``: the largest values along ``dim`` and their indices."
min_result = namedtuple("min", ("values", "indices"))
min_result.__doc__ = "``x.min(dim)``: the smallest values along ``dim`` and their indices."
topk_result = namedtuple("topk", ("values", "indices"))
topk_result.__doc__ = "``x.topk(k)``: the ``k`` largest values along ``dim`` and their indices."
sort_result = namedtuple("sort", ("values", "indices"))
sort_result.__doc__ = "``x.sort(dim)``: the values sorted along ``dim`` and where they came from."


class GradFn:
    """``y.grad_fn`` of a tensor recorded for autograd (``None`` for a leaf), as PyTorch's."""

    __slots__ = ()

    def name(self):
        """The recorded operation's name (gflow does not expose it: ``"GFlowBackward"``)."""
        return "GFlowBackward"

    def __repr__(self):
        return "<GFlowBackward object>"


class Size(tuple):
    """A tensor's shape: a tuple that prints as ``flow.Size([4, 5])``."""

    __slots__ = ()

    def __repr__(self):
        return f"flow.Size({list(self)})"

    __str__ = __repr__

    def numel(self):
        """The number of elements of a tensor of this shape."""
        n = 1
        for d in self:
            n *= d
        return n


class device:
    """A device of this process: ``flow.device("cpu", 0)`` prints as ``cpu:0``."""

    __slots__ = ("type", "index")

    def __init__(self, type, index=0):
        if isinstance(type, str) and ":" in type:
            type, index = type.split(":", 1)
            index = int(index)
        self.type = type
        self.index = index

    def __repr__(self):
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


def _float_formatter(a):
    """PyTorch's float formatting of the values of ``a``: ``1.`` when every finite value is an
    integer, else 4 decimals, scientific (``1.0000e+10``) when the finite non-zero magnitudes
    span more than 1000x or reach 1e8 (or, with decimals, fall below 1e-4); one width for
    all."""
    finite = a[np.isfinite(a)].astype(np.float64)
    nonzero = np.abs(finite[finite != 0])
    int_mode = bool(np.all(finite == np.ceil(finite)))
    sci = False
    if nonzero.size:
        lo, hi = nonzero.min(), nonzero.max()
        sci = hi / lo > 1000.0 or hi > 1e8 or (not int_mode and lo < 1e-4)

    def one(v):
        if np.isnan(v):
            return "nan"
        if np.isinf(v):
            return "inf" if v > 0 else "-inf"
        if sci:
            return f"{float(v):.4e}"
        if int_mode:
            return f"{float(v):.0f}."
        return f"{float(v):.4f}"

    # as PyTorch: the width is that of the widest finite non-zero value
    width = max((len(one(v)) for v in (finite[finite != 0])), default=1)
    return lambda v: one(v).rjust(width)


def tensor_repr(t):
    """As OneFlow prints a tensor (the seeds' outputs): PyTorch's number formatting
    (``tensor([1.5000, 2.0000], ...)``, ``tensor([1., 2.], ...)``, scientific for wide ranges),
    then always ``dtype=flow.float32`` (OneFlow's, where PyTorch leaves default dtypes out),
    ``size=`` for an empty tensor that is not 1-D and ``requires_grad=True`` for a leaf that
    requires grad, as PyTorch; a global tensor also shows ``placement=`` and ``sbp=`` and
    prints its whole logical value (a collective, as in OneFlow)."""
    a = t.numpy()
    if a.size == 0:
        body = "[]"
    elif a.dtype.kind == "f":
        body = np.array2string(a, separator=", ", prefix="tensor(", max_line_width=80,
                               formatter={"float_kind": _float_formatter(a)})
    else:
        body = np.array2string(a, separator=", ", prefix="tensor(", max_line_width=80)
    parts = [body]
    if a.size == 0 and a.ndim != 1:
        parts.append(f"size={tuple(a.shape)}")
    if t.is_global:
        parts.append(f"placement={t.placement!r}")
        parts.append(f"sbp={t.sbp!r}")
    parts.append(f"dtype={t.dtype!r}")
    if t.requires_grad and t.is_leaf:
        parts.append("requires_grad=True")
    return "tensor(" + ", ".join(parts) + ")"
