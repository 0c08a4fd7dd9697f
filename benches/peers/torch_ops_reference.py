# Records PyTorch's (CPU) values of gflow's round-2 operators on fixed small inputs, so that
# `tests/torch_ops.rs` checks gflow against an independent reference without PyTorch in CI.
#   python benches/peers/torch_ops_reference.py [--out tests/data/torch_ops.json]
#
# Output schema (also in tests/data/README.md): a JSON list of cases, each
#   {"name":    unique case name,
#    "op":      the gflow operator (the dispatch key of tests/torch_ops.rs), e.g. "pow", "chunk",
#    "args":    the operator's non-tensor arguments, e.g. {"exponent": 0.5}, {"min": null, "max": 1.0},
#    "inputs":  [tensor, ...]  the operator's tensor inputs, in the order of the gflow call,
#    "output":  tensor         for an operator with one result, or
#    "outputs": [tensor, ...]  for one with several (split, chunk, clip_grad_norm),
#    "weights": [tensor, ...]  (differentiable cases only) one random weight w per output,
#    "grads":   [tensor|null, ...] (differentiable cases only) d/d input of
#               sum over outputs of (out * w).sum(); null for inputs that take no gradient
#               (indices, masks)}
# and a tensor is {"shape": [..], "dtype": "f64"|"f32"|"f16"|"bf16"|"i64"|"i32"|"bool",
#                  "data": the values, flat and row-major}.
# 16-bit and f32 values are stored as the exact float64 of the value; bools as true/false.
# Special cases: "clip_grad_norm" has "given_grads" (the .grad of each input parameter before
# the call) and outputs [the returned total norm (shape []), the clipped grads...];
# "rms_norm" and "layer_norm" take inputs (x, weight[, bias]) with weight and bias multiples of
# 1/16, so that a test may set a module's parameters exactly. Inputs are drawn from a seeded
# generator and stored, so the file alone is the reference.
import argparse
import json
import math

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--out", default="tests/data/torch_ops.json")
a = ap.parse_args()

torch.manual_seed(20261124)
G = torch.Generator().manual_seed(7)
DT = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
      torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}
CASES = []


def enc(t):
    t = t.detach()
    name = DT[t.dtype]
    if t.dtype == torch.bool:
        data = [bool(v) for v in t.reshape(-1).tolist()]
    elif t.dtype in (torch.int64, torch.int32):
        data = [int(v) for v in t.reshape(-1).tolist()]
    else:
        data = [float(v) for v in t.to(torch.float64).reshape(-1).tolist()]
        assert all(math.isfinite(v) for v in data), "JSON holds finite values only"
    return {"shape": list(t.shape), "dtype": name, "data": data}


def randn(*shape, dtype=torch.float64):
    return torch.randn(tuple(shape), generator=G, dtype=torch.float64).to(dtype)


def pos(*shape):
    """Positive values in [0.25, 2.25)."""
    return torch.rand(*shape, generator=G, dtype=torch.float64) * 2 + 0.25


def ints(lo, hi, *shape, dtype=torch.float64):
    """Small integers (as floats by default): equal values make ties."""
    return torch.randint(lo, hi, shape, generator=G).to(dtype)


def sixteenths(lo, hi, *shape):
    return torch.randint(int(lo * 16), int(hi * 16) + 1, shape, generator=G).double() / 16


