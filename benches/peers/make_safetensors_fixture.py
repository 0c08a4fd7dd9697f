"""Writes tests/fixtures/python_model.safetensors with Python's safetensors, the reference file
that tests/checkpoint_safetensors.rs loads into a tensor-parallel gflow model.

Run: pip install safetensors numpy && python3 benches/peers/make_safetensors_fixture.py
"""
import os

import numpy as np
from safetensors.numpy import save_file

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "..", "..", "tests", "fixtures", "python_model.safetensors")
os.makedirs(os.path.dirname(out), exist_ok=True)
weight = (np.arange(5 * 3, dtype=np.float32).reshape(5, 3) * 0.25 - 1.0).astype(np.float32)
bias = np.array([0.5, -1.5, 2.0, 3.25, -0.125], dtype=np.float32)
save_file({"0.weight": weight, "0.bias": bias, "steps": np.array([7, 11], dtype=np.int64)}, out)
print(out)
