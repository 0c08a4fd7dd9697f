"""The seeds' examples (python/examples, OneFlow's docs with only ``oneflow`` -> ``gflow`` and
``cuda`` -> ``cpu``) run under the launcher on 2 and 4 processes and print what the seeds say."""

import numpy as np
import pytest

from conftest import EXAMPLES, launch


def numbers(text):
    """Every float in a printed tensor, in order."""
    import re
    return [float(x) for x in re.findall(r"-?\d+\.\d+(?:e[-+]\d+)?", text)]


@pytest.mark.parametrize("n", [2, 4])
def test_randn_global_local_parts_concatenate_to_global(n):
    job = launch(EXAMPLES / "01_randn_global.py", n)
    assert job.rc == 0, job.stderr
    glob = [np.array(numbers(job.text(r).split("Global data")[1])).reshape(4, 5) for r in (0, 1)]
    local = [np.array(numbers(job.text(r).split("Global data")[0])).reshape(2, 5) for r in (0, 1)]
    np.testing.assert_array_equal(glob[0], glob[1])
    np.testing.assert_array_equal(np.concatenate(local), glob[0])
    for r in range(2, n):  # outside the placement: empty, as OneFlow
        assert "[]" in job.text(r)


@pytest.mark.parametrize("n", [2, 4])
def test_local_to_global_prints_shape_and_kinds(n):
    job = launch(EXAMPLES / "02_local_to_global.py", n)
    assert job.rc == 0, job.stderr
    for r in range(n):
        assert job.out[r] == ["True", "False", "flow.Size([4, 5])", "True", "True"]


@pytest.mark.parametrize("n", [2, 4])
def test_global_to_local_prints_each_ranks_half(n):
    job = launch(EXAMPLES / "03_global_to_local.py", n)
    assert job.rc == 0, job.stderr
    halves = [np.array(numbers(job.text(r))).reshape(2, 5) for r in (0, 1)]
    assert not np.array_equal(halves[0], halves[1])
    for r in (0, 1):
        assert job.text(r).startswith("tensor([[") and "dtype=flow.float32)" in job.text(r)


@pytest.mark.parametrize("n", [2, 4])
def test_split_to_broadcast_gathers_the_locals(n):
    job = launch(EXAMPLES / "04_split_to_broadcast.py", n)
    assert job.rc == 0, job.stderr
    parts, full = [], None
    for r in (0, 1):
        lines = job.out[r]
        assert lines[0] == "flow.Size([4, 5])"
        text = job.text(r)
        second = text.index("flow.Size([4, 5])", 1)
        parts.append(np.array(numbers(text[:second])).reshape(2, 5))
        f = np.array(numbers(text[second:])).reshape(4, 5)
        if full is not None:
            np.testing.assert_array_equal(f, full)
        full = f
    np.testing.assert_array_equal(np.concatenate(parts), full)


@pytest.mark.parametrize("n", [2, 4])
def test_matmul_split_times_broadcast_is_split(n):
    job = launch(EXAMPLES / "05_matmul_global.py", n)
    assert job.rc == 0, job.stderr
    for r in range(n):
        assert job.out[r][:3] == ["True", "flow.Size([4, 8])", "(flow.sbp.split(dim=0),)"]
    for r in (0, 1):
        assert np.array(numbers(job.text(r).split("(flow.sbp.split(dim=0),)")[1])).size == 16


def test_boxing_seed_as_printed_is_a_placement_mismatch():
    # The seed drops Y0.to_global's result, so matmul meets two placements: a typed error.
    job = launch(EXAMPLES / "06_boxing_two_placements.py", 4)
    assert job.rc != 0
    assert "gflow.PlacementError: matmul: inputs are on different placements" in job.stdout + job.stderr


def test_boxing_seed_mended_moves_between_placements():
    job = launch(EXAMPLES / "06b_boxing_two_placements_fixed.py", 4)
    assert job.rc == 0, job.stderr
    for r in range(4):
        assert job.out[r] == [
            'flow.Size([4, 6]) (flow.sbp.split(dim=1),) flow.placement(type="cpu", ranks=[2, 3])'
        ]


@pytest.mark.parametrize("n", [2, 4])
def test_global_tensor_session(n):
    job = launch(EXAMPLES / "07_global_tensor_interactive.py", n)
    assert job.rc == 0, job.stderr
    for r in range(n):
        lines = [l for l in job.out[r] if l.startswith(("flow.Size", "(flow.sbp"))]
        assert lines == ["flow.Size([4, 5])", "flow.Size([4, 5])",
                         "(flow.sbp.split(dim=0),)", "flow.Size([4, 8])",
                         "(flow.sbp.split(dim=1),)", "flow.Size([4, 8])"]


def test_placement_dict_form_names_node_zero():
    job = launch(EXAMPLES / "08_consistent_view_placement.py", 4)
    assert job.rc == 0, job.stderr
    for r in range(4):
        assert job.out[r] == ['flow.placement(type="cpu", ranks=[0, 1, 2, 3])', "flow.Size([2, 2])"]


def test_2d_sbp_broadcast_split():
    job = launch(EXAMPLES / "09_2d_sbp.py", 4)
    assert job.rc == 0, job.stderr
    vals = {}
    for r in range(4):
        head = job.out[r][0]
        assert head == f"cpu:{r}, flow.Size([1, 2, 8]), "
        vals[r] = numbers(job.text(r))
    # (broadcast, split(0)) over [[0, 1], [2, 3]]: ranks 0 and 2 hold the same part, 1 and 3 the other.
    assert vals[0] == vals[2] and vals[1] == vals[3] and vals[0] != vals[1]
