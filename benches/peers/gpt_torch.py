# A GPT-2-style decoder in PyTorch: the reference of `examples/gpt.rs` (losses) and its peer
# (tokens/s under DDP or FSDP on Gloo).
#
#   python gpt_torch.py --config tiny --write-init tests/data/gpt_tiny_init.safetensors --steps 0
#   python gpt_torch.py --config tiny --init tests/data/gpt_tiny_init.safetensors \
#       --data examples/data/devils_dictionary.txt --steps 20 --dtype f32,f64 \
#       --record tests/data/gpt_tiny_losses.json
#   torchrun --nproc-per-node 2 gpt_torch.py --config small --ddp --steps 20    (or --fsdp)
#
# Model (names as the state dict and the safetensors file spell them):
#   tok_emb.weight (vocab, d), pos_emb.weight (seq, d): x = tok_emb[tokens] + pos_emb[0..seq]
#   per block i, pre-norm:
#     x = x + attn(ln1(x)), x = x + mlp(ln2(x))
#     blocks.i.ln1.{weight,bias}, blocks.i.ln2.{weight,bias}: LayerNorm(d), eps 1e-5
#     blocks.i.attn.qkv.{weight (3d, d), bias (3d)}: q, k, v = the three d-wide slices of the
#       output's last dim, in that order; each viewed (batch, seq, heads, d/heads) and transposed
#       to (batch, heads, seq, d/heads); causal scaled_dot_product_attention (scale
#       1/sqrt(d/heads)); transposed back and reshaped to (batch, seq, d)
#     blocks.i.attn.proj.{weight (d, d), bias (d)}
#     blocks.i.mlp.fc.{weight (4d, d), bias (4d)}, GELU (tanh form), blocks.i.mlp.proj.{weight (d, 4d), bias (d)}
#   ln_f.{weight,bias}; head.weight (vocab, d), no bias, not tied to tok_emb
#   loss: cross_entropy(logits (batch*seq, vocab), next bytes (batch*seq)), mean
# Init (--write-init, seed --seed): Linear weights and both embeddings N(0, 0.02); attn.proj and
#   mlp.proj weights N(0, 0.02 / sqrt(2 * layers)); biases 0; LayerNorm weight 1, bias 0. Stored f32.
# Data (--data FILE): tokens are the file's bytes (vocab 256), n = len(bytes). Batch row i
#   (0 <= i < batch) of step s (0-based) is the window at offset
#     o = ((s * batch + i) * stride) mod (n - seq - 1),   stride = --stride (default seq)
#   inputs bytes[o : o + seq], targets bytes[o + 1 : o + seq + 1]. Under --ddp/--fsdp with r ranks,
#   rank k takes rows [k * batch / r, (k + 1) * batch / r) of the same global batch.
# Training: AdamW(lr, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 on every parameter,
#   decoupled as PyTorch's), clip_grad_norm_(1.0) before each step; learning rate of step s:
#     s < warmup:  lr * (s + 1) / warmup
#     else:        min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * (s - warmup) / max(1, steps - warmup)))
#   with min_lr = lr / 10, warmup = --warmup (default max(1, steps // 10)).
# --record FILE writes {"config": {...}, "data": {...}, "train": {...}, "losses": {"f32": [...],
#   "f64": [...]}}: the loss of each step (before that step's update), for each --dtype.
# --device cuda trains on the GPU (one process; the peer of `gflow-bench gpt --device cuda|wgpu`):
#   each timed step ends with torch.cuda.synchronize(), and the loss is read every step as the
#   CPU runs do (one small copy to the host).
# Timing lines (JSON, rank 0): {"system": "torch-gloo" | "torch-cpu" | "torch-cuda", "op": "gpt_train", "config",
#   "mode": "single" | "ddp" | "fsdp", "ranks", "tokens_per_s", "median_step_s", ...}.
import argparse
import hashlib
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(vocab=256, d=64, layers=2, heads=4, seq=32, batch=8, lr=1e-3),
    "small": dict(vocab=256, d=256, layers=4, heads=8, seq=128, batch=16, lr=6e-4),
    "50m": dict(vocab=256, d=512, layers=16, heads=8, seq=256, batch=8, lr=3e-4),  # 50.8M parameters (tiny 0.13M, small 3.3M)
}
DTYPES = {"f32": torch.float32, "f64": torch.float64}


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq, **_):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb.weight[:t]
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def fresh_init(model, layers, seed):
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, p in model.state_dict().items():
        if name.endswith("bias"):
            v = torch.zeros(p.shape)
        elif ".ln" in name or name.startswith("ln_f"):
            v = torch.ones(p.shape)
        else:
            std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
            v = torch.randn(p.shape, generator=g) * std
        sd[name] = v.float().contiguous()
    return sd


def batch_at(data, step, rows, batch, seq, stride):
    """Rows `rows` of step `step`'s batch of `batch` rows (see the header): (inputs, targets)."""
    n = len(data)
    xs, ys = [], []
    for i in rows:
        o = ((step * batch + i) * stride) % (n - seq - 1)
        xs.append(data[o:o + seq])
        ys.append(data[o + 1:o + seq + 1])
    return torch.stack(xs), torch.stack(ys)


