"""What the PyTorch-parity test files share (imported, not collected): the 1-rank placement and
the three layouts each case runs in, arrays made into flow tensors in a layout, central
differences of a float64 NumPy reference, and the check of one case's value and gradients
against its reference."""

import numpy as np

import gflow as flow

P = flow.placement("cpu", [0])
KINDS = ["local", "broadcast", "split"]


def make(a, kind, requires_grad=False, sbp=None):
    """``a`` as a flow tensor: local, or global on the 1-rank placement (split on dim 0 when it
    has one, or on ``sbp``)."""
    a = np.asarray(a)
    if kind == "local":
        return flow.tensor(a, requires_grad=requires_grad)
    if sbp is None:
        sbp = flow.sbp.split(0) if kind == "split" and a.ndim else flow.sbp.broadcast
    return flow.tensor(a, placement=P, sbp=sbp, requires_grad=requires_grad)


def central_grad(f, arrays, i, h=1e-6):
    """d f(arrays) / d arrays[i] by central differences (``f`` scalar)."""
    arrays = [np.array(a, copy=True) for a in arrays]
    a, g = arrays[i], np.zeros_like(arrays[i])
    for idx in np.ndindex(a.shape):
        old = a[idx]
        a[idx] = old + h
        up = f(*arrays)
        a[idx] = old - h
        down = f(*arrays)
        a[idx] = old
        g[idx] = (up - down) / (2 * h)
    return g


def check_case(case, kind, lib, rng):
    """``case.call(lib, *tensors)`` (its inputs made in layout ``kind``) equals
    ``case.ref(*arrays)`` to float64 precision, and the gradients of its inputs in
    ``case.grad`` equal central differences of the reference (for a random upstream gradient
    drawn from ``rng``)."""
    ts = [make(a, kind, i in case.grad) for i, a in enumerate(case.inputs)]
    out = case.call(lib, *ts)
    ref = np.asarray(case.ref(*case.inputs))
    assert out.is_global == (kind != "local")
    assert tuple(out.shape) == ref.shape
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=1e-12)
    if not case.grad:
        return
    up = rng.standard_normal(ref.shape)
    (out * make(up, "broadcast" if out.is_global else "local")).sum().backward()
    for i in case.grad:
        want = central_grad(lambda *arrays: (np.asarray(case.ref(*arrays)) * up).sum(),
                            case.inputs, i)
        np.testing.assert_allclose(ts[i].grad.numpy(), want, rtol=1e-6, atol=1e-7,
                                   err_msg=f"gradient of input {i}")
