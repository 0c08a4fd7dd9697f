"""Optimizers over parameters, as ``flow.optim.SGD(model.parameters(), lr=0.1)``: gflow's own
(``step`` updates each parameter in place, on its placement and SBP)."""

from collections import OrderedDict

from . import _gflow


class Optimizer:
    """Base class: ``step()``, ``zero_grad()``, ``param_groups[0]["lr"]``."""

    def __init__(self, params, make, lr, **options):
        self.params = list(params)
        self._make = make
        self._options = dict(options, lr=lr)
        self._build()

    def _build(self):
        self._handles = [p._handle() for p in self.params]
        self._inner = self._make(self.params, **self._options)

    def _stale(self):
        # Module.to_global points parameters at new storage; gflow's optimizer is rebuilt on
        # the converted parameters (before any step, so no state is lost in the usual order).
        return any(not _same(h, p) for h, p in zip(self._handles, self.params))

    def step(self):
        """Updates every parameter that has a gradient."""
        if self._stale():
            self._build()
        self._inner.step()

    def zero_grad(self, set_to_none=True):
        """Clears every parameter's gradient."""
        for p in self.params:
            p.grad = None

    def state_dict(self):
        """``{"state": {"0.exp_avg": ..., "0.step": ...}, "param_groups": [{"lr": ...}]}``: the
        state tensors are handles (zeros for parameters not stepped yet), which ``flow.save``
        writes sharded as their parameters are."""
        if self._stale():
            self._build()
        state = OrderedDict((n[len("state."):], t) for n, t in self._inner.state_tensors())
        return {"state": state, "param_groups": [dict(self._options, lr=self._inner.lr)]}

    def load_state_dict(self, state_dict):
        """Writes the state of ``state_dict`` (``flow.load``'s, or another optimizer's) into this
        optimizer's state in place, in its parameters' layouts, and takes its learning rate."""
        from .serialization import assign

        if self._stale():
            self._build()
        state = state_dict["state"]
        for name, t in self._inner.state_tensors():
            key = name[len("state."):]
            if key not in state:
                raise KeyError(f"load_state_dict: the state dict has no optimizer state {key!r}")
            assign(t, state[key])
        groups = state_dict.get("param_groups")
        if groups:
            self.param_groups[0]["lr"] = float(groups[0]["lr"])

    @property
    def param_groups(self):
        return [_Group(self)]


class _Group(dict):
    def __init__(self, opt):
        super().__init__(params=opt.params, lr=opt._inner.lr)
        self._opt = opt

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key == "lr":
            self._opt._options["lr"] = value
            self._opt._inner.lr = value


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
