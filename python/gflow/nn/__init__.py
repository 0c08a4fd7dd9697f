"""Neural-network modules, as OneFlow's and PyTorch's: ``import gflow.nn as nn``.

A module holds parameters (``nn.Parameter``, tensors that require gradients) and sub-modules;
calling it runs ``forward``. ``module.to_global(placement=, sbp=)`` converts every parameter in
place (optimizers built before follow it), which is how a model is spread over ranks.
"""

import inspect
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from .. import _gflow
from .._gflow import Tensor
from . import functional, init, utils

__all__ = [
    "Module", "Parameter", "Linear", "ReLU", "SiLU", "GELU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax",
    "Softmin",
    "Identity", "Dropout", "Flatten", "Sequential", "ModuleList", "ModuleDict", "Embedding", "MSELoss", "CrossEntropyLoss",
    "LayerNorm", "RMSNorm", "functional", "init", "parallel", "utils",
    "L1Loss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss", "KLDivLoss",
    "LeakyReLU", "ELU", "SELU", "CELU", "Softplus", "Mish", "Hardswish", "Hardsigmoid", "Hardtanh",
    "ReLU6", "LogSigmoid", "GLU", "Softsign", "CosineSimilarity", "PairwiseDistance", "Unflatten",
    "ParameterList", "ParameterDict",
    "Conv1d", "Conv2d", "Conv3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d",
    "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
]


class Parameter(Tensor):
    """A tensor that is a module's parameter: it requires a gradient unless told otherwise."""

    def __new__(cls, data, requires_grad=True):
        return Tensor.__new__(cls, data, requires_grad=requires_grad)

    def __init__(self, data, requires_grad=True):
        pass


def _zero_grads(params, set_to_none):
    """Each parameter's gradient set to ``None`` (``set_to_none``), or zeroed by its in-place
    ``zero_``, as PyTorch's ``zero_grad``: zeros of the same shape, dtype, placement and SBP,
    no longer on the graph. ``Module.zero_grad`` and ``Optimizer.zero_grad`` share it."""
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            p.grad.zero_()


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns, as PyTorch's: ``missing, unexpected = ...``."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


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

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        """``(dotted name, buffer)`` pairs of this module and (``recurse``) its sub-modules; a
        buffer shared by two modules comes once unless ``remove_duplicate=False`` (as
        PyTorch's)."""
        seen = set()
        modules = self.named_modules(prefix.rstrip(".")) if recurse else [(prefix.rstrip("."), self)]
        for mod_name, m in modules:
            for name, b in m._buffers.items():
                if b is None or (remove_duplicate and id(b) in seen):
                    continue
                seen.add(id(b))
                yield (mod_name + "." if mod_name else "") + name, b

    def buffers(self, recurse=True):
        """The buffers of this module and (``recurse``) its sub-modules."""
        return [b for _, b in self.named_buffers(recurse=recurse)]

    def _own_state(self):
        """``(name, tensor)`` of this module's own state, as PyTorch's ``_save_to_state_dict``:
        its parameters, then its persistent buffers."""
        for name, p in self._parameters.items():
            if p is not None:
                yield name, p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                yield name, b

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
        """``(name, module)`` of the direct sub-modules, a module held under two names once
        (its first), as PyTorch's."""
        seen, out = set(), []
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                out.append((name, m))
        return out

    def add_module(self, name, module):
        """Registers ``module`` (a ``Module`` or ``None``) as the sub-module ``name``, as
        ``setattr`` does, with PyTorch's checks of the name."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f'module name can\'t contain ".", got: {name}' if name
                           else 'module name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if module is None:
            self._modules[name] = None
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, module)

    register_module = add_module

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

    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        """Name to tensor in PyTorch's order: this module's parameters, then its persistent
        buffers, then each sub-module's state under its name. The tensors are detached handles
        on the storage (``keep_vars=True``: the parameters themselves); a tied parameter or a
        shared sub-module comes under each of its names, as PyTorch's."""
        if destination is None:
            destination = OrderedDict()
        for name, t in self._own_state():
            destination[prefix + name] = t if keep_vars else t.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".",
                             keep_vars=keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict=True):
        """Writes ``state_dict``'s tensors (any layout: ``flow.load``'s local ones, another
        placement's) into the parameters and persistent buffers of the same names in place,
        each keeping its placement and SBP. Returns ``(missing_keys, unexpected_keys)``, as
        PyTorch's; ``strict``: a missing or unexpected key is a ``RuntimeError``, as is a shape
        that differs (whatever ``strict``), with PyTorch's message."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []
        self._load(state_dict, "", missing, unexpected, errors)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    def _load(self, state_dict, prefix, missing, unexpected, errors):
        """PyTorch's ``_load_from_state_dict`` for this module, then its sub-modules."""
        from ..serialization import assign

        own = dict(self._own_state())
        for name, t in own.items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            src = state_dict[key]
            if not isinstance(src, Tensor):
                try:
                    src = _gflow.tensor(src, dtype=t.dtype)
                except Exception:
                    errors.append(f'While copying the parameter named "{key}", expected a '
                                  f'Tensor from checkpoint but received {type(src)}')
                    continue
            if t.dim() == 0 and src.dim() == 1 and src.shape[0] == 1:
                src = src.reshape(())  # PyTorch's allowance for old 0-d parameters
            if tuple(src.shape) != tuple(t.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{src.shape} from checkpoint, the shape in current model is "
                              f"{t.shape}.")
                continue
            try:
                assign(t, src)
            except Exception as ex:
                errors.append(f'While copying the parameter named "{key}", whose dimensions '
                              f"in the model are {t.shape} and whose dimensions in the "
                              f"checkpoint are {src.shape}, an exception occurred : {ex.args}.")
        for key in state_dict:
            if not isinstance(key, str):
                if not prefix:
                    unexpected.append(key)
                continue
            if key.startswith(prefix):
                first = key[len(prefix):].split(".", 1)
                if (first[0] not in self._modules) if len(first) > 1 else (first[0] not in own):
                    unexpected.append(key)
        for name, m in self._modules.items():
            if m is not None:
                child = prefix + name + "."
                m._load({k: v for k, v in state_dict.items()
                         if isinstance(k, str) and k.startswith(child)},
                        child, missing, unexpected, errors)

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
        _zero_grads(self.parameters(), set_to_none)

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


