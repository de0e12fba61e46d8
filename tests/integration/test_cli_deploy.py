"""deploy/: the local cluster scripts run for real, the other recipes checked for syntax.

- test_cli_deploy_recipes: up.sh, down.sh and the Slurm recipe pass `bash -n` (and shellcheck
  where installed); the Kubernetes manifests parse as YAML (python3-yaml) and hold the
  Deployment/Service/PVC/DaemonSet the README promises; the systemd units pass
  `systemd-analyze verify` (where installed); every folder the Containerfile copies exists and
  every part with a CMakeLists.txt is copied.
- test_cli_deploy_up_down: deploy/up.sh (DDP_SKIP_APT=1, DDP_SKIP_BUILD=1, the binaries of
  this build, a temporary DDP_HOME and a free port) refuses to start while a stranger answers
  on its port, then brings up ddpd and two agents, runs the
  main job to SUCCEEDED printing each epoch's loss, and leaves the cluster up; a second run
  replaces the first run's processes; down.sh stops everything (checked by pid), ignores a
  stale pid file, keeps the data, and --purge removes it. While ddp-worker is not built, it
  checks that up.sh refuses clearly and starts nothing.
"""
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_sim  # noqa: E402
from cluster import BIN, REPO, free_port, pid_alive  # noqa: E402

DEPLOY = os.path.join(REPO, "deploy")


def sh(argv, env=None, timeout=600):
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_cli_deploy_recipes():
    scripts = [os.path.join(DEPLOY, f) for f in ("up.sh", "down.sh", "slurm/ddp.sbatch")]
    for s in scripts:
        rc, out, err = sh(["bash", "-n", s])
        assert rc == 0, (s, err)
        assert os.access(s, os.X_OK), s + " is not executable"
    if shutil.which("shellcheck"):
        rc, out, err = sh(["shellcheck"] + scripts)
        assert rc == 0, out + err
    else:
        print("shellcheck not installed: skipped")

    try:
        import yaml
    except ImportError:
        yaml = None
        print("python3-yaml not installed: manifests not parsed")
    if yaml:
        kinds = {}
        for f in ("ddpd.yaml", "ddp-agent.yaml"):
            with open(os.path.join(DEPLOY, "k8s", f)) as fh:
                for d in yaml.safe_load_all(fh):
                    kinds[d["kind"]] = d
        assert set(kinds) >= {"Namespace", "PersistentVolumeClaim", "Deployment", "Service",
                              "DaemonSet"}, kinds.keys()
        dep = kinds["Deployment"]["spec"]
        assert dep["replicas"] == 1 and dep["strategy"]["type"] == "Recreate", dep
        vols = {v["name"]: v for v in dep["template"]["spec"]["volumes"]}
        assert vols["data"]["persistentVolumeClaim"]["claimName"] == \
            kinds["PersistentVolumeClaim"]["metadata"]["name"], vols
        ds = kinds["DaemonSet"]["spec"]["template"]["spec"]
        assert ds["hostNetwork"] is True, ds
        args = ds["containers"][0]["args"]
        svc = kinds["Service"]["metadata"]
        assert "http://%s.%s.svc.cluster.local:8470" % (svc["name"], svc["namespace"]) in args
        assert kinds["Service"]["spec"]["ports"][0]["port"] == 8470

    if shutil.which("systemd-analyze"):
        with tempfile.TemporaryDirectory() as d:
            units = []
            for u in ("ddpd.service", "ddp-agent.service"):
                with open(os.path.join(DEPLOY, "systemd", u)) as fh:
                    text = fh.read()
                # verify checks that ExecStart's program exists: point it at stand-ins.
                for b in ("ddpd", "ddp-agent"):
                    shutil.copy("/bin/true", os.path.join(d, b))
                text = text.replace("/usr/local/bin/", d + "/")
                with open(os.path.join(d, u), "w") as fh:
                    fh.write(text)
                units.append(os.path.join(d, u))
            rc, out, err = sh(["systemd-analyze", "verify"] + units)
            assert rc == 0 and "ddp" not in err, out + err
    else:
        print("systemd-analyze not installed: units not verified")

    with open(os.path.join(DEPLOY, "Containerfile")) as fh:
        cf = fh.read()
    assert re.search(r"^FROM debian:\S+", cf, re.M), cf
    copied = set()
    for m in re.finditer(r"^COPY (?!--from)(\S+)", cf, re.M):
        src = m.group(1)
        assert os.path.exists(os.path.join(REPO, src)), "Containerfile copies missing " + src
        copied.add(src)
    for part in os.listdir(REPO):
        if os.path.isfile(os.path.join(REPO, part, "CMakeLists.txt")):
            assert part in copied, "Containerfile does not copy %s/" % part


