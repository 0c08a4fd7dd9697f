"""OneFlow's checks and keywords on global tensors: creation keeps the SBP asked for with a
16-bit ``dtype=``, data that differs between ranks is refused (OneFlow's data consistency
check), optimizers refuse ``partial_max``/``partial_min`` parameters, ``item()`` off the
placement, misspelt ``to_global`` keywords, ``to_local(copy=)``, ``sbp.split(-1)``, negative
ranks and ``.cuda()``."""

from pathlib import Path

import pytest

import gflow as flow
from conftest import launch

P = flow.placement("cpu", [0])


def test_two_ranks():
    job = launch(Path(__file__).with_name("dist_global_checks.py"), 2)
    assert job.rc == 0, job.stdout[-3000:] + job.stderr[-3000:]
    for r in (0, 1):
        out = job.text(r)
        for dt in ("flow.bfloat16", "flow.float16"):
            assert f"partial_{dt}: (flow.sbp.partial_sum,) {dt} [[1.0, 1.0], [1.0, 1.0], " \
                   f"[1.0, 1.0]]" in out, out
        assert "arange_pmax: (flow.sbp.partial_max,) [0.0, 1.0, 2.0, 3.0]" in out, out
        assert "differs: InvalidValueError True" in out, out
        assert "same: [1.0, 2.0]" in out, out
        assert "sgd_pmax: InvalidArgumentError" in out, out
    assert "item: 3.0" in job.text(0)
    assert "item: PlacementError" in job.text(1)


def test_to_global_keywords():
    x = flow.ones(2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'placment'"):
        x.to_global(placment=P, sbp=flow.sbp.broadcast)
    g = x.to_global(placement=P, sbp=flow.sbp.broadcast, check_meta=True, copy=False)
    with pytest.raises(flow.InvalidArgumentError, match="grad_sbp"):
        g.to_global(sbp=flow.sbp.broadcast, grad_sbp=flow.sbp.broadcast)
    mine = g.to_local(copy=True)
    mine.fill_(5.0)
    assert g.to_local().tolist() == [1.0, 1.0] and mine.tolist() == [5.0, 5.0]


def test_argument_errors():
    with pytest.raises(flow.SbpError, match="must not be negative"):
        flow.sbp.split(-1)
    with pytest.raises(flow.PlacementError, match="non-negative"):
        flow.placement("cpu", [-1])
    if not flow.cuda.is_available():
        with pytest.raises(flow.DeviceError):
            flow.randn(2, 5).cuda()
