"""Training from Python gives the Rust tests' losses: tests/training.rs's MLP, checked against a
NumPy float64 reference of the same model and optimizer, locally and data parallel."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import launch
from train_mlp import init

SCRIPT = Path(__file__).with_name("train_mlp.py")


def reference(adam):
    """The 20 losses in NumPy float64 (PyTorch's SGD-momentum and Adam rules)."""
    i = {k: v.astype(np.float64) for k, v in init().items()}
    ps = [i["w1"], i["b1"], i["w2"], i["b2"]]
    state = [dict(m=np.zeros_like(p), v=np.zeros_like(p), buf=None) for p in ps]
    losses = []
    for step in range(1, 21):
        w1, b1, w2, b2 = ps
        h = i["x"] @ w1.T + b1
        a = np.maximum(h, 0)
        out = a @ w2.T + b2
        d = out - i["y"]
        losses.append((d ** 2).mean())
        g_out = 2 * d / d.size
        g_w2, g_b2 = g_out.T @ a, g_out.sum(0)
        g_h = (g_out @ w2) * (h > 0)
        g_w1, g_b1 = g_h.T @ i["x"], g_h.sum(0)
        for p, g, s in zip(ps, (g_w1, g_b1, g_w2, g_b2), state):
            if adam:
                s["m"] = 0.9 * s["m"] + 0.1 * g
                s["v"] = 0.999 * s["v"] + 0.001 * g * g
                mh, vh = s["m"] / (1 - 0.9 ** step), s["v"] / (1 - 0.999 ** step)
                p -= 0.01 * mh / (np.sqrt(vh) + 1e-8)
            else:
                s["buf"] = g.copy() if s["buf"] is None else 0.9 * s["buf"] + g
                p -= 0.05 * s["buf"]
    return np.array(losses)


def losses_of(lines):
    return np.array([float(l) for l in lines])


@pytest.mark.parametrize("adam", [False, True])
def test_local_training_matches_numpy(adam):
    out = subprocess.run([sys.executable, str(SCRIPT)] + (["adam"] if adam else []),
                         capture_output=True, text=True, check=True)
    got = losses_of(out.stdout.split())
    want = reference(adam)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert want[-1] < 0.8 * want[0]


@pytest.mark.parametrize("adam", [False, True])
def test_data_parallel_training_matches_numpy(adam):
    job = launch(SCRIPT, 2, *(["adam"] if adam else []))
    assert job.rc == 0, job.stderr
    want = reference(adam)
    for r in range(2):
        np.testing.assert_allclose(losses_of(job.out[r]), want, rtol=2e-5, atol=1e-6)
