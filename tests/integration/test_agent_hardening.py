"""Integration test: a real pvescale-agent under hostile input and a bad day: connection floods and trickling
clients (caps, request deadline, file descriptors), malformed Content-Length, %00 in a path, wrong Content-Type,
the page's security headers, and the reservation state file (previous generation, unreadable state, leftover
temporary files, failed saves)."""
# SPDX-License-Identifier: Apache-2.0
import glob
import json
import os
import shutil
import signal
import socket
import ssl
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import agentlib  # noqa: E402
from test_agent_reservations import Client  # noqa: E402

GIB = 1 << 30
DEADLINE_S = 10  # HTTP_SERVER_DEADLINE_S


class AgentCase(unittest.TestCase):
    """One agent per test, in its own directory, static policy on a 32-CPU topology."""
    wrapper = ()

    def setUp(self):
        agentlib.static_agent_setup(self, "pvescale-hard-")
        self.state = os.path.join(self.state_dir, "reservations.json")
        self.agent = None

    def start(self):
        self.agent = agentlib.Agent(self.args, wrapper=self.wrapper)
        self.client = Client(self.agent.port, self.ca, self.token)
        self.url = "https://localhost:%d" % self.agent.port

    def tearDown(self):
        if self.agent:
            self.agent.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def reserve(self, vcpus=2, owner="claim-a"):
        status, body = self.client.request("POST", "/v1/reservations", {"vcpus": vcpus, "memory_bytes": GIB,
                                                                        "ttl_seconds": 600, "owner": owner})
        self.assertEqual(status, 201, body)
        return body

    def ids(self):
        status, body = self.client.request("GET", "/v1/reservations")
        self.assertEqual(status, 200, body)
        return [r["id"] for r in body["reservations"]]

    def raw(self, data, source="127.0.0.1", timeout=3):
        """Send bytes over TLS and return all the agent answers until it closes (or the timeout)."""
        ctx = ssl.create_default_context(cafile=self.ca)
        sock = socket.create_connection(("127.0.0.1", self.agent.port), timeout=timeout,
                                        source_address=(source, 0))
        out = b""
        with ctx.wrap_socket(sock, server_hostname="localhost") as s:
            s.sendall(data)
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    out += chunk
            except (socket.timeout, ssl.SSLError, ConnectionError):
                pass
        return out


class RequestsTest(AgentCase):
    def setUp(self):
        super().setUp()
        self.start()

    def test_nul_in_a_path_is_a_400_and_releases_nothing(self):
        rid = self.reserve()["id"]
        for path in ("/v1/reservations/%s%%00junk" % rid, "/v1/reservations/%s%%00" % rid):
            status, body = self.client.request("DELETE", path)
            self.assertEqual(status, 400, body)
            self.assertIn("%00", body["detail"])
        self.assertEqual(self.ids(), [rid])

    def test_json_bodies_need_the_json_content_type(self):
        body = json.dumps({"vcpus": 1, "memory_bytes": GIB, "owner": "ct"})
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None, "application/jsonx"):
            extra = ["-H", "Content-Type: " + ctype] if ctype else ["-H", "Content-Type:"]
            status, text = agentlib.curl(self.url + "/v1/reservations", self.ca, self.token, "POST",
                                         extra=extra + ["--data-binary", body])
            self.assertEqual(status, 415, (ctype, text))
            self.assertEqual(json.loads(text)["detail"], "Content-Type: expected application/json")
        self.assertEqual(self.ids(), [])
        status, text = agentlib.curl(self.url + "/v1/reservations", self.ca, self.token, "POST",
                                     extra=["-H", "Content-Type: Application/JSON; charset=utf-8",
                                            "--data-binary", body])
        self.assertEqual(status, 201, text)

    def test_malformed_content_length_gets_one_400_with_a_json_body(self):
        head = b"POST /v1/offers HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + self.token.encode()
        for value in (b"abc", b"-5", b"99999999999999999999999", b"1e3", b"12x", b""):
            out = self.raw(head + b"\r\nContent-Length: " + value + b"\r\n\r\n{}")
            self.assertEqual(out.count(b"HTTP/1."), 1, (value, out))
            self.assertTrue(out.startswith(b"HTTP/1.1 400 "), (value, out))
            headers, _, body = out.partition(b"\r\n\r\n")
            self.assertIn(b"\r\nContent-Type: application/json\r\n", headers, (value, out))
            self.assertIn(b"\r\nContent-Length: %d\r\n" % len(body), headers + b"\r\n", (value, out))
            self.assertIn("Content-Length", json.loads(body)["detail"], (value, out))
        # A reservation asked for with such a length is not taken.
        body = json.dumps({"vcpus": 1, "memory_bytes": GIB, "owner": "cl"}).encode()
        out = self.raw(b"POST /v1/reservations HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
                       self.token.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: x" +
                       b"\r\n\r\n" + body)
        self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out)
        self.assertEqual(self.ids(), [])
        # A number the body limit refuses: one 413 from the agent, before any body is read.
        out = self.raw(head + b"\r\nContent-Length: 99999999999\r\n\r\n{}")
        self.assertEqual(out.count(b"HTTP/1."), 1, out)
        self.assertTrue(out.startswith(b"HTTP/1.1 413 "), out)
        self.assertIn(b"request body too large", out)
        self.assertEqual(self.client.request("GET", "/v1/capacity")[0], 200)

    def test_the_page_has_security_headers(self):
        for path, extra in (("/ui", []), ("/v1/topology", ["-H", "Accept: text/html"])):
            status, text = agentlib.curl(self.url + path, self.ca, extra=extra + ["-D", "/dev/stdout"])
            self.assertEqual(status, 200, text)
            headers = text.split("\r\n\r\n", 1)[0].lower()
            self.assertIn("content-security-policy: default-src 'none';", headers)
            self.assertIn("frame-ancestors 'none'", headers)
            self.assertIn("x-frame-options: deny", headers)
            self.assertIn("x-content-type-options: nosniff", headers)


