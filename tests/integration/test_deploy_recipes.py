"""deploy/'s systemd units, container image and Kubernetes manifests, checked as far as a
machine without systemd as PID 1, a container engine or a cluster allows (docs/operations.md,
"systemd", "Container image", "Kubernetes").

- systemd: the units (ddpd-replica@.service as its instance 1) pass `systemd-analyze verify`;
  `systemd-analyze security --offline=yes` scores ddpd.service and the replica's at most
  DDPD_MAX_EXPOSURE and the agent's at most AGENT_MAX_EXPOSURE (the "Overall exposure level"
  line); the replica keeps every sandbox setting of ddpd.service, passes the cluster flags from
  its instance and replica.env.example, whose values have the flags' forms; the limits training
  needs are set; ddpd, started with $NOTIFY_SOCKET, sends READY=1 only once /healthz answers,
  and STOPPING=1 on SIGTERM.
- Container image: .dockerignore keeps .ddp/, build folders, tokens, databases, credentials
  and .git out of the build context (Docker's matching rules, re-implemented below) and keeps
  the sources in; the Containerfile's last stage runs as a non-root user, has a HEALTHCHECK on
  ddpd's health endpoint and no `latest` base.
- Kubernetes: every manifest validates against the Kubernetes v1.30 JSON schemas vendored in
  tests/deploy/ (strict: an unknown field fails), and negative controls (a wrong field type,
  a misspelt field) must fail; ddpd's pod meets the Pod Security "restricted" rules, written
  out as assertions, the three replicas' too; images are pinned to the project's version; the
  three-replica StatefulSet has stable names, a claim each, readiness on /healthz and the
  cluster flags, and its start script, run here with stand-ins for ddpd and getent, gives each
  pod its node id and join list; the agent has probes, resources, a one-node-at-a-time update
  and drain hooks, which run here against a real ddpd.
Skips (exit 77) only when python3-yaml or python3-jsonschema is missing; without
systemd-analyze the systemd part says so and is skipped.
"""
import copy
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import Api, SimNode, cluster, run_tests  # noqa: E402
from cluster import BIN, REPO, free_port  # noqa: E402

try:
    import jsonschema
    import yaml
except ImportError as e:
    print("skipped: %s (apt-get install python3-yaml python3-jsonschema)" % e)
    sys.exit(77)

