# Seed 003, "Placement": flow.placement("cuda", {0: [0, 1, 2, 3]}) names the first four devices
# of machine 0. Run with 4 processes.
import gflow as flow
placement = flow.placement("cpu", {0: [0, 1, 2, 3]})
print(placement)
x = flow.randn(8, 2, placement=placement, sbp=flow.sbp.split(0))
print(x.to_local().shape)
