"""``flow.utils.data`` against hand-worked expectations (PyTorch's rules, and orders PyTorch
2.15 gave for the seeds used), and against ``torch.utils.data`` itself where torch is
importable."""

import collections
import threading
import time

import numpy as np
import pytest

import gflow as flow
from gflow.utils.data import (
    BatchSampler,
    ChainDataset,
    ConcatDataset,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    StackDataset,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
    default_collate,
    default_convert,
    get_worker_info,
    random_split,
)

X = np.arange(30, dtype=np.float32).reshape(10, 3)
Y = np.arange(10, dtype=np.int64) * 7


def dataset():
    return TensorDataset(flow.tensor(X), flow.tensor(Y))


def batches(loader):
    return [[t.numpy().tolist() for t in b] for b in loader]


def order(loader):
    """The sample indices of each batch of a loader over ``range(n)``."""
    return [b.tolist() for b in loader]


@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_equal_hand_built_slices(drop_last):
    loader = DataLoader(dataset(), batch_size=4, drop_last=drop_last)
    expect = [[X[s].tolist(), Y[s].tolist()] for s in (slice(0, 4), slice(4, 8), slice(8, 10))]
    if drop_last:
        expect = expect[:2]
    assert len(loader) == len(expect)
    got = list(loader)
    assert [b[0].dtype for b in got] == [flow.float32] * len(expect)
    assert [b[1].dtype for b in got] == [flow.int64] * len(expect)
    assert batches(got) == expect
    assert batches(loader) == expect  # a second pass is the same


def test_shuffle_reproducible_after_manual_seed_and_new_each_epoch():
    flow.manual_seed(5)
    loader = DataLoader(range(10), batch_size=4, shuffle=True)
    first, second = order(loader), order(loader)
    # PyTorch 2.15: torch.manual_seed(5); DataLoader(range(10), 4, shuffle=True)
    assert first == [[8, 3, 0, 5], [9, 1, 6, 2], [4, 7]]
    assert sorted(sum(second, [])) == list(range(10)) and second != first
    flow.manual_seed(5)
    assert order(loader) == first and order(loader) == second
    flow.manual_seed(6)
    assert order(loader) != first


def test_manual_seed_keeps_seeding_tensors():
    flow.manual_seed(11)
    a = flow.randn(5).numpy().copy()
    flow.manual_seed(11)
    np.testing.assert_array_equal(flow.randn(5).numpy(), a)


def test_shuffles_equal_torch_for_equal_seeds():
    torch = pytest.importorskip("torch")
    from torch.utils import data as td

    for seed in (0, 3, 12345):
        flow.manual_seed(seed)
        torch.manual_seed(seed)
        ours = DataLoader(range(23), batch_size=5, shuffle=True)
        theirs = td.DataLoader(range(23), batch_size=5, shuffle=True)
        for _ in range(3):
            assert order(ours) == order(theirs)
        assert list(RandomSampler(range(7), replacement=True, num_samples=70)) == list(
            td.RandomSampler(range(7), replacement=True, num_samples=70))
        assert list(RandomSampler(range(7), num_samples=17)) == list(
            td.RandomSampler(range(7), num_samples=17))
        assert list(SubsetRandomSampler([5, 7, 9])) == list(td.SubsetRandomSampler([5, 7, 9]))
        w = [0.1, 3.0, 1.0, 0.0, 2.5]
        assert list(WeightedRandomSampler(w, 50)) == list(td.WeightedRandomSampler(w, 50))
        g, tg = flow.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        assert order(DataLoader(range(11), batch_size=3, shuffle=True, generator=g)) == order(
            td.DataLoader(range(11), batch_size=3, shuffle=True, generator=tg))
        ours = [s.indices for s in random_split(range(10), [0.3, 0.7], generator=seed)]
        theirs = [s.indices for s in td.random_split(
            range(10), [0.3, 0.7], generator=torch.Generator().manual_seed(seed))]
        assert ours == theirs


