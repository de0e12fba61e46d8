"""Fronts for the multi-address tests: tests/integration/front.py run as real processes on
loopback, each a fake replica that only redirects (307), refuses (503 not_leader) or closes
connections, placed before the real ddpd in a client's --server list. Every front is
stopped by Fronts.stop() (use `with Fronts(tmp) as f:`); every wait is bounded."""
import json
import os
import signal
import socket
import subprocess
import sys

from cluster import free_port, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))


def listening(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Front:
    def __init__(self, tmp, mode, target=None):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(tmp, "front-%d.jsonl" % self.port)
        argv = [sys.executable, os.path.join(HERE, "front.py"), str(self.port), self.log_path,
                mode] + ([target] if target else [])
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        wait_for("front %s (%s) listening" % (self.url, mode),
                 lambda: self.p.poll() is None and listening(self.port), timeout=10)

    def requests(self):
        """The requests this front saw, oldest first."""
        try:
            with open(self.log_path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except OSError:
            return []

    def kill(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait(timeout=10)


class Fronts:
    def __init__(self, tmp):
        self.tmp = tmp
        self.all = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, mode, target=None):
        f = Front(self.tmp, mode, target)
        self.all.append(f)
        return f

    def stop(self):
        for f in self.all:
            f.kill()


def dead_url():
    """An address nothing listens on."""
    return "http://127.0.0.1:%d" % free_port()
