"""ddp-agent running as root runs each job as its owner's local account (per-user isolation),
with a real ddpd and real ddp users (POST /v1/users). The user map (--user-map) maps alice to
nobody and bob to daemon, accounts every machine has (the test creates none), and every other
user to the account of the same name ('* ='):
1. alice's job runs as nobody (`id -u`, `id -g`, HOME/USER), its checkpoint dir is made by it
   (owned by nobody, mode 0700), as are its folders under the work dir; it cannot open the
   agent's node.credential nor the token file. The node says "isolation": "per-user".
2. bob's job (as daemon) cannot read alice's worker's /proc/PID/environ (which holds her job's
   DDP_JOB_TOKEN), while it reads its own.
3. carol has no account here: her job FAILS, its reason naming carol and the node.
4. a workdir nobody cannot enter (a root-owned 0700 folder): the job FAILS, naming the folder
   and the account.
5. the start-up decision with a real agent binary: as nobody, --isolation per-user is refused
   and the default is single-user, said in one line; --user-map with --isolation single-user
   is a usage error.
Skipped (exit 77, saying why) when not root or when nobody or daemon is missing."""
import json
import os
import pwd
import signal
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import BIN, wait_for  # noqa: E402

PY = "/usr/bin/python3"

# Says who it runs as, then writes what it found to OUT/NAME.json (mode 0644) and its pid to
# OUT/NAME.pid; then, if OUT/NAME.release is named, waits for it (at most 120 s).
PROBE = r"""
import json, os, stat, subprocess, sys, time
out, name, creds = sys.argv[1], sys.argv[2], sys.argv[3:]
for flag in ("-u", "-g"):
    print(subprocess.run(["id", flag], capture_output=True, text=True).stdout.strip(),
          flush=True)
res = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
       "home": os.environ.get("HOME"), "user": os.environ.get("USER"), "cwd": os.getcwd()}
ck = os.environ["DDP_CHECKPOINT_DIR"]
st = os.stat(ck)
res["ckpt"] = [ck, st.st_uid, stat.S_IMODE(st.st_mode)]
res["open"] = {}
for path in creds:  # the agent's credentials: open must fail
    try:
        with open(path) as f:
            f.read()
        res["open"][path] = "read"
    except OSError as e:
        res["open"][path] = e.errno
with open("/proc/self/environ", "rb") as f:
    res["own_environ"] = b"DDP_JOB_TOKEN=" in f.read()
def put(suffix, text):
    tmp = os.path.join(out, ".%s.%s" % (name, suffix))
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.rename(tmp, os.path.join(out, "%s.%s" % (name, suffix)))
put("json", json.dumps(res))
put("pid", str(os.getpid()))
release = os.path.join(out, name + ".release")
if name == "alice":
    end = time.monotonic() + 120
    while not os.path.exists(release) and time.monotonic() < end:
        time.sleep(0.05)
"""

# Waits (at most 60 s) for OUT/alice.pid, then tries to read that process's environ; writes
# the outcome to OUT/bob.spy.
SPY = r"""
import json, os, sys, time
out = sys.argv[1]
pidfile = os.path.join(out, "alice.pid")
end = time.monotonic() + 60
while not os.path.exists(pidfile) and time.monotonic() < end:
    time.sleep(0.05)
pid = int(open(pidfile).read())
try:
    with open("/proc/%d/environ" % pid, "rb") as f:
        data = f.read()
    res = {"read": True, "token": b"DDP_JOB_TOKEN=" in data}
except OSError as e:
    res = {"read": False, "errno": e.errno}
tmp = os.path.join(out, ".bob.spy")
with open(tmp, "w") as f:
    json.dump(res, f)
os.rename(tmp, os.path.join(out, "bob.spy"))
print("spy: %r" % res, flush=True)
sys.exit(1 if res["read"] else 0)
"""


