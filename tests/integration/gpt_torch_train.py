#!/usr/bin/env python3
"""The same GPT as ddp-worker's, trained by PyTorch, for test_worker_gpt_torch.py and
bench/models.

usage: gpt_torch_train.py TRAIN VALID SPEC BATCH STEPS LR WARMUP WEIGHT_DECAY CLIP SEED [INIT]
Cuts TRAIN and VALID into windows of T+1 bytes as trainer/text.h does (window i = bytes
i*T .. i*T+T), trains tests/unit/model_gpt_torch.py's Gpt (GPT-2's init: normal 0.02, the
residual projections 0.02/sqrt(2L); or, given INIT, the parameters of that file, f32 in
definition order, as ddp-worker --dump-params writes them) for STEPS steps on consecutive batches of BATCH training
windows in order (ddp-worker --shuffle off), AdamW (0.9, 0.999, eps 1e-8), linear warmup over
WARMUP steps then cosine to 0 at STEPS (ddp-worker's warmup-cosine), global-norm clipping at
CLIP, one thread; then prints one JSON line: the validation loss (mean over the windows of
each one's mean loss, nats per byte) and the training throughput in tokens/s.
Exits 77 without torch.
"""
import importlib.util
import json
import math
import os
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("gpt_torch_train.py: %s" % e, file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
spec_ = importlib.util.spec_from_file_location(
    "model_gpt_torch", os.path.join(HERE, "..", "unit", "model_gpt_torch.py"))
mgt = importlib.util.module_from_spec(spec_)
spec_.loader.exec_module(mgt)


def windows(path, t):
    b = np.fromfile(path, dtype=np.uint8).astype(np.int64)
    n = (len(b) - 1) // t
    idx = np.arange(n)[:, None] * t + np.arange(t + 1)[None, :]
    return torch.from_numpy(b[idx])


def init_gpt2(net, layers):
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                    name == "ln_f.weight":
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            elif name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * layers))
            else:
                p.normal_(0.0, 0.02)


def main():
    train_path, valid_path, spec = sys.argv[1:4]
    batch, steps = int(sys.argv[4]), int(sys.argv[5])
    lr, warmup, wd, clip = float(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8]), \
        float(sys.argv[9])
    seed = int(sys.argv[10])
    L, H, D, T = (int(v) for v in spec[4:].split("-"))
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    net = mgt.Gpt(L, H, D, T)
    if len(sys.argv) > 11:
        flat = np.fromfile(sys.argv[11], dtype="<f4")
        off = 0
        with torch.no_grad():
            for p in net.parameters():
                p.copy_(torch.from_numpy(flat[off:off + p.numel()].reshape(p.shape)))
                off += p.numel()
        assert off == flat.size, "%s holds %d floats, the model %d" % (sys.argv[11], flat.size,
                                                                       off)
    else:
        init_gpt2(net, L)
    tr, va = windows(train_path, T), windows(valid_path, T)
    params = list(net.parameters())
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)

    def lr_at(s):
        if s < warmup:
            return (s + 1) / warmup
        f = min(1.0, (s - warmup) / max(1, steps - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * f))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    per_epoch = (len(tr) + batch - 1) // batch
    t0 = time.monotonic()
    for s in range(steps):
        k = s % per_epoch
        w = tr[k * batch:(k + 1) * batch]
        opt.zero_grad()
        logits = net(w[:, :T])
        loss = F.cross_entropy(logits.reshape(-1, 256), w[:, 1:].reshape(-1))
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        sched.step()
    secs = time.monotonic() - t0
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(va), batch):
            w = va[i:i + batch]
            logits = net(w[:, :T])
            per = F.cross_entropy(logits.reshape(-1, 256), w[:, 1:].reshape(-1),
                                  reduction="none").reshape(len(w), T).mean(dim=1)
            total += per.sum().item()
            count += len(w)
    print(json.dumps({"val_loss": total / count,
                      "tokens_per_s": steps * batch * T / secs, "train_s": secs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
