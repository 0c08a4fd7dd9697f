"""Datasets, samplers and the data loader of training scripts, as ``torch.utils.data``:
``from gflow.utils.data import DataLoader, TensorDataset`` in place of ``torch.utils.data``.
Batches are gflow tensors; random orders come from ``flow.Generator``s drawing as PyTorch's
generators do (``flow.manual_seed`` seeds the default one); ``DataLoader`` workers are threads
(see its docstring)."""

from . import _utils
from .dataloader import DataLoader, WorkerInfo, default_collate, default_convert, get_worker_info
from .dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from .distributed import DistributedSampler
from .sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset",
    "DistributedSampler", "IterableDataset", "RandomSampler", "Sampler", "SequentialSampler",
    "StackDataset", "Subset", "SubsetRandomSampler", "TensorDataset", "WeightedRandomSampler",
    "WorkerInfo", "default_collate", "default_convert", "get_worker_info", "random_split",
]