def test_distributed_sampler_hand_worked():
    # no shuffle: 10 indices padded to 12 with 0, 1; rank r takes every 3rd from r
    got = [list(DistributedSampler(range(10), 3, r, shuffle=False)) for r in range(3)]
    assert got == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    # drop_last: ceil((10 - 4) / 4) = 2 each, 8 in all
    got = [list(DistributedSampler(range(10), 4, r, shuffle=False, drop_last=True))
           for r in range(4)]
    assert got == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # shuffled with seed 7 + epoch: torch.randperm(10, generator=Generator().manual_seed(7))
    # is [5, 0, 3, 4, 1, 7, 9, 6, 8, 2] (PyTorch 2.15), padded with 5, 0
    s = [DistributedSampler(range(10), 3, r, seed=7) for r in range(3)]
    assert [list(x) for x in s] == [[5, 4, 9, 2], [0, 1, 6, 5], [3, 7, 8, 0]]
    assert [len(x) for x in s] == [4, 4, 4]
    s[0].set_epoch(1)  # seed 8: [3, 5, 0, 1, 2, 6, 4, 7, 8, 9]
    assert list(s[0]) == [3, 1, 4, 9]
    # the job's world (one process here) by default
    assert list(DistributedSampler(range(5), shuffle=False)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="Invalid rank 3"):
        DistributedSampler(range(10), 3, 3)


def test_distributed_sampler_equals_torch():
    pytest.importorskip("torch")
    from torch.utils.data import DistributedSampler as TorchSampler

    for n in (1, 5, 10, 17):
        for reps in (1, 2, 3, 4):
            for drop_last in (False, True):
                for shuffle in (False, True):
                    for epoch in (0, 1, 5):
                        for r in range(reps):
                            ours = DistributedSampler(range(n), reps, r, shuffle, 7, drop_last)
                            theirs = TorchSampler(range(n), reps, r, shuffle, 7, drop_last)
                            ours.set_epoch(epoch)
                            theirs.set_epoch(epoch)
                            assert list(ours) == list(theirs) and len(ours) == len(theirs)


Point = collections.namedtuple("Point", ["x", "y"])


def test_default_collate_nested_structures():
    batch = [
        {"a": 1.5, "b": (np.array([1, 2], dtype=np.int32), "s0"), "p": Point(1, True),
         "t": flow.tensor([1.0, 2.0]), "n": np.float64(0.5), "l": [1, 2]},
        {"a": 2.5, "b": (np.array([3, 4], dtype=np.int32), "s1"), "p": Point(2, False),
         "t": flow.tensor([3.0, 4.0]), "n": np.float64(1.5), "l": [3, 4]},
    ]
    out = default_collate(batch)
    assert set(out) == {"a", "b", "p", "t", "n", "l"}
    assert out["a"].dtype == flow.float64 and out["a"].tolist() == [1.5, 2.5]
    assert isinstance(out["b"], list)  # tuples become lists, as PyTorch's
    assert out["b"][0].dtype == flow.int32 and out["b"][0].tolist() == [[1, 2], [3, 4]]
    assert out["b"][1] == ("s0", "s1")  # strings stay the batch's column, as PyTorch's
    assert isinstance(out["p"], Point)
    assert out["p"].x.dtype == flow.int64 and out["p"].x.tolist() == [1, 2]
    assert out["p"].y.dtype == flow.bool and out["p"].y.tolist() == [True, False]
    assert out["t"].shape == flow.Size([2, 2]) and out["t"].tolist() == [[1, 2], [3, 4]]
    assert out["n"].dtype == flow.float64 and out["n"].tolist() == [0.5, 1.5]
    assert [t.tolist() for t in out["l"]] == [[1, 3], [2, 4]]
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="default_collate: batch must contain"):
        default_collate([object()])
    conv = default_convert({"a": np.arange(3), "b": [np.float32(2.0), "x"], "c": 5})
    assert conv["a"].dtype == flow.int64 and conv["a"].tolist() == [0, 1, 2]
    assert conv["b"][0].dtype == flow.float32 and conv["b"][1] == "x" and conv["c"] == 5


def test_batch_size_none_converts_without_batching():
    loader = DataLoader([np.array([1.0, 2.0]), np.array([3.0, 4.0])], batch_size=None)
    assert [b.tolist() for b in loader] == [[1.0, 2.0], [3.0, 4.0]]
    assert len(loader) == 2


def test_random_split_sizes_and_disjointness():
    parts = random_split(range(10), [0.33, 0.33, 0.34], generator=3)
    assert [len(p) for p in parts] == [4, 3, 3]  # floors 3, 3, 3; the remainder to the first
    seen = [i for p in parts for i in p]
    assert sorted(seen) == list(range(10))
    again = random_split(range(10), [0.33, 0.33, 0.34], generator=flow.Generator().manual_seed(3))
    assert [list(p) for p in again] == [list(p) for p in parts]
    parts = random_split(range(100), [30, 70])
    assert [len(p) for p in parts] == [30, 70]
    assert not set(parts[0]) & set(parts[1])
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(range(10), [3, 3])


