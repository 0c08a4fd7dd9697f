# Seed 004, "2D SBP": a 2x2 device array. Run with 4 processes.
import gflow as flow
import gflow.nn as nn

a = flow.Tensor([[1,2],[3,4]])
placement = flow.placement("cpu", ranks=[[0, 1], [2, 3]])
sbp = (flow.sbp.broadcast, flow.sbp.split(0))
a_to_global = a.to_global(placement=placement, sbp=sbp)

PLACEMENT = flow.placement("cpu", [[0, 1], [2, 3]])
BROADCAST = (flow.sbp.broadcast, flow.sbp.broadcast)
BS0 = (flow.sbp.broadcast, flow.sbp.split(0))

model = nn.Sequential(nn.Linear(8, 4),
                      nn.ReLU(),
                      nn.Linear(4, 2))
model = model.to_global(placement=PLACEMENT, sbp=BROADCAST)

x = flow.randn(1, 2, 8)
global_x = x.to_global(placement=PLACEMENT, sbp=BS0)
pred = model(global_x)

local_x = global_x.to_local()
print(f'{local_x.device}, {local_x.shape}, \n{local_x}')
