"""Optimizers over parameters, as ``flow.optim.SGD(model.parameters(), lr=0.1)``: gflow's own
(``step`` updates each parameter in place, on its placement and SBP)."""

from collections import OrderedDict

from . import _gflow


class Optimizer:
    """Base class: ``step()``, ``zero_grad()``, ``param_groups[i]["lr"]``. ``params`` is an
    iterable of parameters, or of dicts ``{"params": [...], "weight_decay": 0.0, ...}`` (param
    groups, as PyTorch's: each group's options override the defaults)."""

    def __init__(self, params, make, lr, **options):
        defaults = dict(options, lr=lr)
        params = list(params)
        if params and isinstance(params[0], dict):
            groups = []
            for g in params:
                unknown = set(g) - set(defaults) - {"params"}
                if unknown:
                    raise TypeError(f"{type(self).__name__}: unknown param group options "
                                    f"{sorted(unknown)} (known: {sorted(defaults)})")
                groups.append(dict(defaults, **g))
        else:
            groups = [dict(defaults, params=params)]
        for g in groups:
            g["params"] = list(g["params"])
        self._make = make
        self._groups = groups
        self.params = [p for g in groups for p in g["params"]]
        if len({id(p) for p in self.params}) != len(self.params):
            # a parameter stepped twice per step would train wrongly (PyTorch refuses it too)
            raise ValueError("some parameters appear more than once (in one parameter group or "
                             "in several); a tied parameter belongs in the list once")
        self._build()

    def _build(self):
        self._handles = [p._handle() for p in self.params]
        self._inners = [
            self._make(g["params"], **{k: v for k, v in g.items() if k != "params"})
            for g in self._groups
        ]

    def _stale(self):
        # Module.to_global points parameters at new storage; gflow's optimizer is rebuilt on
        # the converted parameters (before any step, so no state is lost in the usual order).
        return any(not _same(h, p) for h, p in zip(self._handles, self.params))

    def _fresh(self):
        if self._stale():
            self._build()

    def step(self):
        """Updates every parameter that has a gradient."""
        self._fresh()
        for inner in self._inners:
            inner.step()

    def zero_grad(self, set_to_none=True):
        """Clears every parameter's gradient."""
        for p in self.params:
            p.grad = None

    def _state(self):
        """``(name, tensor)`` of every group's state, named by the parameter's index over all
        groups (``"3.exp_avg"``), as PyTorch numbers them."""
        offset = 0
        for g, inner in zip(self._groups, self._inners):
            for name, t in inner.state_tensors():
                index, rest = name[len("state."):].split(".", 1)
                yield f"{int(index) + offset}.{rest}", t
            offset += len(g["params"])

    def state_dict(self):
        """``{"state": {"0.exp_avg": ..., "0.step": ...}, "param_groups": [{"lr": ...}]}``: the
        state tensors are handles (zeros for parameters not stepped yet), which ``flow.save``
        writes sharded as their parameters are."""
        self._fresh()
        state = OrderedDict(self._state())
        groups = [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Writes the state of ``state_dict`` (``flow.load``'s, or another optimizer's) into this
        optimizer's state in place, in its parameters' layouts, and takes its groups' learning
        rates."""
        from .serialization import assign

        self._fresh()
        state = state_dict["state"]
        for key, t in self._state():
            if key not in state:
                raise KeyError(f"load_state_dict: the state dict has no optimizer state {key!r}")
            assign(t, state[key])
        saved = state_dict.get("param_groups") or []
        if hasattr(saved, "values"):
            # flow.load gives lists back as mappings with int keys
            saved = [saved[k] for k in sorted(saved)]
        for group, one in zip(self.param_groups, saved):
            group["lr"] = float(one["lr"])

    @property
    def param_groups(self):
        """One dict per group (its options, ``"params"`` its parameters); setting ``"lr"`` in
        it changes that group's learning rate (a schedule)."""
        return [_Group(self, i) for i in range(len(self._groups))]


class _Group(dict):
    def __init__(self, opt, index):
        group = opt._groups[index]
        super().__init__({k: v for k, v in group.items() if k != "params"},
                         params=group["params"], lr=opt._inners[index].lr)
        self._opt, self._index = opt, index

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key == "lr":
            self._opt._groups[self._index]["lr"] = value
            self._opt._inners[self._index].lr = value


def _same(handle, param):
    return handle._same_as(param)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum and weight decay (PyTorch's rules)."""

    def __init__(self, params, lr=0.001, momentum=0.0, weight_decay=0.0):
        super().__init__(params, _gflow.Optimizer.sgd, lr, momentum=momentum, weight_decay=weight_decay)


class Adam(Optimizer):
    """Adam (PyTorch's defaults: betas (0.9, 0.999), eps 1e-8)."""

    def __init__(self, params, lr=0.001, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, _gflow.Optimizer.adam, lr, betas=betas, eps=eps, weight_decay=weight_decay)


class AdamW(Optimizer):
    """AdamW: decoupled weight decay (PyTorch's defaults, weight_decay 0.01)."""

    def __init__(self, params, lr=0.001, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, _gflow.Optimizer.adamw, lr, betas=betas, eps=eps, weight_decay=weight_decay)


__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
