"""A real ddpd whose database lives on a small tmpfs that fills up while a real agent's job
ships log lines, then has room again. While writes fail: /readyz answers 503 naming the
storage and SQLite's error, /healthz stays 200, ddp_store_write_failures_total counts,
ddp_store_healthy is 0 and the last failure's time is past the last commit's, and a job whose
rank exits meanwhile is not forgotten. Once the space is back, with no restart: /readyz is 200
again, a commit is past the failure, the job that ended reaches SUCCEEDED,
and the logging job's lines - those the agent had to send again included - are all stored,
each once, their seqs without a gap.

Mounting needs root (as in CI); where the tmpfs cannot be mounted the test says so and
exits 77 (skipped)."""
import errno
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import Api, cluster, run_tests  # noqa: E402
from cluster import pid_alive, wait_for  # noqa: E402

PY = "/usr/bin/python3"
SKIP = 77

# A rank that prints a numbered line every 5 ms until its stop file appears (at most 120 s),
# then "<tag> done <count>" and exits 0.
WORKER = r"""
import os, sys, time
out, tag = sys.argv[1], sys.argv[2]
tmp = os.path.join(out, tag + ".tmp")
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(out, tag + ".pid"))
stop, every = os.path.join(out, tag + ".stop"), float(sys.argv[3])
i, end = 0, time.monotonic() + 120
while not os.path.exists(stop) and time.monotonic() < end:
    print("%s %d %s" % (tag, i, "x" * 100), flush=True)
    i += 1
    time.sleep(every)
print("%s done %d" % (tag, i), flush=True)
"""


def mount_tmpfs(path, size):
    """Mounts a tmpfs of size at path; None, or why it cannot."""
    if os.geteuid() != 0:
        return "not root (mounting a tmpfs needs root)"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "tmpfs", path],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return "mount -t tmpfs failed: %s" % (r.stderr.strip() or r.returncode)
    return None


def fill(path):
    """Writes a file at path until the file system is full; returns the bytes written."""
    n = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        for _ in range(1 << 16):  # 4 GiB at most: the tmpfs is far smaller
            try:
                n += f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        else:
            raise AssertionError("%s did not fill up after %d bytes" % (path, n))
    return n


def metric(api, name):
    a = api.get("/metrics", token=None)
    assert a.status == 200, a
    m = re.search(r"^%s (\S+)$" % re.escape(name), a.text, re.M)
    assert m, "no %s in /metrics" % name
    return float(m.group(1))


def all_lines(api, job_id):
    """Every stored line of the job, following `next` (at most 200 pages of 1000)."""
    lines, after = [], 0
    for _ in range(200):
        a = api.get("/v1/jobs/%s/logs?limit=1000&after=%d" % (job_id, after))
        assert a.status == 200, a
        if not a.json["lines"]:
            return lines
        lines += a.json["lines"]
        after = a.json["next"]
    raise AssertionError("more than 200 pages of logs")


def test_storefull_recovers_without_restart():
    mnt = tempfile.mkdtemp(prefix="ddp-storefull-")
    why = mount_tmpfs(mnt, "8m")
    if why:
        os.rmdir(mnt)
        print("SKIP test_storefull_recovers_without_restart: %s" % why, flush=True)
        sys.exit(SKIP)
    try:
        with cluster(node_timeout=10, home=mnt) as c:
            try:
                run_scenario(c, mnt)
            except BaseException:
                print("---- agent-sf.log\n" + c.log("agent-sf.log")[-4000:])
                raise
    finally:
        subprocess.run(["umount", mnt], timeout=30, check=False)
        os.rmdir(mnt)