def test_weighted_sampler_frequencies():
    w = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
    n = 40000
    flow.manual_seed(0)
    counts = np.bincount(list(WeightedRandomSampler(w, n)), minlength=5)
    p = w / w.sum()
    sigma = np.sqrt(n * p * (1 - p))
    assert counts[4] == 0
    assert np.all(np.abs(counts - n * p) <= 5 * sigma + 1e-9), counts
    # without replacement: distinct, never a zero weight; as many as there are non-zero ones
    picks = list(WeightedRandomSampler(w, 4, replacement=False))
    assert sorted(picks) == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="not enough non-negative category"):
        list(WeightedRandomSampler(w, 5, replacement=False))
    # the heaviest index comes first most often
    firsts = np.bincount([list(WeightedRandomSampler(w, 2, replacement=False))[0]
                          for _ in range(4000)], minlength=5)
    assert np.all(np.abs(firsts - 4000 * p) <= 5 * np.sqrt(4000 * p * (1 - p)) + 1e-9), firsts


def test_samplers_and_datasets():
    assert list(SequentialSampler(range(3))) == [0, 1, 2]
    s = RandomSampler(range(5), replacement=True, num_samples=12)
    assert len(s) == 12 and len(list(s)) == 12 and set(s) <= set(range(5))
    drawn = list(RandomSampler(range(5), num_samples=12))  # two permutations and 2 of a third
    assert len(drawn) == 12 and sorted(drawn[:5]) == sorted(drawn[5:10]) == list(range(5))
    assert len(set(drawn[10:])) == 2
    assert sorted(SubsetRandomSampler([4, 8, 9])) == [4, 8, 9]
    b = BatchSampler(SequentialSampler(range(7)), 3, drop_last=False)
    assert list(b) == [[0, 1, 2], [3, 4, 5], [6]] and len(b) == 3
    b = BatchSampler(range(7), 3, drop_last=True)
    assert list(b) == [[0, 1, 2], [3, 4, 5]] and len(b) == 2
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        BatchSampler(range(3), 0, False)
    cat = ConcatDataset([range(3), range(10, 12)])
    assert len(cat) == 5 and [cat[i] for i in range(5)] == [0, 1, 2, 10, 11] and cat[-1] == 11
    sub = Subset(range(10, 20), [3, 1])
    assert len(sub) == 2 and sub[0] == 13 and sub.__getitems__([1, 0]) == [11, 13]
    st = StackDataset(range(3), range(5, 8))
    assert st[1] == (1, 6) and StackDataset(a=range(2), b=range(2))[1] == {"a": 1, "b": 1}

    class Squares(Dataset):
        def __getitem__(self, i):
            return i * i

        def __len__(self):
            return 4

    assert (Squares() + Squares())[5] == 1
    assert isinstance(Squares() + Squares(), ConcatDataset)


