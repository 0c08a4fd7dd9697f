"""Optimizers over parameters, as ``flow.optim.SGD(model.parameters(), lr=0.1)``: gflow's own
(``step`` updates each parameter in place, on its placement and SBP)."""

from collections import OrderedDict
from collections.abc import Mapping

from .. import _gflow
from .._gflow import Tensor
from ..nn import _zero_grads


class Optimizer:
    """Base class: ``step()``, ``zero_grad()``, ``param_groups``, ``defaults``, ``state``.
    ``params`` is an iterable of parameters, or of dicts ``{"params": [...], "weight_decay":
    0.0, ...}`` (param groups, as PyTorch's: each group's options override the defaults).

    ``param_groups`` are plain dicts, as PyTorch's: any key written into one stays (a
    scheduler's ``initial_lr``, ``max_lr``, ...), and ``step()`` takes each group's current
    ``lr`` and options (a new ``momentum`` or ``betas`` remakes that group's inner optimizer
    with its state carried over, as gflow's optimizers fix them when made)."""

    def __init__(self, params, make, lr, **options):
        self.defaults = dict(lr=lr, **options)
        params = list(params)
        if params and isinstance(params[0], dict):
            groups = []
            for g in params:
                unknown = set(g) - set(self.defaults) - {"params"}
                if unknown:
                    raise TypeError(f"{type(self).__name__}: unknown param group options "
                                    f"{sorted(unknown)} (known: {sorted(self.defaults)})")
                groups.append(dict(self.defaults, **g))
        else:
            groups = [dict(self.defaults, params=params)]
        for g in groups:
            g["params"] = list(g["params"])
        self._make = make
        self.param_groups = groups
        self.params = [p for g in groups for p in g["params"]]
        if len({id(p) for p in self.params}) != len(self.params):
            # a parameter stepped twice per step would train wrongly (PyTorch refuses it too)
            raise ValueError("some parameters appear more than once (in one parameter group or "
                             "in several); a tied parameter belongs in the list once")
        self._build()

    def _options(self, group):
        # the keys the inner optimizer is made from (a scheduler's own keys stay out); a
        # sequence option (betas) as a tuple, whichever sequence the group holds; a flag as a
        # bool (an earlier checkpoint gives them back as ints)
        return {k: tuple(v) if isinstance(v, list)
                else bool(v) if isinstance(self.defaults[k], bool) else v
                for k, v in group.items() if k in self.defaults and k != "lr"}

    def _build(self):
        self._handles = [p._handle() for p in self.params]
        self._built = [self._options(g) for g in self.param_groups]
        self._inners = [self._make(g["params"], lr=g["lr"], **options)
                        for g, options in zip(self.param_groups, self._built)]

    def _stale(self):
        # Module.to_global points parameters at new storage; gflow's optimizer is rebuilt on
        # the converted parameters (before any step, so no state is lost in the usual order).
        return any(not _same(h, p) for h, p in zip(self._handles, self.params))

    def _fresh(self):
        if self._stale():
            self._build()

    def _sync(self):
        """Gives each inner optimizer its group's current ``lr`` and options: an option changed
        since it was made (a scheduler cycling ``momentum`` or ``betas``) makes it anew, with the
        state copied over, so the next step continues as PyTorch's would."""
        for i, g in enumerate(self.param_groups):
            options = self._options(g)
            if options != self._built[i]:
                new = self._make(g["params"], lr=g["lr"], **options)
                old = dict(self._inners[i].state_tensors())
                for name, t in new.state_tensors():
                    if name in old:  # state the new options add (amsgrad's) starts at zeros
                        _gflow.assign(t, old[name])
                self._inners[i], self._built[i] = new, options
            else:
                self._inners[i].lr = g["lr"]

    def step(self):
        """Updates every parameter that has a gradient, with each group's current options."""
        self._fresh()
        self._sync()
        for inner in self._inners:
            inner.step()
        self._opt_called = True

    def zero_grad(self, set_to_none=True):
        """Clears every parameter's gradient: ``None``, or (``set_to_none=False``) zeros of
        its shape, dtype, placement and SBP, as PyTorch's."""
        _zero_grads(self.params, set_to_none)

    def _state(self):
        """``(name, tensor)`` of every group's state, named by the parameter's index over all
        groups (``"3.exp_avg"``), as PyTorch numbers them."""
        offset = 0
        for g, inner in zip(self.param_groups, self._inners):
            for name, t in inner.state_tensors():
                index, rest = name[len("state."):].split(".", 1)
                yield f"{int(index) + offset}.{rest}", t
            offset += len(g["params"])

    def _param_states(self):
        """Per parameter over all groups, in order: ``(its group, {name: state tensor})``."""
        out = [(g, OrderedDict()) for g in self.param_groups for _ in g["params"]]
        for key, t in self._state():
            index, name = key.split(".", 1)
            out[int(index)][1][name] = t
        return out

    @property
    def state(self):
        """``{parameter: {"step": ..., "exp_avg": ...}}``, as PyTorch's ``optimizer.state``:
        handles to the state tensors (zeros for parameters not stepped yet)."""
        self._fresh()
        return {p: named for p, (_, named) in zip(self.params, self._param_states())}

    def _exported(self, group, name, t, step):
        """State tensor ``name`` as PyTorch's optimizer holds it: the step count as a float 0-d
        tensor, the rest as gflow keeps it (a handle)."""
        del group
        return t.reshape(()).to(_gflow.float32) if name == "step" else t

    def _imported(self, group, name, value, step):
        """The value to write into gflow's state ``name`` for PyTorch's ``value``
        (``_exported``'s inverse; ``step`` the saved step count)."""
        del group, name, step
        return value

    def state_dict(self):
        """PyTorch's format: ``{"state": {0: {"step": tensor(3.), "exp_avg": ...}, 1: ...},
        "param_groups": [{"lr": ..., "betas": ..., "params": [0, 1]}]}``, the parameters
        numbered over all groups in order. ``step`` is a float 0-d tensor (a copy), the other
        state tensors are handles (zeros for parameters not stepped yet), which ``flow.save``
        writes sharded as their parameters are."""
        self._fresh()
        state = {}
        for i, (group, named) in enumerate(self._param_states()):
            step = named.get("step")
            state[i] = {name: self._exported(group, name, t, step) for name, t in named.items()}
        groups, index = [], 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = list(range(index, index + len(g["params"])))
            index += len(g["params"])
            groups.append(packed)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Writes the state of ``state_dict`` into this optimizer's state in place, in its
        parameters' layouts, and takes its groups' keys (``lr``, options, a scheduler's
        ``initial_lr``), as PyTorch's. ``state_dict`` is ``state_dict()``'s (another
        optimizer's, or ``flow.load``'s), a ``torch.optim`` one with its tensors made flow
        tensors, or gflow's earlier flat one (``{"0.exp_avg": ...}``). A parameter the saved
        state does not hold starts afresh, as in PyTorch."""
        saved_groups = [dict(g) for g in _as_list(state_dict.get("param_groups") or [])]
        ids = None
        if any("params" in g for g in saved_groups):
            if len(saved_groups) != len(self.param_groups):
                raise ValueError("loaded state dict has a different number of parameter groups")
            ids = [_as_list(g.get("params", [])) for g in saved_groups]
            if any(len(i) != len(g["params"]) for i, g in zip(ids, self.param_groups)):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
            ids = [i for group in ids for i in group]
        self._fresh()
        for group, one in zip(self.param_groups, saved_groups):
            group.update({k: tuple(_as_list(v)) if isinstance(v, Mapping) else v
                          for k, v in one.items() if k != "params"})
        self._sync()  # the saved options (amsgrad, momentum) decide which state there is
        state = state_dict["state"]
        if any(isinstance(k, str) and "." in k for k in state):
            self._load_flat(state)
        else:
            self._load_nested(state, ids)

    def _load_flat(self, state):
        """gflow's earlier format: ``{"0.step": ..., "0.exp_avg": ...}``."""
        from ..serialization import assign

        for key, t in self._state():
            if key not in state:
                raise KeyError(f"load_state_dict: the state dict has no optimizer state {key!r}")
            assign(t, _as_step(state[key]) if key.endswith(".step") else state[key])

    def _load_nested(self, state, ids):
        """PyTorch's format: ``{0: {"step": ..., "exp_avg": ...}, ...}``, keyed by the saved
        parameter ids ``ids`` (the index over all groups when ``None``)."""
        from ..serialization import assign

        for i, (group, named) in enumerate(self._param_states()):
            key = i if ids is None else ids[i]
            saved = state.get(key, state.get(str(key)))
            saved = {k: v for k, v in (saved or {}).items() if v is not None}
            if not saved:  # never stepped: gflow's fresh state is zeros
                for t in named.values():
                    assign(t, _gflow.zeros(*t.shape, dtype=t.dtype))
                continue
            # PyTorch's SGD keeps no step count: a saved buffer means steps were taken
            step = saved.get("step", 1)
            for name, t in named.items():
                if name == "step":
                    assign(t, _as_step(step))
                elif name in saved:
                    assign(t, self._imported(group, name, saved[name], step))
                else:
                    raise KeyError(f"load_state_dict: the saved state of parameter {key} has no "
                                   f"{name!r} (it has {sorted(saved)})")


