"""Parameter initialisation in place, as ``torch.nn.init``: ``nn.init.normal_(w, std=0.02)``.

Each function writes its tensor under ``no_grad`` (a parameter keeps its placement and SBP; a
global one draws placement-invariant values, each rank only its own part) and returns it.
"""

import math

from .. import _gflow

__all__ = [
    "calculate_gain", "uniform_", "normal_", "constant_", "ones_", "zeros_", "xavier_uniform_",
    "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
]


def uniform_(tensor, a=0.0, b=1.0):
    """Values drawn uniformly from [a, b)."""
    with _gflow.no_grad():
        return tensor.uniform_(a, b)


def normal_(tensor, mean=0.0, std=1.0):
    """Values drawn from N(mean, std^2)."""
    with _gflow.no_grad():
        return tensor.normal_(mean, std)


def constant_(tensor, val):
    """Every value ``val``."""
    with _gflow.no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    """Every value 1."""
    return constant_(tensor, 1.0)


def zeros_(tensor):
    """Every value 0."""
    return constant_(tensor, 0.0)


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (PyTorch's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fans(tensor):
    shape = list(tensor.shape)
    if len(shape) < 2:
        raise ValueError(
            f"fan in and fan out need a tensor of 2 or more dimensions, got shape {shape}")
    field = math.prod(shape[2:])
    return shape[1] * field, shape[0] * field


def _fan(tensor, mode):
    fan_in, fan_out = _fans(tensor)
    if mode == "fan_in":
        return fan_in
    if mode == "fan_out":
        return fan_out
    raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")


def xavier_uniform_(tensor, gain=1.0):
    """Glorot's uniform: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor, gain=1.0):
    """Glorot's normal: N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    """He's uniform: U(-b, b) with ``b = gain * sqrt(3 / fan)``."""
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / _fan(tensor, mode))
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    """He's normal: N(0, std^2) with ``std = gain / sqrt(fan)``."""
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode)))
