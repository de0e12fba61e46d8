"""ddpctl with several ddpd addresses (--server A,B,C and DDP_SERVER), against a real ddpd
and fake replicas in front of it (multi_util.py: they only redirect, refuse or close):

- DEAD (nothing listens), a front answering 307 to the real ddpd, the real ddpd: `list`,
  `nodes`, `submit`, `status` and `update` work; the submit's POST reached the front with
  its body and the job ddpd stored has that command, the update's PATCH its priority; the
  front saw the Authorization header (it is listed, and so is its target). Sticky: the
  polls of one `wait` after its first call go straight to ddpd, not through the front.
- A redirect through an unlisted front: that front gets no Authorization header, the
  listed ddpd behind it gets it again and answers.
- A front answering 503 not_leader naming the leader, and one naming none: both lead to
  the real ddpd.
- A front that closes connections: a GET and the submit (which has an Idempotency-Key) move
  on to ddpd; a `cancel` (a POST without one) is not sent again: exit 1 naming the front.
- Only dead addresses: exit 1 naming every one, within a bound.
- A bad list (bad scheme, no port number, an empty element, an empty list) through --server
  and through DDP_SERVER: exit 2 naming the bad element, nothing sent.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import ctl, ctl_env  # noqa: E402
from cluster import Cluster  # noqa: E402
from multi_util import Fronts, dead_url  # noqa: E402


def run(c, servers, *args, timeout=60):
    return ctl(c, "--server", servers, *args, timeout=timeout)


def main():
    with Cluster() as c, Fronts(c.tmp) as fronts:
        dead = dead_url()
        redirect = fronts.start("redirect", c.url)
        servers = ",".join([dead, redirect.url, c.url])

        r = run(c, servers, "list")
        assert r.rc == 0, r
        r = run(c, servers, "nodes")
        assert r.rc == 0 and "no nodes" in r.out, r
        r = run(c, servers, "submit", "--name", "through-front", "--", "echo", "via-front")
        assert r.rc == 0 and "submitted job j-" in r.out, r
        job = r.out.split("submitted job ")[1].split()[0]
        posts = [q for q in redirect.requests() if q["method"] == "POST"]
        assert len(posts) == 1 and posts[0]["path"] == "/v1/jobs", redirect.requests()
        assert "via-front" in posts[0]["body"] and posts[0]["auth"], posts
        assert c.job(job)["spec"]["command"] == ["echo", "via-front"], c.job(job)
        r = run(c, servers, "status", job)
        assert r.rc == 0 and job in r.out and "through-front" in r.out, r
        r = run(c, servers, "-o", "json", "list")
        assert r.rc == 0 and job in r.out, r
        # PATCH keeps its body through the redirect.
        r = run(c, servers, "update", job, "--priority", "7")
        assert r.rc == 0, r
        assert [q for q in redirect.requests() if q["method"] == "PATCH"
                and '"priority":7' in q["body"].replace(" ", "")], redirect.requests()
        assert c.job(job)["spec"]["priority"] == 7, c.job(job)
        # Sticky: the job is PENDING (no nodes), `wait` polls it every 0.5 s; only its first
        # call goes through the front, the others straight to ddpd, which answered.
        n = len(redirect.requests())
        r = run(c, servers, "wait", job, "--timeout", "2")
        assert r.rc == 1 and "timed out" in r.err, r
        assert len(redirect.requests()) == n + 1, redirect.requests()[n:]
        print("ok: dead, 307 front, ddpd: list, nodes, submit and update (bodies kept), status, "
              "sticky")

        # Through an unlisted front: it sees no Authorization; the listed ddpd does again.
        hidden = fronts.start("redirect", c.url)
        entry = fronts.start("redirect", hidden.url)
        r = run(c, ",".join([dead, entry.url, c.url]), "list")
        assert r.rc == 0, r
        assert entry.requests() and all(q["auth"] for q in entry.requests()), entry.requests()
        assert hidden.requests() and not any(q["auth"] for q in hidden.requests()), \
            hidden.requests()
        # ... and with the real ddpd unlisted too, ddpd itself gets none: 401.
        r = run(c, ",".join([dead, redirect.url]), "list")
        assert r.rc == 1 and "missing bearer token" in r.err, r
        print("ok: Authorization only to listed addresses")

        # not_leader naming the leader, and naming none.
        named = fronts.start("not_leader", c.url)
        r = run(c, ",".join([named.url, dead]), "list")
        assert r.rc == 0 and named.requests()[-1]["auth"], r
        unknown = fronts.start("not_leader")
        r = run(c, ",".join([unknown.url, dead, c.url]), "submit", "--", "echo", "nl")
        assert r.rc == 0 and "submitted job" in r.out, r
        assert [q["method"] for q in unknown.requests()] == ["POST"], unknown.requests()
        print("ok: 503 not_leader with and without a leader")

        # A front that closes connections: safe calls move on, a POST without a key does not.
        closing = fronts.start("close")
        servers = ",".join([closing.url, c.url])
        r = run(c, servers, "status", job)
        assert r.rc == 0 and job in r.out, r
        r = run(c, servers, "submit", "--", "echo", "after-close")
        assert r.rc == 0 and "submitted job" in r.out, r
        assert sum(q["method"] == "POST" for q in closing.requests()) == 1, closing.requests()
        n = len(closing.requests())
        r = run(c, servers, "cancel", job)
        assert r.rc == 1 and closing.url in r.err and "not sent to another address" in r.err, r
        assert len(closing.requests()) == n + 1, closing.requests()
        print("ok: a closed connection: GET and keyed POST move on, cancel does not")

        # Only dead addresses: every one named, bounded.
        dead2 = dead_url()
        t0 = time.monotonic()
        r = run(c, ",".join([dead, dead2]), "list", timeout=30)
        assert r.rc == 1 and dead in r.err and dead2 in r.err, r
        assert "any of its 2 addresses" in r.err and "connection refused" in r.err, r
        assert time.monotonic() - t0 < 20, r
        print("ok: all dead")

        # Bad lists: exit 2 naming the element, through the flag and the environment.
        for bad, want in (("%s,ftp://127.0.0.1:1" % c.url, "element 2 'ftp://127.0.0.1:1'"),
                          ("%s,http://127.0.0.1:" % c.url, "port must be a number"),
                          ("http://:8470", "no host"),
                          ("%s,,%s" % (c.url, c.url), "element 2 is empty"),
                          ("%s," % c.url, "element 2 is empty")):
            r = run(c, bad, "list")
            assert r.rc == 2 and "--server" in r.err and want in r.err, r
            r = ctl(c, "list", env=ctl_env(c, extra={"DDP_SERVER": bad}))
            assert r.rc == 2 and "$DDP_SERVER" in r.err and want in r.err, r
        r = run(c, " ", "list")
        assert r.rc == 2 and "empty list" in r.err, r
        n = len(redirect.requests())
        r = run(c, "%s,bogus" % redirect.url, "list")
        assert r.rc == 2 and "element 2 'bogus'" in r.err, r
        assert len(redirect.requests()) == n, "a bad list sent a request"
        print("ok: bad lists")


if __name__ == "__main__":
    main()
    print("test_cli_multiserver: all ok")
