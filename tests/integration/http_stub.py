"""http_stub: a scripted plain-HTTP/1.1 server for testing shared/http_client and the kube client's retries
(reason phrases, Retry-After, chunked line streams split anywhere, idle streams, multipart, keep-alive)."""
# SPDX-License-Identifier: Apache-2.0
import email.parser
import email.policy
import email.utils
import http.server
import json
import socketserver
import threading
import time
import urllib.parse


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def reply(self, code, obj, reason=None, headers=None):
        data = json.dumps(obj).encode()
        self.send_response(code, reason)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def start_chunked(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def count(self, key):
        with self.server.lock:
            self.server.counts[key] = self.server.counts.get(key, 0) + 1
            return self.server.counts[key]

    def handle_any(self):
        u = urllib.parse.urlsplit(self.path)
        body = self.body()
        n = self.count(self.path)
        fn = getattr(self, "r_" + u.path.strip("/").replace("-", "_"), None)
        if fn is None:
            return self.reply(404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "no " + u.path})
        return fn(n, body, urllib.parse.parse_qs(u.query))

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_any

    # ---- scripted routes ----
    def r_counts(self, n, body, q):
        with self.server.lock:
            self.reply(200, dict(self.server.counts))

    def r_reason(self, n, body, q):
        self.reply(500, {"data": None, "message": "only root can set 'affinity' config\n"},
                   reason="only root can set 'affinity' config")

    def r_echo(self, n, body, q):
        self.reply(200, {"method": self.command, "body": body.decode(errors="replace"),
                         "content_length": self.headers.get("Content-Length"),
                         "content_type": self.headers.get("Content-Type"),
                         "authorization": self.headers.get("Authorization"), "x_extra": self.headers.get("X-Extra"),
                         "query": {k: v[-1] for k, v in q.items()}, "port": self.client_address[1],
                         "target": self.path})

    def r_retry_after(self, n, body, q):
        if n == 1:
            return self.reply(429, {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"},
                              headers={"Retry-After": "1"})
        self.reply(200, {"kind": "ConfigMap", "attempt": n})

    def r_retry_date(self, n, body, q):
        if n == 1:
            when = email.utils.formatdate(time.time() + 2, usegmt=True)
            return self.reply(503, {"kind": "Status", "code": 503, "reason": "ServiceUnavailable", "message": "later"},
                              headers={"Retry-After": when})
        self.reply(200, {"kind": "ConfigMap", "attempt": n})

    def r_fail_first(self, n, body, q):
        # 500 without Retry-After for the first ?n= attempts at this target, then 200.
        if n <= int(q.get("n", ["1"])[-1]):
            return self.reply(500, {"kind": "Status", "code": 500, "reason": "InternalError",
                                    "message": "injected fault %d" % n})
        self.reply(200, {"kind": "ConfigMap", "attempt": n})

    def r_not_json(self, n, body, q):
        data = b"done, but not in JSON"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def r_post_busy(self, n, body, q):
        # A 429 without Retry-After (like a PodDisruptionBudget refusal) on a POST.
        self.reply(429, {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "budget"})

    def r_stream(self, n, body, q):
        self.start_chunked()
        for piece in (b'{"a":1}\n{"b"', b':2}\r\n', b"\n", b'{"c":', b'3}\n{"d":4}\n'):
            self.chunk(piece)
            time.sleep(0.05)
        time.sleep(0.3)
        self.chunk(b'{"e":5}\n{"partial"')
        self.chunk(b"")
        self.close_connection = True

    def r_idle(self, n, body, q):
        self.start_chunked()
        self.chunk(b'{"first":true}\n')
        time.sleep(float(q.get("hold", ["4"])[0]))
        try:
            self.chunk(b"")
        except OSError:
            pass
        self.close_connection = True

    def r_inflight(self, n, body, q):
        # Held 200 ms; the answer says how many /inflight requests the server has seen at once so far.
        with self.server.lock:
            self.server.inflight += 1
            self.server.most_inflight = max(self.server.most_inflight, self.server.inflight)
        time.sleep(0.2)
        with self.server.lock:
            self.server.inflight -= 1
            most = self.server.most_inflight
        self.reply(200, {"most": most, "port": self.client_address[1]})

    def r_gone(self, n, body, q):
        self.reply(410, {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})

    def r_slow(self, n, body, q):
        time.sleep(3)
        self.reply(200, {"late": True})

    def r_upload(self, n, body, q):
        ctype = self.headers.get("Content-Type")
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\nMIME-Version: 1.0\r\n\r\n" + body)
        parts = []
        for part in msg.iter_parts():
            payload = part.get_payload(decode=True) or b""
            parts.append({"name": part.get_param("name", header="content-disposition"),
                          "filename": part.get_filename(), "type": part.get_content_type(), "size": len(payload),
                          "text": payload.decode(errors="replace") if len(payload) < 64 else None})
        self.reply(200, {"content_type": ctype.split(";")[0], "parts": parts})


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.counts = {}
        self.inflight = self.most_inflight = 0
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def handle_error(self, request, client_address):
        pass  # clients that time out or cancel close their end on purpose

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.shutdown()
        self.server_close()
