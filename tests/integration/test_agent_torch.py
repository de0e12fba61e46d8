"""An unmodified torchrun-style PyTorch DDP script (env:// rendezvous, gloo backend) runs under
two ddp-agents (2 nodes x 2 processes) and a real ddpd: every rank trains a few steps and the
parameters are equal on all ranks afterwards. Skipped (exit 77) where PyTorch is missing.
Labelled heavy: four PyTorch imports on a small machine take a while."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import wait_for  # noqa: E402

PY = "/usr/bin/python3"

SCRIPT = r"""
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(10, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for step in range(5):
    x = torch.randn(8, 10, generator=g)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
w = torch.cat([p.detach().flatten() for p in model.parameters()])
ws = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(ws, w)
print("rank %d of %d: params equal %s" % (rank, world, all(torch.equal(ws[0], t) for t in ws)),
      flush=True)
dist.destroy_process_group()
"""


def test_agent_runs_an_unmodified_torch_ddp_script():
    with cluster(node_timeout=10) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.start_agent("node-b", slots=2)
            c.wait_nodes_ready(["node-a", "node-b"])
            job = c.submit({"name": "torch", "command": [PY, "-c", SCRIPT], "nnodes": "2",
                            "nproc_per_node": 2, "max_restarts": 0})
            jid = job["id"]
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=240)
            assert done["state"] == "SUCCEEDED", done
            for r in range(4):
                want = "[rank %d] rank %d of 4: params equal True" % (r, r)
                wait_for(want, lambda: want in [
                    ln["text"] for ln in c.get("/v1/jobs/%s/logs?rank=%d" % (jid, r)).json[
                        "lines"]], timeout=20)
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            for n in ("node-a", "node-b"):
                print("---- agent-%s.log\n%s" % (n, c.log("agent-%s.log" % n)[-4000:]))
            raise


if __name__ == "__main__":
    if subprocess.run([PY, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      timeout=120).returncode != 0:
        print("SKIP: PyTorch with gloo is not installed for %s" % PY)
        sys.exit(77)
    run_tests(globals())
