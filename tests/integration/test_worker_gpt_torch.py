"""The GPT learns as PyTorch's does: ddp-worker and the same model in PyTorch
(gpt_torch_train.py) train from the same initial parameters, on the same windows in the same
order (--shuffle off), with the same AdamW, warmup-cosine schedule, clipping and step count,
on the Debian fortunes corpus (1 MB to train, the last 100 kB to validate). The validation
losses must agree within 2%, and be far below the corpus's unigram entropy (the loss of a
model that learned only byte frequencies). Skips, saying so, without python3-torch or the
fortunes package.
"""
import json
import os
import re
import shutil
import subprocess
import sys

from worker_util import Checks, run_ok, tempdir

HERE = os.path.dirname(os.path.abspath(__file__))
FORTUNES = "/usr/share/games/fortunes"
MODEL = "gpt:2-2-64-32"
STEPS = 960
HYPER = ["--optimizer", "adamw", "--lr", "0.003", "--lr-scale", "none", "--warmup-steps", "20",
         "--weight-decay", "0.0", "--clip-grad-norm", "1.0", "--batch-size", "32"]


def corpus(work):
    names = sorted(n for n in os.listdir(FORTUNES)
                   if "." not in n and os.path.isfile(os.path.join(FORTUNES, n)))
    data = b"".join(open(os.path.join(FORTUNES, n), "rb").read() for n in names)
    with open(work + "/train.txt", "wb") as f:
        f.write(data[:1000000])
    with open(work + "/valid.txt", "wb") as f:
        f.write(data[-100000:])


def main():
    c = Checks("worker_gpt_torch")
    if not os.path.isdir(FORTUNES):
        print("SKIP: %s missing (Debian package fortunes)" % FORTUNES)
        sys.exit(0)
    probe = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        print("SKIP: python3-torch is not installed: the PyTorch comparison cannot run")
        sys.exit(0)
    work = tempdir("ddp-gpt-torch-")
    try:
        corpus(work)
        data = ["--data", "text:%s/train.txt,%s/valid.txt" % (work, work), "--shuffle", "off",
                "--seed", "3", "--backend", "cpu", "--checkpoint-dir", ""]
        # The initial parameters: one SGD step of learning rate 0 leaves them as they are.
        init = work + "/init.bin"
        run_ok(work, 1, ["--model", MODEL, "--optimizer", "sgd", "--momentum", "0", "--lr", "0",
                         "--max-steps", "1", "--dump-params", init] + data, tag="init")
        torch_p = subprocess.Popen(
            ["/usr/bin/python3", HERE + "/gpt_torch_train.py", work + "/train.txt",
             work + "/valid.txt", MODEL, "32", str(STEPS), "0.003", "20", "0.0", "1.0", "3",
             init], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            outs, errs = run_ok(work, 1, ["--model", MODEL, "--max-steps", str(STEPS),
                                          "--epochs", "1"] + HYPER + data, timeout=600,
                                tag="ours")
            t_out, t_err = torch_p.communicate(timeout=600)
        finally:
            if torch_p.poll() is None:
                torch_p.kill()
                torch_p.wait()
        c.check("torch ran (%d)" % torch_p.returncode, torch_p.returncode == 0, t_err[-800:])
        theirs = json.loads(t_out.strip().splitlines()[-1])["val_loss"]
        m = re.findall(r"val loss ([0-9.]+) nats/byte", outs[0])
        ours = float(m[-1]) if m else float("nan")
        u = re.search(r"unigram entropy ([0-9.]+)", errs[0])
        unigram = float(u.group(1)) if u else float("nan")
        rel = abs(ours - theirs) / theirs
        c.check("validation loss after %d steps: ours %.4f, PyTorch %.4f nats/byte (%.2f%% apart)"
                % (STEPS, ours, theirs, 100 * rel), rel <= 0.02)
        c.check("ours %.4f is far below the unigram entropy %.4f nats/byte (%.0f%% of it)"
                % (ours, unigram, 100 * ours / unigram), ours < 0.85 * unigram)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