def _functional_module(name, fn, doc, **settings):
    """A module class ``name(**settings)`` (each a keyword with its default, or positional in
    that order, as PyTorch's constructor takes them) whose call is ``fn(*inputs, **settings)``."""
    params = [inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=v)
              for k, v in settings.items()]
    signature = inspect.Signature(params)

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for k, v in bound.arguments.items():
            setattr(self, k, v)

    def forward(self, *inputs):
        return fn(*inputs, **{k: getattr(self, k) for k in settings})

    def extra_repr(self):
        return ", ".join(f"{k}={getattr(self, k)!r}" for k in settings)

    __init__.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *params])
    return type(name, (Module,), {"__init__": __init__, "forward": forward,
                                  "extra_repr": extra_repr, "__doc__": doc})


ReLU = _functional_module("ReLU", functional.relu, "``max(x, 0)`` (``inplace`` as in "
                          "``functional``: a new tensor).", inplace=False)
SiLU = _functional_module("SiLU", functional.silu, "``x * sigmoid(x)``.", inplace=False)
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
    """Softmax over ``dim`` (``None``: PyTorch's legacy implicit dim, 0 for 0-, 1- and 3-D
    inputs, else 1, with its warning)."""

    _fn = staticmethod(functional.softmax)

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return self._fn(x, self.dim, _stacklevel=5)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """Log-softmax over ``dim`` (``None`` as ``Softmax``)."""

    _fn = staticmethod(functional.log_softmax)


class Softmin(Softmax):
    """Softmin (``softmax(-x)``) over ``dim`` (``None`` as ``Softmax``)."""

    _fn = staticmethod(functional.softmin)


class Flatten(Module):
    """Dims ``start_dim..=end_dim`` merged."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class _ModuleSequence(Module):
    """Sub-modules named by their positions: indexing, length, iteration, ``append`` and
    ``extend`` (``Sequential`` and ``ModuleList``)."""

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        """Adds ``module`` at the end (named by its position); returns the container."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules):
        """Appends each of ``modules``; returns the container."""
        for m in modules:
            self.append(m)
        return self


class Sequential(_ModuleSequence):
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


class ModuleList(_ModuleSequence):
    """A list of sub-modules (registered, so their parameters are the list's)."""

    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)


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


def _zero_row(w, row):
    """``w`` with row ``row`` (an index into dim 0, or ``None`` for none) set to +0.0."""
    if row is None:
        return w
    from .._methods import where

    rows = _gflow.arange(w.shape[0], **where(w))
    return _gflow.where((rows == row).unsqueeze(1), 0.0, w)


