"""A small driver for headless chromium over the DevTools protocol, Python stdlib only.

Chromium is started with --remote-debugging-port=0 and a fresh --user-data-dir; the port it
picked is read from <user-data-dir>/DevToolsActivePort, the page target's websocket from
/json/list, and the protocol is spoken over a minimal RFC 6455 client (text frames, masked,
ping answered). Clicks are real mouse events at an element's centre (Input.dispatchMouseEvent),
typing is Input.insertText into the focused element: the page under test needs no hook.

Every wait has a deadline; Browser.close() always ends the chromium process group.
"""
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def find_chromium():
    for n in CHROMIUM_NAMES:
        p = shutil.which(n)
        if p:
            return p
    return None


def ensure_chromium(log=print):
    """Returns the chromium binary, installing Debian's package with apt-get if it is missing;
    returns (None, why) when it cannot be had."""
    p = find_chromium()
    if p:
        return p, ""
    if not shutil.which("apt-get"):
        return None, "chromium is not installed and apt-get is not available"
    log("chromium missing: apt-get install -y chromium")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        r = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "apt-get install chromium failed: %s" % e
    p = find_chromium()
    if not p:
        tail = r.stdout.decode(errors="replace")[-600:]
        return None, "apt-get install chromium failed (exit %d): %s" % (r.returncode, tail)
    return p, ""


