"""A tensor's truth value, ``float``/``int`` and ``item()`` as PyTorch's: a one-element tensor is
its value, more (or fewer) elements are ambiguous (``RuntimeError``); a global tensor's is its
whole value."""

import numpy as np
import pytest

import gflow as flow

P = flow.placement("cpu", [0])


@pytest.mark.parametrize("global_", [False, True], ids=["local", "global"])
def test_one_element_tensors_are_their_value(global_):
    def t(v, **kw):
        x = flow.tensor(v, **kw)
        return x.to_global(placement=P, sbp=flow.sbp.broadcast) if global_ else x

    assert not bool(t([0.0])) and bool(t([2.5])) and bool(t(-1.0)) and not bool(t(0))
    assert not t([False]) and t([[True]])
    loss, eps = t(1e-9), 1e-6
    assert (loss < eps) and not (loss > eps)  # `if loss < eps:` on a 0-d tensor
    assert float(t(2.5)) == 2.5 and int(t([7])) == 7 and int(t(-2.7)) == -2
    assert t(3).item() == 3 and isinstance(t(3).item(), int)
    assert t(2.0).item() == 2.0 and isinstance(t(2.0).item(), float)


def test_int_of_a_large_int64_is_exact():
    assert int(flow.tensor(2**60 + 1)) == 2**60 + 1


def test_several_or_no_elements_are_ambiguous():
    for v in ([False, False], [1.0, 2.0], np.zeros((2, 2))):
        with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
            bool(flow.tensor(v))
    with pytest.raises(RuntimeError, match="no values is ambiguous"):
        bool(flow.zeros(0))
    with pytest.raises(RuntimeError, match="ambiguous"):
        flow.ones(2) in [flow.zeros(2)]  # noqa: B015  (`in` compares with ==, then bool)
    x = flow.ones(2)
    assert x in [x]  # identity first, as Python's containment
