"""ddp-worker on the GPU against ddp-worker on the CPU, same seed: 20 training steps of the
main job's MLP on Fashion-MNIST must give the same parameters to relative 1e-4, and an epoch on
each must reach close test accuracy.

Where no GPU is visible (nvidia-smi finds none) it prints SKIPPED with the reason and exits 77,
which ctest reports as skipped: nothing GPU-related is claimed as passed there."""
import os
import struct
import subprocess
import sys
import tempfile

BIN = os.environ.get("DDP_BIN") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "bin")


def gpu_visible():
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, "nvidia-smi unavailable (%s)" % e.__class__.__name__
    if p.returncode != 0 or "GPU" not in p.stdout:
        return False, "nvidia-smi lists no GPU"
    return True, p.stdout.strip()


def run(backend, tmp, *extra):
    dump = os.path.join(tmp, "params-%s.bin" % backend)
    argv = [os.path.join(BIN, "ddp-worker"), "--backend", backend, "--checkpoint-dir", "",
            "--dump-params", dump] + list(extra)
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(k, None)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, "%s: rc %d\n%s\n%s" % (backend, p.returncode, p.stdout, p.stderr)
    with open(dump, "rb") as f:
        raw = f.read()
    return struct.unpack("%df" % (len(raw) // 4), raw), p.stdout + p.stderr


def main():
    ok, why = gpu_visible()
    if not ok:
        print("SKIPPED: test_gpu_worker needs a GPU: %s" % why)
        return 77
    print(why)
    with tempfile.TemporaryDirectory(prefix="ddp-gpu-") as tmp:
        g, glog = run("nccl", tmp, "--max-steps", "20", "--epochs", "1")
        assert "training on GPU" in glog, glog
        c, _ = run("cpu", tmp, "--max-steps", "20", "--epochs", "1")
        assert len(g) == len(c)
        num = max(abs(a - b) for a, b in zip(g, c))
        den = max(abs(b) for b in c)
        print("20 steps: max |gpu - cpu| / max |cpu| = %.3e" % (num / den))
        assert num / den < 1e-4
        _, glog = run("nccl", tmp, "--epochs", "1")
        _, clog = run("cpu", tmp, "--epochs", "1")
        acc = [float(l.split("test acc ")[1].split()[0]) for l in (glog, clog)
               for l in [next(x for x in l.splitlines() if "test acc" in x)]]
        print("1 epoch: GPU test acc %.4f, CPU test acc %.4f" % (acc[0], acc[1]))
        assert abs(acc[0] - acc[1]) <= 0.005
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
