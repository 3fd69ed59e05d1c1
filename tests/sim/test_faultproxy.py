#!/usr/bin/env python3
# Tests of the fault-injecting TCP proxy: bytes pass through unchanged (TLS included), and each fault does what it
# says: open connections dropped, new ones reset or refused, latency added, old connections expired; bad faults
# are refused and change nothing.
# SPDX-License-Identifier: Apache-2.0
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simlib import faultproxy  # noqa: E402
from simlib import tls  # noqa: E402


class Upstream:
    """A loopback server: echoes what it reads; 'stream' makes it send a line every 50 ms until the peer goes."""

    def __init__(self, ctx=None):
        self.ctx = ctx
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            if self.ctx:
                c = self.ctx.wrap_socket(c, server_side=True)
            while True:
                data = c.recv(4096)
                if not data:
                    return
                if data.strip() == b"stream":
                    while True:
                        c.sendall(b"tick\n")
                        time.sleep(0.05)
                c.sendall(data)
        except OSError:
            return
        finally:
            c.close()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() in progress and stops listening
        except OSError:
            pass
        self.sock.close()


def connect(port, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def exchange(port, data=b"x\n"):
    """Connect, send data, read one answer: the bytes read (b"" at a clean EOF), or the error that ended it."""
    try:
        with connect(port) as s:
            s.sendall(data)
            return s.recv(100)
    except (ConnectionResetError, BrokenPipeError) as e:
        return type(e)


RESET = (ConnectionResetError, BrokenPipeError)


def read_until_closed(s, limit=30):
    """Read until EOF or a reset; return how long it took (seconds)."""
    t0 = time.monotonic()
    s.settimeout(limit)
    try:
        while s.recv(4096):
            pass
    except (ConnectionResetError, socket.timeout):
        pass
    return time.monotonic() - t0


class FaultProxyTest(unittest.TestCase):
    def setUp(self):
        self.up = Upstream()
        self.proxy = faultproxy.FaultProxy("127.0.0.1", self.up.port).start()

    def tearDown(self):
        self.proxy.stop()
        self.up.close()

    def test_bytes_pass_through_unchanged(self):
        with connect(self.proxy.port) as s:
            payload = bytes(range(256)) * 64
            s.sendall(payload)
            got = b""
            while len(got) < len(payload):
                got += s.recv(65536)
        self.assertEqual(got, payload)
        self.assertEqual(self.proxy.stats()["accepted"], 1)

    def test_tls_passes_through(self):
        d = tempfile.mkdtemp(prefix="faultproxy-tls-")
        ca, crt, key = tls.make_certs(d)
        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(crt, key)
        up = Upstream(sctx)
        proxy = faultproxy.FaultProxy("127.0.0.1", up.port).start()
        try:
            cctx = ssl.create_default_context(cafile=ca)
            with cctx.wrap_socket(connect(proxy.port), server_hostname="localhost") as s:
                s.sendall(b"hello over tls\n")
                self.assertEqual(s.recv(100), b"hello over tls\n")
        finally:
            proxy.stop()
            up.close()

    def test_drop_all_ends_a_stream_and_new_connections_work(self):
        s = connect(self.proxy.port)
        s.sendall(b"stream\n")
        self.assertEqual(s.recv(5), b"tick\n")
        self.assertEqual(self.proxy.drop_all(), 1)
        self.assertLess(read_until_closed(s), 5)
        s.close()
        self.assertEqual(self.proxy.stats()["dropped"], 1)
        self.assertEqual(exchange(self.proxy.port, b"again\n"), b"again\n")

    def test_reset_rate_one_resets_every_new_connection(self):
        self.proxy.set_faults(reset_rate=1.0)
        for _ in range(3):
            self.assertIn(exchange(self.proxy.port), RESET)
        self.assertEqual(self.proxy.stats()["reset"], 3)
        self.assertEqual(self.up.accepted, 0)
        self.proxy.set_faults(reset_rate=0.0)
        self.assertEqual(exchange(self.proxy.port, b"ok\n"), b"ok\n")

    def test_refuse_then_recover(self):
        self.proxy.set_faults(refuse=True)
        self.assertIn(exchange(self.proxy.port), RESET)
        self.proxy.set_faults(refuse=False)
        self.assertEqual(exchange(self.proxy.port, b"back\n"), b"back\n")

    def test_latency_is_added_each_way(self):
        self.proxy.set_faults(latency_seconds=0.3)
        with connect(self.proxy.port) as s:
            t0 = time.monotonic()
            s.sendall(b"slow\n")
            self.assertEqual(s.recv(10), b"slow\n")
            self.assertGreaterEqual(time.monotonic() - t0, 0.6)

    def test_old_connections_expire(self):
        self.proxy.set_faults(drop_after_seconds=0.5)
        s = connect(self.proxy.port)
        s.sendall(b"stream\n")
        self.assertEqual(s.recv(5), b"tick\n")
        took = read_until_closed(s)
        s.close()
        self.assertGreaterEqual(took, 0.3)
        self.assertLess(took, 10)
        self.assertGreaterEqual(self.proxy.stats()["dropped"], 1)

    def test_bad_faults_are_refused_and_change_nothing(self):
        before = self.proxy.set_faults()
        for bad in ({"nope": 1}, {"latency_seconds": -1}, {"reset_rate": 2}, {"refuse": 1},
                    {"latency_seconds": "1"}, {"latency_seconds": 0.1, "drop_after_seconds": True}):
            with self.assertRaises(faultproxy.UsageError, msg=bad):
                self.proxy.set_faults(**bad)
        self.assertEqual(self.proxy.set_faults(), before)

    def test_upstream_gone_resets_the_client(self):
        self.up.close()
        self.assertIn(exchange(self.proxy.port), RESET)
        self.assertEqual(self.proxy.stats()["upstream_failed"], 1)

    def test_command_line_bad_input_exits_2(self):
        tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "simlib", "faultproxy.py")
        for args in (["--upstream", "127.0.0.1:x"], ["--upstream", "127.0.0.1:1", "--set", "nope=1"],
                     ["--upstream", "127.0.0.1:1", "--set", "reset_rate=oops"]):
            r = subprocess.run([sys.executable, tool] + args, capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertTrue(r.stderr.startswith("faultproxy: "), r.stderr)


if __name__ == "__main__":
    unittest.main()
