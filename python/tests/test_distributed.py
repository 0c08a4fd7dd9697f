"""Promises that need several processes, under the launcher: a local random tensor differs from
rank to rank, flow.save writes each rank's shard and flow.load fills another layout, retain_grad,
[] indexing, shard views, attention, LayerNorm, clip_grad_norm_ and in-place SGD on global
tensors."""

from conftest import launch
from pathlib import Path

SCRIPT = Path(__file__).with_name("dist_checks.py")


def field(job, rank, key):
    for line in job.out[rank]:
        if line.startswith(key + ": "):
            return line[len(key) + 2:]
    raise AssertionError(f"rank {rank} printed no {key!r}: {job.out.get(rank)}")


def test_two_ranks(tmp_path):
    job = launch(SCRIPT, 2, str(tmp_path))
    assert job.rc == 0, job.stderr
    assert field(job, 0, "local_randn") != field(job, 1, "local_randn")
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == ["index.json", "rank-00000.safetensors", "rank-00001.safetensors"], files
    for r in (0, 1):
        assert field(job, r, "loaded_sbp") == "(flow.sbp.split(dim=1),)"
        assert field(job, r, "loaded_local_shape") == "[6, 2]"
        assert field(job, r, "loaded_equal") == "True"
        assert field(job, r, "stepped_equal") == "True"
        assert field(job, r, "retain_grad_ok") == "True (flow.sbp.split(dim=0),)"
        assert field(job, r, "index_ok") == "True True"
        assert field(job, r, "index_error") == "IndexOutOfRangeError"
        assert field(job, r, "shard_view_ok") == "True"
        assert field(job, r, "sdpa_ok") == "True (flow.sbp.split(dim=1),)"
        assert field(job, r, "layer_norm_ok") == "True"
        assert field(job, r, "clip_ok") == "True True"
        assert field(job, r, "inplace_sgd_ok") == (
            "True True (flow.sbp.split(dim=0),) (flow.sbp.broadcast,) True")
    assert field(job, 0, "saved_w0") == field(job, 1, "saved_w0")


def test_comm_collectives_on_local_tensors():
    n = 3
    job = launch(Path(__file__).with_name("dist_comm.py"), n)
    assert job.rc == 0, job.stdout[-3000:] + job.stderr[-3000:]
    values = lambda r, k: eval(field(job, r, k))  # noqa: E731  (lists of numbers)
    for r in range(n):
        assert values(r, "all_reduce") == [6.0, 30.0]
        assert values(r, "all_gather") == [0, 0, 1, -1, 2, -2]
        assert values(r, "broadcast") == [1.5, 7.0]
        assert values(r, "reduce") == ([3.0] if r == 0 else [float(r)])
        assert values(r, "scatter") == [10.0 * r, r + 0.5]
        assert values(r, "reduce_scatter") == [300.0 + 3 * r, 3.0]
        assert values(r, "all_to_all") == [10.0 * j + r for j in range(n)]
        assert field(job, r, "barrier") == "ok"
    assert values(0, "recv") == [0.5, -1.0, 2.25]
    assert values(2, "recv") == [1, 2, 3, 4, 5, 6]
    assert field(job, 2, "recv meta") == "(2, 3) flow.int32"
    assert values(1, "recv") == []
    for r in range(n):
        assert values(r, "placement.all") == [0, 1, 2]
        assert field(job, r, "node size") == "1"


def test_distributed_data_parallel_equals_full_batch_training():
    job = launch(Path(__file__).with_name("dist_ddp.py"), 2)
    assert job.rc == 0, job.stdout[-3000:] + job.stderr[-3000:]
    for r in range(2):
        assert field(job, r, "ddp_equal") == "True"
        assert field(job, r, "ddp_keys") == "['module.0.weight', 'module.0.bias']"
    # every rank started from rank 0's parameters, though each made its own
    assert field(job, 0, "ddp_start") == field(job, 1, "ddp_start")