class Stream(IterableDataset):
    """0..n-1, each worker reading every num_workers-th."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))

    def __len__(self):
        return self.n


def test_iterable_dataset_with_and_without_workers():
    assert order(DataLoader(Stream(7), batch_size=3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(DataLoader(Stream(7), batch_size=3)) == 3
    assert len(DataLoader(Stream(7), batch_size=3, drop_last=True)) == 2
    # two workers: worker 0 reads 0 2 4 6, worker 1 reads 1 3 5; batches alternate, as PyTorch
    got = order(DataLoader(Stream(7), batch_size=2, num_workers=2))
    assert got == [[0, 2], [1, 3], [4, 6], [5]]
    chained = ChainDataset([Stream(2), Stream(3)])
    assert list(chained) == [0, 1, 0, 1, 2] and len(chained) == 5
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        DataLoader(Stream(3), shuffle=True)


def test_workers_yield_the_same_batches_as_none():
    ds = dataset()
    for shuffle in (False, True):
        flow.manual_seed(9)
        plain = batches(DataLoader(ds, batch_size=3, shuffle=shuffle))
        flow.manual_seed(9)
        threaded = batches(DataLoader(ds, batch_size=3, shuffle=shuffle, num_workers=2))
        assert threaded == plain
    # persistent workers: the same first pass; later passes draw no new base seed (as PyTorch)
    flow.manual_seed(9)
    first = batches(DataLoader(ds, batch_size=3, shuffle=True))
    flow.manual_seed(9)
    loader = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, persistent_workers=True,
                        prefetch_factor=1)
    persistent = [batches(loader), batches(loader)]
    assert persistent[0] == first
    assert sorted(y for b in persistent[1] for y in b[1]) == sorted(Y.tolist())
    flow.manual_seed(9)
    loader = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, persistent_workers=True)
    assert [batches(loader), batches(loader)] == persistent


def test_persistent_workers_equal_torch():
    torch = pytest.importorskip("torch")
    from torch.utils import data as td

    torch.manual_seed(9)
    theirs = td.DataLoader(range(10), batch_size=3, shuffle=True, num_workers=2,
                           persistent_workers=True)
    flow.manual_seed(9)
    ours = DataLoader(range(10), batch_size=3, shuffle=True, num_workers=2,
                      persistent_workers=True)
    assert [order(ours) for _ in range(3)] == [order(theirs) for _ in range(3)]


def test_workers_run_in_threads_with_init_fn_and_worker_info():
    seen = {}
    lock = threading.Lock()

    def init(worker_id):
        info = get_worker_info()
        with lock:
            seen[worker_id] = (threading.current_thread().name, info.num_workers, info.seed)

    class Slow(Dataset):
        def __getitem__(self, i):
            time.sleep(0.002 * (i % 3))  # out-of-order completion; order must hold
            return i

        def __len__(self):
            return 20

    loader = DataLoader(Slow(), batch_size=2, num_workers=3, worker_init_fn=init)
    assert order(loader) == [[i, i + 1] for i in range(0, 20, 2)]
    assert sorted(seen) == [0, 1, 2]
    assert all(name.startswith("gflow-DataLoader-worker") and n == 3 for name, n, _ in
               seen.values())
    assert seen[1][2] == seen[0][2] + 1  # base seed + worker id
    assert get_worker_info() is None


def test_worker_errors_reach_the_caller_and_early_break_stops_workers():
    class Bad(Dataset):
        def __getitem__(self, i):
            if i == 5:
                raise KeyError("sample 5")
            return i

        def __len__(self):
            return 10

    it = iter(DataLoader(Bad(), batch_size=2, num_workers=2))
    assert next(it).tolist() == [0, 1] and next(it).tolist() == [2, 3]
    with pytest.raises(KeyError, match="sample 5"):
        next(it)
    del it
    assert wait_for_workers(0) == 0

    def bad_init(worker_id):
        raise ValueError(f"init {worker_id}")

    with pytest.raises(ValueError, match="init 0"):
        list(DataLoader(range(4), num_workers=2, worker_init_fn=bad_init))
    assert wait_for_workers(0) == 0
    it = iter(DataLoader(range(100), batch_size=2, num_workers=2))
    next(it)
    assert wait_for_workers(2) == 2
    del it  # abandoned mid-pass: its workers stop
    assert wait_for_workers(0) == 0


def wait_for_workers(n, seconds=5):
    """The number of live DataLoader worker threads once it is ``n`` (or after ``seconds``)."""
    deadline = time.time() + seconds
    while True:
        live = sum(t.name.startswith("gflow-DataLoader-worker") for t in threading.enumerate())
        if live == n or time.time() > deadline:
            return live
        time.sleep(0.01)


def test_loader_argument_checks():
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(range(3), sampler=SequentialSampler(range(3)), shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(range(3), batch_size=2, batch_sampler=[[0, 1]])
    with pytest.raises(ValueError, match="persistent_workers option needs num_workers > 0"):
        DataLoader(range(3), persistent_workers=True)
    with pytest.raises(ValueError, match="prefetch_factor option could only be specified"):
        DataLoader(range(3), prefetch_factor=2)
    loader = DataLoader(range(5), batch_sampler=[[4, 0], [2]], pin_memory=True)
    assert order(loader) == [[4, 0], [2]] and len(loader) == 2
    with pytest.raises(ValueError, match="should not be set after"):
        loader.batch_size = 3
    with pytest.raises(TypeError, match="flow.Generator or an int seed"):
        DataLoader(range(3), shuffle=True, generator="seed")
