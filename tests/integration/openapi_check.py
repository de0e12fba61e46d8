"""Checks real ddpd answers against schema/openapi.json.

The OpenAPI 3.0 component schemas are turned into one JSON Schema (draft 4) document:
`nullable: true` becomes `anyOf [schema, {"type": "null"}]`, `$ref: #/components/schemas/X`
becomes `#/definitions/X`. An answer is checked against the response its operation documents
for its status code: an undocumented status, a path that is no route of the document answered
with anything but a 404 Error, or a body that does not match is a failure (AssertionError).

Also: `meta_validate(doc)` validates the document itself against the official OpenAPI 3.0
meta-schema vendored in `schema/vendor/` (Draft4Validator of python3-jsonschema).
"""
import copy
import json
import os
import re

import jsonschema

REPO = os.environ.get("DDP_SRC") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPENAPI_PATH = os.path.join(REPO, "schema", "openapi.json")
META_DIR = os.path.join(REPO, "schema", "vendor")
META_PATH = os.path.join(META_DIR, "openapi-3.0.schema.json")


def load_doc(path=OPENAPI_PATH):
    with open(path) as f:
        return json.load(f)


def meta_validate(doc):
    """Returns the list of meta-schema errors of doc (empty when valid). Fails with a clear
    message when the meta-schema is missing."""
    if not os.path.isfile(META_PATH):
        raise AssertionError("OpenAPI meta-schema not found at %s (expected in "
                             "schema/vendor/ of the repository)" % os.path.normpath(META_PATH))
    with open(META_PATH) as f:
        meta = json.load(f)
    v = jsonschema.Draft4Validator(meta)
    return ["%s at %s" % (e.message[:300], "/".join(str(p) for p in e.absolute_path))
            for e in v.iter_errors(doc)]


def to_json_schema(s):
    """One OpenAPI schema object as JSON Schema draft 4 (recursively)."""
    if isinstance(s, list):
        return [to_json_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {}
    for k, v in s.items():
        if k == "$ref":
            if not v.startswith("#/components/schemas/"):
                raise ValueError("unsupported $ref %s" % v)
            out[k] = "#/definitions/" + v[len("#/components/schemas/"):]
        elif k in ("properties", "definitions"):
            out[k] = {name: to_json_schema(sub) for name, sub in v.items()}
        elif k in ("items", "additionalProperties", "not"):
            out[k] = to_json_schema(v)
        elif k in ("allOf", "anyOf", "oneOf"):
            out[k] = [to_json_schema(x) for x in v]
        elif k in ("nullable", "example", "readOnly", "writeOnly", "deprecated", "xml",
                   "externalDocs", "discriminator"):
            continue
        else:
            out[k] = copy.deepcopy(v)
    if s.get("nullable"):
        inner = out
        if "enum" in inner:
            inner = dict(inner)
            inner["enum"] = list(inner["enum"]) + [None]
            return {"anyOf": [inner, {"type": "null"}]} if "type" in inner else inner
        return {"anyOf": [inner, {"type": "null"}]}
    return out


class Checker:
    """Validates (method, path, status, headers, body) of real answers against the document."""

    def __init__(self, doc=None):
        self.doc = doc or load_doc()
        comp = self.doc.get("components", {})
        self.defs = {n: to_json_schema(s) for n, s in comp.get("schemas", {}).items()}
        for n, s in self.defs.items():  # every component must itself be a valid schema
            jsonschema.Draft4Validator.check_schema(dict(s, definitions=self.defs))
        self.routes = []
        for tmpl, item in self.doc["paths"].items():
            rx = "^" + "".join("[^/:]+" if part.startswith("{") else re.escape(part)
                               for part in re.split(r"(\{[^}]+\})", tmpl)) + "$"
            self.routes.append((re.compile(rx), tmpl, item))
        self.checked = 0

    def schema(self, name):
        return dict(self.defs[name], definitions=self.defs)

    def validate(self, name_or_schema, value, what=""):
        """Validates value against a component name or an OpenAPI schema object."""
        if isinstance(name_or_schema, str):
            sch = self.schema(name_or_schema)
        else:
            sch = dict(to_json_schema(name_or_schema), definitions=self.defs)
        errs = sorted(jsonschema.Draft4Validator(sch).iter_errors(value),
                      key=lambda e: list(e.absolute_path))
        if errs:
            raise AssertionError("%s does not match its schema: %s" % (
                what or name_or_schema,
                "; ".join("%s at /%s" % (e.message[:200], "/".join(str(p) for p in
                                                                   e.absolute_path))
                          for e in errs[:5])))

    def route(self, path):
        path = path.split("?", 1)[0]
        for rx, tmpl, item in self.routes:
            if rx.match(path):
                return tmpl, item
        return None, None

    def _response(self, op, status):
        r = op.get("responses", {}).get(str(status)) or op.get("responses", {}).get("default")
        if r is None:
            return None
        if "$ref" in r:
            r = self.doc["components"]["responses"][r["$ref"].rsplit("/", 1)[1]]
        return r

    def check(self, method, path, status, headers, text, body):
        """Checks one answer; raises AssertionError naming the call when it does not match."""
        self.checked += 1
        call = "%s %s -> %d" % (method, path, status)
        tmpl, item = self.route(path)
        if tmpl is None:
            if status != 404:
                raise AssertionError("%s: not a route of the document, expected 404" % call)
            self.validate("Error", body, call)
            return
        op = item.get(method.lower())
        if op is None:
            if status != 405:
                raise AssertionError("%s: method not in the document, expected 405" % call)
            self.validate("Error", body, call)
            return
        resp = self._response(op, status)
        if resp is None:
            raise AssertionError("%s: status %d is not documented for %s %s (body %s)" % (
                call, status, method, tmpl, text[:200]))
        content = resp.get("content")
        if not content:
            return
        ctype = ""
        for k, v in (headers or {}).items():
            if k.lower() == "content-type":
                ctype = v.split(";", 1)[0].strip().lower()
        if ctype not in content:
            raise AssertionError("%s: content type %r not documented (documented: %s)" % (
                call, ctype, ", ".join(content)))
        sch = content[ctype].get("schema")
        if sch is None:
            return
        if ctype == "application/json":
            if body is None:
                raise AssertionError("%s: body is not JSON: %r" % (call, text[:200]))
            self.validate(sch, body, call)
