"""ddpctl against a live ddpd, without running workers: usage errors (exit 2 with the usage
line), --help, "cannot reach ddpd ...: connection refused", "job j-N not found", token
resolution (flag, DDP_TOKEN, $DDP_HOME/user.token, ./.ddp/user.token) and its errors, and
submit / list / status / cancel in table and json form, the json parsed and compared with
what ddpd stored, and submit --idempotency-key (the same key: the same job)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_sim  # noqa: E402
from api_sim import Api, cluster  # noqa: E402
from cli_util import CTL, Background, assert_usage, ctl, ctl_env  # noqa: E402
from cluster import free_port  # noqa: E402

COMMANDS = ["submit", "list", "status", "cancel", "logs", "nodes", "watch", "wait"]


def test_cli_usage_errors_and_help():
    # No ddpd is needed: a usage error never sends anything.
    r = ctl(None)
    assert r.rc == 2 and "usage: ddpctl [--server URL]" in r.err, r
    r = ctl(None, "frobnicate")
    assert r.rc == 2 and "unknown command 'frobnicate'" in r.err and "usage: ddpctl" in r.err, r
    r = ctl(None, "--help")
    assert r.rc == 0, r
    for cmd in COMMANDS:
        assert "  %s " % cmd in r.out, (cmd, r)
        h = ctl(None, cmd, "--help")
        assert h.rc == 0 and h.out.startswith("usage: ddpctl " + cmd), h
    assert_usage(ctl(None, "-o", "yaml", "list"), "[--server URL]")
    assert_usage(ctl(None, "submit"), "submit [--name N]")
    assert_usage(ctl(None, "submit", "--nnodes", "3:2", "--", "true"), "submit")
    assert "min 3 > max 2" in ctl(None, "submit", "--nnodes", "3:2", "--", "true").err
    assert_usage(ctl(None, "submit", "--nnodes", "x", "--", "true"), "submit")
    assert_usage(ctl(None, "submit", "--nproc-per-node", "0", "--", "true"), "submit")
    assert_usage(ctl(None, "submit", "--grace", "3601", "--", "true"), "submit")
    assert_usage(ctl(None, "submit", "--gpus-per-proc", "65", "--", "true"), "submit")
    assert "--gpus-per-proc" in ctl(None, "submit", "--gpus-per-proc", "x", "--", "true").err
    assert_usage(ctl(None, "submit", "--env", "=v", "--", "true"), "submit")
    assert_usage(ctl(None, "submit", "--bogus", "--", "true"), "submit")
    assert "unknown option '--bogus'" in ctl(None, "submit", "--bogus", "--", "true").err
    for cmd in ("status", "cancel", "logs", "watch", "wait"):
        r = ctl(None, cmd)
        assert_usage(r, cmd + " JOB")
        assert "missing the job id" in r.err, r
        if cmd not in ("status", "cancel"):  # those two take several (test_cli_output_habits)
            assert_usage(ctl(None, cmd, "j-1", "j-2"), cmd + " JOB")
    assert_usage(ctl(None, "list", "--state", "DONE"), "list [--state S]")
    assert_usage(ctl(None, "list", "extra"), "list")
    assert_usage(ctl(None, "nodes", "extra"), "nodes")
    # A flag the node verb does not take is refused, not dropped; an empty name is refused.
    for args, msg in ((["remove", ""], "remove: the node name is empty"),
                      (["remove", "n1", "--reason", "x"], "--reason goes with cordon and drain"),
                      (["uncordon", "n1", "--reason", "x"], "--reason goes with cordon and drain"),
                      (["--no-headers", "cordon", "n1"], "--no-headers goes with the node list")):
        r = ctl(None, "nodes", *args)
        assert_usage(r, "nodes")
        assert msg in r.err, (args, r)
    assert_usage(ctl(None, "logs", "j-1", "--rank", "-1"), "logs JOB")
    assert_usage(ctl(None, "logs", "j-1", "--rank"), "logs JOB")
    assert_usage(ctl(None, "wait", "j-1", "--timeout", "soon"), "wait JOB")
    assert_usage(ctl(None, "status", "j-1", "-o", "xml"), "status JOB")
    # values that go into JSON must be UTF-8: refused naming the option, never dropped
    for args, what in ((["submit", "--name", "x\udcff", "--", "true"], "--name"),
                       (["submit", "--env", "K=\udce9", "--", "true"], "--env"),
                       (["submit", "--", "true", "\udcff"], "the command"),
                       (["users", "add", "bob", "--role", "admin\udcff"], "--role"),
                       (["users", "set", "bob", "--group", "\udce9quipe"], "--group"),
                       (["nodes", "cordon", "n1", "--reason", "\udcff"], "--reason")):
        r = ctl(None, *args)
        assert_usage(r, args[0])
        assert "%s: the value is not UTF-8 text" % what in r.err, (args, r)
    r = ctl(None, "list", "--all=yes")
    assert_usage(r, "list")
    assert "option '--all' takes no value" in r.err, r
    r = ctl(None, "help", "submit")
    assert r.rc == 0 and r.out.startswith("usage: ddpctl submit"), r
    for args in (["help", "bogus"], ["help", "submit", "list"], ["--version", "junk"]):
        r = ctl(None, *args)
        assert r.rc == 2 and "usage: ddpctl" in r.err, (args, r)
    r = ctl(None, "users", "add", "bob", "--token-out", "")
    assert_usage(r, "users")
    assert "--token-out: the file name is empty" in r.err, r


def test_cli_unreachable_ddpd():
    port = free_port()  # nothing listens there
    url = "http://127.0.0.1:%d" % port
    want = "cannot reach ddpd at %s: connection refused" % url
    for args in (["--server", url, "list"], ["list", "--server", url],
                 ["--server", url, "status", "j-1"], ["--server", url, "nodes"],
                 ["--server", url, "submit", "--", "true"], ["--server", url, "wait", "j-1"],
                 ["--server", url, "watch", "j-1"], ["--server", url, "logs", "-f", "j-1"]):
        r = ctl(None, *args)
        assert r.rc == 1 and want in r.err and r.out == "", r
        assert "retrying" not in r.err, r  # only a job being followed is waited for
    # Several jobs and no ddpd: said once, not once a job.
    r = ctl(None, "--server", url, "cancel", "j-1", "j-2", "j-3")
    assert r.rc == 1 and r.err.count(want) == 1 and "3 of 3 jobs not cancelled" in r.err, r
    r = ctl(None, "--server", url, "delete", "j-1", "j-2", "j-3")
    assert r.rc == 1 and r.err.count(want) == 1 and "3 of 3 jobs not deleted" in r.err, r
    # DDP_SERVER is used when there is no flag; the flag wins over it.
    r = ctl(None, "nodes", env=ctl_env(None, extra={"DDP_SERVER": url}))
    assert r.rc == 1 and want in r.err, r
    r = ctl(None, "--server", url + "/", "nodes",
            env=ctl_env(None, extra={"DDP_SERVER": "http://127.0.0.1:1"}))
    assert r.rc == 1 and want in r.err, r


def test_cli_wait_timeout_holds_while_ddpd_is_away():
    """wait --timeout S ends about S s after it started even when ddpd stops answering on
    the way (each request's own timeout is cut to what is left); and status of several jobs
    of a ddpd that does not answer waits for one timeout, not one per job."""
    with cluster(node_timeout=300) as c:
        r = ctl(c, "submit", "--parsable", "--", "/bin/true")  # no agent: stays PENDING
        assert r.rc == 0, r
        job = r.out.strip()
        t0 = time.monotonic()
        w = Background(c, "wait", job, "--timeout", "3")
        try:
            time.sleep(1)  # past wait's first call, which is not patient
            c.ddpd.send_signal(signal.SIGSTOP)
            r = w.finish(timeout=30)
            took = time.monotonic() - t0
        finally:
            c.ddpd.send_signal(signal.SIGCONT)
            w.kill()
        assert r.rc == 1 and "timed out after 3 s waiting for job %s" % job in r.err, r
        assert took < 8, "wait --timeout 3 took %.1f s" % took

        def while_stopped(*args, timeout):
            """ddpctl ARGS run to its end with ddpd stopped; (Run, seconds it took)."""
            c.ddpd.send_signal(signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                return ctl(c, *args, timeout=timeout), time.monotonic() - t0
            finally:
                c.ddpd.send_signal(signal.SIGCONT)

        # ddpd stopped before the first call: that one is bounded by --timeout too
        r, took = while_stopped("wait", job, "--timeout", "2", timeout=60)
        assert r.rc == 1 and "timed out after 2 s waiting for job %s (ddpd did not answer" % job \
            in r.err, r
        assert took < 6, "wait --timeout 2 with ddpd stopped took %.1f s" % took
        r, took = while_stopped("status", job, "j-98", "j-99", timeout=90)
        assert r.rc == 1 and r.err.count("timed out") == 1 and \
            "3 of 3 jobs not shown" in r.err, r
        assert took < 30, "status of 3 jobs took %.1f s" % took


def test_cli_follow_stops_on_an_unknown_state():
    """A ddpd whose job answer carries no state ddpctl knows (another version): wait, logs -f
    and watch stop with an error naming it instead of polling for ever."""
    import http.server
    import threading

    class Stub(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            path = self.path.split("?")[0]
            body = {"/v1/jobs/j-1": {"id": "j-1", "state": "PAUSED"},
                    "/v1/jobs/j-1/logs": {"lines": [], "next": 0},
                    "/v1/jobs/j-1/events": {"events": []},
                    "/v1/jobs/j-1/metrics": {"metrics": []}}.get(path, {"id": "j-1"})
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    url = "http://127.0.0.1:%d" % srv.server_address[1]
    try:
        env = ctl_env(None, extra={"DDP_TOKEN": "t" * 32})
        for args in (["wait", "j-1"], ["logs", "-f", "j-1"], ["watch", "j-1"]):
            r = ctl(None, "--server", url, *args, env=env, timeout=30)
            assert r.rc == 1 and "without a state this ddpctl knows (PAUSED)" in r.err, (args, r)
    finally:
        srv.shutdown()
        srv.server_close()


def test_cli_tokens():
    with cluster(node_timeout=300) as c:
        # $DDP_HOME/user.token by default.
        r = ctl(c, "-o", "json", "list")
        assert r.rc == 0, r
        assert json.loads(r.out) == {"jobs": [], "next_page_token": ""}, r
        r = ctl(c, "list")
        assert r.rc == 0 and "no jobs" in r.out, r
        # ./.ddp/user.token when DDP_HOME is not set: the local cluster's layout.
        with tempfile.TemporaryDirectory() as d:
            os.symlink(c.home, os.path.join(d, ".ddp"))
            r = ctl(c, "nodes", home=False, cwd=d)
            assert r.rc == 0 and "no nodes" in r.out, r
            # Without any token: ddpd's 401 and a hint where the token is looked for.
            r = ctl(c, "list", home=False, cwd=tempfile.gettempdir())
            assert r.rc == 1 and "no user token" in r.err, r
        # --token-file and DDP_TOKEN.
        tf = os.path.join(c.tmp, "tok")
        with open(tf, "w") as f:
            f.write(c.user_token + "\n")
        r = ctl(c, "--token-file", tf, "list", home=False)
        assert r.rc == 0, r
        r = ctl(c, "list", env=ctl_env(c, home=False, extra={"DDP_TOKEN": c.user_token}))
        assert r.rc == 0, r
        r = ctl(c, "list", env=ctl_env(c, extra={"DDP_TOKEN": "wrong" * 8}))
        assert r.rc == 1 and "$DDP_TOKEN was refused" in r.err, r
        # A token that is not one is refused here, naming where it came from, before any
        # call: a second line would otherwise travel as a header of its own.
        for tok, part in (("wrong", "user token in $DDP_TOKEN is 5 bytes: at least 16"),
                          (c.user_token + "\r\nX-Extra: 1",
                           "user token in $DDP_TOKEN holds a space or control character at "
                           "byte %d" % len(c.user_token))):
            r = ctl(c, "list", env=ctl_env(c, extra={"DDP_TOKEN": tok}))
            assert r.rc == 1 and part in r.err, (tok, r)
        two = os.path.join(c.tmp, "two-lines")
        empty = os.path.join(c.tmp, "empty")
        fifo = os.path.join(c.tmp, "fifo")
        with open(two, "w") as f:
            f.write(c.user_token + "\nX-Extra: 1\n")
        open(empty, "w").close()
        os.mkfifo(fifo)
        for f, part in ((two, "holds a space or control character at byte %d"
                         % len(c.user_token)),
                        (empty, "user token file %s is empty" % empty),
                        (fifo, "%s is a FIFO" % fifo)):
            os.chmod(f, 0o600)
            r = ctl(c, "--token-file", f, "list", timeout=20)
            assert r.rc == 1 and "cannot use --token-file %s: " % f in r.err and part in r.err, \
                (f, r)
        # A link is followed (a Kubernetes secret's file is one), to a file held to the rules.
        ln = os.path.join(c.tmp, "tok-link")
        os.symlink(tf, ln)
        r = ctl(c, "--token-file", ln, "list", home=False)
        assert r.rc == 0, r
        # One that others may read is used, with a warning naming the chmod.
        os.chmod(tf, 0o644)
        r = ctl(c, "--token-file", tf, "list", home=False)
        assert r.rc == 0 and "mode 0644" in r.err and "chmod 600 %s" % tf in r.err, r
        # The default file, there but not usable: said, not taken for "no token".
        odd = os.path.join(c.tmp, "odd-home")
        os.makedirs(os.path.join(odd, "user.token"))
        r = ctl(c, "list", env=ctl_env(c, home=False, extra={"DDP_HOME": odd}))
        assert r.rc == 1 and "cannot use the user token file: %s/user.token is a folder" % odd \
            in r.err, r
        # The agent token is the wrong one for ddpctl: 403 and a hint.
        r = ctl(c, "--token-file", os.path.join(c.home, "agent.token"), "list")
        assert r.rc == 1 and "user token" in r.err, r
        missing = os.path.join(c.tmp, "missing")
        r = ctl(c, "--token-file", missing, "list")
        assert r.rc == 1 and "cannot use --token-file %s: open %s: No such file" % (
            missing, missing) in r.err, r
        # Output that cannot be written (a full disk) is a failure, not exit 0.
        with open("/dev/full", "w") as full:
            p = subprocess.run([CTL, "-o", "json", "list"], stdout=full, stderr=subprocess.PIPE,
                               text=True, env=ctl_env(c), timeout=60)
        assert p.returncode == 1 and "cannot write the output: No space left on device" in \
            p.stderr, (p.returncode, p.stderr)


def test_cli_submit_list_status_cancel():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        work = os.path.join(c.tmp, "work")
        os.makedirs(os.path.join(work, "sub"))
        r = ctl(c, "submit", "--parsable", "--", "/bin/echo", "hello world", cwd=work)
        assert r.rc == 0 and r.out == "j-1\n", r
        j1 = api.job("j-1")
        assert j1["spec"]["command"] == ["/bin/echo", "hello world"], j1
        # No --workdir: none sent, so the agent runs it in the job's own folder on the node.
        assert j1["spec"]["workdir"] == "", j1
        r = ctl(c, "submit", "--name", "probe.2", "--nnodes", "2:3", "--nproc-per-node", "2",
                "--max-restarts", "5", "--env", "A=1", "--env", "B=x=y", "--workdir", "sub",
                "--checkpoint-dir", "ck", "--max-runtime", "600", "--grace", "7",
                "--hang-timeout", "60", "-o", "json", "--", "python3", "-c", "print(1)",
                "--lr", "0.1", cwd=work)
        assert r.rc == 0, r
        j2 = json.loads(r.out)
        s = j2["spec"]
        assert j2["id"] == "j-2" and j2["name"] == "probe.2" and j2["state"] == "PENDING", j2
        assert s["command"] == ["python3", "-c", "print(1)", "--lr", "0.1"], s
        assert s["nnodes"] in ("2:3", [2, 3]) and s["nproc_per_node"] == 2, s
        assert s["env"] == {"A": "1", "B": "x=y"}, s
        assert s["workdir"] == os.path.join(os.path.realpath(work), "sub"), s
        assert s["checkpoint_dir"] == os.path.join(os.path.realpath(work), "ck"), s
        assert (s["max_restarts"], s["max_runtime_s"], s["grace_period_s"],
                s["hang_timeout_s"]) == (5, 600, 7, 60), s
        assert api.job("j-2")["spec"] == s
        # The word after the options starts the command even without "--"; --workdir . is
        # the caller's directory, made absolute.
        r = ctl(c, "submit", "--name", "plain", "--workdir", ".", "/bin/true", "--x", cwd=work)
        assert r.rc == 0 and r.out == "submitted job j-3\n", r
        assert api.job("j-3")["spec"]["command"] == ["/bin/true", "--x"]
        assert api.job("j-3")["spec"]["workdir"] == os.path.realpath(work)
        # ddpd's own refusal is a failure with its message (not a usage error).
        r = ctl(c, "submit", "--name", "bad name!", "--", "true")
        assert r.rc == 1 and "name" in r.err and r.out == "", r

        r = ctl(c, "list", "-o", "json")
        assert r.rc == 0, r
        ids = [j["id"] for j in json.loads(r.out)["jobs"]]
        assert ids == ["j-3", "j-2", "j-1"], ids
        r = ctl(c, "list")
        assert r.rc == 0, r
        lines = r.out.splitlines()
        assert lines[0].split()[:4] == ["ID", "NAME", "OWNER", "STATE"], r
        assert lines[1].split()[2] == "admin", r
        assert [ln.split()[0] for ln in lines[1:]] == ["j-3", "j-2", "j-1"], r
        assert "probe.2" in lines[2] and "PENDING" in lines[2], r

        r = ctl(c, "status", "j-2")
        assert r.rc == 0, r
        assert "j-2 (probe.2)" in r.out and "state:       PENDING" in r.out, r
        assert "python3 -c print(1) --lr 0.1" in r.out and "2:3 nodes x 2" in r.out, r
        r = ctl(c, "status", "j-2", "-o", "json")
        assert r.rc == 0 and json.loads(r.out) == api.job("j-2"), r

        r = ctl(c, "cancel", "j-2")
        assert r.rc == 0 and "j-2" in r.out, r
        api.wait_state("j-2", "CANCELLED")
        r = ctl(c, "cancel", "j-2", "-o", "json")  # idempotent
        assert r.rc == 0 and json.loads(r.out)["state"] == "CANCELLED", r
        r = ctl(c, "cancel", "j-2")
        assert r.rc == 0 and "CANCELLED" in r.out, r
        r = ctl(c, "list", "--state", "cancelled", "-o", "json")
        assert [j["id"] for j in json.loads(r.out)["jobs"]] == ["j-2"], r
        r = ctl(c, "list", "--state", "PENDING")
        assert r.rc == 0 and "j-2" not in r.out and "j-1" in r.out, r
        r = ctl(c, "wait", "j-2")
        assert r.rc == 1 and "job j-2 CANCELLED" in r.out, r

        for args in (["status", "j-42"], ["cancel", "j-42"], ["logs", "j-42"],
                     ["logs", "j-42", "-f"], ["watch", "j-42"], ["wait", "j-42"],
                     ["status", "../nodes"]):
            r = ctl(c, *args)
            assert r.rc == 1 and ("job %s not found" % args[1]) in r.err and r.out == "", r

        # More than one page (ddpctl asks 100 a page): every job, newest first, no repeats.
        for _ in range(100):
            api.submit({"command": ["true"]})
        r = ctl(c, "list", "-o", "json")
        assert r.rc == 0, r
        ids = [j["id"] for j in json.loads(r.out)["jobs"]]
        assert ids == ["j-%d" % n for n in range(103, 0, -1)], ids
        r = ctl(c, "list")
        assert r.rc == 0 and len(r.out.splitlines()) == 104, r

        # ddpctl nodes: the isolation its agent registered with, "-" when it did not say.
        for name, iso in (("n-per", "per-user"), ("n-old", None)):
            body = {"name": name, "address": "127.0.0.1", "slots": 1, "incarnation": "i-" + name}
            if iso:
                body["isolation"] = iso
            assert api.post("/v1/nodes:register", body, token="agent").status == 200
        r = ctl(c, "nodes")
        assert r.rc == 0, r
        rows = [ln.split() for ln in r.out.splitlines()]
        assert rows[0][-1] == "ISOLATION", r
        assert {row[0]: row[-1] for row in rows[1:]} == {"n-per": "per-user", "n-old": "-"}, r


def test_cli_submit_paths_keep_links():
    """--workdir and --checkpoint-dir are made absolute against the directory as the shell
    names it ($PWD), links kept: the path goes to other nodes, where this node's link may not
    lead where it does here. An empty one is a usage error."""
    with cluster(node_timeout=300) as c:
        real = os.path.join(c.tmp, "real")
        link = os.path.join(c.tmp, "link")
        os.makedirs(real)
        os.symlink(real, link)
        env = ctl_env(c, extra={"PWD": link})
        r = ctl(c, "-o", "json", "submit", "--workdir", ".", "--checkpoint-dir", "./ck", "--",
                "/bin/true", env=env, cwd=link)
        assert r.rc == 0, r
        spec = json.loads(r.out)["spec"]
        assert (spec["workdir"], spec["checkpoint_dir"]) == (link, os.path.join(link, "ck")), \
            spec
        # A $PWD that is not the current directory is not taken.
        env = ctl_env(c, extra={"PWD": c.tmp})
        r = ctl(c, "-o", "json", "submit", "--workdir", "sub", "--", "/bin/true", env=env,
                cwd=link)
        assert r.rc == 0 and json.loads(r.out)["spec"]["workdir"] == \
            os.path.join(os.path.realpath(real), "sub"), r
        for flag in ("--workdir", "--checkpoint-dir"):
            r = ctl(c, "submit", flag, "", "--", "/bin/true")
            assert r.rc == 2 and "%s: empty" % flag in r.err, r
        r = ctl(c, "-o", "json", "submit", "--workdir", "x", "--", "/bin/true",
                env=ctl_env(c, extra={"PWD": "/"}), cwd="/")
        assert r.rc == 0 and json.loads(r.out)["spec"]["workdir"] == "/x", r


def test_cli_output_habits():
    """--no-headers, -o name and -o wide of list and nodes (empty lists too), and status and
    cancel on several jobs: each done apart, each failure named, exit 1 if any failed."""
    assert_usage(ctl(None, "list", "-o", "yaml"), "list")
    assert "not one of table, json, name, wide" in ctl(None, "list", "-o", "yaml").err
    assert_usage(ctl(None, "cancel"), "cancel JOB...")
    assert_usage(ctl(None, "status"), "status JOB...")
    assert_usage(ctl(None, "status", "j-1", ""), "status JOB...")
    assert_usage(ctl(None, "nodes", "--no-headers", "x"), "nodes")
    with cluster(node_timeout=300) as c:
        api = Api(c)
        # Empty: nothing at all with --no-headers or -o name; the sentence otherwise.
        for args in (["list", "--no-headers"], ["list", "-o", "name"],
                     ["list", "-o", "wide", "--no-headers"], ["nodes", "--no-headers"],
                     ["nodes", "-o", "name"], ["nodes", "-o", "wide", "--no-headers"]):
            r = ctl(c, *args)
            assert r.rc == 0 and r.out == "" and r.err == "", r
        r = ctl(c, "list")
        assert r.rc == 0 and r.out == "no jobs\n", r
        r = ctl(c, "nodes")
        assert r.rc == 0 and r.out.startswith("no nodes"), r

        r = ctl(c, "submit", "-o", "name", "--", "/bin/true")
        assert r.rc == 0 and r.out == "j-1\n", r
        api.submit({"command": ["true"], "name": "two", "priority": 0})
        api.submit({"command": ["true"], "name": "three"})
        r = ctl(c, "list", "-o", "name")
        assert r.rc == 0 and r.out == "j-3\nj-2\nj-1\n", r
        r = ctl(c, "list", "--no-headers")
        assert r.rc == 0 and [ln.split()[0] for ln in r.out.splitlines()] == \
            ["j-3", "j-2", "j-1"], r
        r = ctl(c, "list", "-o", "wide")
        assert r.rc == 0, r
        head = r.out.splitlines()[0].split()
        assert head[:4] == ["ID", "NAME", "OWNER", "STATE"], r
        assert head[-3:] == ["PRIORITY", "NODELIST", "REASON"], r
        rows = [ln.split() for ln in r.out.splitlines()[1:]]
        assert [row[0] for row in rows] == ["j-3", "j-2", "j-1"], r
        assert all(row[-3:-1] == ["0", "-"] for row in rows), r  # pending: no nodes yet
        r = ctl(c, "list", "-o", "wide", "--no-headers")
        assert r.rc == 0 and len(r.out.splitlines()) == 3 and "PRIORITY" not in r.out, r

        # status on several: one block each, a blank line between.
        r = ctl(c, "status", "j-1", "j-2")
        assert r.rc == 0 and r.err == "", r
        blocks = r.out.split("\n\n")
        assert len(blocks) == 2 and blocks[0].startswith("job:         j-1") and \
            blocks[1].startswith("job:         j-2 (two)"), r
        r = ctl(c, "status", "j-1", "j-42", "j-2")
        assert r.rc == 1, r
        assert "job j-42 not found" in r.err and "1 of 3 jobs not shown: j-42" in r.err, r
        assert "job:         j-1" in r.out and "job:         j-2" in r.out, r
        r = ctl(c, "status", "j-1", "j-2", "-o", "json")
        assert r.rc == 0, r
        o = json.loads(r.out)
        assert [j["id"] for j in o["jobs"]] == ["j-1", "j-2"] and o["failed"] == [], o
        r = ctl(c, "status", "j-1", "j-42", "-o", "json")
        assert r.rc == 1, r
        o = json.loads(r.out)
        assert [j["id"] for j in o["jobs"]] == ["j-1"], o
        assert [f["id"] for f in o["failed"]] == ["j-42"] and "j-42" in o["failed"][0]["error"]

        # cancel on several: the good ones cancelled, the bad one named, exit 1.
        r = ctl(c, "cancel", "j-1", "j-404", "j-2")
        assert r.rc == 1, r
        assert "job j-404 not found" in r.err and "1 of 3 jobs not cancelled: j-404" in r.err, r
        assert "job j-1 " in r.out and "job j-2 " in r.out, r
        api.wait_state("j-1", "CANCELLED")
        api.wait_state("j-2", "CANCELLED")
        assert api.job("j-3")["state"] == "PENDING"
        r = ctl(c, "cancel", "j-1", "j-3", "-o", "json")
        assert r.rc == 0, r
        o = json.loads(r.out)
        assert [j["id"] for j in o["jobs"]] == ["j-1", "j-3"] and o["failed"] == [], o
        api.wait_state("j-3", "CANCELLED")
        r = ctl(c, "list", "--state", "PENDING", "--no-headers")
        assert r.rc == 0 and r.out == "", r

        # nodes last: a registered node would take the pending jobs above.
        for name, zone in (("n-a", "a"), ("n-b", "b")):
            body = {"name": name, "address": "127.0.0.1", "slots": 1, "incarnation": "i-" + name,
                    "labels": {"zone": zone}}
            assert api.post("/v1/nodes:register", body, token="agent").status == 200
        r = ctl(c, "nodes", "-o", "name")
        assert r.rc == 0 and sorted(r.out.splitlines()) == ["n-a", "n-b"], r
        r = ctl(c, "nodes", "--no-headers")
        assert r.rc == 0 and sorted(ln.split()[0] for ln in r.out.splitlines()) == \
            ["n-a", "n-b"], r
        r = ctl(c, "nodes", "-o", "wide")
        assert r.rc == 0, r
        lines = r.out.splitlines()
        assert lines[0].split()[-3:] == ["ISOLATION", "REGISTERED", "LABELS"], r
        labels = {ln.split()[0]: ln.split()[-1] for ln in lines[1:]}
        assert "zone=a" in labels["n-a"].split(",") and "zone=b" in labels["n-b"].split(","), r


def test_cli_submit_gpus_per_proc():
    """--gpus-per-proc N (0..64) or auto goes into the spec's gpus_per_proc."""
    with cluster(node_timeout=300) as c:
        api = Api(c)
        for arg, want in (("2", 2), ("0", 0), ("auto", "auto")):
            r = ctl(c, "submit", "--parsable", "--gpus-per-proc", arg, "--", "true")
            assert r.rc == 0, r
            assert api.job(r.out.strip())["spec"]["gpus_per_proc"] == want, (arg, r)
        r = ctl(c, "submit", "--parsable", "--", "true")
        assert api.job(r.out.strip())["spec"]["gpus_per_proc"] == "auto", r


def test_cli_submit_idempotency_key():
    assert_usage(ctl(None, "submit", "--idempotency-key", "a b", "--", "true"), "submit")
    assert_usage(ctl(None, "submit", "--idempotency-key", "k" * 129, "--", "true"), "submit")
    with cluster(node_timeout=300) as c:
        work = c.tmp
        first = ctl(c, "submit", "--parsable", "--idempotency-key", "slurm-x-42", "--",
                    "/bin/true", cwd=work)
        again = ctl(c, "submit", "--parsable", "--idempotency-key", "slurm-x-42", "--",
                    "/bin/true", cwd=work)
        assert first.rc == 0 and again.rc == 0 and first.out == again.out == "j-1\n", (first,
                                                                                     again)
        other = ctl(c, "submit", "--parsable", "--idempotency-key", "slurm-x-42", "--",
                    "/bin/false", cwd=work)
        assert other.rc == 1 and "slurm-x-42" in other.err, other
        fresh = ctl(c, "submit", "--parsable", "--", "/bin/true", cwd=work)
        assert fresh.rc == 0 and fresh.out == "j-2\n", fresh

if __name__ == "__main__":
    api_sim.run_tests(globals())
