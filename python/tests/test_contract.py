"""The Python section of the contract (shared/API.md), promise by promise, in one process:
autograd (retain_grad, backward(gradient=)), to_global keeping the placement, ranks as a dict of
ranges, flow.tensor keeping dtypes, print formats, flow.save/flow.load of models and optimizers."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gflow as flow
import gflow.nn as nn

P = flow.placement("cpu", [0])


def test_retain_grad_keeps_a_non_leaf_gradient():
    a = np.array([[1.0, -2.0], [3.0, 0.5]], dtype=np.float32)
    x = flow.tensor(a, requires_grad=True)
    y = x * x
    y.retain_grad()
    assert not y.is_leaf
    z = (y * 3).sum()
    z.backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.full((2, 2), 3.0))
    np.testing.assert_array_equal(x.grad.numpy(), 6 * a)
    np.testing.assert_array_equal(y.numpy(), a * a)  # the value is unchanged
    w = x * 2
    assert w.grad is None  # not retained: None, as PyTorch
    with pytest.raises(flow.InvalidArgumentError):
        flow.ones(2).retain_grad()


def test_retain_grad_on_a_global_tensor():
    x = flow.randn(4, 3, placement=P, sbp=flow.sbp.split(0), requires_grad=True)
    y = x.relu()
    y.retain_grad()
    (y * y).sum().backward()
    assert y.grad.sbp == (flow.sbp.split(0),) and y.grad.placement == P
    np.testing.assert_allclose(y.grad.numpy(), 2 * np.maximum(x.numpy(), 0), rtol=1e-6)


def test_backward_with_a_gradient_seeds_the_chain():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = np.array([[1, 0, 2], [0.5, 1, -1]], dtype=np.float32)
    x = flow.tensor(a, requires_grad=True)
    y = x * x
    y.backward(gradient=flow.tensor(g))
    np.testing.assert_array_equal(x.grad.numpy(), 2 * a * g)
    with pytest.raises(flow.ShapeError):
        (x * 2).backward(gradient=flow.ones(3))


def test_to_global_with_sbp_only_keeps_the_placement():
    p = flow.placement("cpu", {0: range(1)})
    assert p == P
    x = flow.randn(4, 6, placement=p, sbp=flow.sbp.split(0))
    y = x.to_global(sbp=flow.sbp.split(1))
    assert y.placement == p and y.sbp == (flow.sbp.split(1),)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    z = x.to_global(p, flow.sbp.broadcast)  # positional
    assert z.sbp == (flow.sbp.broadcast,)


def test_tensor_of_an_ndarray_keeps_int64_and_values():
    a = np.array([[2 ** 40 + 1, -3]], dtype=np.int64)
    t = flow.tensor(a)
    assert t.dtype == flow.int64
    b = t.numpy()
    assert b.dtype == np.int64
    np.testing.assert_array_equal(b, a)


def test_print_formats():
    assert str(flow.tensor([[1.0, 2.5], [3.0, 4.0]])) == (
        "tensor([[1.0000, 2.5000],\n        [3.0000, 4.0000]], dtype=flow.float32)")
    assert str(flow.tensor([1, 2])) == "tensor([1, 2], dtype=flow.int64)"
    assert str(flow.zeros(4, 5).shape) == "flow.Size([4, 5])"
    x = flow.zeros(2, placement=P, sbp=flow.sbp.split(0))
    assert str(x) == ('tensor([0., 0.], placement=flow.placement(type="cpu", ranks=[0]), '
                      'sbp=(flow.sbp.split(dim=0),), dtype=flow.float32)')


def test_numpy_out_views_a_local_tensor_and_in_is_copied():
    # As PyTorch: numpy() of a local CPU tensor shares its memory, so writes reach the tensor;
    # the input array is copied once into gflow's own storage.
    src = np.arange(4, dtype=np.float32)
    t = flow.tensor(src)
    a = t.numpy()
    a[0] = 100
    assert t.numpy()[0] == 100 and src[0] == 0
    # A global tensor's numpy() is its gathered value: a fresh array each call.
    g = t.to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.broadcast)
    b = g.numpy()
    b[1] = -1
    assert g.numpy()[1] == 1


def _mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_save_and_load_a_model_and_an_optimizer(tmp_path):
    flow.manual_seed(1)
    model = _mlp()
    opt = flow.optim.Adam(model.parameters(), lr=0.01)
    x, y = flow.randn(5, 4), flow.randn(5, 2)
    for _ in range(3):
        loss = nn.MSELoss()(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    flow.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3, "loss": 0.25},
              tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "index.json").exists()
    ck = flow.load(tmp_path / "ckpt")
    assert ck["epoch"] == 3 and ck["loss"] == 0.25
    assert sorted(ck["model"]) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    np.testing.assert_array_equal(ck["model"]["0.weight"].numpy(), model[0].weight.numpy())

    flow.manual_seed(2)
    fresh = _mlp()
    fopt = flow.optim.Adam(fresh.parameters(), lr=0.5)
    fresh.load_state_dict(ck["model"])
    fopt.load_state_dict(ck["optim"])
    assert fopt.param_groups[0]["lr"] == 0.01
    # One more step on both: identical when the moments and step counts came back too.
    for m, o in ((model, opt), (fresh, fopt)):
        nn.MSELoss()(m(x), y).backward()
        o.step()
    for p, q in zip(model.parameters(), fresh.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_load_into_a_global_model_and_bad_input(tmp_path):
    model = _mlp()
    flow.save(model.state_dict(), tmp_path / "m")
    g = _mlp().to_global(placement=P, sbp=flow.sbp.broadcast)
    g.load_state_dict(flow.load(tmp_path / "m"))
    assert all(p.is_global for p in g.parameters())
    for p, q in zip(model.parameters(), g.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    with pytest.raises(RuntimeError, match="Missing key"):
        nn.Linear(4, 8).load_state_dict(flow.load(tmp_path / "m"))
    with pytest.raises(flow.CheckpointError) as e:
        flow.load(tmp_path / "nowhere")
    assert "nowhere" in str(e.value)
    with pytest.raises(TypeError):
        flow.save([1, 2], tmp_path / "x")


def test_import_prints_nothing_even_in_a_launched_job(tmp_path):
    script = tmp_path / "imp.py"
    script.write_text("import gflow\n")
    out = subprocess.run([sys.executable, "-m", "gflow.distributed.launch", "--nproc_per_node",
                          "2", str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


def test_the_launcher_does_not_join_the_job_its_environment_names(tmp_path):
    # As under srun or mpirun, or with a job's variables exported: the launcher process itself
    # must start its children, not wait to rendezvous as rank 1 of a job that never forms.
    script = tmp_path / "world.py"
    script.write_text("import gflow as flow\nprint(flow.env.get_world_size())\n")
    env = dict(os.environ, WORLD_SIZE="2", RANK="1", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT="1", GFLOW_TIMEOUT_SECS="5")
    out = subprocess.run([sys.executable, "-m", "gflow.distributed.launch", "--nproc_per_node",
                          "2", str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["[rank 0] 2", "[rank 1] 2"]
