# Seed 000, "Converting one global tensor to another global tensor". Run with 2 processes.
import gflow as flow
x = flow.randn(2, 5).cpu()
placement = flow.placement(type="cpu", ranks=[0, 1])
sbp = flow.sbp.split(0)
x_global = x.to_global(placement=placement, sbp=sbp)
print(x_global.shape) # (4, 5)
print(x_global.to_local())
sbp_b = flow.sbp.broadcast
x_global_b = x_global.to_global(placement=placement, sbp=sbp_b)
print(x_global_b.shape) # (4, 5)
print(x_global_b.to_local())
