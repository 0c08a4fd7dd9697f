# Seed 000, "Creating global tensor". Run: python -m gflow.distributed.launch --nproc_per_node 2 01_randn_global.py
import gflow as flow
# Place a global tensor on cuda device of rank(process) 0 and 1
placement = flow.placement(type="cpu", ranks=[0, 1])
# Each rank's local data is a part data as a result of spliting global data on dim 0
sbp = flow.sbp.split(dim=0)
# Create a global tensor by randn
x = flow.randn(4, 5, placement=placement, sbp=sbp)
# Print local data
print("Local data of global tensor:\n ", x.to_local().numpy())
# Print global data
print("Global data of global tensor:\n ", x.numpy())
