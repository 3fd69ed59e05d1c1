# Threaded HTTP/1.1 server (optionally TLS) that hands each request to an application object.
# SPDX-License-Identifier: Apache-2.0
import http.server
import socket
import socketserver
import ssl
import threading
import urllib.parse

from . import util


class Request:
    """One HTTP request plus helpers to answer it (plain, JSON or chunked)."""

    def __init__(self, handler, method):
        self.h = handler
        self.method = method
        u = urllib.parse.urlsplit(handler.path)
        self.raw_path = u.path
        self.path = urllib.parse.unquote(u.path)
        self.query_string = u.query
        self.query = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        self.headers = handler.headers
        self.body = b""
        self.replied = False
        self.chunked = False

    def q1(self, name, default=None):
        v = self.query.get(name)
        return v[-1] if v else default

    def read_body(self):
        h = self.h
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            parts = []
            while True:
                line = h.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(h.rfile.read(size))
                h.rfile.readline(65537)
            self.body = b"".join(parts)
        else:
            n = int(self.headers.get("Content-Length") or 0)
            self.body = h.rfile.read(n) if n > 0 else b""
        return self.body

    def reply(self, code, body=b"", ctype="application/json;charset=UTF-8", reason=None, headers=None):
        if isinstance(body, str):
            body = body.encode()
        h = self.h
        reason = (reason or "").split("\n")[0] or None
        h.send_response(code, reason)
        if body or code not in (204, 304):
            h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        # Headers and body leave in one write, as Go's net/http and pveproxy send a small answer; written apart,
        # they reach the client as two TLS records and wake it twice.
        h._headers_buffer.append(b"\r\n")
        if self.method != "HEAD":
            h._headers_buffer.append(body)
        h.flush_headers()
        h.wfile.flush()
        self.replied = True

    def reply_json(self, code, obj, reason=None, headers=None):
        self.reply(code, util.json_bytes(obj), reason=reason, headers=headers)

    def start_chunked(self, code, ctype="application/json", headers=None):
        h = self.h
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.flush()
        self.replied = True
        self.chunked = True

    def write_chunk(self, data):
        if not data:
            return
        w = self.h.wfile
        w.write(b"%x\r\n" % len(data) + data + b"\r\n")
        w.flush()

    def end_chunked(self):
        try:
            self.h.wfile.write(b"0\r\n\r\n")
            self.h.wfile.flush()
        except OSError:
            pass

    def drop(self):
        """Close the connection without an answer (simulated timeout/reset)."""
        self.replied = True
        self.h.close_connection = True
        try:
            self.h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pve-api-daemon/3.0"
    sys_version = ""
    timeout = 600

    def log_message(self, fmt, *args):
        util.log("%s %s" % (self.server.app_name, fmt % args), 3)

    def _dispatch(self):
        req = Request(self, self.command)
        try:
            req.read_body()
            self.server.app.handle(req)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
            self.close_connection = True
            return
        except Exception as e:  # a simulator bug must not kill the connection silently
            import traceback
            util.log("internal error in %s: %s\n%s" % (self.server.app_name, e, traceback.format_exc()))
            if not req.replied:
                try:
                    req.reply_json(500, {"data": None, "message": "simulator internal error: %s" % e},
                                   reason="simulator internal error")
                except OSError:
                    pass
            self.close_connection = True
            return
        if req.chunked:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _dispatch

    def send_header(self, keyword, value):
        # BaseHTTPRequestHandler adds Server/Date; keep them, nothing else to do
        super().send_header(keyword, value)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, app, name, ssl_ctx=None, host="127.0.0.1", port=0):
        self.app = app
        self.app_name = name
        self.ssl_ctx = ssl_ctx
        super().__init__((host, port), _Handler)
        self.port = self.server_address[1]
        self.thread = None

    def get_request(self):
        sock, addr = self.socket.accept()
        # A reply is written as headers, then body: without TCP_NODELAY, Nagle holds the body until the client
        # ACKs the headers, which a delayed ACK makes 40 ms per request (Go's and Perl's servers set it too).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_ctx is not None:
            # handshake happens on first read, in the per-connection thread
            sock = self.ssl_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request, client_address):
        util.log("%s: connection error from %s" % (self.app_name, client_address), 2)

    def start(self):
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="http-" + self.app_name, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.shutdown()
        self.server_close()


def make_ssl_ctx(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx
