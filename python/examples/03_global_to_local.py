# Seed 000, "Converting global tensor to local tensor". Run under the launcher with 2 processes.
import gflow as flow
placement = flow.placement(type="cpu", ranks=[0, 1])
sbp = flow.sbp.split(0)
x = flow.randn(4, 5, placement=placement, sbp=sbp)
print(x.to_local())
