# Seed 000, "Converting local tensor to global tensor". Run under the launcher with 2 processes.
import gflow as flow
x = flow.randn(2, 5).cpu()
print(x.is_local) # True
print(x.is_global) # False
placement = flow.placement(type="cpu", ranks=[0, 1])
sbp = flow.sbp.split(0)
x_global = x.to_global(placement=placement, sbp=sbp)
print(x_global.shape) # (4, 5)
print(x.is_local) # True
print(x_global.is_global) # True
