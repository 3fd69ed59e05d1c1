#!/usr/bin/env python3
"""bench/agent_api durable part: reservations per second (create + bind + release over HTTPS keep-alive, each
saved to the state file before the reply) against the disk's raw rate for the same pattern in the agent's state
directory (three writes of a temp file the state file's size at each step, each fsynced and renamed into place),
and against that pattern with the directory fsync after each rename (what makes a rename survive a crash).
Half-second slices of the three alternate so that all see the same load on a shared disk.
Prints "<ledger/s> <raw/s> <raw with directory fsync/s> <bytes>"."""
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


def raw_cycle(directory, blobs, dir_fd=None):
    """The disk's pattern for one cycle: per step, write a temp file, fsync it, rename it over the target (then
    fsync the directory when dir_fd is given)."""
    target, tmp = os.path.join(directory, "raw.bench"), os.path.join(directory, "raw.bench.tmp")
    for blob in blobs:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.write(fd, blob)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, target)
        if dir_fd is not None:
            os.fsync(dir_fd)


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
    dir_fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    patterns = (("ledger", lambda i: reservation_cycle(client, i, vmid)),
                ("raw", lambda i: raw_cycle(state_dir, blobs)),
                ("raw_dir", lambda i: raw_cycle(state_dir, blobs, dir_fd)))
    total = {name: [0, 0.0] for name, _ in patterns}
    for _ in range(max(1, int(seconds / 0.5))):
        for name, step in patterns:
            count, elapsed = timed(0.5, step)
            total[name][0] += count
            total[name][1] += elapsed
    os.close(dir_fd)
    for name in ("raw.bench", "raw.bench.tmp"):
        if os.path.exists(os.path.join(state_dir, name)):
            os.unlink(os.path.join(state_dir, name))
    rate = {name: count / elapsed for name, (count, elapsed) in total.items()}
    print("%.1f %.1f %.1f %d" % (rate["ledger"], rate["raw"], rate["raw_dir"], max(sizes)))


if __name__ == "__main__":
    main()