DEPLOY = os.path.join(REPO, "deploy")
SCHEMAS = os.path.join(REPO, "tests", "deploy", "k8s-schema-v1.30.0")
DDPD_MAX_EXPOSURE = 2.0
AGENT_MAX_EXPOSURE = 6.0
SCHEMA_OF = {("v1", "Namespace"): "namespace-v1", ("v1", "Service"): "service-v1",
             ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1",
             ("apps/v1", "Deployment"): "deployment-apps-v1",
             ("apps/v1", "DaemonSet"): "daemonset-apps-v1",
             ("apps/v1", "StatefulSet"): "statefulset-apps-v1",
             ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudget-policy-v1"}
# The replica template, verified as the instance of node 1.
UNITS = (("ddpd.service", "ddpd.service"), ("ddp-agent.service", "ddp-agent.service"),
         ("ddpd-replica@.service", "ddpd-replica@1.service"))


def sh(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)
    return p.returncode, p.stdout, p.stderr


def unit_text(name):
    with open(os.path.join(DEPLOY, "systemd", name)) as fh:
        return fh.read()


def unit_settings(text):
    """{key: [values]} of a unit file's assignments (comments and sections skipped)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;[" or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out.setdefault(k.strip(), []).append(v.strip())
    return out


def staged_units(d):
    """The units copied into d with ExecStart's programs pointed at stand-ins (verify checks
    that they exist)."""
    paths = []
    for b in ("ddpd", "ddp-agent"):
        shutil.copy("/bin/true", os.path.join(d, b))
    for u, staged in UNITS:
        path = os.path.join(d, staged)
        with open(path, "w") as fh:
            fh.write(unit_text(u).replace("/usr/local/bin/", d + "/"))
        paths.append(path)
    return paths


def test_deploy_systemd_units():
    if not shutil.which("systemd-analyze"):
        print("systemd-analyze not installed (apt-get install systemd): units not checked")
        return
    with tempfile.TemporaryDirectory() as d:
        units = staged_units(d)
        rc, out, err = sh(["systemd-analyze", "verify"] + units)
        assert rc == 0 and "ddp" not in err, out + err
        scores = {}
        for u in units:
            rc, out, err = sh(["systemd-analyze", "security", "--offline=yes", "--no-pager", u])
            m = re.search(r"Overall exposure level for (\S+): (\d+\.\d+)", out + err)
            assert m, (rc, out, err)
            scores[m.group(1)] = float(m.group(2))
            print("%s: exposure %s" % (m.group(1), m.group(2)))
    assert scores["ddpd.service"] <= DDPD_MAX_EXPOSURE, scores
    assert scores["ddpd-replica@1.service"] <= DDPD_MAX_EXPOSURE, scores
    assert scores["ddp-agent.service"] <= AGENT_MAX_EXPOSURE, scores

    ddpd = unit_settings(unit_text("ddpd.service"))
    for k, v in (("Type", "notify"), ("LimitNOFILE", "65536"), ("ProtectSystem", "strict"),
                 ("StateDirectory", "ddp"), ("StateDirectoryMode", "0700"), ("UMask", "0077"),
                 ("NoNewPrivileges", "yes"), ("CapabilityBoundingSet", ""),
                 ("MemoryDenyWriteExecute", "yes"), ("SystemCallFilter", "@system-service"),
                 ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX")):
        assert v in ddpd.get(k, []), (k, ddpd.get(k))
    assert "ReadWritePaths" not in ddpd, "StateDirectory= alone is writable"
    agent = unit_settings(unit_text("ddp-agent.service"))
    for k, v in (("LimitMEMLOCK", "infinity"), ("LimitNOFILE", "1048576"),
                 ("TasksMax", "infinity"), ("Delegate", "yes"), ("KillMode", "mixed")):
        assert agent.get(k) == [v], (k, agent.get(k))
    # What training needs may not be taken away (the unit's header says why).
    for k in ("PrivateDevices", "MemoryDenyWriteExecute", "SystemCallFilter", "ProtectClock",
              "ProtectControlGroups", "ProtectKernelTunables", "DeviceAllow"):
        assert k not in agent, k + " would break GPUs, JITs, cgroups or the jobs' programs"
    assert "--server ${DDP_SERVER}" in agent["ExecStart"][0], agent["ExecStart"]


# What a replica may set differently from ddpd.service: where it is, what it runs, its name.
REPLICA_OWN = {"Description", "Documentation", "Environment", "EnvironmentFile",
               "StateDirectory", "WorkingDirectory", "ExecStart"}


def env_file(name):
    """{key: value} of an EnvironmentFile (systemd's reading: no quotes, comments skipped)."""
    out = {}
    for line in unit_text(name).splitlines():
        line = line.strip()
        if line and line[0] not in "#;":
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def test_deploy_systemd_replica_unit():
    """ddpd-replica@.service: ddpd.service's sandbox, one state folder and env file per
    instance, the cluster flags (docs/ha.md), and an example env file of the right forms."""
    ddpd = unit_settings(unit_text("ddpd.service"))
    rep = unit_settings(unit_text("ddpd-replica@.service"))
    for k in set(ddpd) | set(rep):
        if k not in REPLICA_OWN:
            assert rep.get(k) == ddpd.get(k), (k, rep.get(k), ddpd.get(k))
    assert rep["EnvironmentFile"] == ["-/etc/ddp/replica-%i.env"], rep["EnvironmentFile"]
    assert rep["StateDirectory"] == ["ddp-replica-%i"], rep["StateDirectory"]
    assert "DDP_HOME=/var/lib/ddp-replica-%i" in rep["Environment"], rep["Environment"]
    argv = rep["ExecStart"][0].split()
    assert argv[0] == "/usr/local/bin/ddpd", argv
    flags = dict(zip(argv[1:], argv[2:]))
    assert "--cluster" in argv and flags["--node-id"] == "%i", argv
    assert flags["--raft-address"] == "${RAFT_ADDRESS}", argv
    assert flags["--advertise"] == "${ADVERTISE}" and flags["--listen"] == "${LISTEN}", argv
    assert flags["--data-dir"] == "/var/lib/ddp-replica-%i/raft", argv
    # Every replica reads the same tokens, from outside its own state folder.
    assert flags["--token-file"] == "/etc/ddp/user.token", argv
    assert flags["--agent-token-file"] == "/etc/ddp/agent.token", argv
    # $JOIN unbraced: node 1's empty JOIN passes no argument, the others' `--join A,B` two.
    assert "$JOIN" in argv and "${JOIN}" not in argv, argv
    env = env_file("replica.env.example")
    used = set(re.findall(r"\$\{?(\w+)\}?", rep["ExecStart"][0]))
    assert set(env) <= used | {"DDPD_ARGS"}, (set(env) - used)
    assert {"RAFT_ADDRESS", "JOIN", "ADVERTISE", "LISTEN"} <= set(env), env
    addr = r"\d{1,3}(?:\.\d{1,3}){3}:\d+"
    assert re.fullmatch(addr, env["RAFT_ADDRESS"]), "a raft address is a numeric IP:PORT"
    assert re.fullmatch(r"--join %s(?:,%s)*" % (addr, addr), env["JOIN"]), env["JOIN"]
    assert re.fullmatch(r"https?://[^/\s]+", env["ADVERTISE"]), env["ADVERTISE"]


def test_deploy_sdnotify_ready_after_listen():
    name = "@ddp-test-notify-%d" % os.getpid()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name[1:])
    s.settimeout(20)
    port = free_port()
    home = tempfile.mkdtemp(prefix="ddp-test-notify-")
    env = dict(os.environ, NOTIFY_SOCKET=name, DDP_HOME=home)
    log = open(os.path.join(home, "ddpd.log"), "wb")
    p = subprocess.Popen([os.path.join(BIN, "ddpd"), "--listen", "127.0.0.1:%d" % port],
                         stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        msg = s.recv(4096)
        assert msg == b"READY=1", msg
        # READY=1 came after the listener: the first request after it is answered.
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=5) as r:
            assert r.status == 200
        p.terminate()
        assert s.recv(4096) == b"STOPPING=1"
        assert p.wait(timeout=15) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()
        s.close()
        shutil.rmtree(home, ignore_errors=True)