class WebSocket:
    """Client side of RFC 6455, enough for the DevTools protocol."""

    def __init__(self, url, timeout=30):
        assert url.startswith("ws://"), url
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port or 80)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        req = ("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key))
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            head += chunk
            if len(head) > 65536:
                raise ConnectionError("websocket handshake: header too long")
        head, _, self.buf = head.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            raise ConnectionError("websocket handshake refused: %r" % status)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("websocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode, payload):
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def send(self, text):
        self._send_frame(0x1, text.encode())

    def recv(self, timeout):
        """One whole text message, or None when nothing came within `timeout` seconds."""
        self.sock.settimeout(timeout)
        parts = []
        try:
            while True:
                b0, b1 = self._read(2)
                opcode = b0 & 0x0F
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", self._read(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", self._read(8))[0]
                if b1 & 0x80:
                    mask = self._read(4)
                    data = bytes(b ^ mask[i % 4] for i, b in enumerate(self._read(n)))
                else:
                    data = self._read(n)
                if opcode == 0x9:
                    self._send_frame(0xA, data)
                    continue
                if opcode == 0x8:
                    raise ConnectionError("websocket closed by chromium")
                if opcode in (0x0, 0x1, 0x2):
                    parts.append(data)
                    if b0 & 0x80:
                        return b"".join(parts).decode(errors="replace")
        except socket.timeout:
            if parts:
                raise
            return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class CdpError(Exception):
    pass


class Browser:
    """One headless chromium with one page. Attributes: events (every protocol event seen,
    bounded), exceptions (Runtime.exceptionThrown details), requests (URLs and headers of
    the page's network requests), log_entries (the browser's log: console, network errors,
    Content-Security-Policy violations)."""

    def __init__(self, binary, width=1280, height=1000, log_path=None):
        self.profile = tempfile.mkdtemp(prefix="ddp-chromium-")
        argv = [binary, "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                "--user-data-dir=" + self.profile, "--remote-debugging-port=0",
                "--remote-allow-origins=*", "--window-size=%d,%d" % (width, height),
                "about:blank"]
        self.log_path = log_path or os.path.join(self.profile, "chromium.log")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        self.ws = None
        self.next_id = 0
        self.events = []
        self.exceptions = []
        self.requests = []
        self.log_entries = []   # Log.entryAdded: console, network, security (CSP) messages
        try:
            self._connect()
        except Exception:
            self.close()
            raise

    def _connect(self):
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        port = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("chromium exited with %s; log:\n%s" %
                                   (self.proc.returncode, self.log()[-3000:]))
            try:
                with open(port_file) as f:
                    first = f.readline().strip()
                if first.isdigit():
                    port = int(first)
                    break
            except OSError:
                pass
            time.sleep(0.1)
        if not port:
            raise RuntimeError("chromium wrote no DevToolsActivePort in 60 s; log:\n%s" %
                               self.log()[-3000:])
        target = None
        while time.monotonic() < deadline and not target:
            with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=10) as r:
                targets = json.loads(r.read())
            target = next((t for t in targets if t.get("type") == "page"), None)
            if not target:
                time.sleep(0.1)
        if not target:
            raise RuntimeError("chromium shows no page target")
        self.ws = WebSocket(target["webSocketDebuggerUrl"])
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Network.enable")
        self.call("Log.enable")

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _on_event(self, msg):
        m = msg.get("method")
        p = msg.get("params", {})
        if m == "Runtime.exceptionThrown":
            self.exceptions.append(p.get("exceptionDetails", {}))
        elif m == "Log.entryAdded":
            e = p.get("entry", {})
            self.log_entries.append({"level": e.get("level"), "source": e.get("source"),
                                     "text": e.get("text", ""), "url": e.get("url", "")})
        elif m == "Network.requestWillBeSent":
            req = p.get("request", {})
            self.requests.append({"url": req.get("url", ""), "headers": req.get("headers", {}),
                                  "method": req.get("method", "")})
        if len(self.events) < 20000:
            self.events.append(m)

    def call(self, method, params=None, timeout=30):
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError("%s: no answer in %.0f s" % (method, timeout))
            text = self.ws.recv(left)
            if text is None:
                continue
            msg = json.loads(text)
            if msg.get("id") == my:
                if "error" in msg:
                    raise CdpError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if "method" in msg:
                self._on_event(msg)

    def pump(self, seconds):
        """Reads protocol events for `seconds` (keeps the event lists current)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            text = self.ws.recv(max(0.01, deadline - time.monotonic()))
            if text:
                msg = json.loads(text)
                if "method" in msg:
                    self._on_event(msg)

    def navigate(self, url):
        r = self.call("Page.navigate", {"url": url})
        if r.get("errorText"):
            raise CdpError("navigate %s: %s" % (url, r["errorText"]))

    def js(self, expr, timeout=30):
        """The value of a JavaScript expression (awaited if it is a promise)."""
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in r:
            raise CdpError("js %r: %s" % (expr[:120], r["exceptionDetails"]))
        return r.get("result", {}).get("value")

    def wait_js(self, what, expr, timeout=30, interval=0.1):
        """Evaluates `expr` until it is truthy; returns its value or raises AssertionError."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.js(expr)
            except CdpError as e:  # e.g. the page is still loading: try again
                last = e
            if last and not isinstance(last, CdpError):
                return last
            self.pump(interval)
        raise AssertionError("timed out after %.0fs waiting for %s (last: %r)" %
                             (timeout, what, last))

    def click(self, selector, timeout=15):
        """A real mouse click at the centre of the first element matching `selector`, once it
        is displayed and enabled."""
        q = json.dumps(selector)
        rect = self.wait_js("clickable %s" % selector, """(() => {
            const e = document.querySelector(%s);
            if (!e || e.disabled || e.offsetParent === null) return null;
            e.scrollIntoView({block: 'center'});
            const r = e.getBoundingClientRect();
            return r.width > 0 && r.height > 0 ? [r.x + r.width / 2, r.y + r.height / 2] : null;
        })()""" % q, timeout=timeout)
        x, y = rect
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y,
                                                   "button": "left", "clickCount": 1})

    KEYS = {"ArrowDown": 40, "ArrowUp": 38, "Enter": 13, "Escape": 27, "Tab": 9}

    def press(self, key):
        """Presses and releases one named key (KEYS) in the focused element."""
        code = self.KEYS[key]
        for kind in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                 "windowsVirtualKeyCode": code,
                                                 "nativeVirtualKeyCode": code})

    def type_text(self, text):
        self.call("Input.insertText", {"text": text})

    def screenshot(self, path, full_page=True):
        """Writes a PNG of the page (the whole scrollable page unless full_page is False)."""
        params = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"],
                                "height": min(size["height"], 6000), "scale": 1})
        data = self.call("Page.captureScreenshot", params, timeout=60)["data"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        if self.ws:
            self.ws.close()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