def case(name, op, args, inputs, fn, grad=True):
    """Runs fn(*inputs); with grad, also the gradients of sum((out * w).sum()) for each
    floating-point input."""
    assert name not in {c["name"] for c in CASES}, name
    xs = [x.clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    out = fn(*xs)
    many = isinstance(out, (list, tuple))
    outs = list(out) if many else [out]
    c = {"name": name, "op": op, "args": args, "inputs": [enc(x) for x in inputs]}
    if many:
        c["outputs"] = [enc(o) for o in outs]
    else:
        c["output"] = enc(outs[0])
    if grad:
        ws = [randn(*o.shape, dtype=o.dtype) for o in outs]
        loss = sum((o * w).sum() for o, w in zip(outs, ws))
        loss.backward()
        c["weights"] = [enc(w) for w in ws]
        c["grads"] = [None if x.grad is None and not x.is_floating_point() else
                      enc(x.grad if x.grad is not None else torch.zeros_like(x)) for x in xs]
    CASES.append(c)


# ---- comparisons (broadcasting; Bool results) ----
cmp = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
x34, y4, y31 = ints(-2, 3, 3, 4), ints(-2, 3, 4), ints(-2, 3, 3, 1)
for op, f in cmp.items():
    case(f"{op}_bcast_row", op, {}, [x34, y4], f, grad=False)
    case(f"{op}_bcast_col", op, {}, [x34, y31], f, grad=False)
case("lt_i64_f64", "lt", {}, [ints(-2, 3, 3, 4, dtype=torch.int64), y4 + 0.5], torch.lt, grad=False)
case("eq_i32_i32", "eq", {}, [ints(-1, 2, 2, 3, dtype=torch.int32), ints(-1, 2, 3, dtype=torch.int32)],
     torch.eq, grad=False)

# ---- selection ----
cond = torch.rand(3, 4, generator=G) < 0.5
case("where_cond", "where_cond", {}, [cond, randn(3, 4), randn(3, 4)],
     lambda c, t, f: torch.where(c, t, f))
case("where_cond_bcast", "where_cond", {}, [cond, randn(3, 1), randn(4)],
     lambda c, t, f: torch.where(c, t, f))
case("masked_fill", "masked_fill", {"value": -2.5}, [randn(3, 4), cond],
     lambda x, m: x.masked_fill(m, -2.5))
case("masked_fill_bcast", "masked_fill", {"value": 7.0}, [randn(3, 4), torch.tensor([True, False, False, True])],
     lambda x, m: x.masked_fill(m, 7.0))
for k in (-1, 0, 1):
    case(f"tril_k{k}", "tril", {"k": k}, [randn(2, 4, 5)], lambda x, k=k: x.tril(k))
    case(f"triu_k{k}", "triu", {"k": k}, [randn(2, 4, 5)], lambda x, k=k: x.triu(k))

# ---- unary ----
xa = randn(3, 5)
xa[0, 0] = 0.0  # abs'(0) = 0 in PyTorch
case("abs", "abs", {}, [xa], torch.abs)
case("rsqrt", "rsqrt", {}, [pos(3, 5)], torch.rsqrt)
for op, f in {"sin": torch.sin, "cos": torch.cos, "silu": F.silu, "erf": torch.erf,
              "gelu": lambda x: F.gelu(x, approximate="tanh"), "gelu_erf": F.gelu}.items():
    case(op, op, {}, [randn(3, 5) * 2], f)
case("pow_2", "pow", {"exponent": 2.0}, [randn(3, 4)], lambda x: x.pow(2.0))
for e in (0.5, -1.0, 3.5):
    case(f"pow_{e}", "pow", {"exponent": e}, [pos(3, 4)], lambda x, e=e: x.pow(e))
xc = randn(3, 5)
xc[0, 0], xc[0, 1] = -0.5, 0.5  # exactly at the bounds: PyTorch passes the gradient there
for lo, hi in ((-0.5, 0.5), (-0.5, None), (None, 0.5)):
    case(f"clamp_{lo}_{hi}", "clamp", {"min": lo, "max": hi}, [xc], lambda x, lo=lo, hi=hi: x.clamp(lo, hi))

# ---- binary maximum / minimum (ties: PyTorch splits the gradient in halves) ----
ma, mb = ints(-2, 3, 3, 4), ints(-2, 3, 3, 4)
for op, f in {"maximum": torch.maximum, "minimum": torch.minimum}.items():
    case(op, op, {}, [ma, mb], f)
    case(f"{op}_bcast", op, {}, [ma, ints(-2, 3, 4)], f)

# ---- reductions ----
xr = ints(-3, 4, 3, 4, 5)  # many ties
for dims in ([1], [0, 2], []):
    for keep in (False, True):
        full = dims or [0, 1, 2]
        tag = "_".join(map(str, dims)) or "all"
        # max/min over a dim list: values as torch.amax/amin (the gradient shared among ties)
        case(f"max_{tag}_k{int(keep)}", "max", {"dims": dims, "keepdim": keep}, [xr],
             lambda x, d=full, k=keep: x.amax(d, k))
        case(f"min_{tag}_k{int(keep)}", "min", {"dims": dims, "keepdim": keep}, [xr],
             lambda x, d=full, k=keep: x.amin(d, k))
        case(f"logsumexp_{tag}_k{int(keep)}", "logsumexp", {"dims": dims, "keepdim": keep}, [randn(3, 4, 5)],
             lambda x, d=full, k=keep: x.logsumexp(d, k))
for dim in (0, 1, 2):
    for keep in (False, True):
        # argmax/argmin: ties take the lowest index
        case(f"argmax_d{dim}_k{int(keep)}", "argmax", {"dim": dim, "keepdim": keep}, [xr],
             lambda x, d=dim, k=keep: x.argmax(d, k), grad=False)
        case(f"argmin_d{dim}_k{int(keep)}", "argmin", {"dim": dim, "keepdim": keep}, [xr],
             lambda x, d=dim, k=keep: x.argmin(d, k), grad=False)
for dim in (0, 2):
    case(f"softmax_d{dim}", "softmax", {"dim": dim}, [randn(3, 4, 5)], lambda x, d=dim: x.softmax(d))
    case(f"log_softmax_d{dim}", "log_softmax", {"dim": dim}, [randn(3, 4, 5)], lambda x, d=dim: x.log_softmax(d))

# ---- shapes ----
case("permute_201", "permute", {"dims": [2, 0, 1]}, [randn(2, 3, 4)], lambda x: x.permute(2, 0, 1))
case("permute_1032", "permute", {"dims": [1, 0, 3, 2]}, [randn(2, 3, 2, 2)], lambda x: x.permute(1, 0, 3, 2))
case("squeeze_1", "squeeze", {"dim": 1}, [randn(3, 1, 4)], lambda x: x.squeeze(1))
case("squeeze_2", "squeeze", {"dim": 2}, [randn(3, 4, 1)], lambda x: x.squeeze(2))
for d in (0, 1, 2):
    case(f"unsqueeze_{d}", "unsqueeze", {"dim": d}, [randn(3, 4)], lambda x, d=d: x.unsqueeze(d))
for s, e in ((1, 2), (0, 3), (2, 3)):
    case(f"flatten_{s}_{e}", "flatten", {"start": s, "end": e}, [randn(2, 3, 2, 2)],
         lambda x, s=s, e=e: x.flatten(s, e))
for d in (0, 1, 2):
    case(f"stack_{d}", "stack", {"dim": d}, [randn(3, 4), randn(3, 4), randn(3, 4)],
         lambda *xs, d=d: torch.stack(xs, d))
case("split_3_d0", "split", {"size": 3, "dim": 0}, [randn(7, 4)], lambda x: x.split(3, 0))
case("split_4_d1", "split", {"size": 4, "dim": 1}, [randn(3, 8)], lambda x: x.split(4, 1))
case("chunk_3_d0_len7", "chunk", {"n": 3, "dim": 0}, [randn(7, 4)], lambda x: x.chunk(3, 0))
case("chunk_4_d1_len10", "chunk", {"n": 4, "dim": 1}, [randn(3, 10)], lambda x: x.chunk(4, 1))
case("chunk_3_d0_len6", "chunk", {"n": 3, "dim": 0}, [randn(6, 2)], lambda x: x.chunk(3, 0))
# ceil(6/4) = 2: PyTorch gives 3 chunks, not 4
case("chunk_4_d1_len6", "chunk", {"n": 4, "dim": 1}, [randn(3, 6)], lambda x: x.chunk(4, 1))

# ---- indexing ----
i64 = lambda v: torch.tensor(v, dtype=torch.int64)
case("index_select_d0", "index_select", {"dim": 0}, [randn(5, 4), i64([4, 0, 2, 2])],
     lambda x, i: x.index_select(0, i))
case("index_select_d1", "index_select", {"dim": 1}, [randn(5, 4), i64([3, 1])],
     lambda x, i: x.index_select(1, i))
case("index_select_d0_i32", "index_select", {"dim": 0}, [randn(5, 4), torch.tensor([1, 1, 3], dtype=torch.int32)],
     lambda x, i: x.index_select(0, i))
case("gather_d1", "gather", {"dim": 1}, [randn(3, 4), i64([[0, 3], [2, 2], [1, 0]])],
     lambda x, i: torch.gather(x, 1, i))
case("gather_d0", "gather", {"dim": 0}, [randn(3, 4), i64([[2, 0, 1, 1], [0, 0, 2, 1]])],
     lambda x, i: torch.gather(x, 0, i))
case("scatter_add_d1", "scatter_add", {"dim": 1},
     [randn(3, 5), i64([[0, 4, 0], [2, 2, 2], [1, 3, 4]]), randn(3, 3)],
     lambda x, i, s: x.scatter_add(1, i, s))
case("scatter_add_d0", "scatter_add", {"dim": 0},
     [randn(4, 3), i64([[3, 0, 3], [3, 1, 0]]), randn(2, 3)],
     lambda x, i, s: x.scatter_add(0, i, s))
case("gather_rows", "gather_rows", {}, [randn(6, 4), i64([[5, 0, 2], [2, 2, 1]])], lambda t, i: t[i])
case("gather_rows_i32", "gather_rows", {}, [randn(6, 4), torch.tensor([[3, 0], [3, 5]], dtype=torch.int32)],
     lambda t, i: t[i])

# ---- nn ----
case("cross_entropy", "cross_entropy", {}, [randn(5, 7), i64([3, 0, 6, 3, 1])],
     lambda x, t: F.cross_entropy(x, t))
q, k, v = randn(2, 3, 5, 4), randn(2, 3, 5, 4), randn(2, 3, 5, 4)
case("sdpa", "scaled_dot_product_attention", {"is_causal": False}, [q, k, v],
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
case("sdpa_causal", "scaled_dot_product_attention", {"is_causal": True}, [q, k, v],
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
mask = (torch.rand(5, 5, generator=G) < 0.6) | torch.eye(5, dtype=torch.bool)  # True = attend; no empty row
case("sdpa_bool_mask", "scaled_dot_product_attention", {"is_causal": False}, [q, k, v, mask],
     lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
case("rms_norm", "rms_norm", {"eps": 1e-6}, [randn(2, 3, 6), sixteenths(0.5, 1.5, 6)],
     lambda x, w: F.rms_norm(x, (6,), w, eps=1e-6))
case("layer_norm", "layer_norm", {"eps": 1e-5}, [randn(2, 3, 6), sixteenths(0.5, 1.5, 6), sixteenths(-0.5, 0.5, 6)],
     lambda x, w, b: F.layer_norm(x, (6,), w, b, eps=1e-5))

# ---- dtypes: casts ----
f32 = lambda v: torch.tensor(v, dtype=torch.float32)
trunc = torch.tensor([-2.7, -2.0, -0.5, -0.0, 0.0, 0.5, 0.99, 2.7, 3.0, 1e9], dtype=torch.float64)
for dt in (torch.int64, torch.int32):
    case(f"to_dtype_f64_{DT[dt]}", "to_dtype", {"dtype": DT[dt]}, [trunc], lambda x, dt=dt: x.to(dt), grad=False)
case("to_dtype_f32_i64", "to_dtype", {"dtype": "i64"}, [trunc.float()], lambda x: x.to(torch.int64), grad=False)
case("to_dtype_f64_bool", "to_dtype", {"dtype": "bool"}, [trunc], lambda x: x.to(torch.bool), grad=False)
case("to_dtype_i64_bool", "to_dtype", {"dtype": "bool"}, [i64([0, 3, -1, 0])], lambda x: x.to(torch.bool), grad=False)
case("to_dtype_bool_f32", "to_dtype", {"dtype": "f32"}, [torch.tensor([True, False, True])],
     lambda x: x.to(torch.float32), grad=False)
case("to_dtype_i64_f64", "to_dtype", {"dtype": "f64"}, [i64([-5, 0, 7, 2**40])], lambda x: x.to(torch.float64), grad=False)
case("to_dtype_i32_i64", "to_dtype", {"dtype": "i64"}, [torch.tensor([-5, 0, 7], dtype=torch.int32)],
     lambda x: x.to(torch.int64), grad=False)
# f32 -> f16: exact ties (1 + 2^-11 -> 1, 1 + 3 * 2^-11 -> 1 + 2^-9), just above/below a tie,
# a subnormal tie (2^-25 -> 0, 3 * 2^-25 -> 2^-23), negatives, 65504 (the largest finite)
h = [1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-11 + 2**-20, 1 + 2**-11 - 2**-20, 2**-25, 3 * 2**-25,
     -(1 + 2**-11), -(1 + 3 * 2**-11), 65504.0, 0.1, -0.0, 3.14159265]
# f32 -> bf16: ties at 1 + 2^-8 -> 1 and 1 + 3 * 2^-8 -> 1 + 2^-6, near ties, large values
b = [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 1 + 2**-8 - 2**-20, -(1 + 2**-8), -(1 + 3 * 2**-8),
     3.0e38, 1e-40, 0.1, -0.0, 3.14159265, 255.5]
case("to_dtype_f32_f16_ties", "to_dtype", {"dtype": "f16"}, [f32(h)], lambda x: x.half(), grad=False)
case("to_dtype_f32_bf16_ties", "to_dtype", {"dtype": "bf16"}, [f32(b)], lambda x: x.bfloat16(), grad=False)
case("to_dtype_f32_f16_random", "to_dtype", {"dtype": "f16"}, [randn(16, dtype=torch.float32)], lambda x: x.half(), grad=False)
case("to_dtype_f32_bf16_random", "to_dtype", {"dtype": "bf16"}, [randn(16, dtype=torch.float32)],
     lambda x: x.bfloat16(), grad=False)
# f64 just above a tie: PyTorch's CPU cast goes through f32, so it rounds twice (to 1.0 here)
above = torch.tensor([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40], dtype=torch.float64)
case("to_dtype_f64_f16_via_f32", "to_dtype", {"dtype": "f16"}, [above], lambda x: x.half(), grad=False)
case("to_dtype_f64_bf16_via_f32", "to_dtype", {"dtype": "bf16"}, [above], lambda x: x.bfloat16(), grad=False)
case("to_dtype_f16_f32", "to_dtype", {"dtype": "f32"}, [f32(h).half()], lambda x: x.float(), grad=False)
case("to_dtype_bf16_f64", "to_dtype", {"dtype": "f64"}, [f32(b).bfloat16()], lambda x: x.double(), grad=False)

# ---- dtypes: promotion of add (result dtype and values) ----
PROMO = [torch.bool, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]
pa, pb = [True, False, True], [True, True, False]
for da in PROMO:
    for db in PROMO:
        case(f"promote_add_{DT[da]}_{DT[db]}", "add", {},
             [torch.tensor(pa).to(da), torch.tensor(pb).to(db)], torch.add, grad=False)

# ---- 16-bit arithmetic (PyTorch CPU: f32 accumulation, one rounding) ----
for dt in (torch.float16, torch.bfloat16):
    n = DT[dt]
    case(f"matmul_{n}", "matmul", {}, [randn(4, 32, dtype=dt), randn(32, 3, dtype=dt)], torch.matmul, grad=False)
    case(f"sum_{n}_d1", "sum", {"dims": [1], "keepdim": False}, [randn(4, 64, dtype=dt)],
         lambda x: x.sum(1), grad=False)
    case(f"sum_{n}_all", "sum", {"dims": [], "keepdim": False}, [randn(4, 64, dtype=dt)],
         lambda x: x.sum(), grad=False)
    case(f"softmax_{n}", "softmax", {"dim": 1}, [randn(3, 10, dtype=dt) * 3], lambda x: x.softmax(1), grad=False)
    case(f"add_{n}", "add", {}, [randn(3, 4, dtype=dt), randn(3, 4, dtype=dt)], torch.add, grad=False)
case("sum_bool", "sum", {"dims": [], "keepdim": False}, [cond], lambda x: x.sum(), grad=False)
case("sum_i32_d0", "sum", {"dims": [0], "keepdim": False}, [ints(-5, 6, 3, 4, dtype=torch.int32)],
     lambda x: x.sum(0), grad=False)


# ---- clip_grad_norm_ ----
def clip(max_norm, scale):
    ps = [randn(3, 4), randn(5), randn(2, 2, 2)]
    gs = [randn(*p.shape) * scale for p in ps]
    leaves = [p.clone().requires_grad_(True) for p in ps]
    for leaf, g in zip(leaves, gs):
        leaf.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(leaves, max_norm)
    CASES.append({"name": f"clip_grad_norm_{max_norm:g}", "op": "clip_grad_norm", "args": {"max_norm": max_norm},
                  "inputs": [enc(p) for p in ps], "given_grads": [enc(g) for g in gs],
                  "outputs": [enc(norm.to(torch.float64))] + [enc(leaf.grad) for leaf in leaves]})


clip(1.0, 1.0)  # norm about 5: clipped
clip(100.0, 1.0)  # not clipped: the grads come back unchanged

# ---- session 25: sign, log1p, expm1; sort, argsort and topk (stable; ties from small integers) ----
case("sign", "sign", {}, [torch.cat([ints(-2, 3, 6), randn(6)]).reshape(3, 4)], torch.sign)
case("sign_i64", "sign", {}, [ints(-3, 4, 2, 5, dtype=torch.int64)], torch.sign, grad=False)
tiny = torch.tensor([1e-12, -3e-9, 2.5e-6, -1e-4, 0.01, -0.3, 0.9, 5.0], dtype=torch.float64)
case("log1p", "log1p", {}, [torch.cat([tiny, pos(4)])], torch.log1p)
case("log1p_f32", "log1p", {}, [torch.cat([tiny, pos(4)]).float()], torch.log1p)
case("expm1", "expm1", {}, [torch.cat([tiny, -pos(4)])], torch.expm1)
case("expm1_f32", "expm1", {}, [torch.cat([tiny, randn(4)]).float()], torch.expm1)
for dim in (0, 1):
    for desc in (False, True):
        tag = f"d{dim}_{'desc' if desc else 'asc'}"
        case(f"sort_{tag}", "sort", {"dim": dim, "descending": desc}, [ints(-3, 4, 5, 6) / 2],
             lambda x, dim=dim, desc=desc: tuple(torch.sort(x, dim=dim, descending=desc, stable=True)))
        case(f"argsort_{tag}_i64", "argsort", {"dim": dim, "descending": desc},
             [ints(-3, 4, 4, 7, dtype=torch.int64)],
             lambda x, dim=dim, desc=desc: torch.argsort(x, dim=dim, descending=desc, stable=True),
             grad=False)
case("sort_f32_3d", "sort", {"dim": 2, "descending": False}, [randn(2, 3, 9, dtype=torch.float32)],
     lambda x: tuple(torch.sort(x, dim=2)))
for largest in (True, False):
    case(f"topk_{'largest' if largest else 'smallest'}", "topk", {"k": 3, "dim": 1, "largest": largest},
         [randn(4, 8)],  # distinct values: PyTorch's topk does not order ties by index
         lambda x, largest=largest: tuple(torch.topk(x, 3, dim=1, largest=largest)))

# ---- session 26: fmod, remainder, floor_divide (exact remainders; large f32 quotients) ----
def divisors(*shape):
    """Divisors in +-[0.25, 2.25): both signs, none near zero."""
    return pos(*shape) * torch.where(torch.rand(*shape, generator=G) < 0.5, -1.0, 1.0).double()


big = torch.tensor([1e8, -1e8, 123456789.0, -98765432.0, 1e7 + 1, 3.5], dtype=torch.float32)
for op, f in {"fmod": torch.fmod, "remainder": torch.remainder, "floor_divide": torch.floor_divide}.items():
    grad = op != "floor_divide"  # PyTorch: floor_divide has no gradient
    case(op, op, {}, [randn(3, 4) * 4, divisors(3, 4)], f, grad=grad)
    case(f"{op}_bcast", op, {}, [randn(3, 4) * 4, divisors(4)], f, grad=grad)
    case(f"{op}_f32_large", op, {}, [big, torch.tensor([3.0, 3.0, 7.0, -3.0, 3.0, -2.0])], f, grad=False)
    case(f"{op}_i64", op, {}, [ints(-20, 21, 3, 4, dtype=torch.int64),
                               torch.tensor([3, -3, 7, -2], dtype=torch.int64)], f, grad=False)

with open(a.out, "w") as f:
    json.dump(CASES, f, separators=(",", ":"))
    f.write("\n")
print(json.dumps({"cases": len(CASES), "torch": torch.__version__, "out": a.out}))