def dockerignore_patterns():
    pats = []
    with open(os.path.join(REPO, ".dockerignore")) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                pats.append(line)
    return pats


def docker_match(pattern, path):
    """Docker's rule: the pattern matches the path or one of its parent folders; `**` spans
    any number of folders, `*` and `?` stay within one."""
    rx = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            rx += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            rx += ".*"
            i += 2
        elif pattern[i] == "*":
            rx += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            rx += "[^/]"
            i += 1
        else:
            rx += re.escape(pattern[i])
            i += 1
    return re.fullmatch(rx + "(?:/.*)?", path) is not None


def excluded(pats, path):
    out = False
    for p in pats:
        neg = p.startswith("!")
        if docker_match(p[1:] if neg else p, path):
            out = not neg
    return out


def test_deploy_dockerignore():
    pats = dockerignore_patterns()
    # The matcher itself, on Docker's documented examples.
    assert docker_match("**/*.go", "a/b/c.go") and docker_match("*/temp*", "x/temporary")
    assert not docker_match("*/temp*", "x/y/temp") and docker_match("build*", "build-asan/x")
    for path in (".ddp", ".ddp/ddp.db", ".ddp/user.token", ".ddp/logs/ddpd.log", ".git/HEAD",
                 "build", "build/bin/ddpd", "build-asan/CMakeCache.txt", "build-fuzz/x",
                 "agent.token", "user.token", "server/x.token", "deploy/agent.token",
                 "ddp.db", "ddp.db-wal", "tests/state.db", "node.credential",
                 "x/agents/node-a/node.credential", "tls.key", "certs/server.pem",
                 "tests/integration/__pycache__/api_sim.cpython-311.pyc", ".ddp-7/ddp.db"):
        assert excluded(pats, path), path + " would be sent as build context"
    copied = re.findall(r"^COPY (?!--from)(\S+)", open(os.path.join(DEPLOY, "Containerfile")
                                                      ).read(), re.M)
    for src in copied:
        for f in subprocess.run(["git", "-C", REPO, "ls-files", src], capture_output=True,
                                text=True, check=True).stdout.split():
            assert not excluded(pats, f), f + " is copied by the Containerfile but ignored"


