"""An unmodified torchrun-style PyTorch DDP script (env:// rendezvous, gloo backend) runs under
two ddp-agents (2 nodes x 2 processes) and a real ddpd: every rank trains a few steps and the
parameters are equal on all ranks afterwards; and a torch job whose node b is killed re-forms
on a at --suspect-timeout, not the node timeout. Skipped (exit 77) where PyTorch is missing.
Labelled heavy: four PyTorch imports on a small machine take a while."""
import os
import signal
import subprocess
import sys
import time

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


RAISES = r"""
import os, torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

def step(batch):
    if int(os.environ["RANK"]) == 1:
        raise ValueError("bad batch")
    return batch

@record
def main():
    dist.init_process_group("gloo")
    step(7)
    dist.barrier()  # rank 0 waits here for rank 1, which is gone

main()
"""


def test_root_cause_from_torch_record():
    """A script whose entry point is decorated with torch's @record raises ValueError on rank
    1: the job's reason names rank 1 and the exception (from TORCHELASTIC_ERROR_FILE), not
    rank 0's fallout."""
    with cluster(node_timeout=10) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.wait_nodes_ready(["node-a"])
            job = c.submit({"name": "raises", "command": [PY, "-c", RAISES], "nnodes": "1",
                            "nproc_per_node": 2, "max_restarts": 0, "grace_period_s": 2})
            done = c.wait_state(job["id"], ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=240)
            assert done["state"] == "FAILED", done
            reason = done["reason"]
            assert "rank 1 on node-a exited 1 (failure): ValueError: bad batch" in reason, reason
            assert "line 7, in step" in reason, reason  # the failing frame
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            print("---- agent-node-a.log\n%s" % c.log("agent-node-a.log")[-4000:])
            raise


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


LOOP = r"""
import time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(10, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100000):
    loss = (model(torch.randn(8, 10)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 50 == 0:
        print("step", step, flush=True)
    time.sleep(0.02)
"""


def test_torch_job_reforms_before_the_node_timeout():
    """Agent b is killed under a running torch job: a's ranks fail with exit 1 (gloo lost its
    peer; an unmodified script names nobody), which accuses b; b never beats again, so it is
    LOST at --suspect-timeout (1 s), and generation 2 starts on a long before the 10 s node
    timeout."""
    with cluster(node_timeout=10) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.start_agent("node-b", slots=2)
            c.wait_nodes_ready(["node-a", "node-b"])
            jid = c.submit({"name": "torch-loop", "command": [PY, "-c", LOOP], "nnodes": "1:2",
                            "nproc_per_node": 2, "max_restarts": 2})["id"]
            wait_for("rank 3 at step 50", lambda: any(
                "step 50" in ln["text"] for ln in
                c.get("/v1/jobs/%s/logs?rank=3" % jid).json["lines"]), timeout=240)
            t0 = time.monotonic()
            c.agents["node-b"].send_signal(signal.SIGKILL)
            wait_for("generation 2 running", lambda: (
                lambda j: j["state"] == "RUNNING" and j["generation"] == 2)(c.job(jid)),
                timeout=60)
            took = time.monotonic() - t0
            print("re-formed %.2f s after the kill (node timeout 10 s)" % took)
            assert took < 6.0, took
            reasons = [e["reason"] for e in c.get("/v1/jobs/%s/events" % jid).json["events"]]
            assert any("suspected when rank" in r and "exited 1" in r for r in reasons), reasons
            assert c.post("/v1/jobs/%s:cancel" % jid).status == 200
            c.wait_state(jid, ("CANCELLED",), timeout=60)
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            raise


if __name__ == "__main__":
    if subprocess.run([PY, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      timeout=120).returncode != 0:
        print("SKIP: PyTorch with gloo is not installed for %s" % PY)
        sys.exit(77)
    run_tests(globals())
