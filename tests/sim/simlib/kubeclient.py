# A small stdlib client of a real Kubernetes API server: JSON requests and watches with a client certificate,
# a bearer token or no credentials (anonymous), over verified TLS.
# SPDX-License-Identifier: Apache-2.0
import http.client
import json
import ssl
import urllib.parse


# The simulator's own calls (kubelets, informers): left out of GET /calls in real mode.
USER_AGENT = "pvescale-sim"


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__("HTTP %d: %s" % (status, body[:300]))
        self.status = status
        self.body = body


class Client:
    """One identity talking to one API server. cert/key: PEM files of a client certificate; token: a bearer
    token; neither: anonymous. ca: the PEM file that signs the server's certificate."""

    def __init__(self, url, ca, cert=None, key=None, token=None, timeout=30):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.token = token
        self.timeout = timeout
        self.ctx = ssl.create_default_context(cafile=ca)
        if cert:
            self.ctx.load_cert_chain(cert, key)

    def _conn(self, timeout=None):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                           timeout=timeout or self.timeout)

    def _headers(self, ctype=None):
        h = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if ctype:
            h["Content-Type"] = ctype
        return h

    def raw(self, method, path, body=None, ctype="application/json"):
        """(status, parsed JSON body or None, raw bytes)."""
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        conn = self._conn()
        try:
            conn.request(method, path, body=data, headers=self._headers(ctype if data is not None else None))
            r = conn.getresponse()
            raw = r.read()
        finally:
            conn.close()
        try:
            obj = json.loads(raw) if raw else None
        except ValueError:
            obj = None
        return r.status, obj, raw

    def call(self, method, path, body=None, ctype="application/json", ok=(200, 201, 202)):
        """The parsed answer; ApiError on any other status."""
        status, obj, raw = self.raw(method, path, body, ctype)
        if status not in ok:
            raise ApiError(status, raw.decode(errors="replace"))
        return obj

    def get(self, path):
        return self.call("GET", path)

    def merge_patch(self, path, body):
        return self.call("PATCH", path, body, "application/merge-patch+json")

    def watch(self, path, timeout=330):
        """Yield the watch's events (dicts) until the server ends it; ApiError when it does not start."""
        conn = self._conn(timeout)
        try:
            conn.request("GET", path, headers=self._headers())
            r = conn.getresponse()
            if r.status != 200:
                raise ApiError(r.status, r.read().decode(errors="replace"))
            while True:
                line = r.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()
