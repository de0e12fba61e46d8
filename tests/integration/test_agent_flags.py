"""ddp-agent's --server: an empty URL (a unit's `--server ${DDP_SERVER}` with DDP_SERVER unset,
or DDP_SERVER set to nothing) is refused at once with exit 2 and a message saying so, instead
of the agent falling back to 127.0.0.1:8470 and never registering where it was meant to."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import run_tests  # noqa: E402
from cluster import BIN  # noqa: E402

AGENT = os.path.join(BIN, "ddp-agent")


def agent(args, server_env):
    env = dict(os.environ)
    env.pop("DDP_SERVER", None)
    if server_env is not None:
        env["DDP_SERVER"] = server_env
    with tempfile.TemporaryDirectory() as d:
        return subprocess.run([AGENT, "--work-dir", d, "--name", "n"] + args,
                              capture_output=True, text=True, env=env, timeout=20)


def test_agent_flags_empty_server_refused():
    for args, server_env in ((["--server", ""], None), (["--server="], None),
                             ([], ""), (["--server", ""], "http://127.0.0.1:1")):
        p = agent(args, server_env)
        assert p.returncode == 2, (args, server_env, p.returncode, p.stderr)
        assert "ddp-agent: --server: empty URL" in p.stderr, (args, server_env, p.stderr)
        assert "registered" not in p.stderr and "connect" not in p.stderr, p.stderr


def test_agent_flags_bad_server_still_refused():
    p = agent(["--server", "127.0.0.1:8470"], None)
    assert p.returncode == 2, p
    assert "--server" in p.stderr and "scheme must be http or https" in p.stderr, p.stderr


if __name__ == "__main__":
    run_tests(globals())