class FloodTest(AgentCase):
    """1,100 idle and 4 trickling connections, with the agent's open files limited to 1,024 (as a default unit)."""
    wrapper = ("prlimit", "--nofile=1024:1024")

    def trickle(self, sock, stop):
        request = b"GET /v1/capacity HTTP/1.1\r\nHost: localhost\r\n"
        try:
            for i in range(10 * DEADLINE_S):
                if stop.is_set():
                    return
                sock.send(request[i % len(request):i % len(request) + 1])
                time.sleep(0.5)
        except OSError:
            pass

    def timed_get(self, path):
        start = time.monotonic()
        status, text = agentlib.curl(self.url + path, self.ca, self.token, extra=["--interface", "127.0.0.2"])
        return status, text, time.monotonic() - start

    def test_a_flood_from_one_address_does_not_lock_the_api_out(self):
        self.start()
        stop, socks, threads = threading.Event(), [], []
        try:
            for _ in range(4):  # trickling plain-text requests (TLS would fail; the agent only sees bytes)
                s = socket.create_connection(("127.0.0.1", self.agent.port), source_address=("127.0.0.3", 0))
                socks.append(s)
                threads.append(threading.Thread(target=self.trickle, args=(s, stop), daemon=True))
                threads[-1].start()
            opened = time.monotonic()
            for _ in range(1100):  # half-open: TCP connected, no TLS handshake (more than the agent has fds)
                try:
                    socks.append(socket.create_connection(("127.0.0.1", self.agent.port), timeout=5))
                except OSError:
                    pass
            latencies = []
            for i in range(20):
                status, text, took = self.timed_get("/v1/capacity")
                self.assertEqual(status, 200, text)
                latencies.append(took)
            self.assertLess(max(latencies), 2.0, latencies)
            # The inventory is still read (it needs file descriptors): a new VM config shows.
            with open(os.path.join(self.conf_dir, "150.conf"), "w") as f:
                f.write("name: flood\ncores: 1\nmemory: 1024\n")
            deadline = time.time() + 10
            while time.time() < deadline:
                status, text, _ = self.timed_get("/v1/vms")
                if status == 200 and '"vmid": 150' in text:
                    break
                time.sleep(0.3)
            self.assertIn('"vmid": 150', text)
            # The tricklers never complete a request: closed at the deadline, well before the 60 s idle limit.
            time.sleep(max(0, opened + DEADLINE_S + 3 - time.monotonic()))
            for s in socks[:4]:
                s.settimeout(0.5)
                try:
                    self.assertEqual(s.recv(100), b"", "a trickling connection is still open")
                except ConnectionResetError:
                    pass
                except socket.timeout:
                    self.fail("a trickling connection is still open after %d s" % (DEADLINE_S + 3))
        finally:
            stop.set()
            for s in socks:
                s.close()
        self.assertFalse([l for l in self.agent.lines if "Too many open files" in l])
        self.agent.stop()
        self.assertFalse([l for l in self.agent.lines if "Too many open files" in l], "".join(self.agent.lines))


    def test_the_total_cap_keeps_file_descriptors_for_the_agent(self):
        """Many addresses fill the total cap: the agent still reads its files (no EMFILE) and recovers."""
        self.start()
        socks = []
        try:
            for i in range(1100):  # 220 from each of 5 addresses: under the per-address cap, over the fds
                try:
                    socks.append(socket.create_connection(("127.0.0.1", self.agent.port), timeout=2,
                                                          source_address=("127.0.0.%d" % (10 + i % 5), 0)))
                except OSError:
                    pass
            time.sleep(0.5)
            with open(os.path.join(self.conf_dir, "151.conf"), "w") as f:
                f.write("name: capped\ncores: 1\nmemory: 1024\n")
            time.sleep(1.5)  # the inotify re-read happens now, with the connection slots full
        finally:
            for s in socks:
                s.close()
        deadline = time.time() + 10
        status, text = 0, ""
        while time.time() < deadline and '"vmid": 151' not in text:
            status, text = agentlib.curl(self.url + "/v1/vms", self.ca, self.token)
            time.sleep(0.2)
        self.assertIn('"vmid": 151', text)
        self.agent.stop()
        self.assertFalse([l for l in self.agent.lines if "Too many open files" in l], "".join(self.agent.lines))