def test_deploy_containerfile():
    with open(os.path.join(DEPLOY, "Containerfile")) as fh:
        text = fh.read().replace("\\\n", " ")  # continuation lines joined
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) >= 2, "a build stage and a runtime stage"
    for st in stages:
        base = st.split()[0]
        assert ":" in base and not base.endswith(":latest"), "unpinned base " + base
    last = stages[-1]
    users = re.findall(r"^USER\s+(\S+)", last, re.M)
    assert users, "the runtime stage sets no USER: it would run as root"
    assert users[-1].split(":")[0] not in ("root", "0"), users
    assert re.match(r"\d+$", users[-1].split(":")[0]), "a numeric USER lets runAsNonRoot check"
    hc = re.search(r"^HEALTHCHECK\s+(.*)", last, re.M)
    assert hc and re.search(r"CMD .*127\.0\.0\.1:8470/(healthz|readyz)", hc.group(1)), hc
    assert re.search(r"install [^&]*\bcurl\b", last), "HEALTHCHECK runs curl: install it"
    assert "chmod 0700 /var/lib/ddp" in last, "DDP_HOME readable by its user alone"
    assert "-t ddp:%s" % project_version() in text, "the build command tags the version"


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as fh:
        return re.search(r"project\(ddp VERSION (\S+)", fh.read()).group(1)


def manifests():
    docs = []
    for f in sorted(glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))):
        with open(f) as fh:
            docs += [(os.path.basename(f), d) for d in yaml.safe_load_all(fh) if d]
    return docs


def validator(doc):
    name = SCHEMA_OF[(doc["apiVersion"], doc["kind"])]
    with open(os.path.join(SCHEMAS, name + ".json")) as fh:
        schema = json.load(fh)
    return jsonschema.Draft7Validator(schema)


def schema_errors(doc):
    return ["%s: %s" % ("/".join(map(str, e.absolute_path)), e.message)
            for e in validator(doc).iter_errors(doc)]


def test_deploy_k8s_schemas():
    docs = manifests()
    assert {d["kind"] for _, d in docs} == {"Namespace", "PersistentVolumeClaim", "Deployment",
                                            "Service", "DaemonSet", "StatefulSet",
                                            "PodDisruptionBudget"}, docs
    for f, d in docs:
        errs = schema_errors(d)
        assert not errs, (f, d["kind"], errs)
    # Negative controls: the schemas do reject what a cluster would.
    dep = copy.deepcopy(next(d for _, d in docs if d["kind"] == "Deployment"))
    bad = copy.deepcopy(dep)
    bad["spec"]["replicas"] = "one"
    assert any("replicas" in e for e in schema_errors(bad)), "a string replicas passed"
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonroot"] = True
    assert any("runAsNonroot" in e for e in schema_errors(bad)), "a misspelt field passed"
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8470"
    assert schema_errors(bad), "a string containerPort passed"
    ds = copy.deepcopy(next(d for _, d in docs if d["kind"] == "DaemonSet"))
    ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = [1]
    assert schema_errors(ds), "a list maxUnavailable passed"
    sts = copy.deepcopy(next(d for _, d in docs if d["kind"] == "StatefulSet"))
    sts["spec"]["volumeClaimTemplates"][0]["spec"]["accesModes"] = ["ReadWriteOnce"]
    assert any("accesModes" in e for e in schema_errors(sts)), "a misspelt claim field passed"


