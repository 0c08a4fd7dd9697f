"""Python-side pieces the extension module calls back: `flow.Size`, `flow.device`, the named
tuples of `x.max(dim)` / `x.min(dim)`, and how a tensor prints. Kept free of imports from the
rest of the package so `_gflow` can load it early."""

from collections import namedtuple

import numpy as np

max_result = namedtuple("max", ("values", "indices"))
max_result.__doc__ = "``x.max(dim)``: the largest values along ``dim`` and their indices."
min_result = namedtuple("min", ("values", "indices"))
min_result.__doc__ = "``x.min(dim)``: the smallest values along ``dim`` and their indices."


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


def tensor_repr(t):
    """``tensor([...], dtype=flow.float32)``; a global tensor also shows ``placement=`` and
    ``sbp=`` and prints its whole logical value (a collective, as in OneFlow)."""
    a = t.numpy()
    if a.dtype.kind == "f":
        body = np.array2string(a, precision=4, separator=", ", prefix="tensor(", floatmode="fixed")
    else:
        body = np.array2string(a, separator=", ", prefix="tensor(")
    parts = [body]
    if t.is_global:
        parts.append(f"placement={t.placement!r}")
        parts.append(f"sbp={t.sbp!r}")
    parts.append(f"dtype={t.dtype!r}")
    return "tensor(" + ", ".join(parts) + ")"
