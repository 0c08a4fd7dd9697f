"""Collectives on local tensors, as OneFlow's ``flow.comm``: ``all_reduce``, ``all_gather``,
``broadcast``, ``reduce``, ``scatter``, ``reduce_scatter``, ``all_to_all``, ``barrier``. Every
rank of the job calls each one with tensors of one shape and dtype (a rank that does not is a
desync error on the others, never a hang). Each is a conversion of a global tensor over all
ranks, so gflow's boxing moves the bytes: a local tensor as one rank's summand of a
``partial_sum`` tensor, as its ``split(0)`` slice, or (``broadcast``, ``scatter``) as the data
of a ``broadcast`` tensor whose placement lists the root first, converted to what the call
returns.
Results are written into the given tensors in place, as OneFlow's. ``send`` and ``recv`` are
point to point: only the two ranks call them (a move between two one-rank placements)."""

from . import _gflow
from ._gflow import Tensor


def _kind(t):
    """The placement type of ``t``'s device: ``"cpu"``, or ``"gpu"`` for any GPU."""
    kind = t.placement.type if t.is_global else str(t.device).split(":")[0]
    return "cpu" if kind == "cpu" else "gpu"


def _world(t):
    """The placement of every rank, of ``t``'s device type."""
    return _gflow.placement(_kind(t), list(range(_gflow.get_world_size())))


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


def _root(rank, what, name):
    """``rank`` checked as a rank of the job (the root of a one-to-all or all-to-one call)."""
    n = _gflow.get_world_size()
    if isinstance(rank, bool) or not hasattr(rank, "__index__"):
        raise TypeError(f"{what}: {name} must be an int rank, got {rank!r}")
    if not 0 <= rank < n:
        raise ValueError(f"{what}: {name} {rank} is not a rank of a job of {n}")
    return int(rank)


def _from(tensor, src):
    """Rank ``src``'s local ``tensor``, bit for bit, on every rank: a local tensor made global
    with ``broadcast`` takes the first rank of its placement's data, and this placement lists
    ``src`` first (a broadcast from ``src``; no sum, so ``-0.0`` and NaN payloads stay)."""
    n = _gflow.get_world_size()
    order = [src] + [r for r in range(n) if r != src]
    where = _gflow.placement(_kind(tensor), order)
    return tensor.detach().to_global(placement=where, sbp=_gflow.broadcast).to_local()


def broadcast(tensor, src):
    """``tensor`` becomes rank ``src``'s ``tensor`` on every rank (copied bit for bit; ``src``'s
    own is left as it is)."""
    _local(tensor, "broadcast")
    src = _root(src, "broadcast", "src")
    value = _from(tensor, src)
    if _gflow.get_rank() != src:
        _write(tensor, value)


def reduce(tensor, dst):
    """Rank ``dst``'s ``tensor`` becomes the sum of every rank's (the others keep theirs)."""
    _local(tensor, "reduce")
    dst = _root(dst, "reduce", "dst")
    total = _summed(tensor)
    if _gflow.get_rank() == dst:
        _write(tensor, total)


def scatter(tensor, scatter_list=None, src=0):
    """``tensor`` becomes ``scatter_list[rank]`` of rank ``src`` (only ``src`` passes a list),
    copied bit for bit."""
    _local(tensor, "scatter")
    src = _root(src, "scatter", "src")
    me, n = _gflow.get_rank(), _gflow.get_world_size()
    if me == src:
        _check_count(scatter_list or [], "scatter")
        mine = _stacked(scatter_list, "scatter")
    else:
        mine = _zeros((n, *tensor.shape), tensor)  # a stand-in: src's rows are taken
    _write(tensor, _from(mine, src)[me])


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


# dtype codes of a message's meta (shape and dtype), sent ahead of the data by ``send``
_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool")


def _peer(rank, what, name):
    n, me = _gflow.get_world_size(), _gflow.get_rank()
    if not isinstance(rank, int) or not 0 <= rank < n or rank == me:
        raise ValueError(f"{what}: {name} must be another rank of the job of {n} (this is rank "
                         f"{me}), got {rank!r}")
    return rank


def _moved(t, src, dst):
    """``t`` (global on ``[src]``, rank ``dst`` holding no part) as a local tensor on ``dst``:
    a transfer between the two ranks only."""
    return t.to_global(placement=_gflow.placement(_kind(t), [dst]), sbp=_gflow.broadcast)


def send(tensor, dst, send_meta=True):
    """Sends the local ``tensor`` to rank ``dst``, which calls ``recv(src=this rank)``; with
    ``send_meta`` its shape and dtype go first, so the receiver needs neither (OneFlow's)."""
    _local(tensor, "send")
    _peer(dst, "send", "dst")
    me = _gflow.get_rank()

    def ship(data, dtype, kind="cpu"):
        # made global on [me] from the data itself: no other rank's shape is asked for (a
        # local tensor's to_global would exchange shapes with the whole job)
        here = _gflow.placement(kind, [me])
        _moved(_gflow.tensor(data, dtype=dtype, placement=here, sbp=_gflow.broadcast), me, dst)

    if send_meta:
        dtype = str(tensor.dtype).replace("flow.", "")
        meta = [len(tensor.shape), *tensor.shape, _DTYPES.index(dtype)]
        ship([meta[0]], _gflow.int64)
        ship(meta[1:], _gflow.int64)
    ship(tensor.detach().numpy(), tensor.dtype, _kind(tensor))


def recv(src, shape=None, dtype=None, device=None, *, out=None):
    """The tensor rank ``src`` sends with ``send``: of ``out``'s shape and dtype (written into
    it), or of ``shape`` and ``dtype``, or of those sent ahead (``send_meta=True``)."""
    _peer(src, "recv", "src")
    me = _gflow.get_rank()
    if out is not None:
        shape, dtype = tuple(_local(out, "recv").shape), out.dtype
    if shape is None or dtype is None:
        there = _gflow.placement("cpu", [src])

        def meta(n):
            far = _gflow.empty(n, dtype=_gflow.int64, placement=there, sbp=_gflow.broadcast)
            return [int(v) for v in _moved(far, src, me).to_local().numpy().reshape(-1)]

        ndim = meta(1)[0]
        *dims, code = meta(ndim + 1)
        shape, dtype = tuple(dims), getattr(_gflow, _DTYPES[code])
    kind = "cpu" if device is None or str(device).split(":")[0] == "cpu" else "gpu"
    far = _gflow.empty(*shape, dtype=dtype, placement=_gflow.placement(kind, [src]),
                       sbp=_gflow.broadcast)
    got = _moved(far, src, me).to_local()
    if out is None:
        return got
    _write(out, got)
    return out


def barrier():
    """Returns once every rank has called it."""
    _summed(_gflow.zeros(1))


__all__ = ["all_reduce", "all_gather", "broadcast", "reduce", "scatter", "reduce_scatter",
           "all_to_all", "barrier", "send", "recv"]
