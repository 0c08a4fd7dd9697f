"""The Python API in one process (a world of one rank), each against NumPy or a hand result."""

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn

P = flow.placement("cpu", [0])


def test_import_writes_nothing_to_stdout():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import gflow"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == ""


def test_shape_sbp_placement_and_kinds():
    x = flow.randn(4, 5, placement=P, sbp=flow.sbp.split(dim=0))
    assert repr(x.shape) == "flow.Size([4, 5])" and x.shape == (4, 5)
    assert x.sbp == (flow.sbp.split(0),) and x.sbp[0] != flow.sbp.broadcast
    assert repr(x.sbp) == "(flow.sbp.split(dim=0),)"
    assert x.placement == P and x.is_global and not x.is_local
    l = x.to_local()
    assert l.is_local and l.sbp is None and l.placement is None
    assert flow.sbp.broadcast() == flow.sbp.broadcast
    assert str(l.device) == "cpu:0" and l.dtype == flow.float32


def test_placement_forms():
    assert flow.placement("cpu", {0: range(1)}) == flow.placement("cpu", [0])
    assert flow.placement("cpu", [[0]]).hierarchy == [1, 1]
    assert flow.placement(type="cpu", ranks=[0]).type == "cpu"
    assert repr(flow.placement("cpu", [[0]])) == 'flow.placement(type="cpu", ranks=[[0]])'


@pytest.mark.parametrize("bad, exc, text", [
    (lambda: flow.placement("cpu", [0, 0]), flow.PlacementError, "rank 0 appears more than once"),
    (lambda: flow.placement("tpu", [0]), flow.PlacementError, 'unknown device type "tpu"'),
    (lambda: flow.placement("cpu", []), flow.PlacementError, "placement has no ranks"),
    (lambda: flow.placement("cpu", [[0, 1], [2]]), flow.PlacementError, "ragged rank array"),
    (lambda: flow.randn(2, placement=flow.placement("cpu", [0, 1])), flow.PlacementError,
     "placement names rank 1 but the world has 1 ranks"),
    (lambda: flow.randn(2, 3, placement=P, sbp=flow.sbp.split(2)), flow.SbpError, "split(dim=2)"),
    (lambda: flow.randn(2, 3, placement=P, sbp=(flow.sbp.split(0), flow.sbp.broadcast)),
     flow.SbpError, "has 2 entries but the placement has 1 axes"),
    (lambda: flow.randn(2, 3) @ flow.randn(2, 3), flow.ShapeError, "inner dimensions differ"),
    (lambda: flow.randn(2, 3) + flow.randn(4, 3), flow.ShapeError, "add"),
    (lambda: flow.randn(1).backward(), flow.InvalidArgumentError, "does not require grad"),
])
def test_errors_are_typed_with_gflows_message(bad, exc, text):
    with pytest.raises(exc) as e:
        bad()
    assert text in str(e.value)
    assert isinstance(e.value, flow.Error)


def test_wrong_argument_types_are_python_errors_not_crashes():
    with pytest.raises(TypeError):
        flow.randn(2, placement=P, sbp="split")
    with pytest.raises(TypeError):
        flow.randn(2) + "x"


