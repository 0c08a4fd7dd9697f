"""Neural-network modules, as OneFlow's and PyTorch's: ``import gflow.nn as nn``.

A module holds parameters (``nn.Parameter``, tensors that require gradients) and sub-modules;
calling it runs ``forward``. ``module.to_global(placement=, sbp=)`` converts every parameter in
place (optimizers built before follow it), which is how a model is spread over ranks.
"""

from collections import OrderedDict

from .. import _gflow
from .._gflow import Tensor
from . import functional, init, utils

__all__ = [
    "Module", "Parameter", "Linear", "ReLU", "SiLU", "GELU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax",
    "Identity", "Dropout", "Flatten", "Sequential", "ModuleList", "ModuleDict", "Embedding", "MSELoss", "CrossEntropyLoss",
    "LayerNorm", "RMSNorm", "functional", "init", "parallel", "utils",
]


class Parameter(Tensor):
    """A tensor that is a module's parameter: it requires a gradient unless told otherwise."""

    def __new__(cls, data, requires_grad=True):
        return Tensor.__new__(cls, data, requires_grad=requires_grad)

    def __init__(self, data, requires_grad=True):
        pass


class Module:
    """Base class of modules: assign parameters and sub-modules as attributes, write
    ``forward``."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("call super().__init__() before assigning attributes of a Module")
        if name in self._buffers and (value is None or isinstance(value, Tensor)) \
                and not isinstance(value, Parameter):
            # assigning a registered buffer replaces it, as PyTorch
            self._buffers[name] = value
            object.__setattr__(self, name, value)
            return
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor that is part of the module's state but not a parameter (a causal mask,
        running statistics): ``self.name``, in ``buffers()``, converted by ``to_global``, and in
        ``state_dict`` unless ``persistent=False``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("call super().__init__() before register_buffer")
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"register_buffer: a buffer name is a non-empty str without '.', got "
                           f"{name!r}")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"register_buffer: attribute {name!r} already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a tensor or None, got "
                            f"{type(tensor).__name__}")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)
        object.__setattr__(self, name, tensor)

    def named_buffers(self, prefix="", recurse=True):
        """``(dotted name, buffer)`` pairs of this module and (``recurse``) its sub-modules."""
        modules = self.named_modules(prefix.rstrip(".")) if recurse else [(prefix.rstrip("."), self)]
        for mod_name, m in modules:
            for name, b in m._buffers.items():
                if b is not None:
                    yield (mod_name + "." if mod_name else "") + name, b

    def buffers(self, recurse=True):
        """The buffers of this module and (``recurse``) its sub-modules."""
        return [b for _, b in self.named_buffers(recurse=recurse)]

    def _state_buffers(self):
        """``(dotted name, module, buffer name)`` of every persistent buffer."""
        for mod_name, m in self.named_modules():
            for name, b in m._buffers.items():
                if b is not None and name not in m._non_persistent:
                    yield (mod_name + "." if mod_name else "") + name, m, name

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """``(dotted name, parameter)`` pairs: ``"0.weight"`` in a Sequential. A parameter
        shared by two modules (tied weights) comes once, under its first name, unless
        ``remove_duplicate=False`` (as PyTorch's)."""
        seen = set()
        modules = self.named_modules(prefix.rstrip(".")) if recurse else [(prefix.rstrip("."), self)]
        for mod_name, m in modules:
            for name, p in m._parameters.items():
                if p is None or (remove_duplicate and id(p) in seen):
                    continue
                seen.add(id(p))
                yield (mod_name + "." if mod_name else "") + name, p

    def parameters(self, recurse=True):
        """The parameters of this module and its sub-modules, in order (each once)."""
        return [p for _, p in self.named_parameters(recurse=recurse)]

    def named_modules(self, prefix="", memo=None):
        """``(dotted name, module)`` for this module (name ``prefix``) and every sub-module,
        depth first, each once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(prefix + ("." if prefix else "") + name, memo)

    def modules(self):
        """This module and every sub-module, depth first, each once."""
        return [m for _, m in self.named_modules()]

    def named_children(self):
        """``(name, module)`` of the direct sub-modules."""
        return list(self._modules.items())

    def children(self):
        """The direct sub-modules."""
        return list(self._modules.values())

    def apply(self, fn):
        """Calls ``fn`` on every sub-module (children first), then on this module, as PyTorch's
        ``Module.apply`` (weight initialisation: ``model.apply(init_weights)``); returns it."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def state_dict(self):
        """Parameter name to tensor (detached handles on the parameters' storage); a tied
        parameter under each of its names, as PyTorch's."""
        params = self.named_parameters(remove_duplicate=False)
        out = OrderedDict((n, p.detach()) for n, p in params)
        for name, m, key in self._state_buffers():
            out[name] = m._buffers[key].detach()
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Writes ``state_dict``'s tensors (any layout: ``flow.load``'s local ones, another
        placement's) into the parameters of the same names in place, each parameter keeping its
        placement and SBP. ``strict``: the names must match exactly."""
        from ..serialization import assign

        own = OrderedDict(self.named_parameters(remove_duplicate=False))
        own.update((name, m._buffers[key]) for name, m, key in self._state_buffers())
        if strict:
            missing = [n for n in own if n not in state_dict]
            unexpected = [n for n in state_dict if n not in own]
            if missing or unexpected:
                raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys "
                               f"{unexpected}")
        for name, p in own.items():
            if name in state_dict:
                assign(p, state_dict[name])
        return self

    def _convert(self, f, buffers=True):
        """Every parameter's value replaced by ``f(parameter)`` in place (handles held
        elsewhere, optimizers', follow) and, with ``buffers``, every buffer by ``f(buffer)``;
        returns the module."""
        with _gflow.no_grad():
            for p in self.parameters():
                p.data = f(p)
            for m in self.modules() if buffers else ():
                for name, b in list(m._buffers.items()):
                    if b is not None:
                        setattr(m, name, f(b))
        return self

    def to_global(self, placement=None, sbp=None):
        """Converts every parameter (in place) and buffer to ``placement`` and ``sbp``; returns
        the module."""
        return self._convert(lambda t: t.to_global(placement=placement, sbp=sbp))

    def to_local(self):
        """Every parameter and buffer back to this rank's component; returns the module."""
        return self._convert(lambda t: t.to_local() if t.is_global else t)

    def train(self, mode=True):
        for _, m in self.named_modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        """Clears every parameter's gradient (zeros it in place when ``set_to_none=False``)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.zero_()

    def requires_grad_(self, requires_grad=True):
        """Sets ``requires_grad`` of every parameter (freezing a model); returns it."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def to(self, *args, **kwargs):
        """``model.to(device)``, ``model.to(dtype)`` or both, as PyTorch's: every parameter
        (in place) and buffer moved to the device, and the floating ones cast to the dtype;
        returns the module. Global parameters stay on their placement (a device names where
        local tensors live)."""
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        if kwargs:
            raise TypeError(f"Module.to: unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, _gflow.dtype):
                dtype = a
            elif isinstance(a, Tensor):
                dtype = a.dtype if a.is_floating_point() else dtype
            else:
                device = a
        if device is None and dtype is None:
            return self

        def moved(t):
            if device is not None and not t.is_global:
                t = t.to(device)
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            return t

        return self._convert(moved)

    def cpu(self):
        """``self.to("cpu")``."""
        return self.to("cpu")

    def float(self):
        """Floating parameters and buffers as float32."""
        return self.to(_gflow.float32)

    def double(self):
        """Floating parameters and buffers as float64."""
        return self.to(_gflow.float64)

    def half(self):
        """Floating parameters and buffers as float16."""
        return self.to(_gflow.float16)

    def bfloat16(self):
        """Floating parameters and buffers as bfloat16."""
        return self.to(_gflow.bfloat16)

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ("\n" + "\n".join(lines) + "\n)" if lines else ")")


class Linear(Module):
    """``y = x @ weight.T + bias``; weight (out, in) and bias (out) start as PyTorch's do
    (uniform in ±1/sqrt(in), from gflow's generator: ``flow.manual_seed`` makes them
    reproducible)."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        w, b = _gflow.linear_init(in_features, out_features, bias)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(w)
        self.bias = Parameter(b) if b is not None else None

    def forward(self, x):
        return _gflow.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _activation(name, method, doc):
    def forward(self, x):
        return getattr(x, method)()

    return type(name, (Module,), {"forward": forward, "__doc__": doc})


ReLU = _activation("ReLU", "relu", "``max(x, 0)``.")
SiLU = _activation("SiLU", "silu", "``x * sigmoid(x)``.")
Sigmoid = _activation("Sigmoid", "sigmoid", "Logistic sigmoid.")
Tanh = _activation("Tanh", "tanh", "Hyperbolic tangent.")


class GELU(Module):
    """GELU: exact (erf) by default, ``approximate="tanh"`` for the tanh form."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return x.gelu(approximate=self.approximate)


class Identity(Module):
    """Returns its input."""

    def forward(self, x):
        return x


class Dropout(Module):
    """PyTorch's ``Dropout``: in training, each element zeroed with probability ``p`` and the
    others scaled by ``1 / (1 - p)`` (gflow's random generator); in eval mode, or with
    ``p == 0``, the input itself."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x):
        return functional.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class Softmax(Module):
    """Softmax over ``dim``."""

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.softmax(self.dim)


class LogSoftmax(Softmax):
    """Log-softmax over ``dim``."""

    def forward(self, x):
        return x.log_softmax(self.dim)


class Flatten(Module):
    """Dims ``start_dim..=end_dim`` merged."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Sequential(Module):
    """Modules applied in order; parameters named ``"0.weight"``, ``"2.bias"``, ..."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            modules = modules[0].items()
        else:
            modules = ((str(i), m) for i, m in enumerate(modules))
        for name, m in modules:
            setattr(self, name, m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleList(Module):
    """A list of sub-modules (registered, so their parameters are the list's)."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m):
        setattr(self, str(len(self._modules)), m)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    """An ordered dict of sub-modules (registered, so their parameters are the dict's):
    ``nn.ModuleDict(dict(wte=..., h=nn.ModuleList(...)))``, attribute or key access."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for name, m in items:
            self[name] = m

    def __setitem__(self, name, m):
        if not isinstance(m, Module):
            raise TypeError(f"ModuleDict values are modules, got {type(m).__name__} for {name!r}")
        setattr(self, name, m)

    def __getitem__(self, name):
        return self._modules[name]

    def __delitem__(self, name):
        del self._modules[name]
        object.__delattr__(self, name)

    def __contains__(self, name):
        return name in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


class Embedding(Module):
    """A table of ``num_embeddings`` rows of ``embedding_dim`` (standard normal start); calling it
    with int64 indices gives their rows."""

    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.weight = Parameter(_gflow.randn(num_embeddings, embedding_dim))

    def forward(self, indices):
        return _gflow.embedding(indices, self.weight)


class MSELoss(Module):
    """Mean squared error over all elements (``reduction="sum"`` / ``"none"`` as PyTorch's)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return functional.mse_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(Module):
    """Cross entropy of logits against class indices (``functional.cross_entropy``): the mean
    over the batch by default, as PyTorch's."""

    def __init__(self, ignore_index=-100, reduction="mean"):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, input, target):
        from . import functional

        return functional.cross_entropy(input, target, ignore_index=self.ignore_index,
                                        reduction=self.reduction)


class _Norm(Module):
    """A normalisation layer computed by gflow's own (``gflow::nn::LayerNorm`` / ``RMSNorm``,
    fused kernels included) with this module's current parameters."""

    def _setup(self, impl, shape, eps, elementwise_affine, names):
        object.__setattr__(self, "_impl", impl)
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        initial = impl.parameters()
        # Without an affine transform the layer's own ones and zeros are fixed (no gradients).
        object.__setattr__(self, "_fixed", [t.detach() for t in initial])
        object.__setattr__(self, "_names", names)
        for name, t in zip(names, initial):
            setattr(self, name, Parameter(t) if elementwise_affine else None)

    def _params(self, x):
        out = []
        for name, fixed in zip(self._names, self._fixed):
            p = getattr(self, name)
            if p is None:
                if x.is_global:
                    p = fixed.to_global(placement=x.placement,
                                        sbp=[_gflow.broadcast] * len(x.sbp))
                else:
                    p = fixed
            out.append(p)
        return out

    def forward(self, x):
        return self._impl.forward(x, self._params(x))

    def extra_repr(self):
        return (f"{tuple(self.normalized_shape)}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


def _shape(normalized_shape):
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(d) for d in normalized_shape)


class LayerNorm(_Norm):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing ``normalized_shape``
    (biased variance), as PyTorch's: weight starts at ones, bias at zeros; ``bias=False`` or
    ``elementwise_affine=False`` leave them fixed."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        shape = _shape(normalized_shape)
        self._setup(_gflow._Norm.layer_norm(list(shape), float(eps)), shape, eps,
                    elementwise_affine, ("weight", "bias"))
        if elementwise_affine and not bias:
            self.bias = None


class RMSNorm(_Norm):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim (``normalized_shape`` an int
    or a one-element shape), weight starting at ones; ``eps`` 1e-6 by default, gflow's
    ``nn::RMSNorm``'s (PyTorch's default is the dtype's machine epsilon)."""

    def __init__(self, normalized_shape, eps=1e-6, elementwise_affine=True):
        super().__init__()
        shape = _shape(normalized_shape)
        if len(shape) != 1:
            raise _gflow.InvalidArgumentError(
                f"RMSNorm normalises the last dim only: normalized_shape must have one entry, "
                f"got {shape}")
        self._setup(_gflow._Norm.rms_norm(shape[0], float(1e-6 if eps is None else eps)),
                    shape, eps, elementwise_affine, ("weight",))


from . import parallel  # noqa: E402  (it subclasses Module)
