#!/usr/bin/env python3
# Benchmark: simulator start-up time (process start -> endpoints.json) with 10 hosts, cold and warm cache.
# SPDX-License-Identifier: Apache-2.0
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_scenario import TEN_HOSTS  # noqa: E402


def start_once(cache, runs_dir):
    state = tempfile.mkdtemp(prefix="state-", dir=runs_dir)
    env = dict(os.environ, PVESCALE_SIM_CACHE=cache)
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "run"), "--state-dir", state, "--hosts", TEN_HOSTS,
                          "--kube", "none"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ep = os.path.join(state, "endpoints.json")
    while not os.path.exists(ep):
        if p.poll() is not None or time.monotonic() - t0 > 60:
            raise SystemExit("simulator failed to start")
        time.sleep(0.005)
    dt = time.monotonic() - t0
    p.send_signal(signal.SIGTERM)
    p.wait(30)
    return dt


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    work = tempfile.mkdtemp(prefix="sim-bench-")
    try:
        cold = []
        for i in range(min(n, 3)):
            cache = os.path.join(work, "cache-cold-%d" % i)
            cold.append(start_once(cache, work))
        warm_cache = os.path.join(work, "cache-warm")
        start_once(warm_cache, work)
        warm = [start_once(warm_cache, work) for _ in range(n)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%-28s %8s %8s %8s" % ("case (10 hosts, 8 tarballs)", "min s", "median s", "max s"))
    for name, xs in (("cold topology cache", cold), ("warm topology cache", warm)):
        xs = sorted(xs)
        print("%-28s %8.3f %8.3f %8.3f" % (name, xs[0], xs[len(xs) // 2], xs[-1]))
    print("RESULT name=sim_startup hosts=10 cold_median_s=%.3f warm_median_s=%.3f warm_max_s=%.3f"
          % (sorted(cold)[len(cold) // 2], sorted(warm)[len(warm) // 2], max(warm)))


if __name__ == "__main__":
    main()
