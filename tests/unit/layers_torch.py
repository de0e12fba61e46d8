#!/usr/bin/env python3
"""PyTorch's own forward and backward of one layer, for tests/unit/test_layers.c and
test_layers_gpt.c.

usage: layers_torch.py DIR KIND SIZES...
  conv   n cin h w cout k stride pad   reads x w b dy     writes y dx dw db
  pool   n c h w m                     reads x dy         writes y dx
  linear n in out                      reads x w b dy     writes y dx dw db
  relu   cnt                           reads x dy         writes y dx
  xent   n classes                     reads z, labels    writes loss (sum, f64) dz (mean's)
  layernorm n c                        reads x w b dy     writes y dx dw db
  gelu   cnt                           reads x dy         writes y dx
  attention b t c heads [p]            reads qkv dy       writes y dqkv
                                       (with p: dropout of the probabilities, keep.u8)
  dropout cnt p                        reads x dy keep.u8 writes y dx
  embedding b t c tmax                 reads wte wpe dy, tokens (u8, b*t)  writes y dwte dwpe
Arrays are raw little-endian float32 files DIR/<name>.f32 (labels: DIR/labels.u8), shaped
by the sizes. A dropout's mask comes from the C side as DIR/keep.u8 (1 kept, 0 dropped): it
stands in for torch's bernoulli draw, and the rest is ATen's own dropout (noise = the draw
divided by 1 - p; y = x * noise) under autograd. Exits 77 when torch cannot be imported, so that the C test says it skips.
"""
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print("layers_torch.py: %s" % e, file=sys.stderr)
    sys.exit(77)


def load(d, name, shape):
    a = np.fromfile("%s/%s.f32" % (d, name), dtype="<f4")
    return torch.from_numpy(a.reshape(shape).copy()).requires_grad_(True)


def save(d, name, t):
    t.detach().numpy().astype("<f4").tofile("%s/%s.f32" % (d, name))


def noise(d, shape, p):
    """ATen's dropout noise (_dropout_impl: bernoulli_(1 - p), then div_(1 - p)) with the
    C side's draw."""
    keep = np.fromfile("%s/keep.u8" % d, dtype=np.uint8).reshape(shape)
    return torch.from_numpy(keep.astype(np.float32)).div_(1 - p)


def main():
    d, kind = sys.argv[1], sys.argv[2]
    p = None
    if kind == "dropout" or (kind == "attention" and len(sys.argv) == 8):
        p = float(sys.argv[-1])
        sys.argv.pop()
    s = [int(v) for v in sys.argv[3:]]
    torch.set_num_threads(1)
    if kind == "conv":
        n, cin, h, w, cout, k, stride, pad = s
        x = load(d, "x", (n, cin, h, w))
        wt = load(d, "w", (cout, cin, k, k))
        b = load(d, "b", (cout,))
        y = torch.nn.functional.conv2d(x, wt, b, stride=stride, padding=pad)
        dy = load(d, "dy", tuple(y.shape)).detach()
        y.backward(dy)
        save(d, "y", y)
        save(d, "dx", x.grad)
        save(d, "dw", wt.grad)
        save(d, "db", b.grad)
    elif kind == "pool":
        n, c, h, w, m = s
        x = load(d, "x", (n, c, h, w))
        y = torch.nn.functional.max_pool2d(x, m)
        dy = load(d, "dy", tuple(y.shape)).detach()
        y.backward(dy)
        save(d, "y", y)
        save(d, "dx", x.grad)
    elif kind == "linear":
        n, fin, fout = s
        x = load(d, "x", (n, fin))
        wt = load(d, "w", (fout, fin))
        b = load(d, "b", (fout,))
        y = torch.nn.functional.linear(x, wt, b)
        y.backward(load(d, "dy", (n, fout)).detach())
        save(d, "y", y)
        save(d, "dx", x.grad)
        save(d, "dw", wt.grad)
        save(d, "db", b.grad)
    elif kind == "relu":
        (cnt,) = s
        x = load(d, "x", (cnt,))
        y = torch.relu(x)
        y.backward(load(d, "dy", (cnt,)).detach())
        save(d, "y", y)
        save(d, "dx", x.grad)
    elif kind == "xent":
        n, classes = s
        z = load(d, "z", (n, classes))
        labels = np.fromfile("%s/labels.u8" % d, dtype=np.uint8).astype(np.int64)
        lab = torch.from_numpy(labels)
        loss_sum = torch.nn.functional.cross_entropy(z.double(), lab, reduction="sum")
        np.array([loss_sum.item()], dtype="<f8").tofile("%s/loss.f64" % d)
        torch.nn.functional.cross_entropy(z, lab, reduction="mean").backward()
        save(d, "dz", z.grad)
    elif kind == "layernorm":
        n, c = s
        x = load(d, "x", (n, c))
        wt = load(d, "w", (c,))
        b = load(d, "b", (c,))
        y = torch.nn.functional.layer_norm(x, (c,), wt, b, eps=1e-5)
        y.backward(load(d, "dy", (n, c)).detach())
        save(d, "y", y)
        save(d, "dx", x.grad)
        save(d, "dw", wt.grad)
        save(d, "db", b.grad)
    elif kind == "gelu":
        (cnt,) = s
        x = load(d, "x", (cnt,))
        y = torch.nn.functional.gelu(x, approximate="tanh")
        y.backward(load(d, "dy", (cnt,)).detach())
        save(d, "y", y)
        save(d, "dx", x.grad)
    elif kind == "attention":
        b, t, c, heads = s
        qkv = load(d, "qkv", (b, t, 3 * c))
        q, k, v = qkv.split(c, dim=2)
        hs = c // heads
        q = q.view(b, t, heads, hs).transpose(1, 2)
        k = k.view(b, t, heads, hs).transpose(1, 2)
        v = v.view(b, t, heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / hs ** 0.5)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        if p is not None:
            att = att * noise(d, (b, heads, t, t), p)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        y.backward(load(d, "dy", (b, t, c)).detach())
        save(d, "y", y)
        save(d, "dqkv", qkv.grad)
    elif kind == "dropout":
        (cnt,) = s
        x = load(d, "x", (cnt,))
        y = x * noise(d, (cnt,), p)
        y.backward(load(d, "dy", (cnt,)).detach())
        save(d, "y", y)
        save(d, "dx", x.grad)
    elif kind == "embedding":
        b, t, c, tmax = s
        wte = load(d, "wte", (256, c))
        wpe = load(d, "wpe", (tmax, c))
        tok = np.fromfile("%s/tokens.u8" % d, dtype=np.uint8).astype(np.int64)
        tok = torch.from_numpy(tok.reshape(b, t))
        y = torch.nn.functional.embedding(tok, wte) + \
            torch.nn.functional.embedding(torch.arange(t), wpe)
        y.backward(load(d, "dy", (b, t, c)).detach())
        save(d, "y", y)
        save(d, "dwte", wte.grad)
        save(d, "dwpe", wpe.grad)
    else:
        print("layers_torch.py: unknown kind %r" % kind, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
