"""The job this process belongs to: ``flow.env.get_rank()``, ``flow.env.get_world_size()``,
``get_local_rank()``, ``get_node_size()`` and ``all_device_placement(type)``, as OneFlow's."""

import os

from ._gflow import get_rank, get_world_size, get_local_rank, placement


def get_node_size():
    """The number of nodes (hosts) in the job: the world over the processes per node
    (``LOCAL_WORLD_SIZE``, which launchers set; one node without it)."""
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    world = get_world_size()
    return -(-world // per_node) if per_node > 0 else 1


def all_device_placement(device_type):
    """The placement of every rank of the job, ``flow.placement.all(device_type)``."""
    return placement.all(device_type)


__all__ = ["get_rank", "get_world_size", "get_local_rank", "get_node_size", "all_device_placement"]