def containers(pod):
    return pod.get("initContainers", []) + pod["containers"]


def test_deploy_k8s_ddpd_restricted():
    """The Pod Security Standards' restricted profile (v1.30), rule by rule, on ddpd's pod,
    the single one's and the three replicas'."""
    docs = manifests()
    for f, ns in docs:
        if ns["kind"] == "Namespace" and ns["metadata"]["name"] == "ddp":
            assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == \
                "restricted", f
    pods = [(d["kind"], d["spec"]["template"]["spec"]) for _, d in docs
            if d["kind"] in ("Deployment", "StatefulSet")]
    assert sorted(k for k, _ in pods) == ["Deployment", "StatefulSet"], pods
    for kind, pod in pods:
        check_restricted(pod)
        # Probes: liveness the process; readiness the store for the single ddpd, but the
        # process for a replica (a follower stays in the Service and redirects).
        c = pod["containers"][0]
        ready = "/readyz" if kind == "Deployment" else "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == ready, (kind, c["readinessProbe"])
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", c["livenessProbe"]
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


def check_restricted(pod):
    psc = pod.get("securityContext", {})
    # baseline: no host namespaces, ports, paths, privileged, added capabilities, sysctls...
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(k), k
    assert not any("hostPath" in v for v in pod.get("volumes", [])), "hostPath volume"
    assert not psc.get("sysctls"), "sysctls"
    for c in containers(pod):
        sc = c.get("securityContext", {})
        assert not sc.get("privileged"), c["name"]
        assert not any("hostPort" in p for p in c.get("ports", [])), c["name"]
        assert sc.get("procMount", "Default") == "Default", c["name"]
        assert not (sc.get("seLinuxOptions") or {}).get("type"), c["name"]
        # restricted: volumes of the allowed kinds only
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
               "persistentVolumeClaim", "projected", "secret"}
    for v in pod.get("volumes", []):
        assert set(v) - {"name"} <= allowed, v
    for c in containers(pod):
        sc = c.get("securityContext", {})
        # restricted: non-root, never escalating, no capabilities, a seccomp profile
        assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, c["name"]
        assert sc.get("runAsUser", psc.get("runAsUser")) != 0, c["name"]
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], c["name"]
        assert set(sc.get("capabilities", {}).get("add", [])) <= {"NET_BIND_SERVICE"}
        prof = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        assert prof in ("RuntimeDefault", "Localhost"), (c["name"], prof)
        assert sc.get("readOnlyRootFilesystem") is True, c["name"]  # beyond restricted


def ha_docs():
    with open(os.path.join(DEPLOY, "k8s", "ddpd-ha.yaml")) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def test_deploy_k8s_ddpd_ha():
    """ddpd-ha.yaml: three replicas with stable names and a claim each, a headless Service
    that publishes not-ready pods, a client Service, a budget keeping a quorum, the cluster
    flags from the downward API."""
    docs = ha_docs()
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    spec = sts["spec"]
    assert spec["replicas"] == 3, spec["replicas"]
    assert spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady", "ddpd-0 first"
    svc = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    peers = svc[spec["serviceName"]]["spec"]
    assert peers["clusterIP"] == "None" and peers["publishNotReadyAddresses"] is True, peers
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"] == labels
    assert svc["ddpd"]["spec"]["selector"] == labels, "the client Service is the agents' URL"
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"] == labels, pdb
    claims = spec["volumeClaimTemplates"]
    assert len(claims) == 1 and claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"], claims
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts[claims[0]["metadata"]["name"]] == env["DDP_HOME"]["value"], mounts
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    script = c["command"][-1]
    for flag in ("--cluster", "--node-id", "--raft-address", "--join", "--advertise",
                 "--data-dir", "--token-file", "--agent-token-file"):
        assert flag in script, flag
    assert "getent hosts" in script, "raft addresses are numeric: the peers are resolved"
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["tokens"]["secret"]["secretName"] == "ddp-tokens", "the tokens of ddpd.yaml"
    assert "claimName" not in str(pod["volumes"]), "each replica its own claim"