def run_scenario(c, mnt):
    api = Api(c)  # every answer checked against schema/openapi.json
    c.start_agent("sf", slots=2)
    c.wait_nodes_ready(["sf"])
    out = os.path.join(c.tmp, "out")
    os.makedirs(out)
    logger = c.submit({"command": [PY, "-c", WORKER, out, "a", "0.005"], "max_restarts": 0,
                       "name": "logger"})["id"]
    ender = c.submit({"command": [PY, "-c", WORKER, out, "b", "0.5"], "max_restarts": 0,
                      "name": "ender"})["id"]
    for j in (logger, ender):
        c.wait_state(j, "RUNNING", timeout=30)
    wait_for("100 lines of the logger stored",
             lambda: len(api.get("/v1/jobs/%s/logs?limit=1000" % logger).json["lines"]) >= 100,
             timeout=30)
    wait_for("the ender's pid", lambda: os.path.exists(os.path.join(out, "b.pid")), timeout=30)
    with open(os.path.join(out, "b.pid")) as f:
        ender_pid = int(f.read())
    a = api.get("/readyz", token=None)
    assert a.status == 200 and a.json == {"status": "ok", "storage": "ok"}, a
    assert metric(api, "ddp_store_healthy") == 1

    # The disk fills up while the logger prints 200 lines a second.
    filler = os.path.join(mnt, "filler")
    fill(filler)
    a = wait_for("/readyz 503", lambda: (lambda r: r if r.status == 503 else None)(
        api.get("/readyz", token=None)), timeout=30)
    msg = a.json["error"]["message"]
    assert a.json["error"]["status"] == "UNAVAILABLE", a
    assert msg.startswith("storage: last write failed at ") and "full" in msg, msg
    assert api.get("/healthz", token=None).status == 200
    assert metric(api, "ddp_store_write_failures_total") >= 1
    assert metric(api, "ddp_store_healthy") == 0
    failed_at = metric(api, "ddp_store_last_failure_timestamp_seconds")
    assert abs(failed_at - time.time()) < 60, failed_at
    assert metric(api, "ddp_store_last_commit_timestamp_seconds") <= failed_at
    assert metric(api, "ddp_store_database_bytes") > 0

    # The ender's rank exits 0 while every beat's lines fail to be stored; the agent keeps
    # reporting it (a beat that is not 200 leaves its changes unreported), and ddpd acts on
    # it: the job's move to SUCCEEDED is tried (and refused by the full disk for now).
    with open(os.path.join(out, "b.stop"), "w"):
        pass
    wait_for("the ender's rank exited", lambda: not pid_alive(ender_pid), timeout=30)
    wait_for("ddpd trying to record the ender's end",
             lambda: "cannot record transition job=%s to=SUCCEEDED" % ender in c.log("ddpd.log"),
             timeout=30)
    a = api.get("/readyz", token=None)
    assert a.status == 503, "the disk is still full, yet %r" % a
    failures = metric(api, "ddp_store_write_failures_total")
    assert failures >= 3, failures

    # Room again: no restart, the next writes succeed.
    os.remove(filler)
    wait_for("/readyz 200", lambda: api.get("/readyz", token=None).status == 200, timeout=30)
    assert metric(api, "ddp_store_healthy") == 1
    assert metric(api, "ddp_store_last_commit_timestamp_seconds") >= \
        metric(api, "ddp_store_last_failure_timestamp_seconds")
    done = c.wait_state(ender, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=30)
    assert done["state"] == "SUCCEEDED", done

    with open(os.path.join(out, "a.stop"), "w"):
        pass
    done = c.wait_state(logger, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
    assert done["state"] == "SUCCEEDED", done
    lines = wait_for("the logger's last line stored", lambda: (
        lambda ls: ls if ls and " done " in ls[-1]["text"] else None)(all_lines(api, logger)),
        timeout=30)
    seqs = [ln["seq"] for ln in lines]
    assert seqs == list(range(1, len(lines) + 1)), \
        "seqs with a gap or a duplicate: %s" % first_break(seqs)
    count = int(re.match(r"\[rank 0\] a done (\d+)$", lines[-1]["text"]).group(1))
    got = [int(re.match(r"\[rank 0\] a (\d+) x+$", ln["text"]).group(1)) for ln in lines[:-1]]
    assert got == list(range(count)), "lines missing or twice: %s" % first_break(got, 0)
    print("logger: %d lines stored in order, %d write failures while the disk was full" %
          (len(lines), failures), flush=True)


def first_break(xs, start=1):
    """Where xs first differs from start, start + 1, ... (for the failure message)."""
    for i, x in enumerate(xs):
        if x != start + i:
            return "at index %d: %r (around: %r)" % (i, x, xs[max(0, i - 3):i + 3])
    return "length %d" % len(xs)


if __name__ == "__main__":
    run_tests(globals())
