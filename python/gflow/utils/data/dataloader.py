"""``DataLoader``, as ``torch.utils.data``'s, with ``get_worker_info``, ``default_collate`` and
``default_convert``."""

import functools
import itertools
import math
import queue
import threading
import warnings
from dataclasses import dataclass

from ... import _runtime
from ._utils.collate import default_collate, default_convert
from .dataset import IterableDataset, generator_arg
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader", "get_worker_info", "default_collate", "default_convert", "WorkerInfo"]


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker thread is: ``id`` (0 to ``num_workers - 1``), ``num_workers``, ``seed``
    (the iterator's base seed plus ``id``, as PyTorch's), ``dataset`` (the loader's own: threads
    share it) and ``worker_method`` (``"thread"``)."""

    id: int
    num_workers: int
    seed: int
    dataset: object
    worker_method: str = "thread"


_local = threading.local()


def get_worker_info():
    """The ``WorkerInfo`` of the calling worker thread, ``None`` outside workers (in an
    ``IterableDataset``'s ``__iter__``, to read one worker's share)."""
    return getattr(_local, "info", None)


class _InfiniteConstantSampler(Sampler):
    """``None`` forever: the indices of an iterable dataset."""

    def __iter__(self):
        while True:
            yield None


class _MapFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset, self.auto_collation, self.collate_fn = dataset, auto_collation, collate_fn

    def fetch(self, index):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.collate_fn(self.dataset.__getitems__(index))
        return self.collate_fn([self.dataset[i] for i in index])


class _IterableFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.auto_collation, self.collate_fn, self.drop_last = auto_collation, collate_fn, drop_last
        self.it = iter(dataset)
        self.ended = False

    def fetch(self, index):
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.it))
        data = []
        for _ in index:
            try:
                data.append(next(self.it))
            except StopIteration:
                self.ended = True
                break
        if not data or (self.drop_last and len(data) < len(index)):
            raise StopIteration
        return self.collate_fn(data)


class DataLoader:
    """Batches of a dataset, as ``torch.utils.data.DataLoader`` (the same arguments, checks,
    samplers and order): ``batch_size``, ``shuffle`` (a ``RandomSampler`` drawing from
    ``generator``, a ``flow.Generator`` or an int seed, else from ``flow.default_generator``,
    which ``flow.manual_seed`` seeds), ``sampler``, ``batch_sampler``, ``drop_last``,
    ``collate_fn`` (``default_collate``: batched gflow tensors), ``len()``, and a new pass per
    ``iter()``.

    ``num_workers > 0`` prefetches up to ``prefetch_factor`` batches per worker and returns
    them in order (``in_order=False``: as they are ready). Workers are threads of this process,
    not processes: a forked process would carry the job's transport threads and their
    connections in an unusable state, and a spawned one would import gflow and try to join the
    job as this rank again. Threads share the dataset, the process's random state and the GIL, so loading
    runs in parallel where it releases the GIL (file reads, NumPy, decoding); each calls
    ``worker_init_fn(worker_id)`` first and sees its ``get_worker_info()``.
    ``persistent_workers`` keeps them between passes; ``timeout`` bounds each wait for a batch.
    ``pin_memory``, ``pin_memory_device`` and ``multiprocessing_context`` are accepted and
    ignored: batches are gflow tensors in host memory, which a device transfer reads directly,
    and threads need no start method. Workers should make local tensors only: a global
    tensor's operations are collectives, which every rank must issue in one order."""

    _initialized = False

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if num_workers == 0 and timeout != 0:
            raise ValueError("timeout applies to loading with workers (num_workers > 0)")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order
        generator = generator_arg(generator)
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in {False, None}:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler "
                                 f"option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._len_reported = None
        self._iterator = None
        self._initialized = True

    def __setattr__(self, attr, val):
        if self._initialized and attr in ("batch_size", "batch_sampler", "sampler", "drop_last",
                                          "dataset", "persistent_workers"):
            raise ValueError(f"{attr} attribute should not be set after "
                             f"{type(self).__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleThreadIter(self)
        if not self.persistent_workers:
            return _WorkerThreadsIter(self)
        if self._iterator is None:
            self._iterator = _WorkerThreadsIter(self)
        else:
            self._iterator._reset(self)
        return self._iterator

    def __len__(self):
        if not self._iterable:
            return len(self._index_sampler)
        length = self._len_reported = len(self.dataset)
        if self.batch_size is not None:
            length = length // self.batch_size if self.drop_last else math.ceil(
                length / self.batch_size)
        return length


class _BaseIter:
    def __init__(self, loader):
        self._dataset = loader.dataset
        self._iterable = loader._iterable
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._collate_fn = loader.collate_fn
        self._sampler_iter = iter(self._index_sampler)
        # drawn as PyTorch draws its base seed, so the generator's stream stays PyTorch's
        self._base_seed = (loader.generator or _runtime.default_generator)._int64()
        self._len_reported = loader._len_reported
        self._num_yielded = 0

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._index_sampler)

    def _reset(self, loader):
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._len_reported = loader._len_reported

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        if self._iterable and self._len_reported is not None \
                and self._num_yielded > self._len_reported:
            warnings.warn(f"Length of IterableDataset {self._dataset} was reported to be "
                          f"{self._len_reported} (when accessing len(dataloader)), but "
                          f"{self._num_yielded} samples have been fetched.", stacklevel=2)
        return data

    def _fetcher(self):
        """A function making a fetcher of this pass's batches (each call a new one)."""
        return functools.partial(_IterableFetcher if self._iterable else _MapFetcher,
                                 self._dataset, self._auto_collation, self._collate_fn,
                                 self._drop_last)