def test_operators_match_numpy():
    a, b = np.random.rand(3, 4).astype(np.float32), np.random.rand(4, 2).astype(np.float32)
    x, w = flow.tensor(a), flow.tensor(b)
    np.testing.assert_allclose((x @ w).numpy(), a @ b, rtol=1e-5)
    np.testing.assert_allclose(flow.matmul(x, w).numpy(), a @ b, rtol=1e-5)
    np.testing.assert_allclose((x + 1).numpy(), a + 1, rtol=1e-6)
    np.testing.assert_allclose((2 - x).numpy(), 2 - a, rtol=1e-6)
    np.testing.assert_allclose((1 / (x + 1)).numpy(), 1 / (a + 1), rtol=1e-6)
    np.testing.assert_allclose((x * x - x / 2).numpy(), a * a - a / 2, rtol=1e-6)
    np.testing.assert_allclose(x.sum(dim=1).numpy(), a.sum(1), rtol=1e-5)
    np.testing.assert_allclose(x.mean().numpy(), a.mean(), rtol=1e-5)
    np.testing.assert_allclose(x.softmax(-1).numpy(), np.exp(a) / np.exp(a).sum(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(x.reshape(-1, 2).numpy(), a.reshape(-1, 2))
    np.testing.assert_allclose(x.T.numpy(), a.T)
    np.testing.assert_allclose(flow.cat([x, x], dim=0).numpy(), np.concatenate([a, a]))
    assert x.unsqueeze(0).shape == (1, 3, 4) and x.flatten().shape == (12,)


def test_tensor_dtypes_and_constructors():
    assert flow.tensor(np.arange(6).reshape(2, 3)).dtype == flow.int64
    assert flow.tensor(np.zeros(2)).dtype == flow.float64
    assert flow.tensor([1.0, 2.0]).dtype == flow.float32
    assert flow.tensor([1, 2]).dtype == flow.int64
    assert flow.Tensor([[1, 2], [3, 4]]).dtype == flow.float32
    assert flow.Tensor(2, 3).shape == (2, 3) and flow.ones(2, 3).numpy().sum() == 6
    assert flow.zeros((2, 3)).shape == (2, 3)
    assert str(flow.tensor([1.5, 2.0])) == "tensor([1.5000, 2.0000], dtype=flow.float32)"


def test_global_tensor_print_shows_placement_and_sbp():
    x = flow.ones(2, placement=P, sbp=flow.sbp.broadcast)
    assert repr(x) == ('tensor([1., 1.], placement=flow.placement(type="cpu", ranks=[0]), '
                       'sbp=(flow.sbp.broadcast,), dtype=flow.float32)')


def test_numpy_round_trip_values_and_the_array_out_views_gflows_buffer():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = flow.from_numpy(a)
    b = t.numpy()
    np.testing.assert_array_equal(a, b)
    # numpy() views gflow's own buffer (no copy); the array's base keeps that buffer alive.
    assert type(b.base).__name__ == "_Storage" and np.shares_memory(b, t.numpy())
    # In: gflow's storage is its own (one copy), so the input array stays independent.
    assert not np.shares_memory(a, b)


def test_autograd_matches_hand_gradients():
    a = np.random.rand(3, 4).astype(np.float32)
    x = flow.tensor(a, requires_grad=True)
    assert x.is_leaf and x.requires_grad
    y = (x * x).sum()
    assert not y.is_leaf and y.requires_grad
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * a, rtol=1e-6)
    z = flow.tensor(a)
    z.requires_grad = True
    (z * 3).backward(gradient=flow.ones(3, 4))
    np.testing.assert_allclose(z.grad.numpy(), np.full((3, 4), 3.0))
    with flow.no_grad():
        w = z * 2
    assert not w.requires_grad


def test_local_tensor_made_global_stays_on_the_graph():
    x = flow.randn(2, 3, requires_grad=True)
    g = x.to_global(placement=P, sbp=flow.sbp.split(0))
    g.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((2, 3)))


def test_modules_call_and_to_global_keep_optimizer_handles():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    model.to_global(placement=P, sbp=flow.sbp.broadcast)
    assert all(p.is_global for p in model.parameters())
    x = flow.randn(5, 8, placement=P, sbp=flow.sbp.split(0))
    before = model[0].weight.numpy().copy()
    loss = model(x).sum()
    loss.backward()
    grad = model[0].weight.grad.numpy()
    opt.step()
    np.testing.assert_allclose(model[0].weight.numpy(), before - 0.1 * grad, rtol=1e-5, atol=1e-6)


def test_env():
    assert flow.env.get_rank() == 0 and flow.env.get_world_size() == 1


def test_backward_retain_graph_runs_the_graph_again():
    x = flow.tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32), requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    y.backward()  # the kept graph: 2x accumulates again
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0, 12.0])
    with pytest.raises(RuntimeError):
        y.backward()  # freed by the pass without retain_graph
    with pytest.raises(Exception):
        (x * x).sum().backward(create_graph=True)
