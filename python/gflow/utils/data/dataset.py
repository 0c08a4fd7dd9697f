"""Datasets, as ``torch.utils.data``'s: ``Dataset``, ``IterableDataset``, ``TensorDataset``,
``StackDataset``, ``ConcatDataset``, ``ChainDataset``, ``Subset`` and ``random_split``."""

import bisect
import itertools
import math
import warnings
from typing import Generic, TypeVar

from ... import _runtime

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "StackDataset", "ConcatDataset",
           "ChainDataset", "Subset", "random_split"]

_T_co = TypeVar("_T_co", covariant=True)


class Dataset(Generic[_T_co]):
    """A map-style dataset: subclasses define ``__getitem__(index)`` (and usually
    ``__len__``); ``a + b`` concatenates two."""

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset[_T_co]):
    """A dataset read as a stream: subclasses define ``__iter__``. With workers, each worker
    iterates its own ``iter(dataset)``; ``get_worker_info()`` inside it tells it which worker
    it is, to read its own share. ``a + b`` chains two."""

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are the ``index``-th rows of tensors of one first dimension."""

    def __init__(self, *tensors):
        if any(tensors[0].size(0) != t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


class StackDataset(Dataset):
    """Samples are tuples (``StackDataset(a, b)``) or dicts (``StackDataset(x=a, y=b)``) of
    the samples of datasets of one length."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or``dict``- (via "
                             "``kwargs``) like input/output, but both types are given.")
        if not args and not kwargs:
            raise ValueError("At least one dataset should be passed")
        parts = list(args) or list(kwargs.values())
        self._length = len(parts[0])
        if any(self._length != len(d) for d in parts):
            raise ValueError("Size mismatch between datasets")
        self.datasets = args or kwargs

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self):
        return self._length


class ConcatDataset(Dataset):
    """The datasets one after the other."""

    @staticmethod
    def cumsum(sequence):
        r, s = [], 0
        for e in sequence:
            s += len(e)
            r.append(s)
        return r

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        i = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[i][idx - (self.cumulative_sizes[i - 1] if i else 0)]


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other."""

    def __init__(self, datasets):
        self.datasets = datasets

    def _each(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield d

    def __iter__(self):
        for d in self._each():
            yield from d

    def __len__(self):
        return sum(len(d) for d in self._each())


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        """A batch's samples, through the dataset's own ``__getitems__`` where it has one (a
        subclass's ``__getitem__`` is used as written)."""
        if type(self).__getitem__ is not Subset.__getitem__:
            return [self[i] for i in indices]
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self):
        return len(self.indices)


def generator_arg(generator):
    """A ``generator=`` of the data utilities as a ``flow.Generator``: one as is, an int as a
    new generator with that seed (``None`` stays ``None``)."""
    if generator is None or isinstance(generator, _runtime.Generator):
        return generator
    if isinstance(generator, int) and not isinstance(generator, bool):
        return _runtime.Generator().manual_seed(generator)
    raise TypeError(f"generator= takes a flow.Generator or an int seed, not "
                    f"{type(generator).__name__}")


def random_split(dataset, lengths, generator=_runtime.default_generator):
    """``dataset`` split into non-overlapping ``Subset``s of the given lengths, or of
    fractions of it summing to 1 (floored, the remainder handed out one by one from the
    first), in a random order drawn as PyTorch's (``randperm`` from ``generator``: a
    ``flow.Generator`` or an int seed)."""
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            sizes.append(math.floor(len(dataset) * frac))
        for i in range(len(dataset) - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
        for i, n in enumerate(lengths):
            if n == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an "
                              "empty dataset.", stacklevel=2)
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    generator = generator_arg(generator) or _runtime.default_generator
    indices = generator._randperm(sum(lengths))
    return [Subset(dataset, indices[offset - n:offset])
            for offset, n in zip(itertools.accumulate(lengths), lengths)]