def lr_at(s, steps, lr, warmup):
    if s < warmup:
        return lr * (s + 1) / warmup
    lo = lr / 10
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup)))


ap = argparse.ArgumentParser()
ap.add_argument("--config", choices=CONFIGS, default="tiny")
ap.add_argument("--init", help="initial weights (safetensors, the names above)")
ap.add_argument("--write-init", help="write a fresh init (seed --seed) here, then train from it")
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data",
                                               "devils_dictionary.txt"))
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--stride", type=int, help="window stride in bytes (default seq)")
ap.add_argument("--warmup", type=int, help="warm-up steps (default max(1, steps // 10))")
ap.add_argument("--lr", type=float, help="peak learning rate (default: the config's)")
ap.add_argument("--dtype", default="f32", help="comma-separated: f32, f64")
ap.add_argument("--record", help="write the losses here (JSON)")
ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel on Gloo (under torchrun)")
ap.add_argument("--fsdp", action="store_true", help="FSDP2 fully_shard on Gloo (under torchrun)")
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--device", default="cpu", help="cpu or cuda (one process)")
ap.add_argument("--quiet", action="store_true", help="no per-step loss lines")
a = ap.parse_args()
cfg = dict(CONFIGS[a.config])
lr = a.lr or cfg["lr"]
seq, len_batch = cfg["seq"], cfg["batch"]
stride = a.stride or seq
warmup = a.warmup if a.warmup is not None else max(1, a.steps // 10)

dist = None
rank, world = 0, 1
if a.ddp or a.fsdp:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
if a.threads:
    torch.set_num_threads(a.threads)
elif dist is not None:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))

if a.write_init:
    init = fresh_init(Gpt(**cfg), cfg["layers"], a.seed)
    if rank == 0:
        from safetensors.torch import save_file

        save_file(init, a.write_init)
elif a.init:
    from safetensors.torch import load_file

    init = load_file(a.init)
else:
    init = fresh_init(Gpt(**cfg), cfg["layers"], a.seed)

raw = open(a.data, "rb").read()
data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)
assert len(data) > seq + 1, "the data must be longer than a window"
my_rows = range(rank * len_batch // world, (rank + 1) * len_batch // world)

losses = {}
timing = []
for dname in a.dtype.split(","):
    dt = DTYPES[dname]
    model = Gpt(**cfg)
    missing = set(model.state_dict()) ^ set(init)
    assert not missing, f"names that differ between the model and the init: {sorted(missing)}"
    model.load_state_dict({k: v.to(dt) for k, v in init.items()})
    model = model.to(device=a.device, dtype=dt)
    net = model
    if a.ddp:
        net = nn.parallel.DistributedDataParallel(model)
    elif a.fsdp:
        from torch.distributed.fsdp import fully_shard

        for blk in model.blocks:
            fully_shard(blk)
        fully_shard(model)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    losses[dname] = []
    timing = []
    for s in range(a.steps):
        t0 = time.perf_counter()
        for grp in opt.param_groups:
            grp["lr"] = lr_at(s, a.steps, lr, warmup)
        x, y = batch_at(data, s, my_rows, len_batch, seq, stride)
        x, y = x.to(a.device), y.to(a.device)
        loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dist is not None:  # the global batch's loss: the mean of the ranks' (equal-sized) means
            loss = loss.detach().clone()
            dist.all_reduce(loss)
            loss /= world
        losses[dname].append(loss.item())
        if a.device != "cpu":
            torch.cuda.synchronize()
        timing.append(time.perf_counter() - t0)
        if rank == 0 and not a.quiet:
            print(json.dumps({"step": s, "dtype": dname, "loss": loss.item(), "lr": lr_at(s, a.steps, lr, warmup)}),
                  flush=True)
    if rank == 0 and len(timing) > 2:
        med = statistics.median(timing[2:])
        print(json.dumps({"system": "torch-gloo" if dist is not None else f"torch-{a.device}", "op": "gpt_train",
                          "config": a.config, "dtype": dname,
                          "mode": "ddp" if a.ddp else "fsdp" if a.fsdp else "single", "ranks": world,
                          "threads": torch.get_num_threads(), "batch": len_batch, "seq": seq,
                          "median_step_s": med, "tokens_per_s": len_batch * seq / med}), flush=True)

if a.record and rank == 0:
    with open(a.record, "w") as f:
        json.dump({"config": {**cfg, "name": a.config},
                   "data": {"file": os.path.basename(a.data), "bytes": len(raw),
                            "sha256": hashlib.sha256(raw).hexdigest(), "stride": stride},
                   "train": {"steps": a.steps, "lr": lr, "min_lr": lr / 10, "warmup": warmup,
                             "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "clip_grad_norm": 1.0,
                             "init": os.path.basename(a.init or a.write_init or "")},
                   "losses": losses, "torch": torch.__version__}, f, indent=1)
        f.write("\n")
if dist is not None:
    dist.destroy_process_group()
