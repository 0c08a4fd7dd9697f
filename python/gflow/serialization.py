"""``flow.save(obj, path)`` / ``flow.load(path)``, as OneFlow's, on gflow's checkpoints.

``obj`` is a state dict (``model.state_dict()``, ``optimizer.state_dict()``) or a mapping of
them and of Python values (``{"model": ..., "optim": ..., "epoch": 3, "note": "warmup"}``).
``path`` becomes a checkpoint directory (``index.json`` and one safetensors file per rank that
holds data): a global tensor is saved sharded, each rank writing its own part once, and the
save is atomic. Both calls are collective: every rank of the job calls them, as in OneFlow.

``flow.load`` gives the same nesting back, as ``torch.load`` does: keys in the order they were
saved, ``bool`` / ``int`` / ``float`` / ``str`` / ``None`` with their types, lists, tuples and
dicts as saved, and tensors as local tensors holding whole values; ``module.load_state_dict``
and ``optimizer.load_state_dict`` then write them into parameters of any placement and SBP in
place (each rank keeping its part).

On disk the checkpoint holds tensors and 64-bit integers by name (nesting levels joined with
``"/"``); what a name's Python value was is kept in marker integers under ``__gflow_*__/``
names beside it (the saved order, a type, an int dict key, a string's bytes). A checkpoint
written before the markers existed loads as it did: names in sorted order, digit keys as ints,
lists as mappings with int keys, bools as ints.
"""

import math
import numbers
import os
import struct
from collections import OrderedDict
from collections.abc import Mapping

from . import _gflow
from ._gflow import Tensor

# Nesting levels are joined with "/" (names inside a state dict use ".", never "/").
_SEP = "/"
# A float value is kept as its IEEE bits; a marker value names it so load gives a float back.
_FLOAT = "__gflow_float__" + _SEP
# The position of each entry (a value, a tensor or an empty container) in the saved order.
_ORDER = "__gflow_order__" + _SEP
# The type of a value or container that is not an int, float, tensor or non-empty dict.
_TYPE = "__gflow_type__" + _SEP
# A dict entry whose key is an int (other keys are str).
_INTKEY = "__gflow_intkey__" + _SEP
# A str's UTF-8 bytes, 8 per value (the value at the str's own name is its length).
_STR = "__gflow_str__" + _SEP
_BOOL, _NONE, _TEXT, _LIST, _TUPLE, _DICT = 1, 2, 3, 4, 5, 6
_CONTAINERS = {_LIST: list, _TUPLE: tuple, _DICT: OrderedDict}


def _key_name(key):
    if isinstance(key, str):
        if _SEP in key:
            raise ValueError(f"flow.save: a key may not contain {_SEP!r}: {key!r}")
        return key, False
    if isinstance(key, numbers.Integral):
        return str(int(key)), True
    raise TypeError(f"flow.save: keys are str or int, got {type(key).__name__} {key!r}")


def _flatten(obj, prefix, out):
    """``out`` gets ``(name, value, int key)`` of every leaf of ``obj`` depth first in order, a
    container as ``(name, container, int key)`` before its entries."""
    items = obj.items() if isinstance(obj, Mapping) else enumerate(obj)
    for key, v in items:
        part, int_key = _key_name(key) if isinstance(obj, Mapping) else (str(key), False)
        name = prefix + part
        out.append((name, v, int_key))
        if isinstance(v, (Mapping, list, tuple)):
            _flatten(v, name + _SEP, out)
    return out


def _int64(name, v):
    if not -2**63 <= v < 2**63:
        raise OverflowError(f"flow.save: {name!r} = {v} does not fit in 64 bits")
    return v