class Embedding(Module):
    """PyTorch's ``Embedding``: a table of ``num_embeddings`` rows of ``embedding_dim`` (standard
    normal start, from gflow's generator); calling it with int64 indices gives their rows.
    ``padding_idx`` (negative from the end): that row starts at zeros and gets no gradient;
    ``max_norm``, ``norm_type`` and ``scale_grad_by_freq`` as ``functional.embedding``."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = functional._padding_index(padding_idx, num_embeddings)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            kw = {k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None}
            w = _zero_row(_gflow.randn(num_embeddings, embedding_dim, **kw), self.padding_idx)
        else:
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and "
                                     "embedding_dim")
            w = _weight
        self.weight = Parameter(w, requires_grad=not _freeze)

    def reset_parameters(self):
        """A fresh standard normal table, the padding row zeros."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with _gflow.no_grad():
                self.weight.data = _zero_row(self.weight.detach(), self.padding_idx)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        """An ``Embedding`` whose table is ``embeddings`` (2-D); ``freeze``: it does not require
        a gradient (the padding row is left as given, as PyTorch's)."""
        if embeddings.dim() != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(num_embeddings=rows, embedding_dim=cols, _weight=embeddings, _freeze=freeze,
                   padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                   scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)

    def forward(self, indices):
        return functional.embedding(indices, self.weight, self.padding_idx, self.max_norm,
                                    self.norm_type, self.scale_grad_by_freq, self.sparse)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        if self.sparse:
            s += ", sparse=True"
        return s


class MSELoss(Module):
    """Mean squared error over all elements (``reduction="sum"`` / ``"none"`` as PyTorch's)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return functional.mse_loss(input, target, reduction=self.reduction)


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


L1Loss = _functional_module("L1Loss", functional.l1_loss, "Mean absolute error (``reduction`` "
                            "``\"sum\"`` / ``\"none\"`` as PyTorch's).", reduction="mean")
SmoothL1Loss = _functional_module("SmoothL1Loss", functional.smooth_l1_loss,
                                  "``functional.smooth_l1_loss``: quadratic below ``beta``, "
                                  "linear above.", reduction="mean", beta=1.0)
HuberLoss = _functional_module("HuberLoss", functional.huber_loss, "``functional.huber_loss``: "
                               "quadratic below ``delta``, linear above.", reduction="mean",
                               delta=1.0)
KLDivLoss = _functional_module("KLDivLoss", functional.kl_div, "``functional.kl_div`` of "
                               "log-probabilities against (log-)probabilities.",
                               reduction="mean", log_target=False)
LeakyReLU = _functional_module("LeakyReLU", functional.leaky_relu, "``x``, or ``negative_slope "
                               "* x`` below 0.", negative_slope=0.01, inplace=False)
ELU = _functional_module("ELU", functional.elu, "``x``, or ``alpha (e^x - 1)`` below 0.",
                         alpha=1.0, inplace=False)
SELU = _functional_module("SELU", functional.selu, "The self-normalising ``scale * elu(x, "
                          "alpha)``.", inplace=False)
CELU = _functional_module("CELU", functional.celu, "``x``, or ``alpha (e^(x / alpha) - 1)`` "
                          "below 0.", alpha=1.0, inplace=False)
Softplus = _functional_module("Softplus", functional.softplus, "``log(1 + e^(beta x)) / beta`` "
                              "(stable), ``x`` above ``threshold``.", beta=1.0, threshold=20.0)
Mish = _functional_module("Mish", functional.mish, "``x * tanh(softplus(x))``.", inplace=False)
Hardswish = _functional_module("Hardswish", functional.hardswish, "``x * relu6(x + 3) / 6``.",
                               inplace=False)
Hardsigmoid = _functional_module("Hardsigmoid", functional.hardsigmoid, "``relu6(x + 3) / 6``.",
                                 inplace=False)
Hardtanh = _functional_module("Hardtanh", functional.hardtanh, "``x`` clamped to ``[min_val, "
                              "max_val]``.", min_val=-1.0, max_val=1.0, inplace=False)
ReLU6 = _functional_module("ReLU6", functional.relu6, "``min(max(x, 0), 6)``.", inplace=False)
LogSigmoid = _functional_module("LogSigmoid", functional.logsigmoid, "``log(sigmoid(x))`` "
                                "(stable).")
GLU = _functional_module("GLU", functional.glu, "``a * sigmoid(b)`` for the halves of ``dim``.",
                         dim=-1)
Softsign = _functional_module("Softsign", functional.softsign, "``x / (1 + |x|)``.")
CosineSimilarity = _functional_module("CosineSimilarity", functional.cosine_similarity,
                                      "Cosine of the angle between ``x1`` and ``x2`` along "
                                      "``dim``.", dim=1, eps=1e-8)
PairwiseDistance = _functional_module("PairwiseDistance", functional.pairwise_distance,
                                      "The ``p``-norm of ``x1 - x2 + eps`` over the last dim.",
                                      p=2.0, eps=1e-6, keepdim=False)


class _WeightedLoss(Module):
    """A loss with an optional per-class (or per-element) ``weight``, a buffer (so
    ``to_global`` moves it and ``state_dict`` holds it, as PyTorch's); ``size_average`` and
    ``reduce`` are PyTorch's deprecated forms of ``reduction``."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = functional._legacy_reduction(size_average, reduce)
        self.register_buffer("weight", weight)
        self.reduction = reduction

    def extra_repr(self):
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_WeightedLoss):
    """``functional.cross_entropy`` of logits against class indices or class probabilities:
    ``weight`` per class (a buffer), ``ignore_index``, ``label_smoothing``; the mean over the
    batch by default, as PyTorch's."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return functional.cross_entropy(input, target, weight=self.weight,
                                        ignore_index=self.ignore_index, reduction=self.reduction,
                                        label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """``functional.nll_loss`` of log-probabilities against class indices."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return functional.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                                   reduction=self.reduction)


