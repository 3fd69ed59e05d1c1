# A fault-injecting TCP proxy: stands in front of a real server (kube-apiserver) and drops, resets, delays or
# refuses connections on demand, as a flaky network or a load balancer would. TLS passes through untouched.
# SPDX-License-Identifier: Apache-2.0
import argparse
import json
import random
import socket
import struct
import sys
import threading
import time

FAULTS = {
    "latency_seconds": 0.0,     # added before every chunk forwarded, in both directions
    "reset_rate": 0.0,          # share of new connections answered with a TCP reset
    "refuse": False,            # every new connection is reset (the server is unreachable)
    "drop_after_seconds": 0.0,  # connections older than this are closed (watches end mid-stream); 0: never
}


class UsageError(Exception):
    pass


def _reset(sock):
    """Close with a TCP RST instead of a FIN (SO_LINGER on, timeout 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()  # no shutdown first: that would send a FIN before the reset


def _close(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class _Conn:
    """One client connection and its upstream connection, pumped by two threads."""

    def __init__(self, proxy, client, upstream):
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.opened = time.monotonic()
        self.closed = False
        self.lock = threading.Lock()

    def start(self):
        for src, dst in ((self.client, self.upstream), (self.upstream, self.client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True, name="faultproxy-pump").start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                delay = self.proxy.fault("latency_seconds")
                if delay > 0:
                    time.sleep(delay)
                dst.sendall(data)
                self.proxy.add_bytes(len(data))
        except OSError:
            pass
        self.close()

    def close(self, why=None):
        """Close both sides once; why ("dropped") is counted before the client can see the close."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
        self.proxy.forget(self, why)
        for s in (self.client, self.upstream):
            _close(s)
        return True


class FaultProxy:
    """Listens on listen_host:listen_port (0: a free port) and forwards each connection to upstream."""

    def __init__(self, upstream_host, upstream_port, listen_host="127.0.0.1", listen_port=0):
        self.upstream = (upstream_host, int(upstream_port))
        self.lock = threading.Lock()
        self.faults = dict(FAULTS)
        self.conns = set()
        self.counts = {"accepted": 0, "reset": 0, "dropped": 0, "upstream_failed": 0, "bytes": 0}
        self.stopping = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((listen_host, int(listen_port)))
        self.sock.listen(128)
        self.host, self.port = self.sock.getsockname()[:2]

    # ---- faults --------------------------------------------------------------------------------
    def fault(self, name):
        with self.lock:
            return self.faults[name]

    def set_faults(self, **kv):
        """Change faults at any time; an unknown name or a bad value raises UsageError and changes nothing."""
        fresh = {}
        for k, v in kv.items():
            if k not in FAULTS:
                raise UsageError("unknown fault %r (known: %s)" % (k, ", ".join(sorted(FAULTS))))
            if isinstance(FAULTS[k], bool):
                if not isinstance(v, bool):
                    raise UsageError("fault %s must be true or false" % k)
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise UsageError("fault %s must be a number >= 0" % k)
            elif k == "reset_rate" and v > 1:
                raise UsageError("fault reset_rate must be between 0 and 1")
            fresh[k] = v
        with self.lock:
            self.faults.update(fresh)
            return dict(self.faults)

    def drop_all(self):
        """Close every open connection now (a FIN to both sides): a watch in progress ends mid-stream."""
        with self.lock:
            conns = list(self.conns)
        return sum(1 for c in conns if c.close("dropped"))

    def stats(self):
        with self.lock:
            return dict(self.counts, open=len(self.conns))

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def add_bytes(self, n):
        self._count("bytes", n)

    def forget(self, conn, why=None):
        with self.lock:
            self.conns.discard(conn)
            if why:
                self.counts[why] += 1

    # ---- serving -------------------------------------------------------------------------------
    def start(self):
        threading.Thread(target=self._accept_loop, daemon=True, name="faultproxy-accept").start()
        threading.Thread(target=self._expire_loop, daemon=True, name="faultproxy-expire").start()
        return self

    def stop(self):
        self.stopping.set()
        _close(self.sock)
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            c.close()

    def _accept_loop(self):
        while not self.stopping.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self._count("accepted")
            if self.fault("refuse") or random.random() < self.fault("reset_rate"):
                self._count("reset")
                _reset(client)
                continue
            self._connect(client)

    def _connect(self, client):
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
            upstream.settimeout(None)
        except OSError:
            self._count("upstream_failed")
            _reset(client)
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(self, client, upstream)
        with self.lock:
            self.conns.add(conn)
        conn.start()

    def _expire_loop(self):
        while not self.stopping.wait(0.1):
            limit = self.fault("drop_after_seconds")
            if limit <= 0:
                continue
            now = time.monotonic()
            with self.lock:
                old = [c for c in self.conns if now - c.opened >= limit]
            for c in old:
                c.close("dropped")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="faultproxy", description="A fault-injecting TCP proxy for tests")
    ap.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on (port 0: a free one)")
    ap.add_argument("--set", action="append", default=[], metavar="FAULT=VALUE", help="a fault (JSON value)")
    args = ap.parse_args(argv)
    try:
        uh, _, up = args.upstream.rpartition(":")
        lh, _, lp = args.listen.rpartition(":")
        proxy = FaultProxy(uh, int(up), lh or "127.0.0.1", int(lp))
        proxy.set_faults(**{k: json.loads(v) for k, _, v in (s.partition("=") for s in args.set)})
    except (ValueError, UsageError, OSError) as e:
        sys.stderr.write("faultproxy: %s\n" % e)
        return 2
    proxy.start()
    print(json.dumps({"listen": "%s:%d" % (proxy.host, proxy.port)}), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
