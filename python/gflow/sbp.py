"""SBP values, as attributes as in OneFlow: ``flow.sbp.split(0)`` (also ``split(dim=0)``),
``flow.sbp.broadcast``, ``flow.sbp.partial_sum``, ``flow.sbp.partial_min``,
``flow.sbp.partial_max``. An n-d placement takes a tuple with one entry per axis."""

from ._gflow import sbp, split, broadcast, partial_sum, partial_min, partial_max

__all__ = ["sbp", "split", "broadcast", "partial_sum", "partial_min", "partial_max"]
