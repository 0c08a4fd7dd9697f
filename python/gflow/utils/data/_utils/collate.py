"""Turning a list of samples into a batch, as ``torch.utils.data._utils.collate``:
``default_collate`` (a new first dimension: numbers, NumPy arrays and scalars and gflow tensors
become batched gflow tensors; mappings, named tuples, tuples and lists are collated field by
field; strings and bytes stay lists), ``default_convert`` (NumPy data to gflow tensors, no
batching), and ``collate`` with ``default_collate_fn_map`` to extend them by type."""

import collections.abc
import copy
import re

import numpy as np

from .... import _gflow
from ...._gflow import Tensor

__all__ = ["collate", "default_collate", "default_convert", "default_collate_fn_map",
           "collate_tensor_fn"]

_str_or_object = re.compile(r"[SaUO]")
_err = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        "found {}")


def _numpy(x):
    """A NumPy array or scalar (not a NumPy string)."""
    t = type(x)
    return t.__module__ == "numpy" and t.__name__ not in ("str_", "string_", "bytes_")


def default_convert(data):
    """``data`` with each NumPy array or scalar in it (through mappings, named tuples,
    sequences) made a gflow tensor of its dtype; anything else as it is."""
    if isinstance(data, Tensor):
        return data
    if _numpy(data):
        if isinstance(data, np.ndarray) and _str_or_object.search(data.dtype.str):
            return data
        return _gflow.tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({k: default_convert(data[k]) for k in data})
                return clone
            return type(data)({k: default_convert(data[k]) for k in data})
        except TypeError:
            return {k: default_convert(data[k]) for k in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch, *, collate_fn_map=None):
    """Collates ``batch`` (a list of samples of one structure): an element whose type (or a
    base of it, in the map's order) is in ``collate_fn_map`` goes to that function; mappings,
    named tuples and sequences are collated per field."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for t in collate_fn_map:
            if isinstance(elem, t):
                return collate_fn_map[t](batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        fields = {k: collate([d[k] for d in batch], collate_fn_map=collate_fn_map) for k in elem}
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(fields)
                return clone
            return elem_type(fields)
        except TypeError:
            return fields
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return elem_type(*(collate(s, collate_fn_map=collate_fn_map) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        columns = [collate(s, collate_fn_map=collate_fn_map) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return columns
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, c in enumerate(columns):
                    clone[i] = c
                return clone
            return elem_type(columns)
        except TypeError:
            return columns
    raise TypeError(_err.format(elem_type))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    """Tensors of one shape stacked along a new first dimension."""
    return _gflow.stack(list(batch), 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    """NumPy arrays as gflow tensors of their dtype, then collated as tensors."""
    if _str_or_object.search(batch[0].dtype.str):
        raise TypeError(_err.format(batch[0].dtype))
    return collate([_gflow.tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    """NumPy scalars as one 1-d tensor of their dtype."""
    return _gflow.tensor(np.asarray(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    """Python floats as a float64 tensor, as PyTorch's."""
    return _gflow.tensor(batch, dtype=_gflow.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    """Python ints as an int64 tensor (bools as a bool one)."""
    return _gflow.tensor(batch)


def collate_str_fn(batch, *, collate_fn_map=None):
    """Strings and bytes stay a list."""
    return batch


default_collate_fn_map = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch):
    """A batch from a list of samples, as PyTorch's ``default_collate``: tensors stacked
    along a new first dimension; NumPy arrays and scalars as gflow tensors of their dtype;
    floats float64, ints int64, bools bool; strings and bytes a list; mappings, named tuples
    and lists collated field by field (tuples become lists)."""
    return collate(batch, collate_fn_map=default_collate_fn_map)
