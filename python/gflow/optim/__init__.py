"""Optimizers over parameters, as ``flow.optim.SGD(model.parameters(), lr=0.1)``: gflow's own
(``step`` updates each parameter in place, on its placement and SBP)."""

from collections import OrderedDict
from collections.abc import Mapping

from .. import _gflow


class Optimizer:
    """Base class: ``step()``, ``zero_grad()``, ``param_groups``, ``defaults``, ``state``.
    ``params`` is an iterable of parameters, or of dicts ``{"params": [...], "weight_decay":
    0.0, ...}`` (param groups, as PyTorch's: each group's options override the defaults).

    ``param_groups`` are plain dicts, as PyTorch's: any key written into one stays (a
    scheduler's ``initial_lr``, ``max_lr``, ...), and ``step()`` takes each group's current
    ``lr`` and options (a new ``momentum`` or ``betas`` remakes that group's inner optimizer
    with its state carried over, as gflow's optimizers fix them when made)."""

    def __init__(self, params, make, lr, **options):
        self.defaults = dict(options, lr=lr)
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
        # sequence option (betas) as a tuple, whichever sequence the group holds
        return {k: tuple(v) if isinstance(v, list) else v
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
                for (_, old), (_, t) in zip(self._inners[i].state_tensors(), new.state_tensors()):
                    _gflow.assign(t, old)
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
        """Clears every parameter's gradient."""
        for p in self.params:
            p.grad = None

    def _state(self):
        """``(name, tensor)`` of every group's state, named by the parameter's index over all
        groups (``"3.exp_avg"``), as PyTorch numbers them."""
        offset = 0
        for g, inner in zip(self.param_groups, self._inners):
            for name, t in inner.state_tensors():
                index, rest = name[len("state."):].split(".", 1)
                yield f"{int(index) + offset}.{rest}", t
            offset += len(g["params"])

    @property
    def state(self):
        """``{parameter: {"step": ..., "exp_avg": ...}}``, as PyTorch's ``optimizer.state``:
        handles to the state tensors (zeros for parameters not stepped yet)."""
        self._fresh()
        out = {}
        for key, t in self._state():
            index, name = key.split(".", 1)
            out.setdefault(self.params[int(index)], {})[name] = t
        return out

    def state_dict(self):
        """``{"state": {"0.exp_avg": ..., "0.step": ...}, "param_groups": [{"lr": ...}]}``: the
        state tensors are handles (zeros for parameters not stepped yet), which ``flow.save``
        writes sharded as their parameters are; each group's keys but ``params``."""
        self._fresh()
        state = OrderedDict(self._state())
        groups = [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Writes the state of ``state_dict`` (``flow.load``'s, or another optimizer's) into this
        optimizer's state in place, in its parameters' layouts, and takes its groups' keys
        (``lr``, options, a scheduler's ``initial_lr``), as PyTorch's."""
        from ..serialization import assign

        self._fresh()
        state = state_dict["state"]
        for key, t in self._state():
            if key not in state:
                raise KeyError(f"load_state_dict: the state dict has no optimizer state {key!r}")
            assign(t, state[key])
        saved = _as_list(state_dict.get("param_groups") or [])
        for group, one in zip(self.param_groups, saved):
            group.update({k: tuple(_as_list(v)) if isinstance(v, Mapping) else v
                          for k, v in one.items() if k != "params"})


def _as_list(seq):
    # flow.load gives lists back as mappings with int keys
    return [seq[k] for k in sorted(seq)] if isinstance(seq, Mapping) else seq


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


from . import lr_scheduler  # noqa: E402  (its schedulers take the optimizers above)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
