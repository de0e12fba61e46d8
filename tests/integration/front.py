"""A fake coordinator replica for the multi-address tests: it never serves the API, it only
redirects or refuses, the way a replica that is not the leader will (docs/api.md, "Several
addresses"). Run as its own process on loopback:

    front.py PORT LOGFILE redirect URL     307 to URL + the request's path and query
    front.py PORT LOGFILE not_leader [URL] 503 {"error": {"code": "not_leader", "leader": URL}}
                                           (no URL: "leader" is null)
    front.py PORT LOGFILE close            reads the request, closes without an answer

Every request is appended to LOGFILE as one JSON line: method, path, whether it carried an
Authorization header, and the body it carried. The body is read whole before the answer, so
a client never meets a reset for a body it is still sending.
"""
import http.server
import json
import sys
import threading

PORT, LOG, MODE = int(sys.argv[1]), sys.argv[2], sys.argv[3]
TARGET = sys.argv[4].rstrip("/") if len(sys.argv) > 4 else None
LOCK = threading.Lock()


class Front(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(n, 1 << 20)) if n > 0 else b""
        rec = {"method": self.command, "path": self.path,
               "auth": "Authorization" in self.headers,
               "body": body.decode(errors="replace")}
        with LOCK, open(LOG, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if MODE == "close":
            self.close_connection = True
            return
        if MODE == "redirect":
            self.send_response(307)
            self.send_header("Location", TARGET + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        out = json.dumps({"error": {"code": "not_leader", "status": "UNAVAILABLE",
                                    "message": "this replica is not the leader",
                                    "leader": TARGET}}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = do_HEAD = handle_any


http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Front).serve_forever()
