"""Shared pieces of the ddpctl integration tests (tests/integration/test_cli_*.py): run the
real ddpctl binary against a real ddpd (api_sim.cluster) with the local-cluster defaults
(DDP_HOME, DDP_SERVER), in the foreground or in the background, every run under a timeout."""
import os
import select
import subprocess
import time

from cluster import BIN

CTL = os.path.join(BIN, "ddpctl")


def ctl_env(c, home=True, extra=None):
    """The environment of a user of cluster c: DDP_SERVER and (with home) DDP_HOME, no
    DDP_TOKEN unless extra sets it."""
    e = dict(os.environ)
    for k in ("DDP_TOKEN", "DDP_SERVER", "DDP_HOME"):
        e.pop(k, None)
    if c is not None:
        e["DDP_SERVER"] = c.url
        if home:
            e["DDP_HOME"] = c.home
    if extra:
        e.update(extra)
    return e


class Run:
    def __init__(self, argv, rc, out, err):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err

    def __repr__(self):
        return "ddpctl %s -> rc %s\nstdout:\n%s\nstderr:\n%s" % (
            " ".join(self.argv), self.rc, self.out[-3000:], self.err[-3000:])


def ctl(c, *args, env=None, cwd=None, timeout=60, home=True):
    """Runs ddpctl ARGS to its end; returns Run."""
    e = env if env is not None else ctl_env(c, home=home)
    p = subprocess.run([CTL] + list(args), capture_output=True, text=True, env=e, cwd=cwd,
                       timeout=timeout)
    return Run(list(args), p.returncode, p.stdout, p.stderr)


class Background:
    """ddpctl ARGS running in the background with stdout/stderr to pipes (so not a terminal).
    finish() waits (bounded) and returns a Run; kill() is always safe to call."""

    def __init__(self, c, *args, env=None, cwd=None):
        self.args = list(args)
        self.early = b""  # stdout read by read_until, before finish()
        self.p = subprocess.Popen([CTL] + self.args, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  env=env if env is not None else ctl_env(c), cwd=cwd)

    def running(self):
        return self.p.poll() is None

    def read_until(self, text, timeout=30):
        """Reads stdout (bounded in time) until it holds text; fails if it does not."""
        fd = self.p.stdout.fileno()
        deadline = time.monotonic() + timeout
        while text.encode() not in self.early:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("ddpctl %s: no %r within %ss; stdout so far:\n%s" % (
                    " ".join(self.args), text, timeout, self.early.decode(errors="replace")))
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError("ddpctl %s ended before printing %r:\n%r" % (
                        " ".join(self.args), text, self.finish(5)))
                self.early += chunk

    def finish(self, timeout=30):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate(timeout=10)
            raise AssertionError("ddpctl %s did not end within %ss; stdout:\n%s\nstderr:\n%s"
                                 % (" ".join(self.args), timeout, out, err))
        out = self.early.decode(errors="replace") + out
        self.early = b""
        return Run(self.args, self.p.returncode, out, err)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.communicate(timeout=10)


def beat_until(nodes, cond, what, timeout=30, interval=0.2):
    """Beats every simulated node each round until cond() is true (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in nodes:
            n.beat()
        if cond():
            return
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def assert_usage(r, usage_start):
    """A usage error: exit 2 and the usage line on stderr."""
    assert r.rc == 2, r
    assert ("usage: ddpctl " + usage_start) in r.err, r
    assert r.out == "", r