def run_ha_script(tmp, pod_name, hosts):
    """The StatefulSet's start script as pod pod_name, ddpd, getent and sleep stand-ins first
    on PATH: returns (exit status, ddpd's argv or None, stderr)."""
    c = next(d for d in ha_docs() if d["kind"] == "StatefulSet")["spec"]["template"]["spec"][
        "containers"][0]
    stubs = os.path.join(tmp, "bin")
    os.makedirs(stubs, exist_ok=True)
    for name, body in (("ddpd", 'for a; do printf "%s\\n" "$a"; done > "$ARGV_OUT"'),
                       ("getent", '[ "$1" = hosts ] || exit 2\n'
                                  'awk -v n="$2" \'$2 == n {print; f=1} END {exit !f}\' "$HOSTS"'),
                       ("sleep", "exit 0")):
        with open(os.path.join(stubs, name), "w") as fh:
            fh.write("#!/bin/sh\n" + body + "\n")
        os.chmod(os.path.join(stubs, name), 0o755)
    with open(os.path.join(tmp, "hosts"), "w") as fh:
        fh.writelines("%s %s.ddpd-peers.ddp.svc.cluster.local\n" % (ip, h) for h, ip in hosts)
    out = os.path.join(tmp, "argv")
    if os.path.exists(out):
        os.remove(out)
    env = dict(os.environ, PATH=stubs + ":" + os.environ["PATH"], POD_NAME=pod_name,
               POD_IP="10.1.0.%d" % (int(pod_name[-1]) + 10), HOSTS=os.path.join(tmp, "hosts"),
               ARGV_OUT=out)
    script = c["command"][-1].replace("/usr/local/bin/ddpd", os.path.join(stubs, "ddpd"))
    p = subprocess.run(c["command"][:-1] + [script], env=env, capture_output=True, text=True,
                       timeout=60)
    argv = open(out).read().splitlines() if os.path.exists(out) else None
    return p.returncode, argv, p.stderr