def up_env(home, port):
    e = dict(os.environ)
    for k in ("DDP_TOKEN", "DDP_SERVER"):
        e.pop(k, None)
    e.update(DDP_HOME=home, DDP_PORT=str(port), DDP_SKIP_APT="1", DDP_SKIP_BUILD="1",
             DDP_BUILD_DIR=os.path.dirname(BIN), DDP_EPOCHS="2",
             DDP_WORKER_PORT_BASE=str(20000 + (port % 20000)),
             DDP_WORKER_ARGS=os.environ.get("DDP_TEST_WORKER_ARGS",
                                            "--data synthetic:2048:784:10"))
    return e


def pids(home):
    out = {}
    run = os.path.join(home, "run")
    for f in os.listdir(run) if os.path.isdir(run) else ():
        with open(os.path.join(run, f)) as fh:
            out[f[:-4]] = int(fh.read().split()[0])
    return out


def ddpctl_json(home, port, *args):
    e = dict(os.environ, DDP_HOME=home, DDP_SERVER="http://127.0.0.1:%d" % port)
    e.pop("DDP_TOKEN", None)
    p = subprocess.run([os.path.join(BIN, "ddpctl"), "-o", "json"] + list(args),
                       capture_output=True, text=True, env=e, timeout=60)
    assert p.returncode == 0, p
    return json.loads(p.stdout)


def test_cli_deploy_up_down():
    tmp = tempfile.mkdtemp(prefix="ddp-test-up-")
    home = os.path.join(tmp, ".ddp")
    port = free_port()
    env = up_env(home, port)
    up, down = os.path.join(DEPLOY, "up.sh"), os.path.join(DEPLOY, "down.sh")
    try:
        missing = [b for b in ("ddpd", "ddp-agent", "ddp-worker", "ddpctl")
                   if not os.access(os.path.join(BIN, b), os.X_OK)]
        if missing:
            rc, out, err = sh([up], env=env, timeout=120)
            assert rc == 1, (rc, out, err)
            assert "%s/%s is missing (not built)" % (BIN, missing[0]) in err, err
            assert pids(home) == {}, pids(home)
            print("not built yet: %s; checked that up.sh refuses" % missing)
            return

        # A stranger on the port: up.sh refuses rather than submit to it.
        srv = http.server.HTTPServer(("127.0.0.1", port), http.server.BaseHTTPRequestHandler)
        th = threading.Thread(target=srv.serve_forever, daemon=True)
        th.start()
        try:
            rc, out, err = sh([up], env=env, timeout=120)
        finally:
            srv.shutdown()
            srv.server_close()
        assert rc == 1 and "something not started by up.sh answers at" in err, (out, err)
        assert pids(home) == {}, pids(home)

        rc, out, err = sh([up], env=env, timeout=600)
        assert rc == 0, (rc, out[-4000:], err[-4000:])
        epochs = re.findall(r"^epoch (\d+)/2 loss (\d+\.\d+)", out, re.M)
        assert [e[0] for e in epochs] == ["1", "2"], out[-4000:]
        assert re.search(r"^job j-1 SUCCEEDED", out, re.M), out[-4000:]
        assert "ddpctl list" in out and "deploy/down.sh" in out, out[-2000:]
        first = pids(home)
        assert set(first) == {"ddpd", "agent-node-a", "agent-node-b"}, first
        assert all(pid_alive(p) for p in first.values()), first
        nodes = {n["name"]: n for n in ddpctl_json(home, port, "nodes")["nodes"]}
        assert {k: (v["state"], v["slots"]) for k, v in nodes.items()} == {
            "node-a": ("READY", 2), "node-b": ("READY", 2)}, nodes
        assert os.path.isfile(os.path.join(home, "logs", "ddpd.log"))

        # Twice: the first run's processes are replaced, the data kept.
        rc, out, err = sh([up], env=env, timeout=600)
        assert rc == 0, (rc, out[-4000:], err[-4000:])
        assert re.search(r"^job j-2 SUCCEEDED", out, re.M), out[-4000:]
        second = pids(home)
        assert not any(pid_alive(p) for p in first.values()), first
        assert all(pid_alive(p) for p in second.values()), second
        jobs = ddpctl_json(home, port, "list")["jobs"]
        assert [(j["id"], j["state"]) for j in jobs] == [("j-2", "SUCCEEDED"),
                                                         ("j-1", "SUCCEEDED")], jobs

        # A stale pid file naming a live process that is not ours: never signalled.
        with open(os.path.join(home, "run", "agent-stale.pid"), "w") as fh:
            fh.write("%d 1 ddp-agent\n" % os.getpid())
        rc, out, err = sh([down], env=env, timeout=120)
        assert rc == 0, (out, err)
        assert "agent-stale is not running (stale pid file removed)" in out, out
        assert not any(pid_alive(p) for p in second.values()), second
        assert pids(home) == {}
        assert os.path.isfile(os.path.join(home, "ddp.db")), os.listdir(home)
        rc, out, err = sh([down, "--purge"], env=env, timeout=120)
        assert rc == 0 and not os.path.exists(home), (out, err)
    finally:
        if os.path.isdir(home):
            sh([down], env=env, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    api_sim.run_tests(globals())