def skip_reason():
    if os.geteuid() != 0:
        return "not root (uid %d): the agent runs every job as its own user" % os.geteuid()
    for name in ("nobody", "daemon"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            return "no local account %s" % name
    try:
        pwd.getpwnam("carol")
        return "a local account carol exists (the test needs a user without one)"
    except KeyError:
        return None


def add_user(c, name):
    a = c.post("/v1/users", {"name": name, "role": "user"})
    assert a.status == 201, a
    return a.json["token"]


def submit_as(c, token, spec):
    a = c.post("/v1/jobs", spec, token=token)
    assert a.status == 201, a
    return a.json["id"]


def logs_of(c, jid):
    a = c.get("/v1/jobs/%s/logs?limit=1000" % jid)
    assert a.status == 200, a
    return [ln["text"] for ln in a.json["lines"]]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def dump(c):
    print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
    print("---- agent-node-a.log\n" + c.log("agent-node-a.log")[-6000:])


def stop_agent(c):
    p = c.agents["node-a"]
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 0, c.log("agent-node-a.log")[-3000:]
    log = c.log("agent-node-a.log")
    assert "agent stopped" in log and "Sanitizer" not in log and "runtime error" not in log, log


def owner_mode(path):
    st = os.lstat(path)
    return st.st_uid, stat.S_IMODE(st.st_mode)


def test_agent_runas_jobs_run_as_their_owners_accounts():
    nobody, daemon = pwd.getpwnam("nobody"), pwd.getpwnam("daemon")
    with cluster(node_timeout=5) as c:
        try:
            os.chmod(c.tmp, 0o755)  # mkdtemp's 0700: the accounts must pass to the work dir
            out = os.path.join(c.tmp, "out")
            os.makedirs(out)
            os.chmod(out, 0o1777)
            umap = os.path.join(c.tmp, "user-map")
            with open(umap, "w") as f:
                f.write("# ddp user -> local account\nalice nobody\nbob   daemon\n* =\n")
            c.start_agent("node-a", slots=2, extra=["--user-map", umap])
            c.wait_nodes_ready(["node-a"])
            work = c.agent_work["node-a"]
            node = {n["name"]: n for n in c.get("/v1/nodes").json["nodes"]}["node-a"]
            assert node["isolation"] == "per-user", node
            log = c.log("agent-node-a.log")
            assert "isolation: per-user: each job runs as its owner's local account " \
                   "(--user-map %s: 3 mappings)" % umap in log, log
            tok = {u: add_user(c, u) for u in ("alice", "bob", "carol")}
            cred = os.path.join(work, "node.credential")
            token_file = os.path.join(c.home, "agent.token")
            assert os.path.exists(cred) and owner_mode(cred) == (0, 0o600), owner_mode(cred)

            # 1. alice as nobody, with her own checkpoint dir made by her worker.
            ckpt = os.path.join(out, "ckpt-alice", "j")
            ja = submit_as(c, tok["alice"], {
                "command": [PY, "-c", PROBE, out, "alice", cred, token_file],
                "max_restarts": 0, "checkpoint_dir": ckpt, "grace_period_s": 2})
            wait_for("alice's report", lambda: os.path.exists(os.path.join(out, "alice.json")),
                     timeout=60)
            r = read_json(os.path.join(out, "alice.json"))
            assert (r["uid"], r["euid"], r["gid"]) == (nobody.pw_uid, nobody.pw_uid,
                                                       nobody.pw_gid), r
            # No workdir: the job's own folder, which its account (nobody) can enter.
            assert (r["user"], r["home"], r["cwd"]) == ("nobody", nobody.pw_dir,
                                                        os.path.join(work, "jobs", ja)), r
            assert r["ckpt"] == [ckpt, nobody.pw_uid, 0o700], r
            assert r["open"] == {cred: 13, token_file: 13}, r  # EACCES, both
            assert r["own_environ"] is True, r
            job_dir = os.path.join(work, "jobs", ja)
            assert not os.path.exists(os.path.join(job_dir, "ckpt"))  # she has her own
            for d in (job_dir, os.path.join(job_dir, "gen-1")):
                assert owner_mode(d) == (nobody.pw_uid, 0o700), (d, owner_mode(d))
            assert owner_mode(os.path.join(work, "jobs"))[0] == 0
            assert owner_mode(cred) == (0, 0o600)
            ids = "[rank 0] %d" % nobody.pw_uid, "[rank 0] %d" % nobody.pw_gid
            wait_for("alice's id -u and id -g at ddpd",
                     lambda: list(ids) == logs_of(c, ja)[:2], timeout=20)
            assert "owner=alice account=nobody uid=%d" % nobody.pw_uid in \
                c.log("agent-node-a.log")

            # 2. bob as daemon cannot read alice's worker's environ (her DDP_JOB_TOKEN).
            jb = submit_as(c, tok["bob"], {"command": [PY, "-c", SPY, out], "max_restarts": 0})
            done = c.wait_state(jb, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=90)
            spy = read_json(os.path.join(out, "bob.spy"))
            assert spy == {"read": False, "errno": 13}, spy
            assert done["state"] == "SUCCEEDED", done
            bob_dir = os.path.join(work, "jobs", jb)
            assert owner_mode(bob_dir) == (daemon.pw_uid, 0o700), owner_mode(bob_dir)
            assert owner_mode(os.path.join(bob_dir, "ckpt")) == (daemon.pw_uid, 0o700)
            with open(os.path.join(out, "alice.release"), "w"):
                pass
            done = c.wait_state(ja, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "SUCCEEDED", done

            # 3. carol has no local account: the worker does not start, the job fails.
            jc = submit_as(c, tok["carol"], {"command": ["/bin/true"], "max_restarts": 0})
            done = c.wait_state(jc, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "FAILED", done
            want = ("ddp-agent: cannot start worker: no local account for ddp user carol on "
                    "node node-a (see --user-map): it maps to 'carol', which does not exist "
                    "here")
            assert "exited 127" in done["reason"] and want in done["reason"], done["reason"]
            assert logs_of(c, jc) == ["[rank 0] " + want], logs_of(c, jc)
            assert not os.path.exists(os.path.join(work, "jobs", jc))  # nothing made for it

            # 4. a workdir nobody cannot enter: the same path as an exec failure.
            closed = os.path.join(c.tmp, "closed")
            os.makedirs(closed)
            os.chmod(closed, 0o700)
            jw = submit_as(c, tok["alice"], {"command": ["/bin/true"], "workdir": closed,
                                             "max_restarts": 0})
            done = c.wait_state(jw, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "FAILED", done
            want = ("ddp-agent: cannot run '/bin/true': cannot enter working dir '%s' as nobody "
                    "(uid %d): permission denied" % (closed, nobody.pw_uid))
            assert "exited 127" in done["reason"] and want in done["reason"], done["reason"]

            # 5. alice's job moves its generation's folder away and puts a link to a folder
            # of root's in its place, whose error file the agent (root) would read and ship
            # to her: it reads in the folder it opened at the start, where her job left none.
            decoy = os.path.join(c.tmp, "decoy")
            os.makedirs(decoy)
            os.chmod(decoy, 0o700)
            with open(os.path.join(decoy, "rank-0.error.json"), "w") as f:
                f.write('{"message": "root-only-text"}')
            os.chmod(os.path.join(decoy, "rank-0.error.json"), 0o600)
            swap = ("import os, sys\n"
                    "g = os.path.dirname(os.environ['TORCHELASTIC_ERROR_FILE'])\n"
                    "os.rename(g, g + '.moved')\n"
                    "os.symlink(sys.argv[1], g)\n"
                    "sys.exit(3)\n")
            js = submit_as(c, tok["alice"], {"command": [PY, "-c", swap, decoy],
                                             "max_restarts": 0})
            done = c.wait_state(js, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "FAILED", done
            gen = os.path.join(work, "jobs", js, "gen-1")
            assert os.path.islink(gen), "the job did not swap its folder: %s" % done["reason"]
            assert "exited 3" in done["reason"], done["reason"]
            assert "root-only-text" not in done["reason"], done["reason"]
            stop_agent(c)
        except BaseException:
            dump(c)
            raise


def run_agent(argv, as_nobody=False, env=None, timeout=20):
    """Runs the agent binary to its end (bounded); returns (rc, output)."""
    nb = pwd.getpwnam("nobody")

    def drop():
        os.setgroups([])
        os.setgid(nb.pw_gid)
        os.setuid(nb.pw_uid)
    p = subprocess.run([os.path.join(BIN, "ddp-agent")] + argv, capture_output=True,
                       text=True, timeout=timeout, env=env,
                       preexec_fn=drop if as_nobody else None)
    return p.returncode, p.stdout + p.stderr


def test_agent_runas_start_decision():
    """The decision with a real binary, before it ever reaches ddpd."""
    nb = pwd.getpwnam("nobody")
    with cluster(node_timeout=5) as c:
        os.chmod(c.tmp, 0o755)
        home = os.path.join(c.tmp, "nobody-home")
        os.makedirs(home)
        os.chown(home, nb.pw_uid, nb.pw_gid)
        env = dict(os.environ, DDP_HOME=home)
        base = ["--server", "http://127.0.0.1:1", "--name", "n1",
                "--work-dir", os.path.join(home, "work")]
        umap = os.path.join(c.tmp, "user-map")
        with open(umap, "w") as f:
            f.write("alice nobody\n")
        os.chmod(umap, 0o644)
        rc, text = run_agent(base + ["--isolation", "single-user", "--user-map", umap], env=env)
        assert rc == 2 and "--user-map: every job runs as the agent's own user here " \
            "(--isolation single-user), so the map would not be used" in text, (rc, text)
        rc, text = run_agent(base + ["--isolation", "per-user"], as_nobody=True, env=env)
        assert rc == 1 and "--isolation per-user: the agent runs as uid %d, not root" \
            % nb.pw_uid in text, (rc, text)
        rc, text = run_agent(base + ["--user-map", umap], as_nobody=True, env=env)
        assert rc == 2 and "(the agent is not root)" in text, (rc, text)
        with open(umap, "w") as f:
            f.write("alice nobody extra\n")
        rc, text = run_agent(base + ["--user-map", umap], env=env)
        assert rc == 1 and "cannot use --user-map: %s:1: expected" % umap in text, (rc, text)
        # As nobody by default: single-user, said in one line at start (then it waits for
        # its token file, so it is stopped).
        log = os.path.join(c.tmp, "nobody-agent.log")
        nbf = open(log, "w")
        p = subprocess.Popen([os.path.join(BIN, "ddp-agent")] + base, stdout=nbf,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True,
                             preexec_fn=lambda: (os.setgroups([]), os.setgid(nb.pw_gid),
                                                 os.setuid(nb.pw_uid)))
        nbf.close()
        try:
            want = ("isolation: single-user: the agent runs as uid %d (nobody), not root, so "
                    "every job runs as this user, whoever owns it" % nb.pw_uid)
            wait_for("the single-user line", lambda: want in open(log).read(), timeout=20)
            assert open(log).read().count("isolation:") == 1
        finally:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=10)


if __name__ == "__main__":
    why = skip_reason()
    if why:
        print("SKIP: %s" % why)
        sys.exit(77)
    run_tests(globals())
