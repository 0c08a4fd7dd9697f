"""Convolution, pooling and batch-normalisation modules, as PyTorch's: ``Conv1d Conv2d Conv3d
MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d
AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d BatchNorm1d BatchNorm2d
BatchNorm3d`` (re-exported by ``gflow.nn``), each calling the functional form of
``conv_functional`` (gflow's operators, so gradients and global tensors work)."""

import math

from .. import _gflow
from . import Module, Parameter, functional, init
from . import conv_functional as CF

__all__ = [
    "Conv1d", "Conv2d", "Conv3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
    "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "BatchNorm1d", "BatchNorm2d",
    "BatchNorm3d",
]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _factory(device, dtype):
    return {k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None}


class _ConvNd(Module):
    """A convolution over ``_nd`` spatial dims: weight (out_channels, in_channels / groups,
    *kernel_size) and bias (out_channels), both uniform in ±1/sqrt(fan_in) as PyTorch's
    (``kaiming_uniform_(a=sqrt(5))``, from gflow's generator); ``padding_mode`` ``"zeros"``,
    or ``"reflect"`` / ``"replicate"`` / ``"circular"`` by ``functional.pad`` first."""

    _nd = 2
    _fn = None

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        nd = self._nd
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        kernel_size = CF._ntuple(kernel_size, nd, "kernel_size")
        stride = CF._ntuple(stride, nd, "stride")
        dilation = CF._ntuple(dilation, nd, "dilation")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'same', 'valid'}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = CF._ntuple(padding, nd, "padding")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {{'zeros', 'reflect', 'replicate', "
                             f"'circular'}}, but got padding_mode='{padding_mode}'")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.groups, self.padding_mode = dilation, groups, padding_mode
        if isinstance(padding, str):
            lo, hi = CF._conv_padding(padding, nd, kernel_size, stride, dilation)
        else:
            lo = hi = padding
        # F.pad's order: the last dim's (before, after) first
        self._reversed_padding_repeated_twice = [
            p for i in reversed(range(nd)) for p in (lo[i], hi[i])]
        kw = _factory(device, dtype)
        self.weight = Parameter(_gflow.empty(out_channels, in_channels // groups, *kernel_size,
                                             **kw))
        self.bias = Parameter(_gflow.empty(out_channels, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        """PyTorch's start: the weight ``kaiming_uniform_(a=sqrt(5))`` (uniform in
        ±1/sqrt(fan_in)), the bias uniform in ±1/sqrt(fan_in)."""
        if self.weight.numel() == 0:  # a zero-size kernel: nothing to draw (PyTorch warns)
            return
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_channels // self.groups * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def _conv_forward(self, input, weight, bias):
        fn = type(self)._fn
        if self.padding_mode != "zeros":
            padded = functional.pad(input, self._reversed_padding_repeated_twice,
                                    mode=self.padding_mode)
            return fn(padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return fn(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)

    def extra_repr(self):
        nd = self._nd
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * nd:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """PyTorch's ``Conv1d``: ``functional.conv1d`` of (N, C_in, L) with this module's weight
    (C_out, C_in / groups, k) and bias."""

    _nd = 1
    _fn = staticmethod(CF.conv1d)


class Conv2d(_ConvNd):
    """PyTorch's ``Conv2d``: ``functional.conv2d`` of (N, C_in, H, W) with this module's
    weight (C_out, C_in / groups, kH, kW) and bias."""

    _nd = 2
    _fn = staticmethod(CF.conv2d)


class Conv3d(_ConvNd):
    """PyTorch's ``Conv3d``: ``functional.conv3d`` of (N, C_in, D, H, W)."""

    _nd = 3
    _fn = staticmethod(CF.conv3d)


class _MaxPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding, self.dilation,
                              ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


def _pooling(base, fn):
    """PyTorch's module of ``base`` that calls ``fn``, named after it (``max_pool2d`` gives
    ``MaxPool2d``)."""
    name = "".join(part.capitalize() for part in fn.__name__.split("_"))
    return type(name, (base,), {"__doc__": f"PyTorch's ``{name}``: ``functional.{fn.__name__}``.",
                                "__module__": __name__, "_fn": staticmethod(fn)})


MaxPool1d, MaxPool2d, MaxPool3d = (
    _pooling(_MaxPoolNd, f) for f in (CF.max_pool1d, CF.max_pool2d, CF.max_pool3d))


class AvgPool1d(Module):
    """PyTorch's ``AvgPool1d``: ``functional.avg_pool1d``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__()
        self.kernel_size = CF._ntuple(kernel_size, 1, "kernel_size")
        self.stride = CF._ntuple(stride if stride is not None else kernel_size, 1, "stride")
        self.padding = CF._ntuple(padding, 1, "padding")
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input):
        return CF.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AvgPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                              self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


AvgPool2d, AvgPool3d = (_pooling(_AvgPoolNd, f) for f in (CF.avg_pool2d, CF.avg_pool3d))


class _AdaptivePoolNd(Module):
    """An adaptive pooling module: ``_fn(input, output_size, *extra)``."""

    _fn = None

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def _extra(self):
        return ()

    def forward(self, input):
        return type(self)._fn(input, self.output_size, *self._extra())

    def extra_repr(self):
        return f"output_size={self.output_size}"


class _AdaptiveAvgPoolNd(_AdaptivePoolNd):
    pass


AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d = (
    _pooling(_AdaptiveAvgPoolNd, f)
    for f in (CF.adaptive_avg_pool1d, CF.adaptive_avg_pool2d, CF.adaptive_avg_pool3d))


class _AdaptiveMaxPoolNd(_AdaptivePoolNd):
    def __init__(self, output_size, return_indices=False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def _extra(self):
        return (self.return_indices,)


AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d = (
    _pooling(_AdaptiveMaxPoolNd, f)
    for f in (CF.adaptive_max_pool1d, CF.adaptive_max_pool2d, CF.adaptive_max_pool3d))


class _BatchNorm(Module):
    """PyTorch's batch normalisation over every dim but the channels (dim 1): ``weight``
    (ones) and ``bias`` (zeros) with ``affine``; buffers ``running_mean`` (zeros),
    ``running_var`` (ones) and ``num_batches_tracked`` (int64) with ``track_running_stats``. In
    training the batch's statistics normalise (biased variance) and update the running ones
    (``momentum``, or the cumulative average when ``momentum=None``; the variance unbiased); in
    eval the running ones normalise (the batch's when not tracked). On a global input split by
    batch the statistics are the whole batch's (every rank's samples), as ``SyncBatchNorm``."""

    _dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = _factory(device, dtype)
        if affine:
            self.weight = Parameter(_gflow.ones(num_features, **kw))
            self.bias = Parameter(_gflow.zeros(num_features, **kw))
        else:
            self.weight = self.bias = None
        if track_running_stats:
            self.register_buffer("running_mean", _gflow.zeros(num_features, **kw))
            self.register_buffer("running_var", _gflow.ones(num_features, **kw))
            self.register_buffer("num_batches_tracked", _gflow.tensor(
                0, dtype=_gflow.int64, **({"device": device} if device is not None else {})))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        """Running mean 0, variance 1 and no batches tracked, in place."""
        if self.track_running_stats:
            with _gflow.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        """Running statistics reset; weight ones, bias zeros."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_dim(self, input):
        if input.dim() not in self._dims:
            want = " or ".join(f"{d}D" for d in self._dims)
            raise ValueError(f"expected {want} input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with _gflow.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked.item())
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        return CF.batch_norm(input, self.running_mean if keep else None,
                             self.running_var if keep else None, self.weight, self.bias,
                             batch_stats, factor, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """PyTorch's ``BatchNorm1d`` of (N, C) or (N, C, L)."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """PyTorch's ``BatchNorm2d`` of (N, C, H, W)."""

    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """PyTorch's ``BatchNorm3d`` of (N, C, D, H, W)."""

    _dims = (5,)
