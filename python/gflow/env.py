"""The job this process belongs to: ``flow.env.get_rank()``, ``flow.env.get_world_size()``."""

from ._gflow import get_rank, get_world_size, get_local_rank

__all__ = ["get_rank", "get_world_size", "get_local_rank"]
