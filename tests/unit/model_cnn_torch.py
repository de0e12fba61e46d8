#!/usr/bin/env python3
"""PyTorch's training of a ddp CNN spec, for tests/unit/test_model_cnn.c.

usage: model_cnn_torch.py DIR SPEC BATCH STEPS LR MOMENTUM WEIGHT_DECAY
Builds the network of SPEC (trainer/model_cnn.h's grammar: cNkK conv + ReLU with padding
K/2, pM max pool, fN linear with ReLU but on the last, dP dropout whose draws come from
DIR/keep.u8 in the order the forwards make them: ATen's noise, the draw divided by 1 - P) for
1x28x28 inputs, loads its
parameters from DIR/params.f32 (definition order: each layer's weight then bias), and runs
STEPS steps of torch.optim.SGD on consecutive batches of BATCH samples of DIR/x.f32 and
DIR/labels.u8, mean cross-entropy. Writes DIR/grads.f32 (the first step's gradients),
DIR/loss.f64 (the first step's summed loss) and DIR/params_out.f32. Exits 77 without torch.
"""
import sys
import warnings

warnings.filterwarnings("ignore", message="Lazy modules")

try:
    import numpy as np
    import torch
except ImportError as e:
    print("model_cnn_torch.py: %s" % e, file=sys.stderr)
    sys.exit(77)


class Drop(torch.nn.Module):
    """Dropout with the C side's draws (shared by every d layer, consumed in order)."""

    def __init__(self, draws, p):
        super().__init__()
        self.draws, self.p = draws, p

    def forward(self, x):
        if not self.training:
            return x
        n = x.numel()
        at = self.draws["at"]
        assert at + n <= self.draws["keep"].size, "keep.u8 holds too few draws"
        k = self.draws["keep"][at:at + n].reshape(x.shape)
        self.draws["at"] = at + n
        return x * torch.from_numpy(k.astype(np.float32)).div_(1 - self.p)


def build(spec, draws=None):
    """The torch module of spec; draws (the masks' source) only where it has d layers."""
    assert spec.startswith("cnn:")
    parts = spec[4:].split("-")
    layers, c, flat = [], 1, False
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if p[0] == "d":
            assert draws is not None, "a d layer needs the masks' draws"
            layers.append(Drop(draws, float(p[1:])))
        elif p[0] == "c":
            n, k = (int(v) for v in p[1:].split("k"))
            layers += [torch.nn.Conv2d(c, n, k, padding=k // 2), torch.nn.ReLU()]
            c = n
        elif p[0] == "p":
            layers.append(torch.nn.MaxPool2d(int(p[1:])))
        else:
            if not flat:
                layers.append(torch.nn.Flatten())
                flat = True
            layers.append(torch.nn.LazyLinear(int(p[1:])))
            if not last:
                layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    net.eval()
    net(torch.zeros(1, 1, 28, 28))  # materializes the lazy layers (no draws: eval)
    net.train()
    return net


def main():
    d, spec = sys.argv[1], sys.argv[2]
    batch, steps = int(sys.argv[3]), int(sys.argv[4])
    lr, mom, wd = (float(v) for v in sys.argv[5:8])
    torch.set_num_threads(1)
    draws = {"keep": None, "at": 0}
    if any(p[0] == "d" for p in spec[4:].split("-")):
        draws["keep"] = np.fromfile("%s/keep.u8" % d, dtype=np.uint8)
    net = build(spec, draws)
    params = list(net.parameters())
    flat = np.fromfile("%s/params.f32" % d, dtype="<f4")
    off = 0
    with torch.no_grad():
        for p in params:
            p.copy_(torch.from_numpy(flat[off:off + p.numel()].reshape(p.shape)))
            off += p.numel()
    assert off == flat.size, "params.f32 holds %d floats, the model %d" % (flat.size, off)
    x = torch.from_numpy(np.fromfile("%s/x.f32" % d, dtype="<f4").reshape(-1, 1, 28, 28))
    y = torch.from_numpy(np.fromfile("%s/labels.u8" % d, dtype=np.uint8).astype(np.int64))
    opt = torch.optim.SGD(params, lr=lr, momentum=mom, weight_decay=wd)
    for s in range(steps):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        loss.backward()
        if s == 0:
            g = torch.cat([p.grad.reshape(-1) for p in params])
            g.numpy().astype("<f4").tofile("%s/grads.f32" % d)
            np.array([loss.item() * len(yb)], dtype="<f8").tofile("%s/loss.f64" % d)
        opt.step()
    with torch.no_grad():
        out = torch.cat([p.reshape(-1) for p in params])
    out.numpy().astype("<f4").tofile("%s/params_out.f32" % d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
