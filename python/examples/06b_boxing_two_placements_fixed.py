# Seed 001's boxing example with its one slip mended: the result of Y0.to_global is kept
# (`Y0 = ...`), which the text means; as printed (06_...) matmul meets two placements and gflow
# raises PlacementError. Run with 4 processes.
import gflow as flow
P0 = flow.placement("cpu", ranks=[0, 1])
P1 = flow.placement("cpu", ranks=[2, 3])
a0_sbp = flow.sbp.split(0)
b0_sbp = flow.sbp.broadcast
y0_sbp = flow.sbp.broadcast
b1_sbp = flow.sbp.split(1)
A0 = flow.randn(4, 5, placement=P0, sbp=a0_sbp)
B0 = flow.randn(5, 8, placement=P0, sbp=b0_sbp)
Y0 = flow.matmul(A0, B0)
Y0 = Y0.to_global(placement=P1, sbp=y0_sbp)
B1 = flow.randn(8, 6, placement=P1, sbp=b1_sbp)
Y2 = flow.matmul(Y0, B1)
print(Y2.shape, Y2.sbp, Y2.placement)
