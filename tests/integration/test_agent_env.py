"""ddp-agent with a real ddpd: two agents (two nodes, 2 slots each) on loopback run a 2 x 2 job
whose command writes its environment; every torchrun and DDP_* variable is checked on every
rank, with the job's own env overridden where docs/api.md says so. The job SUCCEEDS, each
rank's output reaches ddpd with a "[rank R] " prefix (and the local rank log keeps it raw),
rank 0's metrics line is relayed. A command that does not exist is reported as an exit with
code 127 and a log line saying what failed. GPUs (gpus_per_proc): an agent given fake GPUs by
the CUDA_VISIBLE_DEVICES it inherits hands each worker its own, disjoint, and ddpd places a
GPU job only where its GPUs fit, never on a node without GPUs."""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import wait_for  # noqa: E402

PY = "/usr/bin/python3"

# Writes the environment (and cwd) to OUT/rank-R.json atomically, says hello, and rank 0
# writes one metrics line to DDP_METRICS_FD.
ENV_SCRIPT = r"""
import json, os, sys
out, rank = sys.argv[1], os.environ["RANK"]
env = dict(os.environ)
env["__cwd"] = os.getcwd()
try:  # the agent's own environment, as a job could read it
    with open("/proc/%d/environ" % os.getppid(), "rb") as f:
        env["__parent_environ"] = f.read().decode(errors="replace")
except OSError as e:
    env["__parent_environ"] = "unreadable: %s" % e
tmp = os.path.join(out, ".rank-%s.tmp" % rank)
with open(tmp, "w") as f:
    json.dump(env, f)
os.rename(tmp, os.path.join(out, "rank-%s.json" % rank))
print("hello from rank %s" % rank, flush=True)
print("to stderr from rank %s" % rank, file=sys.stderr, flush=True)
if rank == "0":
    os.write(int(os.environ["DDP_METRICS_FD"]), b'{"epoch": 1, "loss": 0.25}\n')
"""


def dump_logs(c, names):
    print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
    for n in names:
        print("---- agent-%s.log\n%s" % (n, c.log("agent-%s.log" % n)[-4000:]))


def stop_agents(c):
    """SIGTERM to every agent: each exits 0, and clean (no sanitizer report)."""
    for name, p in c.agents.items():
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0, name
        log = c.log("agent-%s.log" % name)
        assert "agent stopped" in log and "Sanitizer" not in log and "runtime error" not in log, \
            log[-3000:]


def logs_of(c, job_id, rank):
    a = c.get("/v1/jobs/%s/logs?rank=%d&limit=1000" % (job_id, rank))
    assert a.status == 200, a
    return [ln["text"] for ln in a.json["lines"]]


