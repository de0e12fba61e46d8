"""Separate hosts for the fault scenarios: one network namespace per node, joined by a bridge.

Layout (names carry a random tag so that concurrent tests never meet):
  root namespace: bridge ddpt<tag>br holding 10.213.<x>.1/24 (ddpd listens there);
  node i:         namespace ddpt-<tag>-<node>, its veth end "eth0" holding 10.213.<x>.<10+i>/24
                  and "lo" up; the root end ddpt<tag><i> is a port of the bridge.
<x> is drawn at random per test among the /24s no interface of this host uses yet. The
addresses exist only inside the namespaces and on the bridge; nothing is routed or forwarded.

Net.close() deletes every namespace, veth and the bridge, also after a failure halfway through
setup (use `with Net(...) as net:`). Where namespaces cannot be made (not root, no `ip`, no
netns support), Net(...).mode is "loopback": every node gets 127.0.0.1 and run_argv() runs the
command as it is; the scenarios that need a real link (cutting it) say so and skip.
"""
import os
import random
import shutil
import subprocess
import time

IP = shutil.which("ip") or "/usr/sbin/ip"


def _ip(*args, check=True):
    r = subprocess.run([IP] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=20)
    if check and r.returncode != 0:
        raise OSError("ip %s: %s" % (" ".join(args), r.stderr.decode(errors="replace").strip()))
    return r


def _used_subnets():
    r = _ip("-4", "-o", "addr", "show", check=False)
    used = set()
    for line in r.stdout.decode(errors="replace").splitlines():
        for tok in line.split():
            if tok.startswith("10.213.") and "/" in tok:
                used.add(int(tok.split(".")[2]))
    return used


class Net:
    """Namespaces for `nodes` (a list of names). Attributes: mode ("netns" or "loopback"),
    server_addr (where ddpd listens), addr[node], ns[node], why (why loopback)."""

    def __init__(self, nodes, force_loopback=False):
        self.nodes = list(nodes)
        self.tag = "%06x" % random.randrange(1 << 24)
        self.ns = {}
        self.addr = {}
        self.veth = {}
        self.bridge = None
        self.mode = "loopback"
        self.why = ""
        self.server_addr = "127.0.0.1"
        if force_loopback or os.environ.get("DDP_FAULTS_LOOPBACK"):
            self.why = "loopback asked for"
        else:
            try:
                self._setup()
                self.mode = "netns"
            except (OSError, subprocess.SubprocessError) as e:
                self.why = str(e)
                self.close()
        if self.mode == "loopback":
            self.ns = {}
            self.addr = {n: "127.0.0.1" for n in self.nodes}
            self.server_addr = "127.0.0.1"

    def _setup(self):
        if os.geteuid() != 0:
            raise OSError("not root")
        if not os.path.exists(IP):
            raise OSError("no ip(8)")
        free = [x for x in range(2, 250) if x not in _used_subnets()]
        x = random.choice(free)
        self.bridge = "ddpt%sbr" % self.tag
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", "10.213.%d.1/24" % x, "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self.server_addr = "10.213.%d.1" % x
        for i, n in enumerate(self.nodes):
            ns = "ddpt-%s-%s" % (self.tag, n)
            veth = "ddpt%s%d" % (self.tag, i)
            _ip("netns", "add", ns)
            self.ns[n] = ns
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.veth[n] = veth
            _ip("link", "set", veth, "master", self.bridge, "up")
            a = "10.213.%d.%d" % (x, 10 + i)
            _ip("-n", ns, "addr", "add", a + "/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self.addr[n] = a
        self._wait_links()

    def _wait_links(self):
        """The bridge ports forward only once the links are up (no STP on our bridge)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = _ip("-o", "link", "show", "master", self.bridge, check=False)
            if r.stdout.decode().count("state UP") >= len(self.nodes):
                return
            time.sleep(0.05)
        raise OSError("bridge ports of %s not up after 10 s" % self.bridge)

    def run_argv(self, node, argv):
        """argv run inside node's namespace (as it is in loopback mode)."""
        if self.mode != "netns":
            return list(argv)
        return [IP, "netns", "exec", self.ns[node]] + list(argv)

    def cut(self, node):
        """Takes the node's link down inside its namespace: it can reach nothing, nothing
        reaches it; its processes keep running."""
        if self.mode != "netns":
            raise RuntimeError("cannot cut a link in loopback mode")
        _ip("-n", self.ns[node], "link", "set", "eth0", "down")

    def restore(self, node):
        """Brings the node's link up again."""
        if self.mode != "netns":
            raise RuntimeError("cannot restore a link in loopback mode")
        _ip("-n", self.ns[node], "link", "set", "eth0", "up")

    def describe(self):
        if self.mode == "netns":
            return "network namespaces (%s; ddpd on %s, nodes %s)" % (
                self.bridge, self.server_addr,
                ", ".join("%s=%s" % (n, self.addr[n]) for n in self.nodes))
        return "loopback fallback (%s)" % self.why

    def leftovers(self):
        """Namespaces and links with our tag that still exist (should be none after close)."""
        left = []
        r = _ip("netns", "list", check=False)
        left += [l.split()[0] for l in r.stdout.decode().splitlines()
                 if l.startswith("ddpt-%s-" % self.tag)]
        r = _ip("-o", "link", "show", check=False)
        for l in r.stdout.decode().splitlines():
            parts = l.split(":")
            if len(parts) > 1 and parts[1].strip().split("@")[0].startswith("ddpt" + self.tag):
                left.append(parts[1].strip())
        return left

    def close(self):
        """Deletes everything made; safe to call twice and after a partial setup."""
        for n, ns in list(self.ns.items()):
            _ip("netns", "del", ns, check=False)
        for n, veth in list(self.veth.items()):
            _ip("link", "del", veth, check=False)  # normally gone with its peer
        if self.bridge:
            _ip("link", "del", self.bridge, check=False)
        deadline = time.monotonic() + 10  # veth removal finishes asynchronously
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.ns = {}
        self.veth = {}
        self.bridge = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
