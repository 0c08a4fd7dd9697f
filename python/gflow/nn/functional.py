"""Functional forms: ``flow.nn.functional.relu(x)``, ``linear``, ``mse_loss``, ``cross_entropy``,
``softmax``, ``scaled_dot_product_attention``, ... (gflow's own operators, so results match
the Rust API's)."""

from .. import _gflow

linear = _gflow.linear
mse_loss = _gflow.mse_loss
cross_entropy = _gflow.cross_entropy
scaled_dot_product_attention = _gflow.scaled_dot_product_attention


def embedding(input, weight):
    """Rows of ``weight`` picked by the int64 ``input``."""
    return _gflow.embedding(input, weight)


def relu(x):
    return x.relu()


def gelu(x, approximate="none"):
    return x.gelu(approximate=approximate)


def silu(x):
    return x.silu()


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def softmax(x, dim=-1):
    return x.softmax(dim)


def log_softmax(x, dim=-1):
    return x.log_softmax(dim)


__all__ = [
    "linear", "mse_loss", "cross_entropy", "embedding", "relu", "gelu", "silu", "sigmoid", "tanh",
    "softmax", "log_softmax", "scaled_dot_product_attention",
]
