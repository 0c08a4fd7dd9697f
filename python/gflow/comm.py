"""Collectives on local tensors, as OneFlow's ``flow.comm``: ``all_reduce``, ``all_gather``,
``broadcast``, ``reduce``, ``scatter``, ``reduce_scatter``, ``all_to_all``, ``barrier``. Every
rank of the job calls each one with tensors of one shape and dtype (a rank that does not is a
desync error on the others, never a hang). Each is a conversion of a global tensor over all
ranks, so gflow's boxing moves the bytes: a local tensor as one rank's summand of a
``partial_sum`` tensor, or as its ``split(0)`` slice, converted to what the call returns.
Results are written into the given tensors in place, as OneFlow's."""

from . import _gflow
from ._gflow import Tensor


def _world(t):
    """The placement of every rank, of ``t``'s device type."""
    kind = str(t.device).split(":")[0]
    return _gflow.placement("cpu" if kind == "cpu" else "gpu", list(range(_gflow.get_world_size())))


def _local(t, what):
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: expected a tensor, got {type(t).__name__}")
    if t.is_global:
        raise TypeError(f"{what}: expects local tensors (a global tensor converts with "
                        "to_global instead)")
    return t


def _summed(t):
    """Every rank's ``t`` summed, on every rank (a local tensor)."""
    g = t.detach().to_global(placement=_world(t), sbp=_gflow.partial_sum)
    return g.to_global(sbp=_gflow.broadcast).to_local()


def _zeros(shape, like):
    return _gflow.zeros(*shape, dtype=like.dtype, device=like.device)


def _write(dst, value):
    with _gflow.no_grad():
        dst.copy_(value)


def _stacked(tensors, what):
    if not tensors:
        raise ValueError(f"{what}: needs one tensor per rank, got none")
    return _gflow.stack([_local(t, what).detach() for t in tensors])


def _check_count(tensors, what):
    n = _gflow.get_world_size()
    if len(tensors) != n:
        raise ValueError(f"{what}: needs {n} tensors (one per rank), got {len(tensors)}")


def all_reduce(tensor):
    """``tensor`` becomes the sum of every rank's ``tensor``."""
    _write(_local(tensor, "all_reduce"), _summed(tensor))


def all_gather(tensor_list, tensor):
    """``tensor_list[i]`` becomes rank i's ``tensor`` (an empty list is filled)."""
    _local(tensor, "all_gather")
    g = tensor.detach().unsqueeze(0).to_global(placement=_world(tensor), sbp=_gflow.split(0))
    full = g.to_global(sbp=_gflow.broadcast).to_local()
    parts = [full[i] for i in range(full.shape[0])]
    if not tensor_list:
        tensor_list.extend(parts)
        return
    _check_count(tensor_list, "all_gather")
    for dst, part in zip(tensor_list, parts):
        _write(dst, part)


def _from(tensor, src, what):
    """``tensor`` on rank ``src``, zeros elsewhere, summed: ``src``'s value on every rank."""
    n = _gflow.get_world_size()
    if not 0 <= src < n:
        raise ValueError(f"{what}: src {src} is not a rank of a job of {n}")
    mine = tensor if _gflow.get_rank() == src else _zeros(tensor.shape, tensor)
    return _summed(mine)


def broadcast(tensor, src):
    """``tensor`` becomes rank ``src``'s ``tensor`` on every rank."""
    _write(_local(tensor, "broadcast"), _from(tensor, src, "broadcast"))


def reduce(tensor, dst):
    """Rank ``dst``'s ``tensor`` becomes the sum of every rank's (the others keep theirs)."""
    total = _summed(_local(tensor, "reduce"))
    if _gflow.get_rank() == dst:
        _write(tensor, total)


def scatter(tensor, scatter_list=None, src=0):
    """``tensor`` becomes ``scatter_list[rank]`` of rank ``src`` (only ``src`` passes a list)."""
    _local(tensor, "scatter")
    me = _gflow.get_rank()
    if me == src:
        _check_count(scatter_list or [], "scatter")
        mine = _stacked(scatter_list, "scatter")
    else:
        mine = _zeros((_gflow.get_world_size(), *tensor.shape), tensor)
    g = mine.to_global(placement=_world(tensor), sbp=_gflow.partial_sum)
    _write(tensor, g.to_global(sbp=_gflow.split(0)).to_local()[0])


def reduce_scatter(output, input_list):
    """``output`` becomes the sum over ranks of their ``input_list[rank]``."""
    _local(output, "reduce_scatter")
    _check_count(input_list, "reduce_scatter")
    g = _stacked(input_list, "reduce_scatter").to_global(placement=_world(output),
                                                         sbp=_gflow.partial_sum)
    _write(output, g.to_global(sbp=_gflow.split(0)).to_local()[0])


def all_to_all(output_tensor_list, input_tensor_list):
    """``output_tensor_list[i]`` becomes rank i's ``input_tensor_list[rank]``."""
    _check_count(input_tensor_list, "all_to_all")
    _check_count(output_tensor_list, "all_to_all")
    rows = _stacked(input_tensor_list, "all_to_all").unsqueeze(0)  # (1, world, ...)
    g = rows.to_global(placement=_world(rows), sbp=_gflow.split(0))  # (world, world, ...)
    cols = g.to_global(sbp=_gflow.split(1)).to_local()  # (world, 1, ...)
    for i, dst in enumerate(output_tensor_list):
        _write(dst, cols[i, 0])


def barrier():
    """Returns once every rank has called it."""
    _summed(_gflow.zeros(1))


__all__ = ["all_reduce", "all_gather", "broadcast", "reduce", "scatter", "reduce_scatter",
           "all_to_all", "barrier"]
