"""Two ddp-agent processes with the same --name and work dir (so the same node credential
file): each takes the node over from the other. Without a backoff they did so thousands of
times a second; now a conflict waits 0.5 s doubling, so in 8 s they register only a handful
of times, and say how long they wait."""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import wait_for  # noqa: E402

WATCH_S = 8


def registrations(c, log):
    return len(re.findall(r"registered with ddpd", c.log(log)))


def test_agent_same_name_backs_off():
    with cluster(node_timeout=3) as c:
        first = c.start_agent("twin", slots=1)
        c.wait_nodes_ready(["twin"])
        work = c.agent_work["twin"]
        # The second agent: same name, same work dir (it reads the first one's credential).
        argv = list(first.args)
        c._spawn(argv, "agent-twin2.log")
        wait_for("the second agent's registration",
                 lambda: registrations(c, "agent-twin2.log") >= 1, timeout=20)
        time.sleep(WATCH_S)
        n1, n2 = registrations(c, "agent-twin.log"), registrations(c, "agent-twin2.log")
        logs = c.log("agent-twin.log") + c.log("agent-twin2.log")
        assert n1 + n2 <= 20, "%d + %d registrations in %d s:\n%s" % (n1, n2, WATCH_S,
                                                                       logs[-3000:])
        assert re.search(r"(registering|trying) again in [0-9.]+s \((conflict|refusal) 1\)",
                         logs), logs[-3000:]
        assert os.path.isdir(work)


if __name__ == "__main__":
    run_tests(globals())
