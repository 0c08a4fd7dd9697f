"""``flow.save(obj, path)`` / ``flow.load(path)``, as OneFlow's, on gflow's checkpoints.

``obj`` is a state dict (``model.state_dict()``, ``optimizer.state_dict()``) or a mapping of
them and of numbers (``{"model": ..., "optim": ..., "epoch": 3}``). ``path`` becomes a checkpoint
directory (``index.json`` and one safetensors file per rank that holds data): a global tensor is
saved sharded, each rank writing its own part once, and the save is atomic. Both calls are
collective: every rank of the job calls them, as in OneFlow.

``flow.load`` gives the same nesting back with local tensors holding whole values;
``module.load_state_dict`` and ``optimizer.load_state_dict`` then write them into parameters of
any placement and SBP in place (each rank keeping its part).
"""

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


def _flatten(obj, prefix, out):
    items = obj.items() if isinstance(obj, Mapping) else enumerate(obj)
    for key, v in items:
        name = prefix + str(key)
        if _SEP in str(key):
            raise ValueError(f"flow.save: a key may not contain {_SEP!r}: {key!r}")
        if isinstance(v, (Mapping, list, tuple)):
            _flatten(v, name + _SEP, out)
        else:
            out.append((name, v))
    return out


def save(obj, path):
    """Saves the state dict ``obj`` (tensors and numbers, nested in mappings and lists) to the
    checkpoint directory ``path`` (collective)."""
    if not isinstance(obj, Mapping):
        raise TypeError(f"flow.save saves a state dict (a mapping), got {type(obj).__name__}")
    tensors, values = [], []
    for name, v in _flatten(obj, "", []):
        if isinstance(v, Tensor):
            tensors.append((name, v))
        elif isinstance(v, (bool, int)):
            values.append((name, int(v)))
        elif isinstance(v, float):
            values.append((name, struct.unpack("<q", struct.pack("<d", v))[0]))
            values.append((_FLOAT + name, 1))
        else:
            raise TypeError(f"flow.save: {name!r} is a {type(v).__name__}; a state dict holds "
                            "tensors and numbers")
    _gflow.save_checkpoint(tensors, values, os.fspath(path))


def load(path):
    """The state dict saved in the checkpoint directory ``path`` (collective): the saved nesting
    of mappings (lists come back as mappings with int keys), tensors as local tensors holding
    whole values, numbers as numbers."""
    path = os.fspath(path)
    tensors = [(name, _gflow.zeros(*shape, dtype=dtype))
               for name, shape, dtype in _gflow.checkpoint_tensors(path)]
    values = dict(_gflow.load_checkpoint(tensors, path))
    flat = dict(tensors)
    for name, v in values.items():
        if name.startswith(_FLOAT):
            continue
        if values.get(_FLOAT + name):
            v = struct.unpack("<d", struct.pack("<q", v))[0]
        flat[name] = v
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
