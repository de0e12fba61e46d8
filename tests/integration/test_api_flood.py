"""Nobody can starve ddpd of connections (a real ddpd on loopback):

- 10,000 idle TCP connections, from 20 loopback source addresses, are held while a fresh
  client's /healthz and an authenticated GET /v1/jobs are still answered (the figures: ddpd's
  RSS and the probes' latency, printed);
- --max-connections-per-ip: one address cannot take more; another address is still served;
- --idle-timeout: a silent connection, and one that stalls in its request head, is closed after
  the timeout (not 120 s), so a slowloris holds nothing for long.

Needs about 10,300 open files in this process: the soft limit is raised to the hard one (root
may raise the hard one too); below that the test says so and exits 77.
"""
import os
import resource
import socket
import statistics
import sys
import time

from api_sim import cluster, run_tests

N_IDLE = 10000
N_SOURCES = 20


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return True
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
        return True
    except (ValueError, OSError):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= want


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def connect_from(src, port, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def probe(c, n=20, token=None, path="/healthz"):
    """n fresh requests; returns their latencies in ms (each must answer 200)."""
    lat = []
    for _ in range(n):
        t = time.monotonic()
        a = c.request("GET", path, token=token, timeout=10)
        assert a.status == 200, a
        lat.append((time.monotonic() - t) * 1000)
    return lat


def closed_within(s, seconds):
    """Seconds until the peer closed s (recv b'' or a reset), or None if still open."""
    s.settimeout(0.2)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def test_ten_thousand_idle_connections():
    if not raise_nofile(N_IDLE + 300):
        print("SKIP: RLIMIT_NOFILE %r is below %d" % (
            resource.getrlimit(resource.RLIMIT_NOFILE), N_IDLE + 300))
        sys.exit(77)
    with cluster(node_timeout=300, ddpd_args=["--idle-timeout", "120"]) as c:
        pid = c.ddpd.pid
        base = statistics.median(probe(c))
        rss0 = rss_mb(pid)
        idle = []
        t0 = time.monotonic()
        try:
            for i in range(N_IDLE):
                idle.append(connect_from("127.0.0.%d" % (2 + i % N_SOURCES), c.port))
            opened = time.monotonic() - t0
            time.sleep(1.0)  # let ddpd take every one of them
            lat = probe(c)
            lat_jobs = probe(c, n=10, token="user", path="/v1/jobs")
            rss1 = rss_mb(pid)
            # the held ones are still open (none was dropped to make room)
            alive = 0
            for s in idle[:: N_IDLE // 100]:
                s.setblocking(False)
                try:
                    alive += s.recv(1) != b""
                except BlockingIOError:
                    alive += 1
                except OSError:
                    pass
            print("idle connections held: %d (opened in %.1f s), %d of 100 sampled still open"
                  % (len(idle), opened, alive))
            print("ddpd RSS: %.1f MB idle, %.1f MB holding %d connections (%.1f KB each)" % (
                rss0, rss1, N_IDLE, (rss1 - rss0) * 1024 / N_IDLE))
            print("/healthz: median %.1f ms before; median %.1f ms, max %.1f ms while held" % (
                base, statistics.median(lat), max(lat)))
            print("GET /v1/jobs (authenticated): median %.1f ms, max %.1f ms while held" % (
                statistics.median(lat_jobs), max(lat_jobs)))
            assert alive == 100, "ddpd dropped held connections: %d of 100 open" % alive
            assert max(lat) < 5000, lat
        finally:
            for s in idle:
                s.close()
        assert probe(c, n=3)


def test_per_ip_cap_and_idle_timeout():
    with cluster(node_timeout=300, ddpd_args=["--max-connections-per-ip", "50",
                                               "--idle-timeout", "3"]) as c:
        mine = [connect_from("127.0.0.9", c.port) for _ in range(50)]
        try:
            time.sleep(0.5)
            extra = connect_from("127.0.0.9", c.port)
            closed = closed_within(extra, 3)
            assert closed is not None, "the 51st connection of one address was kept"
            print("connection 51 from one address closed after %.2f s" % closed)
            extra.close()
            # another address is served meanwhile
            s = connect_from("127.0.0.10", c.port)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            s.settimeout(5)
            assert s.recv(100).startswith(b"HTTP/1.1 200"), "another address not served"
            s.close()
        finally:
            for s in mine:
                s.close()
        # silent and stalled-head connections are closed after --idle-timeout (3 s)
        silent = connect_from("127.0.0.11", c.port)
        stalled = connect_from("127.0.0.12", c.port)
        stalled.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")  # never ends the head
        t0 = time.monotonic()
        t_silent = closed_within(silent, 15)
        t_silent = t_silent and time.monotonic() - t0
        t_stalled = closed_within(stalled, 15)
        t_stalled = t_stalled and time.monotonic() - t0  # both counted from t0
        print("a silent connection closed after %s s, a stalled head after %s s" % (
            t_silent and round(t_silent, 1), t_stalled and round(t_stalled, 1)))
        assert t_silent is not None and t_stalled is not None, (t_silent, t_stalled)
        assert t_silent >= 2 and t_stalled >= 2, "closed before the timeout"
        silent.close()
        stalled.close()
        # the refusals were logged once a second at most, not once each
        log = c.log("ddpd.log")
        assert log.count("http: ") < 20, log[-3000:]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run_tests(globals())