class StateFileTest(AgentCase):
    def corrupt(self, path):
        with open(path, "r+b") as f:
            f.seek(5)
            f.write(b"#")

    def readyz(self):
        status, text = agentlib.curl(self.url + "/readyz", self.ca)
        return status, json.loads(text) if text.startswith("{") else text

    def test_a_damaged_file_falls_back_to_the_previous_generation(self):
        self.start()
        first = self.reserve(owner="claim-1")["id"]
        second = self.reserve(owner="claim-2")["id"]  # journaled; the restart writes the state file whole, [claim-1]
        # becomes .prev, and the journal's record of claim-2 (the epoch of .prev) stays until the next change
        self.agent.stop(signal.SIGKILL)
        self.assertFalse(os.path.exists(self.state + ".prev"))
        self.start()
        self.agent.stop()
        self.assertTrue(os.path.exists(self.state + ".prev"))
        self.corrupt(self.state)
        self.start()
        self.assertEqual(self.ids(), [first, second])  # the previous generation, and the journal's records of it
        self.assertEqual(len(glob.glob(self.state + ".corrupt-*")), 1)
        self.assertEqual(self.readyz()[0], 200)
        self.assertTrue(any("previous generation" in l for l in self.agent.lines), "".join(self.agent.lines))
        # The held CPUs stay held, and the next save does not lose the good previous generation.
        self.reserve(owner="claim-3")
        with open(self.state + ".prev") as f:
            self.assertIn(first, f.read())

    def test_no_intact_generation_takes_no_reservations(self):
        self.start()
        rid = self.reserve()["id"]
        self.agent.stop()
        self.corrupt(self.state)
        self.start()
        status, body = self.readyz()
        self.assertEqual(status, 503, body)
        self.assertIn("no intact previous generation", body["reservations"])
        for method, path, body in (("GET", "/v1/reservations", None), ("DELETE", "/v1/reservations/" + rid, None),
                                   ("POST", "/v1/reservations", {"vcpus": 1, "memory_bytes": GIB, "owner": "x"}),
                                   ("POST", "/v1/offers", {"shapes": [{"vcpus": 1, "memory_bytes": GIB}]})):
            status, reply = self.client.request(method, path, body)
            self.assertEqual(status, 503, (path, reply))
            self.assertEqual(reply["error"], "reservations unavailable")
        self.assertEqual(self.client.request("GET", "/healthz")[0], 200)  # alive, only not ready
        self.assertTrue(os.path.exists(self.state), "the damaged file is kept for the operator")
        # The operator removes it: the agent starts empty on its next retry, without a restart.
        os.unlink(self.state)
        deadline = time.time() + 5
        while time.time() < deadline and self.readyz()[0] != 200:
            time.sleep(0.2)
        self.assertEqual(self.readyz()[0], 200)
        self.assertEqual(self.ids(), [])

    def test_an_unreadable_file_takes_no_reservations(self):
        self.start()
        self.reserve()
        self.agent.stop()
        os.rename(self.state, self.state + ".keep")
        os.mkdir(self.state)  # read() fails with EISDIR, as EACCES or EIO would
        self.start()
        status, body = self.readyz()
        self.assertEqual(status, 503, body)
        self.assertIn("cannot read", body["reservations"])
        self.assertEqual(glob.glob(self.state + ".corrupt-*"), [])
        self.assertTrue(any("reservations unavailable" in l for l in self.agent.lines), "".join(self.agent.lines))
        os.rmdir(self.state)
        os.rename(self.state + ".keep", self.state)
        deadline = time.time() + 5
        while time.time() < deadline and self.readyz()[0] != 200:
            time.sleep(0.2)
        self.assertEqual(len(self.ids()), 1)

    def test_temporary_files_of_interrupted_saves_are_removed_at_start(self):
        left = [self.state + ".tmp.a1B2c3", self.state + ".tmp.zzzzzz", self.state + ".prev.tmp"]
        for path in left:
            with open(path, "w") as f:
                f.write("{")
        other = os.path.join(self.state_dir, "unrelated.tmp.123456")
        open(other, "w").close()
        self.start()
        self.assertEqual([p for p in left if os.path.exists(p)], [])
        self.assertTrue(os.path.exists(other))

    def test_a_release_whose_save_failed_is_saved_later(self):
        self.start()
        rid = self.reserve()["id"]
        away = self.state_dir + ".away"
        os.rename(self.state_dir, away)
        open(self.state_dir, "w").close()  # every save now fails (ENOTDIR)
        status, body = self.client.request("DELETE", "/v1/reservations/" + rid)
        self.assertEqual(status, 500, body)
        status, body = self.client.request("POST", "/v1/reservations/r-0123456789abcdef/bind", {"vmid": 150})
        os.unlink(self.state_dir)
        os.rename(away, self.state_dir)
        time.sleep(1.5)  # the tick saves again
        self.agent.stop(signal.SIGKILL)
        self.start()
        self.assertEqual(self.ids(), [])


    def test_a_grant_or_a_bind_whose_save_failed_is_taken_back(self):
        self.start()
        held = self.reserve()
        rid = held["id"]
        with open(os.path.join(self.conf_dir, "150.conf"), "w") as f:
            f.write("name: bindme\ncores: 2\nmemory: 1024\n")
        away = self.state_dir + ".away"
        os.rename(self.state_dir, away)
        open(self.state_dir, "w").close()  # every save now fails (ENOTDIR)
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % rid, {"vmid": 150})
        self.assertEqual(status, 500, body)
        self.assertIn("nothing changed", body["detail"])
        status, body = self.client.request("GET", "/v1/reservations/" + rid)
        self.assertEqual((status, body), (200, held))  # still held, with its expiry
        status, body = self.client.request("POST", "/v1/reservations", {"vcpus": 2, "memory_bytes": GIB,
                                                                         "ttl_seconds": 600, "owner": "claim-b"})
        self.assertEqual(status, 500, body)
        self.assertIn("nothing was reserved", body["detail"])
        self.assertEqual(self.ids(), [rid])
        os.unlink(self.state_dir)
        os.rename(away, self.state_dir)
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % rid, {"vmid": 150})
        self.assertEqual(status, 200, body)
        self.agent.stop(signal.SIGKILL)
        self.start()
        status, body = self.client.request("GET", "/v1/reservations/" + rid)
        self.assertEqual(status, 200, body)
        self.assertEqual((body["state"], body["vmid"], body["expires_at"]), ("bound", 150, None))
        self.assertEqual(self.ids(), [rid])


if __name__ == "__main__":
    unittest.main(verbosity=2)