class _SingleThreadIter(_BaseIter):
    def __init__(self, loader):
        super().__init__(loader)
        self._fetch = self._fetcher()().fetch

    def _next_data(self):
        return self._fetch(next(self._sampler_iter))


class _Resume:
    """Asks a persistent worker to start a new pass."""


class _WorkerEnded:
    """A worker's iterable dataset is exhausted."""

    def __init__(self, worker_id):
        self.worker_id = worker_id


class _Failed:
    """An exception a worker raised, to raise again where its batch is taken."""

    def __init__(self, exc):
        self.exc = exc


def _worker_loop(make_fetcher, iterable, info, init_fn, tasks, results, done):
    """One worker thread: runs ``init_fn``, then fetches each task's batch into ``results``
    (``iterable``: a ``StopIteration`` ends this worker's share of the pass). It holds no
    reference to its iterator, nor to an exception once reported (raised in the caller, its
    traceback leads to the iterator), so an abandoned iterator is freed and stops it."""
    _local.info = info
    start_error, broken, fetcher, ended = None, None, None, False
    try:
        if init_fn is not None:
            init_fn(info.id)
        fetcher = make_fetcher()
    except BaseException as e:
        start_error = e
    while True:
        task = tasks.get()
        if task is None:
            return
        if isinstance(task, _Resume):
            if start_error is None and broken is None:
                try:
                    fetcher, ended = make_fetcher(), False
                except BaseException as e:
                    start_error = e
            results.put((task, None))
            continue
        if done.is_set() or ended:
            continue
        idx, index = task
        if start_error is not None:  # the first batch raises it; later ones say it happened
            broken = f"DataLoader worker {info.id} failed to start: {start_error!r}"
            data, start_error = _Failed(start_error), None
        elif broken is not None:
            data = _Failed(RuntimeError(broken))
        else:
            try:
                data = fetcher.fetch(index)
            except StopIteration as e:
                data, ended = (_WorkerEnded(info.id), True) if iterable else (_Failed(e), False)
            except BaseException as e:
                data = _Failed(e)
        results.put((idx, data))
        del data


class _WorkerThreadsIter(_BaseIter):
    def __init__(self, loader):
        super().__init__(loader)
        self._num_workers = loader.num_workers
        self._prefetch = loader.prefetch_factor
        self._in_order = loader.in_order
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self._results = queue.Queue()
        self._done = threading.Event()
        self._shutdown = False
        self._tasks = [queue.Queue() for _ in range(self._num_workers)]
        for i in range(self._num_workers):
            info = WorkerInfo(i, self._num_workers, self._base_seed + i, self._dataset)
            threading.Thread(target=_worker_loop, name=f"gflow-DataLoader-worker-{i}",
                             args=(self._fetcher(), self._iterable, info, loader.worker_init_fn,
                                   self._tasks[i], self._results, self._done),
                             daemon=True).start()
        self._start()

    def _start(self):
        self._send_idx = self._rcvd_idx = self._outstanding = 0
        self._task_info = {}
        self._active = [True] * self._num_workers
        self._cycle = itertools.cycle(range(self._num_workers))
        for _ in range(self._prefetch * self._num_workers):
            self._put_index()

    def _reset(self, loader):
        super()._reset(loader)
        for q in self._tasks:
            q.put(_Resume())
        resumed = 0
        while resumed < self._num_workers:
            idx, _ = self._get()
            resumed += isinstance(idx, _Resume)
        self._start()

    def _get(self):
        try:
            return self._results.get(timeout=self._timeout or None)
        except queue.Empty:
            raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") from None

    def _put_index(self):
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        for _ in range(self._num_workers):
            w = next(self._cycle)
            if self._active[w]:
                break
        else:
            return
        self._tasks[w].put((self._send_idx, index))
        self._task_info[self._send_idx] = (w,)
        self._outstanding += 1
        self._send_idx += 1

    def _next_data(self):
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx)
                if info is not None and (len(info) == 2 or self._active[info[0]]):
                    break
                self._task_info.pop(self._rcvd_idx, None)
                self._rcvd_idx += 1
            else:
                if not self._persistent:
                    self._shutdown_workers()
                raise StopIteration
            if len(self._task_info[self._rcvd_idx]) == 2:
                data = self._task_info.pop(self._rcvd_idx)[1]
                self._rcvd_idx += 1
                return self._process(data)
            idx, data = self._get()
            self._outstanding -= 1
            if isinstance(data, _WorkerEnded):
                self._active[data.worker_id] = False
                self._put_index()
                continue
            if idx == self._rcvd_idx or not self._in_order:
                del self._task_info[idx]
                if idx == self._rcvd_idx:
                    self._rcvd_idx += 1
                return self._process(data)
            self._task_info[idx] += (data,)

    def _process(self, data):
        self._put_index()
        if isinstance(data, _Failed):
            # taken out of the wrapper, so the traceback's frames lead back to it nowhere: an
            # abandoned iterator is then freed at once (and stops its workers)
            exc, data.exc = data.exc, None
            try:
                raise exc
            finally:
                del exc
        return data

    def _shutdown_workers(self):
        if not self._shutdown:
            self._shutdown = True
            self._done.set()
            for q in self._tasks:
                q.put(None)

    def __del__(self):
        if hasattr(self, "_tasks"):
            self._shutdown_workers()