class BCELoss(_WeightedLoss):
    """``functional.binary_cross_entropy`` of probabilities against 0/1 (or soft) targets."""

    def forward(self, input, target):
        return functional.binary_cross_entropy(input, target, self.weight,
                                               reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """``functional.binary_cross_entropy_with_logits`` (stable, from logits); ``pos_weight``
    scales the positive term, a buffer as ``weight``."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):
        super().__init__(weight, size_average, reduce, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return functional.binary_cross_entropy_with_logits(
            input, target, self.weight, reduction=self.reduction, pos_weight=self.pos_weight)


class Unflatten(Module):
    """Dim ``dim`` split into ``unflattened_size`` (``Tensor.unflatten``)."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


def _put_parameter(container, key, value):
    """``container``'s parameter ``key`` set to ``value``, a tensor made a ``Parameter`` (one
    that requires a gradient, as PyTorch's containers make them); a key already there keeps its
    place in the order."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{type(container).__name__} holds tensors (made parameters), got "
                        f"{type(value).__name__}")
    p = value if isinstance(value, Parameter) else Parameter(value)
    if key in container._parameters:
        container._parameters[key] = p
        object.__setattr__(container, key, p)
    else:
        setattr(container, key, p)


def _parameters_repr(self):
    """One line per parameter, as the containers print them."""
    lines = [f"  ({k}): Parameter of shape {tuple(p.shape)}, {p.dtype}"
             for k, p in self._parameters.items()]
    return "\n" + "\n".join(lines) + "\n" if lines else ""


class ParameterList(Module):
    """A list of parameters (registered as ``"0"``, ``"1"``, ..., so ``parameters()``,
    ``state_dict()`` and ``to_global`` see them); tensors put in become parameters."""

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def append(self, value):
        _put_parameter(self, str(len(self)), value)
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def _index(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range")
        return str(i % n)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ParameterList(list(self)[i])
        return self._parameters[self._index(i)]

    def __setitem__(self, i, value):
        _put_parameter(self, self._index(i), value)

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    extra_repr = _parameters_repr


class ParameterDict(Module):
    """An ordered dict of parameters (registered under their keys, so ``parameters()``,
    ``state_dict()`` and ``to_global`` see them); tensors put in become parameters."""

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def update(self, parameters):
        items = parameters.items() if hasattr(parameters, "items") else parameters
        for k, v in items:
            self[k] = v

    def __setitem__(self, key, value):
        if not isinstance(key, str) or not key or "." in key:
            raise KeyError(f"ParameterDict keys are non-empty str without '.', got {key!r}")
        _put_parameter(self, key, value)

    def __getitem__(self, key):
        return self._parameters[key]

    def __delitem__(self, key):
        del self._parameters[key]
        object.__delattr__(self, key)

    def __contains__(self, key):
        return key in self._parameters

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def get(self, key, default=None):
        return self._parameters.get(key, default)

    def pop(self, key):
        value = self[key]
        del self[key]
        return value

    extra_repr = _parameters_repr


from . import parallel  # noqa: E402  (it subclasses Module)
from .conv import (  # noqa: E402  (they subclass Module)
    Conv1d, Conv2d, Conv3d, MaxPool1d, MaxPool2d, MaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d,
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d,
    AdaptiveMaxPool3d, BatchNorm1d, BatchNorm2d, BatchNorm3d,
)
