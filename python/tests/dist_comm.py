"""Run by test_distributed.py under the launcher: OneFlow's flow.comm collectives on local
tensors, each result printed as `name: values` for the test to compare with its definition."""

import gflow as flow

r, n = flow.env.get_rank(), flow.env.get_world_size()


def show(name, t):
    print(f"{name}: {[round(float(v), 6) for v in t.numpy().ravel()]}", flush=True)


t = flow.tensor([r + 1.0, 10.0 * r])
flow.comm.all_reduce(t)
show("all_reduce", t)

out = []
flow.comm.all_gather(out, flow.tensor([[r, -r]], dtype=flow.int64))
show("all_gather", flow.cat(out))

b = flow.tensor([r * 1.5, float("nan") if r != 1 else 7.0])
flow.comm.broadcast(b, 1)
show("broadcast", b)

d = flow.tensor([float(r)])
flow.comm.reduce(d, 0)
show("reduce", d)

s = flow.zeros(2)
flow.comm.scatter(s, [flow.tensor([10.0 * i, i + 0.5]) for i in range(n)] if r == 2 else None,
                  src=2)
show("scatter", s)

o = flow.zeros(2)
flow.comm.reduce_scatter(o, [flow.tensor([100.0 * r + i, 1.0]) for i in range(n)])
show("reduce_scatter", o)

outs = [flow.zeros(1) for _ in range(n)]
flow.comm.all_to_all(outs, [flow.tensor([10.0 * r + j]) for j in range(n)])
show("all_to_all", flow.cat(outs))

# point to point: rank 0 -> 2 with meta, 2 -> 0 into `out`, rank 1 takes no part
if r == 0:
    flow.comm.send(flow.tensor([[1, 2, 3], [4, 5, 6]], dtype=flow.int32), 2)
    got = flow.comm.recv(2, out=flow.zeros(3, dtype=flow.float64))
    show("recv", got)
elif r == 2:
    got = flow.comm.recv(0)
    print(f"recv meta: {tuple(got.shape)} {got.dtype}", flush=True)
    show("recv", got)
    flow.comm.send(flow.tensor([0.5, -1.0, 2.25], dtype=flow.float64), 0, send_meta=False)
else:
    show("recv", flow.zeros(0))

flow.comm.barrier()
print("barrier: ok", flush=True)
every = flow.placement.all("cpu")
assert every == flow.env.all_device_placement("cpu")
show("placement.all", flow.tensor(every.ranks))
print(f"node size: {flow.env.get_node_size()}", flush=True)
