"""OneFlow's global-view spellings beside ``to_global``: ``local_to_global``,
``global_to_global``, ``flow.placement.all``, ``flow.env.all_device_placement`` (one process;
the multi-process forms are in ``dist_comm.py``)."""

import numpy as np
import pytest

import gflow as flow


def test_local_to_global_and_global_to_global_are_to_global_by_kind():
    p = flow.placement.all("cpu")
    assert p == flow.placement("cpu", [0]) == flow.env.all_device_placement("cpu")
    x = flow.tensor([[1.0, 2.0], [3.0, 4.0]])
    g = x.local_to_global(placement=p, sbp=flow.sbp.split(0))
    assert g.is_global and g.sbp == (flow.sbp.split(0),)
    b = g.global_to_global(sbp=flow.sbp.broadcast)
    assert b.sbp == (flow.sbp.broadcast,) and b.placement == p
    np.testing.assert_array_equal(b.numpy(), x.numpy())
    with pytest.raises(TypeError, match="global already"):
        g.local_to_global(placement=p, sbp=flow.sbp.broadcast)
    with pytest.raises(TypeError, match="local"):
        x.global_to_global(placement=p, sbp=flow.sbp.broadcast)


def test_local_to_global_keeps_the_autograd_graph():
    x = flow.tensor([1.0, 2.0, 3.0], requires_grad=True)
    g = x.local_to_global(placement=flow.placement.all("cpu"), sbp=flow.sbp.broadcast)
    (g * g).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])


def test_node_size_of_a_single_process_job():
    assert flow.env.get_node_size() == 1


def test_randperm_is_a_permutation_alike_on_any_layout():
    flow.manual_seed(5)
    a = flow.randperm(20, placement=flow.placement.all("cpu"), sbp=flow.sbp.broadcast)
    flow.manual_seed(5)
    b = flow.randperm(20, placement=flow.placement.all("cpu"), sbp=flow.sbp.split(0))
    assert a.dtype == flow.int64 and b.sbp == (flow.sbp.split(0),)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(np.sort(a.numpy()), np.arange(20))
    assert flow.randperm(4, dtype=flow.int32).dtype == flow.int32
    with pytest.raises(TypeError, match="generator"):
        flow.randperm(3, generator=object())
