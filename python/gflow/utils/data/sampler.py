"""Samplers, as ``torch.utils.data``'s: ``Sampler``, ``SequentialSampler``, ``RandomSampler``,
``SubsetRandomSampler``, ``WeightedRandomSampler``, ``BatchSampler``.

The random ones draw from a ``flow.Generator`` (``generator=``: one, an int seed, or ``None``
for ``flow.default_generator``, which ``flow.manual_seed`` seeds) exactly as PyTorch's draw
from a ``torch.Generator``, so equal seeds give PyTorch's indices (``WeightedRandomSampler``
without replacement, or of one sample, is PyTorch's distribution with other values)."""

import itertools
from typing import Generic, TypeVar

import numpy as np

from ... import _runtime
from ..._gflow import Tensor
from .dataset import generator_arg

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]

_T_co = TypeVar("_T_co", covariant=True)


class Sampler(Generic[_T_co]):
    """Base of the samplers: subclasses define ``__iter__`` over dataset indices (or batches of
    them) and, where they know it, ``__len__``."""

    def __init__(self, data_source=None):
        """``data_source`` is accepted from subclasses that pass it on, and ignored, as
        PyTorch's."""


class SequentialSampler(Sampler[int]):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


def _seeded(generator):
    """The generator a pass draws from: ``generator``, or (``None``) a new one seeded from
    ``flow.default_generator``, as PyTorch's ``RandomSampler``."""
    if generator is not None:
        return generator
    return _runtime.Generator().manual_seed(_runtime.default_generator._int64())


class RandomSampler(Sampler[int]):
    """Indices in a random order: each pass a new permutation (or, with ``replacement``,
    ``num_samples`` independent draws); ``num_samples`` beyond the dataset's length takes
    further permutations."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator_arg(generator)
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        g = _seeded(self.generator)
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from g._randint(n, 32).tolist()
            yield from g._randint(n, self.num_samples % 32).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from g._randperm(n)
            yield from g._randperm(n)[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices, in a random order each pass."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator_arg(generator)

    def __iter__(self):
        g = self.generator or _runtime.default_generator
        for i in g._randperm(len(self.indices)):
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``num_samples`` indices of ``range(len(weights))``, each drawn with probability
    proportional to its weight (``replacement=False``: each index at most once)."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        w = weights.numpy() if isinstance(weights, Tensor) else weights
        w = np.array(w, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape "
                             f"{tuple(w.shape)}")
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator_arg(generator)

    def __iter__(self):
        w, k = self.weights, self.num_samples
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if not w.sum() > 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not self.replacement and k > w.size:
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                               "replacement")
        if not self.replacement and k > np.count_nonzero(w):
            raise RuntimeError("invalid multinomial distribution (with replacement=False, not "
                               "enough non-negative category to sample)")
        g = self.generator or _runtime.default_generator
        if self.replacement and k > 1:
            # PyTorch's: a uniform double per draw, searched in the normalised cumulative sum
            cum = np.cumsum(w)
            cum /= cum[-1]
            cum[-1] = 1.0
            return iter(np.searchsorted(cum, g._uniform(k), side="left").tolist())
        # the k largest w / q, q ~ Exp(1): sampling without replacement, as PyTorch's method
        keys = w / -np.log1p(-g._uniform(w.size))
        return iter(np.argsort(-keys, kind="stable")[:k].tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler[list]):
    """Lists of ``batch_size`` indices from ``sampler``; the last shorter one is kept unless
    ``drop_last``."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        it = iter(self.sampler)
        if self.drop_last:
            yield from (list(b) for b in zip(*[it] * self.batch_size))
        else:
            batch = list(itertools.islice(it, self.batch_size))
            while batch:
                yield batch
                batch = list(itertools.islice(it, self.batch_size))

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
