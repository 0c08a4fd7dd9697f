"""``DistributedSampler``, as ``torch.utils.data.distributed``'s."""

import math

from ... import _runtime, env
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """Each rank's share of a dataset, as PyTorch's: the indices (permuted each epoch with the
    seed ``seed + epoch``, or in order) padded by repeating from the start to a multiple of
    ``num_replicas`` (or cut to one with ``drop_last``), then every ``num_replicas``-th from
    ``rank``. The permutation is PyTorch's for that seed, so rank ``r`` of ``N`` gets exactly
    the indices PyTorch's sampler gives it. ``num_replicas`` and ``rank`` default to the job's
    (``flow.env.get_world_size()``, ``flow.env.get_rank()``); call ``set_epoch(e)`` before
    each epoch for a new order."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None:
            num_replicas = env.get_world_size()
        if rank is None:
            rank = env.get_rank()
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        if drop_last and len(dataset) % num_replicas != 0:
            self.num_samples = math.ceil((len(dataset) - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(len(dataset) / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = _runtime.Generator().manual_seed(self.seed + self.epoch)._randperm(n)
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad <= len(indices):
                indices += indices[:pad]
            else:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Sets the epoch, which with ``seed`` decides the next pass's order."""
        self.epoch = epoch
