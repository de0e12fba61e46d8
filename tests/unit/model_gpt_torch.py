#!/usr/bin/env python3
"""PyTorch's training of a ddp GPT spec, for tests/unit/test_model_gpt.c.

usage: model_gpt_torch.py DIR SPEC BATCH STEPS OPTIMIZER LR MOMENTUM WEIGHT_DECAY CLIP [DROP]
Builds GPT-2's architecture for gpt:L-H-D-T (trainer/model_gpt.h: byte vocabulary, learned
positions, pre-LayerNorm blocks, tanh GELU, the output head tied to the token embedding),
loads its parameters from DIR/params.f32 (definition order = named_parameters()), and runs
STEPS steps of torch.optim.SGD (OPTIMIZER sgd: momentum, weight decay as L2) or
torch.optim.AdamW (adamw: betas 0.9, 0.999, eps 1e-8, decoupled weight decay) on
consecutive batches of BATCH windows of T+1 bytes of DIR/tokens.u8, mean cross-entropy of
every position's next byte, with torch.nn.utils.clip_grad_norm_(CLIP) before each step when
CLIP > 0. With DROP > 0, dropout as GPT-2 has it (the embeddings' sum, each block's
attention probabilities, its attention's and its MLP's output), the draws read from
DIR/keep.u8 in the order the forward makes them (ATen's noise: the draw divided by 1 - p).
Writes DIR/grads.f32 (the first step's gradients), DIR/loss.f64 (the first
step's loss times BATCH) and DIR/params_out.f32. Exits 77 without torch.
"""
import math
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print("model_gpt_torch.py: %s" % e, file=sys.stderr)
    sys.exit(77)


class Draws:
    """Dropout with the C side's draws, consumed in order."""

    def __init__(self, keep, p):
        self.keep, self.p, self.at = keep, p, 0

    def __call__(self, x):
        if self.keep is None:
            return x
        n = x.numel()
        assert self.at + n <= self.keep.size, "keep.u8 holds too few draws"
        k = self.keep[self.at:self.at + n].reshape(x.shape)
        self.at += n
        return x * torch.from_numpy(k.astype(np.float32)).div_(1 - self.p)


NO_DROP = Draws(None, 0.0)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.heads = heads
        self.drop = NO_DROP

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.heads
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.heads, hs).transpose(1, 2)
        k = k.view(b, t, self.heads, hs).transpose(1, 2)
        v = v.view(b, t, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = self.drop(att.masked_fill(~mask, float("-inf")).softmax(dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.drop(self.c_proj(y))


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)
        self.drop = NO_DROP

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, layers, heads, d, t):
        super().__init__()
        self.wte = nn.Embedding(256, d)
        self.wpe = nn.Embedding(t, d)
        self.h = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.drop = NO_DROP

    def set_drop(self, drop):
        self.drop = drop
        for blk in self.h:
            blk.attn.drop = drop
            blk.mlp.drop = drop

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(t)))
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def main():
    d, spec = sys.argv[1], sys.argv[2]
    batch, steps = int(sys.argv[3]), int(sys.argv[4])
    opt_name = sys.argv[5]
    lr, mom, wd, clip = (float(v) for v in sys.argv[6:10])
    drop = float(sys.argv[10]) if len(sys.argv) > 10 else 0.0
    assert spec.startswith("gpt:")
    L, H, D, T = (int(v) for v in spec[4:].split("-"))
    torch.set_num_threads(1)
    net = Gpt(L, H, D, T)
    params = list(net.parameters())
    flat = np.fromfile("%s/params.f32" % d, dtype="<f4")
    off = 0
    with torch.no_grad():
        for p in params:
            p.copy_(torch.from_numpy(flat[off:off + p.numel()].reshape(p.shape)))
            off += p.numel()
    assert off == flat.size, "params.f32 holds %d floats, the model %d" % (flat.size, off)
    if drop > 0:
        net.set_drop(Draws(np.fromfile("%s/keep.u8" % d, dtype=np.uint8), drop))
    tok = np.fromfile("%s/tokens.u8" % d, dtype=np.uint8).astype(np.int64)
    tok = torch.from_numpy(tok.reshape(-1, T + 1))
    if opt_name == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=mom, weight_decay=wd)
    for s in range(steps):
        w = tok[s * batch:(s + 1) * batch]
        opt.zero_grad()
        logits = net(w[:, :T])
        loss = F.cross_entropy(logits.reshape(-1, 256), w[:, 1:].reshape(-1))
        loss.backward()
        if s == 0:
            g = torch.cat([p.grad.reshape(-1) for p in params])
            g.numpy().astype("<f4").tofile("%s/grads.f32" % d)
            np.array([loss.item() * batch], dtype="<f8").tofile("%s/loss.f64" % d)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
    with torch.no_grad():
        out = torch.cat([p.reshape(-1) for p in params])
    out.numpy().astype("<f4").tofile("%s/params_out.f32" % d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
