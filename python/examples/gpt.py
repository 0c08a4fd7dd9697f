"""A GPT in the shape of nanoGPT's model.py and train.py (PyTorch code with ``import gflow as
flow`` in place of ``import torch``), trained data-parallel on global tensors: the parameters are
broadcast over the ranks, each rank builds only its own rows of the batch, and the batch is one
global tensor split by rows. gflow boxes the gradients; nothing else changes with the number of
ranks, and 1, 2 or 4 ranks give the same losses for one seed.

Byte-level, on the Devil's Dictionary (public domain; ``examples/data/``). Run:

    python python/examples/gpt.py --steps 200
    python -m gflow.distributed.launch --nproc_per_node 2 python/examples/gpt.py --steps 200
"""

import argparse
import math
import os
import time
from dataclasses import dataclass

import numpy as np

import gflow as flow
import gflow.nn as nn
import gflow.nn.functional as F


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as GPT-2

    def init_weights(self):
        """nanoGPT's initialisation; on global parameters the values do not depend on the
        number of ranks."""
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = flow.arange(0, t, dtype=flow.long, placement=idx.placement, sbp=flow.sbp.broadcast)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return flow.optim.AdamW(groups, lr=learning_rate, betas=betas)

    @flow.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            bs = self.config.block_size
            idx_cond = idx if idx.size(1) <= bs else idx[:, -bs:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = flow.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = flow.multinomial(probs, num_samples=1)
            idx = flow.cat((idx, idx_next), dim=1)
        return idx


def get_batch(data, step, batch_size, block_size, seed):
    """This rank's rows of the global batch of ``step``: every rank draws the same offsets (one
    generator per step) and keeps its ``split(0)`` share, so the global batch does not depend on
    the number of ranks; it reads only its own rows."""
    rank, world = flow.env.get_rank(), flow.env.get_world_size()
    offsets = np.random.default_rng([seed, step]).integers(0, len(data) - block_size - 1, batch_size)
    lo, hi = batch_size * rank // world, batch_size * (rank + 1) // world
    x = np.stack([data[i:i + block_size] for i in offsets[lo:hi]]).astype(np.int64)
    y = np.stack([data[i + 1:i + 1 + block_size] for i in offsets[lo:hi]]).astype(np.int64)
    placement = flow.placement("cpu", list(range(world)))
    split = flow.sbp.split(0)
    return (flow.tensor(x).to_global(placement=placement, sbp=split),
            flow.tensor(y).to_global(placement=placement, sbp=split))


def get_lr(it, warmup, lr_decay_iters, learning_rate, min_lr):
    """nanoGPT's schedule: linear warm-up, then cosine decay to ``min_lr``."""
    if it < warmup:
        return learning_rate * (it + 1) / (warmup + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup) / (lr_decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_data = os.path.join(here, "..", "..", "examples", "data", "devils_dictionary.txt")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=default_data)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--sample", type=int, default=120, help="bytes to generate at the end")
    ap.add_argument("--log-every", type=int, default=10)
    a = ap.parse_args()

    data = np.frombuffer(open(a.data, "rb").read(), dtype=np.uint8)
    cut = int(len(data) * 0.95)
    train, val = data[:cut], data[cut:]
    world = flow.env.get_world_size()
    placement = flow.placement("cpu", list(range(world)))

    flow.manual_seed(a.seed)
    config = GPTConfig(block_size=a.block_size, n_layer=a.n_layer, n_head=a.n_head,
                       n_embd=a.n_embd)
    model = GPT(config).to_global(placement=placement, sbp=flow.sbp.broadcast)
    model.init_weights()
    optimizer = model.configure_optimizers(0.1, a.lr, (0.9, 0.95))
    n_params = sum(p.numel() for p in model.parameters())
    rank0 = flow.env.get_rank() == 0
    if rank0:
        print(f"{n_params / 1e6:.2f}M parameters, {world} rank(s), "
              f"batch {a.batch_size} x {a.block_size}")

    t0 = time.time()
    step_times = []
    for it in range(a.steps):
        lr = get_lr(it, max(1, a.steps // 20), a.steps, a.lr, a.lr / 10)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train, it, a.batch_size, a.block_size, a.seed)
        t_step = time.perf_counter()
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        flow.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step_times.append(time.perf_counter() - t_step)
        if it % a.log_every == 0 or it == a.steps - 1:
            # a global tensor's value is a collective: every rank asks, rank 0 prints
            lossf = loss.item()
            dt = time.time() - t0
            tokens = (it + 1) * a.batch_size * a.block_size
            if rank0:
                print(f"step {it}: loss {lossf:.4f}, lr {lr:.2e}, {tokens / dt:.0f} tokens/s",
                      flush=True)

    if rank0:
        # the median step (forward, backward, clipping, update) past the first quarter: the
        # figure benches/peers/nanogpt_torch.py gives for PyTorch
        step = float(np.median(step_times[len(step_times) // 4:]))
        print(f"median step {step * 1e3:.1f} ms, {a.batch_size * a.block_size / step:.0f} tokens/s")
    with flow.no_grad():
        losses = [model(*get_batch(val, k, a.batch_size, a.block_size, a.seed + 1))[1].item()
                  for k in range(4)]
    if rank0:
        print(f"val loss {np.mean(losses):.4f}")
    if a.sample > 0:
        start = flow.tensor([[ord("A")]]).to_global(placement=placement, sbp=flow.sbp.broadcast)
        out = model.generate(start, a.sample, temperature=0.8, top_k=40)
        if rank0:
            print("sample:", bytes(out.numpy()[0].astype(np.uint8).tolist()).decode("utf-8", "replace"))


if __name__ == "__main__":
    main()