def test_agent_env_every_variable_on_every_rank():
    with cluster(node_timeout=5) as c:
        try:
            c.start_agent("node-a", slots=2)
            # node-b's own environment carries the agent token, the user token and where the
            # token files are: workers must see none of them, not even in the agent's own
            # /proc/PID/environ.
            c.start_agent("node-b", slots=2, env={"DDP_AGENT_TOKEN": c.agent_token,
                                                  "DDP_TOKEN": c.user_token,
                                                  "DDP_HOME": c.home})
            c.wait_nodes_ready(["node-a", "node-b"])
            out = os.path.join(c.tmp, "env-out")
            os.makedirs(out)
            job = c.submit({"name": "envprobe", "command": [PY, "-c", ENV_SCRIPT, out],
                            "nnodes": "2", "nproc_per_node": 2, "max_restarts": 1,
                            "env": {"FOO": "bar", "RANK": "99", "MASTER_PORT": "1"}})
            jid = job["id"]
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "SUCCEEDED", done
            assert done["generation"] == 1 and done["world_size"] == 4, done

            envs = {}
            for r in range(4):
                with open(os.path.join(out, "rank-%d.json" % r)) as f:
                    envs[r] = json.load(f)
            assert sorted(os.listdir(out)) == ["rank-%d.json" % r for r in range(4)]
            node_of = {}
            for n in done["nodes"]:
                for r in n["ranks"]:
                    node_of[r] = n
            assert sorted(node_of) == [0, 1, 2, 3], done["nodes"]
            masters = set()
            for r, e in envs.items():
                node = node_of[r]
                work = os.path.realpath(os.path.join(c.tmp, "agent-" + node["name"]))
                want = {
                    "RANK": str(r), "WORLD_SIZE": "4", "LOCAL_RANK": str(r % 2),
                    "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": str(node["group_rank"]),
                    "GROUP_WORLD_SIZE": "2", "ROLE_RANK": str(r), "ROLE_WORLD_SIZE": "4",
                    "ROLE_NAME": "default", "TORCHELASTIC_RESTART_COUNT": "0",
                    "TORCHELASTIC_MAX_RESTARTS": "1", "TORCHELASTIC_RUN_ID": jid,
                    "OMP_NUM_THREADS": "1", "DDP_JOB_ID": jid, "DDP_GENERATION": "1",
                    "DDP_METRICS_FD": "3", "FOO": "bar",
                    "MASTER_ADDR": done["master_addr"], "MASTER_PORT": str(done["master_port"]),
                    "DDP_CHECKPOINT_DIR": os.path.join(work, "jobs", jid, "ckpt"),
                    "DDP_HEARTBEAT_FILE": os.path.join(work, "jobs", jid, "gen-1",
                                                       "rank-%d.heartbeat" % r),
                    "__cwd": os.path.join(work, "jobs", jid),  # no workdir: the job's folder
                }
                for k, v in want.items():
                    assert e.get(k) == v, "rank %d: %s=%r, expected %r" % (r, k, e.get(k), v)
                assert r == node["group_rank"] * 2 + int(e["LOCAL_RANK"])
                assert os.path.isdir(e["DDP_CHECKPOINT_DIR"]), e["DDP_CHECKPOINT_DIR"]
                assert len(e["DDP_JOB_TOKEN"]) >= 8, e["DDP_JOB_TOKEN"]
                for k in ("DDP_AGENT_TOKEN", "DDP_TOKEN", "DDP_HOME"):
                    assert k not in e, "rank %d inherits %s from its agent" % (r, k)
                parent = e["__parent_environ"]
                assert c.agent_token not in parent and c.user_token not in parent, \
                    "rank %d reads a token in its agent's /proc/PID/environ" % r
                if not any(d.startswith("nvidia") and d[6:].isdigit()
                           for d in os.listdir("/dev")):
                    assert e.get("CUDA_VISIBLE_DEVICES") == os.environ.get(
                        "CUDA_VISIBLE_DEVICES"), e.get("CUDA_VISIBLE_DEVICES")
                masters.add((e["MASTER_ADDR"], e["MASTER_PORT"], e["DDP_JOB_TOKEN"]))
            assert len(masters) == 1, masters  # equal across ranks
            group0 = [n for n in done["nodes"] if n["group_rank"] == 0][0]
            assert group0["ranks"] == [0, 1], group0

            # Output reached ddpd with the rank prefix; the local file keeps it raw.
            for r in range(4):
                lines = wait_for("rank %d log lines at ddpd" % r,
                                 lambda: (lambda ls: ls if len(ls) >= 2 else None)(
                                     logs_of(c, jid, r)), timeout=20)
                assert "[rank %d] hello from rank %d" % (r, r) in lines, lines
                assert "[rank %d] to stderr from rank %d" % (r, r) in lines, lines
                work = os.path.join(c.tmp, "agent-" + node_of[r]["name"])
                with open(os.path.join(work, "jobs", jid, "gen-1", "rank-%d.log" % r)) as f:
                    raw = f.read()
                assert "hello from rank %d\n" % r in raw and "[rank" not in raw, raw
            m = c.get("/v1/jobs/%s/metrics" % jid)
            assert m.status == 200, m
            assert [x["metric"] for x in m.json["metrics"]] == [{"epoch": 1, "loss": 0.25}], m
            stop_agents(c)
        except BaseException:
            dump_logs(c, ["node-a", "node-b"])
            raise


