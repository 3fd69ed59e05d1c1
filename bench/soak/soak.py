"""bench/soak's driver: a steady mix of agent API requests at a fixed rate over keep-alive HTTPS, with the agent's
RSS and open fds sampled every 10 s. Prints the samples as a table and a RESULT line."""
# SPDX-License-Identifier: Apache-2.0
import argparse
import http.client
import json
import os
import ssl
import time


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class Client:
    def __init__(self, port, token, cafile):
        self.port, self.token = port, token
        self.ctx = ssl.create_default_context(cafile=cafile)
        self.conn = None
        self.errors = 0

    def call(self, method, path, body=None):
        for _ in range(2):  # the agent may close an idle keep-alive connection: open a new one once
            if self.conn is None:
                self.conn = http.client.HTTPSConnection("localhost", self.port, context=self.ctx, timeout=10)
            headers = {"Authorization": "Bearer " + self.token}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                text = r.read()
                return r.status, (json.loads(text) if text and text[:1] in b"{[" else None)
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
        self.errors += 1
        return 0, None


def one_cycle(c, k, vmid):
    """Ten requests: six reads, an offer, and a reservation created, bound and released."""
    for path in ("/v1/topology", "/v1/capacity", "/v1/vms", "/v1/reservations", "/v1/capacity", "/v1/vms/%d" % vmid):
        yield c.call("GET", path)[0] == 200
    yield c.call("POST", "/v1/offers", {"shapes": [{"vcpus": 4, "memory_bytes": 4 << 30}]})[0] == 200
    st, res = c.call("POST", "/v1/reservations", {"vcpus": 2, "memory_bytes": 2 << 30, "ttl_seconds": 60,
                                                  "owner": "soak/%d" % k})
    yield st in (200, 201)
    rid = (res or {}).get("id")
    yield rid is not None and c.call("POST", "/v1/reservations/%s/bind" % rid, {"vmid": vmid})[0] == 200
    yield rid is not None and c.call("DELETE", "/v1/reservations/%s" % rid)[0] in (200, 204)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--cafile", required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--rate", type=float, default=100)
    a = ap.parse_args()
    c = Client(a.port, a.token, a.cafile)
    start = time.monotonic()
    samples = [(0, rss_kib(a.pid), fds(a.pid), 0)]
    sent = bad = k = 0
    next_sample = start + 10
    while time.monotonic() - start < a.seconds:
        for ok in one_cycle(c, k, 200 + k % 4):
            sent += 1
            bad += not ok
            due = start + sent / a.rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        k += 1
        if time.monotonic() >= next_sample:
            samples.append((round(time.monotonic() - start), rss_kib(a.pid), fds(a.pid), sent))
            next_sample += 10
    elapsed = time.monotonic() - start
    samples.append((round(elapsed), rss_kib(a.pid), fds(a.pid), sent))
    print("%8s %10s %6s %10s" % ("t_s", "rss_kib", "fds", "requests"))
    for t, rss, n, s in samples:
        print("%8d %10d %6d %10d" % (t, rss, n, s))
    # Growth after the first minute (the allocator's and TLS session caches' warm-up), and since the start.
    warm = next((x for x in samples if x[0] >= 60), samples[0])
    print("RESULT name=soak seconds=%d requests=%d rate=%.1f failed=%d transport_errors=%d rss_start_kib=%d "
          "rss_end_kib=%d rss_growth_kib=%d rss_growth_after_60s_kib=%d fds_start=%d fds_end=%d fds_max=%d" % (
              elapsed, sent, sent / elapsed, bad, c.errors, samples[0][1], samples[-1][1],
              samples[-1][1] - samples[0][1], samples[-1][1] - warm[1], samples[0][2], samples[-1][2],
              max(x[2] for x in samples)))


if __name__ == "__main__":
    main()