def save(obj, path):
    """Saves the state dict ``obj`` (tensors and Python values: bool, int, float, str, None,
    nested in mappings, lists and tuples) to the checkpoint directory ``path`` (collective)."""
    if not isinstance(obj, Mapping):
        raise TypeError(f"flow.save saves a state dict (a mapping), got {type(obj).__name__}")
    if any(isinstance(k, str) and k.startswith("__gflow_") for k in obj):
        raise ValueError("flow.save: keys starting with '__gflow_' are gflow's own")
    tensors, values, seen, order = [], [], set(), 0

    def mark(prefix, name, v):
        values.append((prefix + name, v))

    for name, v, int_key in _flatten(obj, "", []):
        if name in seen:
            raise ValueError(f"flow.save: two entries are both named {name!r} (an int key and "
                             "a str key that reads the same)")
        seen.add(name)
        if int_key:
            mark(_INTKEY, name, 1)
        if isinstance(v, (Mapping, list, tuple)):
            kind = _DICT if isinstance(v, Mapping) else _TUPLE if isinstance(v, tuple) else _LIST
            if kind != _DICT or not v:
                mark(_TYPE, name, kind)
            if not v:  # an empty container is an entry of its own
                mark(_ORDER, name, order)
                order += 1
            continue
        mark(_ORDER, name, order)
        order += 1
        if isinstance(v, Tensor):
            tensors.append((name, v))
        elif isinstance(v, bool):
            values.append((name, int(v)))
            mark(_TYPE, name, _BOOL)
        elif isinstance(v, numbers.Integral):
            values.append((name, _int64(name, int(v))))
        elif isinstance(v, numbers.Real):
            values.append((name, struct.unpack("<q", struct.pack("<d", float(v)))[0]))
            mark(_FLOAT, name, 1)
        elif isinstance(v, str):
            data = v.encode("utf-8")
            values.append((name, len(data)))
            mark(_TYPE, name, _TEXT)
            for i in range(0, len(data), 8):
                chunk = data[i:i + 8].ljust(8, b"\0")
                mark(_STR, f"{name}{_SEP}{i // 8}", int.from_bytes(chunk, "little", signed=True))
        elif v is None:
            values.append((name, 0))
            mark(_TYPE, name, _NONE)
        else:
            raise TypeError(f"flow.save: {name!r} is a {type(v).__name__}; a state dict holds "
                            "tensors, bool, int, float, str and None")
    _gflow.save_checkpoint(tensors, values, os.fspath(path))


def load(path):
    """The state dict saved in the checkpoint directory ``path`` (collective): the saved
    nesting and order, tensors as local tensors holding whole values, Python values with their
    types."""
    path = os.fspath(path)
    tensors = [(name, _gflow.zeros(*shape, dtype=dtype))
               for name, shape, dtype in _gflow.checkpoint_tensors(path)]
    values = dict(_gflow.load_checkpoint(tensors, path))
    marks = {p: {} for p in (_FLOAT, _ORDER, _TYPE, _INTKEY, _STR)}
    plain = {}
    for name, v in values.items():
        prefix = next((p for p in marks if name.startswith(p)), None)
        if prefix is None:
            plain[name] = v
        else:
            marks[prefix][name[len(prefix):]] = v
    order, types = marks[_ORDER], marks[_TYPE]
    if not order:
        return _load_unordered(dict(tensors), plain, marks[_FLOAT])
    flat = dict(tensors)
    for name, v in plain.items():
        kind = types.get(name)
        if name in marks[_FLOAT]:
            v = struct.unpack("<d", struct.pack("<q", v))[0]
        elif kind == _BOOL:
            v = bool(v)
        elif kind == _NONE:
            v = None
        elif kind == _TEXT:
            chunks = (marks[_STR][f"{name}{_SEP}{i}"] for i in range(math.ceil(v / 8)))
            v = b"".join(c.to_bytes(8, "little", signed=True) for c in chunks)[:v].decode()
        flat[name] = v
    for name in order:
        if name not in flat:  # an empty container
            flat[name] = _CONTAINERS[types[name]]()
    out = OrderedDict()
    for name in sorted(order, key=order.get):
        *outer, last = name.split(_SEP)
        d, at = out, ""
        for k in outer:
            at += k
            d = d.setdefault(int(k) if at in marks[_INTKEY] else k, OrderedDict())
            at += _SEP
        d[int(last) if name in marks[_INTKEY] else last] = flat[name]
    return _typed(out, "", types)


def _typed(d, prefix, types):
    """The containers of ``d`` (built as OrderedDicts) as the lists and tuples they were."""
    for k, v in d.items():
        if isinstance(v, OrderedDict):
            d[k] = _typed(v, f"{prefix}{k}{_SEP}", types)
    kind = types.get(prefix[:-len(_SEP)])
    return _CONTAINERS[kind](d.values()) if kind in (_LIST, _TUPLE) else d


def _load_unordered(flat, values, floats):
    """A checkpoint written before order and types were kept: names sorted, digit keys as ints,
    lists as mappings with int keys."""
    for name, v in values.items():
        flat[name] = struct.unpack("<d", struct.pack("<q", v))[0] if floats.get(name) else v
    out = OrderedDict()
    for name in sorted(flat):
        *outer, last = name.split(_SEP)
        d = out
        for k in outer:
            d = d.setdefault(_key(k), OrderedDict())
        d[_key(last)] = flat[name]
    return out


def _key(k):
    return int(k) if k.isdigit() else k


def assign(dst, src):
    """Writes ``src``'s value into ``dst`` in place (any layouts, collective for global ones)."""
    if not isinstance(src, Tensor):
        src = _gflow.tensor(src, dtype=dst.dtype)
    elif src.dtype != dst.dtype:
        src = src.to(dst.dtype)
    _gflow.assign(dst, src)


__all__ = ["save", "load"]