def test_agent_gpus_per_proc_disjoint_per_worker():
    """The agent's GPUs are the ids of its inherited CUDA_VISIBLE_DEVICES (no device needed):
    2 workers x 2 GPUs of 4 get two each, none shared, all of them together; a job of 2 x 3
    does not fit there and waits for Resources naming the GPUs; a CPU node (an empty
    CUDA_VISIBLE_DEVICES, so no GPUs) with slots to spare is never chosen for it."""
    with cluster(node_timeout=5) as c:
        try:
            c.start_agent("node-g", slots=4, env={"CUDA_VISIBLE_DEVICES": "10,11,GPU-x,13"})
            c.start_agent("node-c", slots=8, env={"CUDA_VISIBLE_DEVICES": ""})
            c.wait_nodes_ready(["node-g", "node-c"])
            labels = {n["name"]: n["labels"] for n in c.get("/v1/nodes").json["nodes"]}
            assert labels["node-g"]["gpus"] == "4" and labels["node-c"]["gpus"] == "0", labels
            out = os.path.join(c.tmp, "gpu-out")
            os.makedirs(out)
            # A sleep keeps both workers alive together, so their GPUs are held at once.
            script = ENV_SCRIPT + "\nimport time; time.sleep(1)\n"
            job = c.submit({"name": "gpus", "command": [PY, "-c", script, out],
                            "nproc_per_node": 2, "gpus_per_proc": 2, "max_restarts": 0})
            done = c.wait_state(job["id"], ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "SUCCEEDED", done
            assert [n["name"] for n in done["nodes"]] == ["node-g"], done["nodes"]
            assert done["spec"]["gpus_per_proc"] == 2, done["spec"]
            seen = []
            for r in range(2):
                with open(os.path.join(out, "rank-%d.json" % r)) as f:
                    seen.append(json.load(f)["CUDA_VISIBLE_DEVICES"].split(","))
            assert all(len(g) == 2 for g in seen), seen
            assert not set(seen[0]) & set(seen[1]), seen  # never one GPU for two workers
            assert sorted(seen[0] + seen[1]) == sorted(["10", "11", "GPU-x", "13"]), seen

            # 2 x 3 GPUs: no node holds 6 free GPUs; the CPU node's 8 slots do not count.
            big = c.submit({"name": "big", "command": [PY, "-c", "pass"], "nproc_per_node": 2,
                            "gpus_per_proc": 3})
            p = wait_for("big waits", lambda: c.job(big["id"]).get("pending"), timeout=10)
            assert p["reason"] == "Resources" and "6 GPUs" in p["message"], p
            assert "0 nodes fit" in p["message"], p
            # A default (auto) job of 2 fits the CPU node by slots alone, gpus_per_proc 0 too.
            for gpp in (None, 0):
                spec = {"name": "cpu", "command": [PY, "-c", ENV_SCRIPT, out + "-%s" % gpp],
                        "nproc_per_node": 2, "max_restarts": 0,
                        "node_selector": {"gpus": "0"}}
                os.makedirs(out + "-%s" % gpp)
                if gpp is not None:
                    spec["gpus_per_proc"] = gpp
                j = c.submit(spec)
                d = c.wait_state(j["id"], ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
                assert d["state"] == "SUCCEEDED" and d["nodes"][0]["name"] == "node-c", d
                with open(os.path.join(out + "-%s" % gpp, "rank-0.json")) as f:
                    assert json.load(f)["CUDA_VISIBLE_DEVICES"] == "", gpp
            a = c.post("/v1/jobs/%s:cancel" % big["id"])
            assert a.status in (200, 202), a
            c.wait_state(big["id"], "CANCELLED", timeout=20)
            # A bad value is a 400 naming the field.
            a = c.post("/v1/jobs", {"command": ["x"], "gpus_per_proc": 65})
            assert a.status == 400 and "gpus_per_proc" in a.json["error"]["message"], a
            stop_agents(c)
        except BaseException:
            dump_logs(c, ["node-g", "node-c"])
            raise


def test_agent_command_not_found_exits_127():
    with cluster(node_timeout=5) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.wait_nodes_ready(["node-a"])
            job = c.submit({"command": ["ddp-no-such-command-x", "--flag"], "nnodes": "1",
                            "nproc_per_node": 1, "max_restarts": 0})
            jid = job["id"]
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "FAILED", done
            want = "[rank 0] ddp-agent: cannot run 'ddp-no-such-command-x': command not found"
            wait_for("the exec failure line at ddpd", lambda: want in logs_of(c, jid, 0),
                     timeout=20)
            ev = c.get("/v1/jobs/%s/events" % jid).json["events"]
            assert any("127" in e["reason"] for e in ev), ev
            assert "code=127" in c.log("agent-node-a.log")
            stop_agents(c)
        except BaseException:
            dump_logs(c, ["node-a"])
            raise


def test_agent_ships_many_lines_in_order_once():
    """5000 short lines written at once go out 1000 a beat, and 1500 lines of 4000 bytes
    (6 MB, far more than the 1 MiB a beat may carry) in beats under the size limit; each
    line once, in order."""
    n, nlong = 5000, 1500
    with cluster(node_timeout=5) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.wait_nodes_ready(["node-a"])

            def all_lines(jid, want):
                texts, after = [], 0
                for _ in range(200):
                    a = c.get("/v1/jobs/%s/logs?rank=0&after=%d&limit=1000" % (jid, after))
                    assert a.status == 200, a
                    texts += [ln["text"] for ln in a.json["lines"]]
                    if not a.json["lines"]:
                        break
                    after = a.json["next"]
                return texts if len(texts) >= want else None

            job = c.submit({"command": [PY, "-c", "for i in range(%d): print('line', i)" % n],
                            "nnodes": "1", "nproc_per_node": 1, "max_restarts": 0})
            jid = job["id"]
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "SUCCEEDED", done
            texts = wait_for("%d lines at ddpd" % n, lambda: all_lines(jid, n), timeout=30)
            assert texts == ["[rank 0] line %d" % i for i in range(n)], texts[:3]

            script = "for i in range(%d): print('%%05d' %% i + 'x' * 3995)" % nlong
            job = c.submit({"command": [PY, "-c", script], "nnodes": "1",
                            "nproc_per_node": 1, "max_restarts": 0})
            jid = job["id"]
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "SUCCEEDED", done
            texts = wait_for("%d long lines at ddpd" % nlong, lambda: all_lines(jid, nlong),
                             timeout=60)
            assert texts == ["[rank 0] %05d" % i + "x" * 3995 for i in range(nlong)], \
                [t[:20] for t in texts[:3]]
            assert "refused" not in c.log("agent-node-a.log")
            stop_agents(c)
        except BaseException:
            dump_logs(c, ["node-a"])
            raise


def test_agent_long_lines_arrive_whole():
    """A 10,000-byte line reaches ddpd in pieces that, with their "[rank 0] " prefix, fit
    the 4096 bytes ddpd keeps of a line: put together they are the line, no byte lost. A line
    of exactly one piece is one line, and one of exactly 4096 raw bytes two pieces (neither
    empty)."""
    prefix, keep = "[rank 0] ", 4096
    piece = keep - len(prefix)
    script = ("import sys\n"
              "sys.stdout.write(''.join(chr(97 + i %% 26) for i in range(10000)) + '\\n')\n"
              "sys.stdout.write('y' * %d + '\\n')\n"
              "sys.stdout.write('z' * 4096 + '\\n')\n"
              "print('end', flush=True)\n" % piece)
    long_line = "".join(chr(97 + i % 26) for i in range(10000))
    with cluster(node_timeout=5) as c:
        try:
            c.start_agent("node-a", slots=1)
            c.wait_nodes_ready(["node-a"])
            job = c.submit({"command": [PY, "-c", script], "nnodes": "1",
                            "nproc_per_node": 1, "max_restarts": 0})
            jid = job["id"]
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "SUCCEEDED", done
            texts = wait_for("the end line at ddpd",
                             lambda: (lambda t: t if t and t[-1] == prefix + "end" else None)(
                                 logs_of(c, jid, 0)), timeout=20)
            assert all(t.startswith(prefix) and len(t.encode()) <= keep for t in texts), \
                [len(t) for t in texts]
            raw = [t[len(prefix):] for t in texts]
            assert len(raw) == 7, [len(t) for t in raw]
            assert "".join(raw[:3]) == long_line, [len(t) for t in raw]
            assert raw[3] == "y" * piece, [len(t) for t in raw]
            assert raw[4:6] == ["z" * piece, "z" * (4096 - piece)], [len(t) for t in raw]
            assert raw[6] == "end", [len(t) for t in raw]
            stop_agents(c)
        except BaseException:
            dump_logs(c, ["node-a"])
            raise


# Touches DDP_HEARTBEAT_FILE every 0.1 s for 5 s, then says so and stops touching (and
# sleeps, at most 60 s): a hung rank.
HANG_SCRIPT = r"""
import os, time
hb = os.environ["DDP_HEARTBEAT_FILE"]
end = time.monotonic() + 5
while time.monotonic() < end:
    with open(hb, "a"):
        os.utime(hb)
    time.sleep(0.1)
print("stopped touching", flush=True)
time.sleep(60)
"""


def test_agent_reports_heartbeat_file_age_as_progress():
    """A rank that touches its heartbeat file is not hung (hang_timeout_s 3 < 5 s of
    touching); once it stops, ddpd's watchdog sees the age grow and ends the job."""
    with cluster(node_timeout=5) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.wait_nodes_ready(["node-a"])
            job = c.submit({"command": [PY, "-c", HANG_SCRIPT], "nnodes": "1",
                            "nproc_per_node": 1, "max_restarts": 0, "hang_timeout_s": 3,
                            "grace_period_s": 1})
            jid = job["id"]
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "FAILED" and "hung" in done["reason"], done
            lines = logs_of(c, jid, 0)
            assert "[rank 0] stopped touching" in lines, lines  # not declared hung before
            stop_agents(c)
        except BaseException:
            dump_logs(c, ["node-a"])
            raise


if __name__ == "__main__":
    run_tests(globals())