def _as_step(step):
    # a step count as gflow keeps it: one element (PyTorch's is 0-d, or a number)
    return step.reshape(1) if isinstance(step, Tensor) else _gflow.tensor([int(step)])


def _count(step):
    # a saved step count as a number
    return step.item() if isinstance(step, Tensor) else step


def _as_list(seq):
    # flow.load of an earlier checkpoint gives lists back as mappings with int keys
    return [seq[k] for k in sorted(seq)] if isinstance(seq, Mapping) else list(seq)


def _same(handle, param):
    return handle._same_as(param)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov momentum, weight
    decay and ``maximize`` (PyTorch's rules)."""

    def __init__(self, params, lr=0.001, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, _gflow.Optimizer.sgd, lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)


def _speed_hints(kind, foreach, fused, capturable, differentiable):
    """PyTorch's implementation switches: ``foreach`` and ``fused`` only pick how PyTorch runs
    the same update (gflow's is one pass, fused where the device has the kernel), so they are
    accepted; ``capturable`` and ``differentiable`` change what a step is, and are refused."""
    del foreach, fused
    if capturable or differentiable:
        raise ValueError(f"{kind}: capturable and differentiable steps are not supported")


class Adam(Optimizer):
    """Adam (PyTorch's defaults: betas (0.9, 0.999), eps 1e-8), with ``amsgrad`` and
    ``maximize``."""

    def __init__(self, params, lr=0.001, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None):
        _speed_hints("Adam", foreach, fused, capturable, differentiable)
        super().__init__(params, _gflow.Optimizer.adam, lr, betas=betas, eps=eps,
                         weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize)


class AdamW(Optimizer):
    """AdamW: decoupled weight decay (PyTorch's defaults, weight_decay 0.01), with ``amsgrad``
    and ``maximize``."""

    def __init__(self, params, lr=0.001, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None):
        _speed_hints("AdamW", foreach, fused, capturable, differentiable)
        super().__init__(params, _gflow.Optimizer.adamw, lr, betas=betas, eps=eps,
                         weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize)


class RMSprop(Optimizer):
    """RMSprop: steps scaled by a running average of squared gradients, optionally centred and
    with momentum (PyTorch's defaults: lr 0.01, alpha 0.99, eps 1e-8)."""

    def __init__(self, params, lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, *, maximize=False):
        super().__init__(params, _gflow.Optimizer.rmsprop, lr, alpha=alpha, eps=eps,
                         weight_decay=weight_decay, momentum=momentum, centered=centered,
                         maximize=maximize)


class Adagrad(Optimizer):
    """Adagrad: each element's step shrinks with its sum of squared gradients (PyTorch's
    defaults: lr 0.01, eps 1e-10)."""

    def __init__(self, params, lr=0.01, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10, *, maximize=False):
        super().__init__(params, _gflow.Optimizer.adagrad, lr, lr_decay=lr_decay,
                         weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps,
                         maximize=maximize)

    # gflow's sum starts at 0 and takes the initial value at the first step; PyTorch's holds
    # it from the start, so a state dict not stepped yet differs by it

    def _exported(self, group, name, t, step):
        v = group["initial_accumulator_value"]
        if name == "sum" and v:
            return t + (step == 0).to(t.dtype) * v
        return super()._exported(group, name, t, step)

    def _imported(self, group, name, value, step):
        v = group["initial_accumulator_value"]
        if name == "sum" and v and _count(step) == 0:
            return value - v
        return value


from . import lr_scheduler  # noqa: E402  (its schedulers take the optimizers above)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
