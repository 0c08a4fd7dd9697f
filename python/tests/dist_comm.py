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

flow.comm.barrier()
print("barrier: ok", flush=True)
