"""deploy/slurm/ddp.sbatch on a real Slurm: Debian's slurm-wlm and munge brought up on
loopback in a temporary folder (munged, slurmctld and two slurmd on one host as the Slurm
nodes n1 and n2, `slurmd -N`, each on its own port), and the recipe submitted with sbatch on
both nodes:

  1. a short ddp-worker training (synthetic data): COMPLETED 0:0, the ddp job SUCCEEDED;
     the Slurm overhead (sbatch to the end vs the ddp job's own start to end) is printed;
  2. a command that fails: FAILED 1:0; DDP_PORT taken: FAILED 1:0 at once, the reason in
     the job's output;
  3. a command that waits, cancelled with scancel: CANCELLED, and every worker saw its
     SIGTERM (the agents gave them their grace);
  4. ddpctl submit with a finished run's DDP_HOME and Idempotency-Key: that run's job back;
  5. scontrol requeue of a running job: the second run follows the same ddp job (generation
     2) to COMPLETED 0:0, and ddpd's database holds one job, not two.

After each job: no ddpd, ddp-agent or worker process of this test is left, and the agents'
node-local work dirs are gone. Every wait has a deadline; every daemon is killed at the end,
also on failure. Skips (exit 77, loudly) where the Slurm or munge programs are missing (the
packages could not be installed: tests/run.sh installs slurm-wlm and munge) or when not root
(slurmd must be).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import BIN, REPO, free_port, wait_for  # noqa: E402

RECIPE = os.path.join(os.environ.get("DDP_SRC", REPO), "deploy", "slurm", "ddp.sbatch")
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo", "srun")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def skip(why):
    print("SKIP test_slurm_recipe: %s" % why, flush=True)
    print("*" * 72 + "\n*** the Slurm recipe was NOT tested: %s\n" % why + "*" * 72, flush=True)
    sys.exit(77)


def which(p):
    return shutil.which(p) or shutil.which(p, path="/usr/sbin:/usr/bin:/sbin:/bin")


class Slurm:
    """munged, slurmctld and slurmd for n1 and n2, everything under self.tmp."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="ddp-slurm-")
        self.procs = []
        self.env = dict(os.environ)
        self.conf = os.path.join(self.tmp, "slurm.conf")
        self.env["SLURM_CONF"] = self.conf
        self.run_dir = os.path.join(self.tmp, "run")
        os.makedirs(self.run_dir)

    def _spawn(self, argv, log):
        out = open(os.path.join(self.tmp, log), "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                             start_new_session=True)
        out.close()
        self.procs.append(p)
        return p

    def start(self):
        t = self.tmp
        mdir = os.path.join(t, "munge")
        os.makedirs(mdir, mode=0o700)
        key = os.path.join(mdir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        sock = os.path.join(mdir, "munge.socket")
        self._spawn([which("munged"), "-F", "-f", "--socket=" + sock, "--key-file=" + key,
                     "--pid-file=" + os.path.join(mdir, "munged.pid"),
                     "--log-file=" + os.path.join(mdir, "munged.log"),
                     "--seed-file=" + os.path.join(mdir, "munged.seed")], "munged.out")
        wait_for("munged's socket", lambda: os.path.exists(sock), timeout=15)
        for d in ("state", "spool/n1", "spool/n2", "log"):
            os.makedirs(os.path.join(t, d))
        ports = [free_port() for _ in range(4)]
        conf = """ClusterName=ddptest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={p0}
SlurmdPort={p1}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool/%n
SlurmctldPidFile={t}/slurmctld.pid
SlurmdPidFile={t}/slurmd-%n.pid
SlurmctldLogFile={t}/log/slurmctld.log
SlurmdLogFile={t}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=15
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port={p2} CPUs=2 RealMemory=500 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port={p3} CPUs=2 RealMemory=500 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""".format(p0=ports[0], p1=ports[1], p2=ports[2], p3=ports[3], sock=sock, t=t)
        with open(self.conf, "w") as f:
            f.write(conf)
        self._spawn([which("slurmctld"), "-D", "-i", "-f", self.conf], "slurmctld.out")
        for n in ("n1", "n2"):
            self._spawn([which("slurmd"), "-D", "-N", n, "-f", self.conf], "slurmd-%s.out" % n)

        def idle():
            for p in self.procs:
                if p.poll() is not None:
                    raise AssertionError("%s exited %s:\n%s" % (p.args[0], p.returncode,
                                                                 self.logs()))
            r = self.cmd(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
            st = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
            return st.get("n1") == "idle" and st.get("n2") == "idle"
        wait_for("Slurm nodes n1 and n2 idle", idle, timeout=40, interval=0.2)

    def cmd(self, argv, check=True, timeout=30):
        r = subprocess.run([which(argv[0])] + argv[1:], env=self.env, cwd=self.run_dir,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("%s: exit %d: %s %s" % (argv, r.returncode, r.stdout, r.stderr))
        return r

    def job_info(self, job):
        r = self.cmd(["scontrol", "show", "job", "-o", job], check=False)
        state = re.search(r"JobState=(\S+)", r.stdout)
        code = re.search(r" ExitCode=(\S+)", r.stdout)
        return (state.group(1) if state else None, code.group(1) if code else None)

    def wait_final(self, job, timeout):
        return wait_for("Slurm job %s to end" % job,
                        lambda: (lambda i: i if i[0] in FINAL else None)(self.job_info(job)),
                        timeout=timeout, interval=0.1)

    def out(self, job):
        try:
            with open(os.path.join(self.run_dir, "slurm-%s.out" % job), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def logs(self):
        text = []
        for root, _, files in os.walk(self.tmp):
            for name in files:
                if name.endswith((".log", ".out")):
                    try:
                        with open(os.path.join(root, name), errors="replace") as f:
                            text.append("== %s\n%s" % (name, f.read()[-3000:]))
                    except OSError:
                        pass
        return "\n".join(text)

    def ours(self):
        """Processes of this test's jobs still alive: a ddpd, ddp-agent, ddp-worker, bash or
        sleep whose command line, environment or working directory names our folder."""
        left = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open("/proc/%s/comm" % pid) as f:
                    comm = f.read().strip()
                if comm not in ("ddpd", "ddp-agent", "ddp-worker", "bash", "sleep"):
                    continue
                with open("/proc/%s/stat" % pid) as f:
                    if f.read().split(")")[-1].split()[0] == "Z":
                        continue
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmdline = f.read()
                with open("/proc/%s/environ" % pid, "rb") as f:
                    environ = f.read()
                cwd = os.readlink("/proc/%s/cwd" % pid)
            except OSError:
                continue
            mark = self.tmp.encode()
            if mark in cmdline or mark in environ or cwd.startswith(self.tmp):
                left.append("%s %s %s" % (pid, comm, cmdline.replace(b"\0", b" ")[:200]))
        return left

    def check_nothing_left(self, job):
        try:
            wait_for("no process of job %s left" % job, lambda: not self.ours(), timeout=20,
                     interval=0.2)
        except AssertionError:
            raise AssertionError("left running after job %s:\n%s" % (job, "\n".join(self.ours())))
        dirs = [d for d in os.listdir(self.run_dir) if d.startswith("ddp-agent-")]
        assert not dirs, "agent work dirs left after job %s: %s" % (job, dirs)

    def stop(self):
        try:
            self.cmd(["scancel", "--user=root", "--cluster=ddptest"], check=False, timeout=10)
        except (subprocess.TimeoutExpired, OSError, TypeError):
            pass
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        # slurmstepd and anything a job left (it carries SLURM_CONF, our folder, in its
        # environment): killed too, so that a failed test leaves nothing behind.
        mark = self.tmp.encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if mark in f.read():
                        os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        if os.environ.get("DDP_TEST_KEEP"):
            print("kept test folder", self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def sbatch(s, args, env=None):
    e = {"DDP_BIN": BIN, "DDP_AGENT_DIR": s.run_dir, "DDP_GRACE": "5",
         "DDP_AGENT_ARGS": "--isolation single-user"}
    e.update(env or {})
    saved = dict(s.env)
    s.env.update(e)
    try:
        r = s.cmd(["sbatch", "--parsable", "--export=ALL", "--nodes=2", RECIPE] + args)
    finally:
        s.env = saved
    return r.stdout.strip().split(";")[0]


def iso_s(text, field):
    m = re.search(r"^%s:\s+\d{4}-\d\d-\d\dT(\d\d):(\d\d):(\d\d\.\d+)Z" % field, text, re.M)
    assert m, "no %s: line in\n%s" % (field, text)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))


def test_success(s):
    t0 = time.monotonic()
    job = sbatch(s, [os.path.join(BIN, "ddp-worker"), "--data", "synthetic:20000:64:10",
                     "--model", "mlp:64-256-10", "--epochs", "4", "--batch-size", "32"])
    state = s.wait_final(job, 90)
    wall = time.monotonic() - t0
    out = s.out(job)
    assert state == ("COMPLETED", "0:0"), "%s\n%s\n%s" % (state, out, s.logs())
    assert re.search(r"^state:\s+SUCCEEDED", out, re.M), out
    assert "epoch 4/4" in out, out
    train = iso_s(out, "finished") - iso_s(out, "started")
    print("slurm overhead: sbatch to COMPLETED %.2f s, ddp job started to finished %.2f s, "
          "overhead %.2f s" % (wall, train, wall - train), flush=True)
    m = re.search(r"timings since start:(.*)", out)
    assert m, out
    print("recipe timings:%s" % m.group(1), flush=True)
    s.check_nothing_left(job)


def test_failure(s):
    job = sbatch(s, ["/bin/sh", "-c", "echo failing; exit 3"], {"DDP_MAX_RESTARTS": "0"})
    state = s.wait_final(job, 90)
    out = s.out(job)
    assert state == ("FAILED", "1:0"), "%s\n%s" % (state, out)
    assert re.search(r"^state:\s+FAILED", out, re.M), out
    assert "exited 3" in out, out
    s.check_nothing_left(job)


def test_port_taken(s):
    """DDP_PORT fixed to a port that is taken: the job fails at once, the reason in its
    output (it was a silent 36 s wait and an empty slurm-N.out)."""
    import socket
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen(1)
        port = held.getsockname()[1]
        t0 = time.monotonic()
        job = sbatch(s, ["/bin/true"], {"DDP_PORT": str(port)})
        state = s.wait_final(job, 60)
        took = time.monotonic() - t0
    out = s.out(job)
    assert state == ("FAILED", "1:0"), "%s\n%s" % (state, out)
    assert "ddp.sbatch: ddpd exited at start" in out, out
    assert took < 15, "port taken: %.1f s to FAILED\n%s" % (took, out)
    s.check_nothing_left(job)


def test_scancel(s):
    term = os.path.join(s.run_dir, "term.log")
    ready = os.path.join(s.run_dir, "ready")
    os.makedirs(ready)
    script = ('trap \'echo "TERM $RANK" >> %s; exit 143\' TERM; touch %s/$RANK; '
              'sleep 300 & wait' % (term, ready))
    job = sbatch(s, ["/bin/bash", "-c", script])
    wait_for("both workers of job %s running" % job, lambda: len(os.listdir(ready)) == 2,
             timeout=60, interval=0.1)
    t0 = time.monotonic()
    s.cmd(["scancel", job])
    state = s.wait_final(job, 60)
    took = time.monotonic() - t0
    out = s.out(job)
    assert state[0] == "CANCELLED", "%s\n%s" % (state, out)
    with open(term) as f:
        seen = set(f.read().split("\n")) - {""}
    # Slurm signals every process of the agents' step and the agent stops its workers: a
    # worker may see SIGTERM twice, each at least once.
    assert seen == {"TERM 0", "TERM 1"}, "workers' SIGTERM: %s\n%s" % (seen, out)
    print("scancel to CANCELLED: %.2f s" % took, flush=True)
    s.check_nothing_left(job)


def test_notice(s):
    """scancel --signal=USR1 --batch (what --signal=B:USR1@T sends before the time limit):
    the recipe relays it to the agents, the workers checkpoint at their step and exit 10,
    ddpd starts the next generation without charging a restart, it resumes from that step
    and the job ends COMPLETED 0:0."""
    job = sbatch(s, [os.path.join(BIN, "ddp-worker"), "--data", "synthetic:40000:64:10",
                     "--model", "mlp:64-512-512-10", "--epochs", "6", "--batch-size", "16"])
    wait_for("job %s training" % job, lambda: "epoch 1/6" in s.out(job), timeout=90,
             interval=0.2)
    t0 = time.monotonic()
    s.cmd(["scancel", "--signal=USR1", "--batch", job])
    state = s.wait_final(job, 180)
    out = s.out(job)
    assert state == ("COMPLETED", "0:0"), "%s\n%s\n%s" % (state, out, s.logs())
    assert "relaying the checkpoint notice" in out, out
    assert re.search(r"^generation:\s+2 \(restarts 0\)", out, re.M), out
    assert re.search(r"^state:\s+SUCCEEDED", out, re.M), out
    print("USR1 relayed: job ended %.2f s later, generation 2, no restart" %
          (time.monotonic() - t0), flush=True)
    s.check_nothing_left(job)


def test_same_key_same_job(s):
    """What a requeue does: the same DDP_HOME and Idempotency-Key. The second run gets the
    first run's ddp job back (SUCCEEDED at once) instead of training a second one."""
    home = os.path.join(s.run_dir, "home-requeue")
    env = {"DDP_HOME": home}
    argv = [os.path.join(BIN, "ddp-worker"), "--data", "synthetic:256:8:2", "--model",
            "mlp:8-8-2", "--epochs", "1"]
    first = sbatch(s, argv, env)
    assert s.wait_final(first, 90) == ("COMPLETED", "0:0"), s.out(first)
    # The key is derived from SLURM_JOB_ID, which a requeue keeps; a new sbatch has a new
    # id, so the check uses ddpctl with the first run's key directly.
    e = dict(s.env, DDP_HOME=home)
    ddpd = subprocess.Popen([os.path.join(BIN, "ddpd"), "--listen", "127.0.0.1:0"],
                            env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    s.procs.append(ddpd)
    port = wait_for("ddpd's port", lambda: re.search(
        r"listening on http://[^ ]*:(\d+) ", ddpd.stderr.readline() or ""), timeout=20)
    e["DDP_SERVER"] = "http://127.0.0.1:%s" % port.group(1)
    r = subprocess.run([os.path.join(BIN, "ddpctl"), "submit", "--parsable",
                        "--idempotency-key", "slurm-ddptest-%s" % first, "--workdir", ".",
                        "--name",
                        "slurm-%s" % first, "--nnodes", "2:2", "--nproc-per-node", "1",
                        "--grace", "5", "--"] + argv, env=e, cwd=s.run_dir,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "j-1", (r.returncode, r.stdout, r.stderr)
    r = subprocess.run([os.path.join(BIN, "ddpctl"), "list", "--all"], env=e,
                       capture_output=True, text=True, timeout=30)
    assert r.stdout.count("slurm-%s" % first) == 1, r.stdout
    os.killpg(ddpd.pid, signal.SIGTERM)
    ddpd.wait(timeout=10)


def test_requeue(s):
    """scontrol requeue of a running job: the second run (same SLURM_JOB_ID, so the same
    DDP_HOME and Idempotency-Key) follows the same ddp job to its end: one ddp job, trained
    once, not a duplicate."""
    go = os.path.join(s.run_dir, "go")
    starts = os.path.join(s.run_dir, "starts.log")
    script = ('echo "start $RANK $DDP_GENERATION" >> %s; '
              'for i in $(seq 600); do [ -e %s ] && exit 0; sleep 0.1; done; exit 1'
              % (starts, go))
    job = sbatch(s, ["/bin/bash", "-c", script])
    home = os.path.join(s.run_dir, ".ddp-%s" % job)
    wait_for("job %s's workers" % job, lambda: os.path.exists(starts) and
             open(starts).read().count("start") >= 2, timeout=60, interval=0.1)
    t0 = time.monotonic()
    s.cmd(["scontrol", "requeue", job])
    # Slurm holds a requeued job back for a while (BeginTime); the test does not wait that.
    wait_for("job %s PENDING again" % job, lambda: s.job_info(job)[0] == "PENDING",
             timeout=60, interval=0.1)
    s.cmd(["scontrol", "update", "JobId=" + job, "StartTime=now"])
    wait_for("job %s's second run" % job,
             lambda: os.path.exists(os.path.join(home, "logs", "agents.1.log")), timeout=120,
             interval=0.2)
    with open(go, "w"):
        pass
    state = s.wait_final(job, 90)
    out = s.out(job)
    print("requeue to the end of the second run: %.2f s" % (time.monotonic() - t0), flush=True)
    assert state == ("COMPLETED", "0:0"), "%s\n%s\n%s" % (state, out, s.logs())
    assert re.search(r"^job:\s+j-1 ", out, re.M), out
    e = dict(s.env, DDP_HOME=home)
    db = os.path.join(home, "ddp.db")
    assert re.search(r"^generation:\s+2 ", out, re.M), out
    with open(starts) as f:
        assert sorted(f.read().split()) == sorted("start 0 1 start 1 1 start 0 2 start 1 2".split())
    r = subprocess.run(["sqlite3", db, "select count(*) from jobs"], capture_output=True,
                       text=True, timeout=30, env=e)
    assert r.returncode == 0 and r.stdout.strip() == "1", "jobs in %s: %s %s" % (
        db, r.stdout, r.stderr)
    s.check_nothing_left(job)


def main():
    missing = [p for p in PROGRAMS if not which(p)]
    if missing:
        skip("no %s (Debian packages slurm-wlm and munge could not be installed)"
             % ", ".join(missing))
    if os.geteuid() != 0:
        skip("not root: slurmd must run as root")
    s = Slurm()
    failed = []
    try:
        t0 = time.monotonic()
        s.start()
        print("Slurm up (munged, slurmctld, 2 slurmd) in %.1f s" % (time.monotonic() - t0),
              flush=True)
        for name, fn in (("success", test_success), ("failure", test_failure),
                         ("port_taken", test_port_taken),
                         ("scancel", test_scancel), ("notice", test_notice),
                         ("same_key", test_same_key_same_job),
                         ("requeue", test_requeue)):
            t1 = time.monotonic()
            try:
                fn(s)
                print("PASS %s (%.1fs)" % (name, time.monotonic() - t1), flush=True)
            except Exception as e:  # the next one runs
                failed.append(name)
                print("FAIL %s (%.1fs): %s" % (name, time.monotonic() - t1, e), flush=True)
    except Exception as e:
        failed.append("start")
        print("FAIL start: %s\n%s" % (e, s.logs()), flush=True)
    finally:
        s.stop()
    print("%s" % ("all passed" if not failed else "failed: " + ", ".join(failed)), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
