"""``flow.autograd``, PyTorch's names: ``grad`` (gradients returned, no ``.grad`` changed),
``backward`` (of several tensors at once, optionally into chosen ``inputs`` only), and the
grad-mode switches ``no_grad enable_grad set_grad_enabled inference_mode``. Higher-order
gradients (``create_graph=True``) are refused: gflow's backward is not recorded."""

from . import _gflow

__all__ = ["grad", "backward", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode"]


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of ``outputs`` with respect to ``inputs`` (each a tensor or a sequence),
    as a tuple; ``grad_outputs`` seeds each output (``None``: ones, for one-element outputs).
    No tensor's ``.grad`` changes. An input the outputs do not use gives ``None`` with
    ``allow_unused`` (zeros with ``materialize_grads``), else a ``RuntimeError``. On global
    tensors a collective, as ``backward``."""
    if is_grads_batched:
        raise _gflow.InvalidArgumentError("grad(is_grads_batched=True) is not supported")
    del only_inputs  # deprecated in PyTorch, and without effect there
    many = isinstance(inputs, (list, tuple))
    ins = list(inputs) if many else [inputs]
    got = _gflow.grad(outputs, ins, grad_outputs, retain_graph, create_graph,
                      allow_unused or materialize_grads)
    if materialize_grads:
        import gflow
        got = tuple(gflow.zeros_like(x) if g is None else g for g, x in zip(got, ins))
    return got


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Backward of every tensor in ``tensors`` (each seeded by ``grad_tensors``), summed into
    the leaves' ``.grad`` (or only into ``inputs``), as ``torch.autograd.backward``."""
    ts = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if grad_tensors is None:
        seeds = [None] * len(ts)
    elif isinstance(grad_tensors, (list, tuple)):
        seeds = list(grad_tensors)
    else:
        seeds = [grad_tensors]
    if len(seeds) != len(ts):
        raise _gflow.InvalidArgumentError(
            f"backward got {len(ts)} tensors and {len(seeds)} grad_tensors: one each")
    # all but the last keep the graph, which the later ones may share
    for i, (t, g) in enumerate(zip(ts, seeds)):
        keep = retain_graph if i == len(ts) - 1 else True
        t.backward(g, retain_graph=keep, create_graph=create_graph, inputs=inputs)


def __getattr__(name):
    # the grad-mode switches live in the package (they wrap _gflow's depth counter)
    if name in ("no_grad", "enable_grad", "set_grad_enabled", "inference_mode"):
        import gflow
        return getattr(gflow, name)
    raise AttributeError(f"module 'gflow.autograd' has no attribute {name!r}")
