#!/usr/bin/env python3
"""bench/agent_api durable part: reservations per second (create + bind + release over HTTPS keep-alive, each
saved to the state file before the reply) against the disk's raw rate for the same pattern in the agent's state
directory (three writes of a temp file the state file's size at each step, each fsynced and renamed into place).
Rounds of the two alternate so that both see the same load. Prints "<ledger/s> <raw/s> <bytes>"."""
# SPDX-License-Identifier: Apache-2.0
import http.client
import json
import os
import ssl
import sys
import time

GIB = 1 << 30


class Client:
    """One keep-alive HTTPS connection to the agent."""

    def __init__(self, port, ca, token):
        ctx = ssl.create_default_context(cafile=ca)
        self.conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=30)
        self.headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}

    def call(self, method, path, body, want):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=self.headers)
        resp = self.conn.getresponse()
        text = resp.read()
        if resp.status != want:
            sys.exit("bench/agent_api: %s %s: %d %s" % (method, path, resp.status, text.decode()))
        return json.loads(text)


def reservation_cycle(client, n, vmid):
    """Create, bind and release one reservation: three saves of the ledger."""
    body = {"vcpus": 1, "memory_bytes": GIB, "ttl_seconds": 600, "owner": "bench-%d" % n}
    rid = client.call("POST", "/v1/reservations", body, 201)["id"]
    client.call("POST", "/v1/reservations/%s/bind" % rid, {"vmid": vmid}, 200)
    client.call("DELETE", "/v1/reservations/" + rid, None, 200)


def state_sizes(client, state, vmid):
    """The state file's size after each step of one cycle (the sizes the raw pattern writes)."""
    body = {"vcpus": 1, "memory_bytes": GIB, "ttl_seconds": 600, "owner": "bench-sizes"}
    rid = client.call("POST", "/v1/reservations", body, 201)["id"]
    sizes = [os.path.getsize(state)]
    client.call("POST", "/v1/reservations/%s/bind" % rid, {"vmid": vmid}, 200)
    sizes.append(os.path.getsize(state))
    client.call("DELETE", "/v1/reservations/" + rid, None, 200)
    sizes.append(os.path.getsize(state))
    return sizes


def raw_cycle(directory, blobs):
    """The disk's pattern for one cycle: per step, write a temp file, fsync it, rename it over the target."""
    target, tmp = os.path.join(directory, "raw.bench"), os.path.join(directory, "raw.bench.tmp")
    for blob in blobs:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.write(fd, blob)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, target)


def timed(seconds, step):
    """Run step(i) until seconds have passed; return (count, elapsed)."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(count)
        count += 1
    return count, time.perf_counter() - start


def main():
    port, ca, token, state_dir, seconds, vmid = sys.argv[1:7]
    seconds, vmid = float(seconds), int(vmid)
    client = Client(int(port), ca, token)
    sizes = state_sizes(client, os.path.join(state_dir, "reservations.json"), vmid)
    blobs = [b"x" * size for size in sizes]
    rounds, total = 4, {"ledger": [0, 0.0], "raw": [0, 0.0]}
    for _ in range(rounds):
        for name, step in (("ledger", lambda i: reservation_cycle(client, i, vmid)),
                           ("raw", lambda i: raw_cycle(state_dir, blobs))):
            count, elapsed = timed(seconds / rounds, step)
            total[name][0] += count
            total[name][1] += elapsed
    for name in ("raw.bench", "raw.bench.tmp"):
        if os.path.exists(os.path.join(state_dir, name)):
            os.unlink(os.path.join(state_dir, name))
    rate = {name: count / elapsed for name, (count, elapsed) in total.items()}
    print("%.1f %.1f %d" % (rate["ledger"], rate["raw"], max(sizes)))


if __name__ == "__main__":
    main()
