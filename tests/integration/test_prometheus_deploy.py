"""deploy/prometheus/ against a real ddpd: every metric the alert rules and the Grafana
dashboard name is one ddpd's /metrics declares (a fresh ddpd declares every family, samples or
not); the dashboard is valid JSON whose panels each have a query; `promtool check rules` and
`promtool test rules` pass on the rules and their unit tests.

promtool comes from PATH (tests/run.sh puts the Debian package's there) or build-tools/.
Without it the name checks still run, then the test says loudly that promtool's part was
skipped and exits 77 (skipped)."""
import json
import os
import re
import shutil
import subprocess
import sys

import api_sim
from api_sim import Api, cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(ROOT, "deploy", "prometheus")
RULES = os.path.join(DIR, "ddp-alerts.yml")
RULES_TEST = os.path.join(DIR, "ddp-alerts.test.yml")
DASHBOARD = os.path.join(DIR, "ddp-dashboard.json")
SKIP = 77
# Series Prometheus makes itself, not ddpd.
OWN = {"up"}
NAME = re.compile(r"\b(ddp_[a-z0-9_]+|up)\b")


def promtool():
    tool = shutil.which("promtool")
    local = os.path.join(ROOT, "build-tools", "usr", "bin", "promtool")
    if not tool and os.access(local, os.X_OK):
        tool = local
    return tool


def exported_families():
    """The family names of a fresh ddpd's /metrics (from its TYPE lines)."""
    with cluster(node_timeout=300) as c:
        a = Api(c).get("/metrics", token=None)
        assert a.status == 200, a
        fams = set(re.findall(r"^# TYPE (\S+) ", a.text, re.M))
    assert "ddp_job_state" in fams and "ddp_http_long_poll_duration_seconds" in fams, fams
    return fams


def unknown_names(expr, fams):
    bad = []
    for n in NAME.findall(expr):
        base = re.sub(r"_(bucket|sum|count)$", "", n)
        if n not in OWN and n not in fams and base not in fams:
            bad.append(n)
    return bad


def rule_exprs():
    """(alert, expr) of every rule: a small reader of the file's own layout (no YAML module
    needed): `- alert: X` then `expr:` inline or as a folded block."""
    lines = open(RULES).read().split("\n")
    out, alert, i = [], None, 0
    while i < len(lines):
        s = lines[i].strip()
        if s.startswith("- alert:"):
            alert = s.split(":", 1)[1].strip()
        elif s.startswith("expr:"):
            e = s.split(":", 1)[1].strip()
            if e in (">-", ">", "|", "|-"):
                ind = len(lines[i]) - len(lines[i].lstrip())
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(lines[i].lstrip()) > ind):
                    block.append(lines[i].strip())
                    i += 1
                e = " ".join(block).strip()
                i -= 1
            out.append((alert, e))
        i += 1
    return out


def test_prometheus_deploy():
    fams = exported_families()
    rules = rule_exprs()
    assert len(rules) >= 5, rules
    alerts = {a for a, _ in rules}
    for want in ("DdpdDown", "DdpNodeLost", "DdpJobRestartingRepeatedly", "DdpJobNoProgress",
                 "DdpStoreFailing"):
        assert want in alerts, "no alert %s in %s" % (want, RULES)
    for alert, expr in rules:
        assert NAME.search(expr), "%s: no metric in %r" % (alert, expr)
        bad = unknown_names(expr, fams)
        assert not bad, "%s: %s not exported by ddpd (%r)" % (alert, bad, expr)

    dash = json.load(open(DASHBOARD))
    assert dash.get("title") and dash.get("uid"), "dashboard without title or uid"
    panels = [p for p in dash["panels"] if p.get("type") != "row"]
    assert len(panels) >= 10, "only %d panels" % len(panels)
    used = set()
    for p in panels:
        assert p.get("targets"), "panel %r has no query" % p.get("title")
        for t in p["targets"]:
            expr = t.get("expr", "")
            names = NAME.findall(expr)
            assert names, "panel %r: no metric in %r" % (p["title"], expr)
            bad = unknown_names(expr, fams)
            assert not bad, "panel %r: %s not exported by ddpd" % (p["title"], bad)
            used.update(re.sub(r"_(bucket|sum|count)$", "", n) for n in names)
    for want in ("ddp_job_loss", "ddp_node_heartbeat_age_seconds",
                 "ddp_http_request_duration_seconds", "ddp_http_long_poll_duration_seconds",
                 "ddp_store_healthy", "ddp_process_resident_memory_bytes"):
        assert want in used, "no dashboard panel uses %s" % want
    print("names: %d rules, %d panels reference only ddpd's series" % (len(rules), len(panels)))

    tool = promtool()
    if not tool:
        print("SKIP promtool check rules / test rules: promtool not installed (tests/run.sh "
              "fetches it from Debian's prometheus package into build-tools/)", flush=True)
        sys.exit(SKIP)
    for argv in ([tool, "check", "rules", RULES], [tool, "test", "rules", RULES_TEST]):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=DIR)
        assert p.returncode == 0, "%s: rc %d\n%s%s" % (" ".join(argv[1:3]), p.returncode,
                                                        p.stdout, p.stderr)
        print("%s: %s" % (" ".join(argv[1:3]), p.stdout.strip().split("\n")[-1].strip()))


if __name__ == "__main__":
    api_sim.run_tests(globals())
