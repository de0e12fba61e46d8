"""schema/openapi.json: valid OpenAPI 3.0 (official meta-schema vendored in schema/vendor/),
describes every call of docs/api.md, its component schemas compile to JSON Schema, and a real
ddpd serves exactly this document at GET /v1/openapi.json (and only to the user token)."""
import json
import os
import re

import api_sim
from api_sim import Api, cluster, expect_error
import openapi_check

DOC = openapi_check.load_doc()


def test_openapi_meta_schema_valid():
    errs = openapi_check.meta_validate(DOC)
    assert not errs, "schema/openapi.json is not valid OpenAPI 3.0:\n" + "\n".join(errs[:10])
    assert DOC["openapi"].startswith("3.0."), DOC["openapi"]


def test_openapi_meta_schema_catches_a_bad_document():
    bad = json.loads(json.dumps(DOC))
    bad["paths"]["/v1/jobs"]["get"]["responses"]["200"]["bogus"] = 1
    assert openapi_check.meta_validate(bad), "the meta-schema check accepts anything"


def test_openapi_describes_every_call_of_api_md():
    with open(os.path.join(openapi_check.REPO, "docs", "api.md")) as f:
        text = f.read()
    calls = set(re.findall(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`?\s]*)", text))
    assert len(calls) >= 12, calls
    chk = api_sim.checker()
    for method, path in sorted(calls):
        assert path in DOC["paths"], "docs/api.md call %s %s missing from openapi.json" % (
            method, path)
        assert method.lower() in DOC["paths"][path], "%s %s missing" % (method, path)
        tmpl, _ = chk.route(path.replace("{id}", "j-1").replace("{name}", "node-a"))
        assert tmpl == path, (path, tmpl)


def test_openapi_components_and_operations_complete():
    schemas = DOC["components"]["schemas"]
    for name in ("Job", "JobSpec", "Node", "Event", "Metric", "LogLines", "Heartbeat",
                 "HeartbeatAnswer", "Assignment", "Error"):
        assert name in schemas, "components.schemas lacks " + name
    sec = DOC["components"]["securitySchemes"]
    assert {s["scheme"] for s in sec.values()} == {"bearer"} and len(sec) == 3, sec
    for path, item in DOC["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            assert "security" in op, "%s %s: no security" % (method, path)
            codes = set(op["responses"])
            assert any(c.startswith("2") for c in codes), (method, path, codes)
            if op["security"]:
                assert {"401", "403"} <= codes, "%s %s lacks 401/403" % (method, path)
            if "requestBody" in op:
                assert {"400", "413"} <= codes, "%s %s lacks 400/413" % (method, path)
    chk = api_sim.checker()
    # The converted schemas really check: nullable, $ref and additionalProperties.
    job = {"id": "j-1", "name": "job", "spec": {"command": ["x"]}, "state": "PENDING",
           "generation": 0, "restarts": 0, "world_size": 0, "master_addr": None,
           "master_port": None, "nodes": [], "last_metrics": None, "reason": "submitted",
           "created_at": "2026-11-29T13:58:16.123Z", "started_at": None, "finished_at": None,
           "owner": "admin"}
    chk.validate("Job", job)
    for field, bad in (("state", "WEIRD"), ("created_at", None), ("spec", {"bogus": 1}),
                       ("owner", "a b"),
                       ("created_at", "2026-11-29 13:58")):
        j = dict(job, **{field: bad})
        try:
            chk.validate("Job", j)
        except AssertionError:
            continue
        raise AssertionError("Job with %s=%r accepted" % (field, bad))


def test_openapi_served_by_ddpd():
    with cluster(node_timeout=30) as c:
        api = Api(c)
        a = api.get("/v1/openapi.json")
        assert a.status == 200, a
        assert a.json == DOC, "GET /v1/openapi.json differs from schema/openapi.json"
        expect_error(api.get("/v1/openapi.json", token="agent"), 403, what="agent token")
        expect_error(api.get("/v1/openapi.json", token=None), 401, what="no token")


if __name__ == "__main__":
    api_sim.run_tests(globals())