def test_deploy_k8s_ha_start_script():
    hosts = [("ddpd-0", "10.1.0.10"), ("ddpd-1", "10.1.0.11"), ("ddpd-2", "10.1.0.12")]
    tmp = tempfile.mkdtemp(prefix="ddp-test-ha-")
    try:
        def flags(argv):
            return dict(zip(argv, argv[1:]))
        rc, argv, err = run_ha_script(tmp, "ddpd-0", hosts)
        assert rc == 0 and argv, (rc, argv, err)
        f = flags(argv)
        assert "--cluster" in argv and f["--node-id"] == "1" and "--join" not in argv, argv
        assert f["--raft-address"] == "10.1.0.10:8471", argv
        assert f["--advertise"] == "http://ddpd-0.ddpd-peers.ddp.svc.cluster.local:8470", argv
        assert f["--data-dir"] == "/var/lib/ddp/raft", argv
        rc, argv, err = run_ha_script(tmp, "ddpd-1", hosts)
        assert rc == 0 and flags(argv)["--node-id"] == "2", (rc, argv, err)
        assert flags(argv)["--join"] == "10.1.0.10:8471", argv
        rc, argv, err = run_ha_script(tmp, "ddpd-2", hosts)
        assert rc == 0 and flags(argv)["--node-id"] == "3", (rc, argv, err)
        assert flags(argv)["--join"] == "10.1.0.10:8471,10.1.0.11:8471", argv
        assert flags(argv)["--raft-address"] == "10.1.0.12:8471", argv
        # A peer that does not resolve (yet) is left out; none at all: the pod gives up.
        rc, argv, err = run_ha_script(tmp, "ddpd-2", hosts[1:])
        assert rc == 0 and flags(argv)["--join"] == "10.1.0.11:8471", (rc, argv, err)
        rc, argv, err = run_ha_script(tmp, "ddpd-1", hosts[1:])
        assert rc == 1 and argv is None and "no replica before ddpd-1" in err, (rc, argv, err)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_deploy_k8s_images_and_agent():
    version = project_version()
    docs = manifests()
    for f, d in docs:
        spec = d.get("spec", {}).get("template", {}).get("spec")
        for c in containers(spec) if spec else ():
            assert c["image"] == "ddp:" + version, (f, c["name"], c["image"])
    ds = next(d for _, d in docs if d["kind"] == "DaemonSet")
    ns = next(d for _, d in docs if d["kind"] == "Namespace"
              and d["metadata"]["name"] == ds["metadata"]["namespace"])
    assert ns["metadata"]["name"] != "ddp", "the agent may not share ddpd's restricted namespace"
    up = ds["spec"]["updateStrategy"]
    assert up["type"] == "RollingUpdate" and up["rollingUpdate"]["maxUnavailable"] == 1, up
    pod = ds["spec"]["template"]["spec"]
    agent = pod["containers"][0]
    assert agent["securityContext"]["allowPrivilegeEscalation"] is False
    assert agent["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert agent["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert agent["readinessProbe"] and agent["livenessProbe"], agent
    assert agent["resources"]["requests"]["cpu"] and agent["resources"]["requests"]["memory"]
    for c in pod.get("initContainers", []):
        assert c["resources"]["limits"]["memory"], c["name"]
    pre = agent["lifecycle"]["preStop"]["exec"]["command"]
    assert "ddpctl nodes drain" in pre[-1], pre
    # The grace covers the drain's wait and then the agent's own stop (its 45 s).
    wait = int(re.search(r'-lt (\d+)', pre[-1]).group(1))
    assert pod["terminationGracePeriodSeconds"] >= wait + 45, pod["terminationGracePeriodSeconds"]
    # A drain token is optional: without the Secret the pod still starts.
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["drain-token"]["secret"]["optional"] is True


def hook(ds, which, tmp):
    """The DaemonSet's hook script, its image paths pointed at this build and tmp."""
    script = ds["spec"]["template"]["spec"]["containers"][0]["lifecycle"][which]["exec"][
        "command"][-1]
    return script.replace("/usr/local/bin/", BIN + "/").replace("/etc/ddp-drain/", tmp + "/")


def test_deploy_k8s_drain_hooks():
    ds = next(d for _, d in manifests() if d["kind"] == "DaemonSet")
    tmp = tempfile.mkdtemp(prefix="ddp-test-hooks-")
    try:
        with cluster() as c:
            api = Api(c)
            node = SimNode(api, "gpu-1")
            node.register()
            env = dict(os.environ, NODE_NAME="gpu-1", DDP_SERVER=c.url, DDP_HOME=tmp)
            env.pop("DDP_TOKEN", None)

            def admin():
                n = next(n for n in api.get("/v1/nodes").json["nodes"] if n["name"] == "gpu-1")
                return n["admin_state"], n["admin_reason"]

            def run(which):
                p = subprocess.run(["/bin/sh", "-c", hook(ds, which, tmp)], env=env,
                                   capture_output=True, text=True, timeout=60)
                assert p.returncode == 0, (which, p)

            run("preStop")  # no token: nothing done
            assert admin() == ("", ""), admin()
            with open(os.path.join(tmp, "drain.token"), "w") as fh:
                fh.write(c.user_token + "\n")
            t0 = time.monotonic()
            run("preStop")
            assert admin() == ("drain", "k8s-agent-update"), admin()
            assert time.monotonic() - t0 < 30, "no slot used: the hook waits for nothing"
            run("postStart")
            assert admin() == ("", ""), admin()
            # An admin's own drain outlives the agent's restart.
            a = api.post("/v1/nodes/gpu-1:drain", {"reason": "disk swap"})
            assert a.status == 200, a
            run("postStart")
            assert admin() == ("drain", "disk swap"), admin()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
