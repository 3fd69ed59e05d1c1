# Stand-in for a Proxmox `kvm` process: one `CPU n/KVM` thread per vCPU, pid file, tiny QMP socket.
# SPDX-License-Identifier: Apache-2.0
# Run as `<state>/bin/kvm -S standin_kvm.py -id <vmid> ... -pidfile P -smp N ...` where
# <state>/bin/kvm is a symlink to the Python interpreter, so argv[0] has basename `kvm`.
import ctypes
import json
import os
import signal
import socket
import sys
import threading

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1
libc = ctypes.CDLL(None, use_errno=True)


def set_thread_name(name):
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def arg(name, default=None):
    a = sys.argv
    for i in range(len(a) - 1):
        if a[i] == name:
            return a[i + 1]
    return default


def main():
    ppid = os.getppid()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != ppid:
        sys.exit(1)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    smp = arg("-smp", "1").split(",")[0]
    n = int(smp)
    pidfile = arg("-pidfile")
    chardev = arg("-chardev", "")
    qmp = None
    for part in chardev.split(","):
        if part.startswith("path="):
            qmp = part[5:]
    threading.stack_size(64 * 1024)
    tids = {}
    ready = threading.Barrier(n + 1)
    stop = threading.Event()

    def vcpu(i):
        set_thread_name("CPU %d/KVM" % i)
        tids[i] = threading.get_native_id()
        ready.wait()
        stop.wait()
    for i in range(n):
        threading.Thread(target=vcpu, args=(i,), daemon=True).start()
    ready.wait()
    srv = None
    if qmp:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.unlink(qmp)
        except FileNotFoundError:
            pass
        srv.bind(qmp)
        srv.listen(4)
    if pidfile:
        tmp = pidfile + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(tmp, pidfile)
    if srv is None:
        stop.wait()
        return
    while True:
        conn, _ = srv.accept()
        serve_qmp(conn, n, tids)


def serve_qmp(conn, n, tids):
    f = conn.makefile("rwb")
    try:
        greet = {"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 9},
                                     "package": "pve-qemu-kvm_9.2.0-5"}, "capabilities": []}}
        f.write(json.dumps(greet).encode() + b"\r\n")
        f.flush()
        for line in f:
            try:
                cmd = json.loads(line)
            except ValueError:
                continue
            ex = cmd.get("execute")
            if ex == "qmp_capabilities":
                res = {}
            elif ex == "query-cpus-fast":
                res = [{"cpu-index": i, "qom-path": "/machine/unattached/device[%d]" % i,
                        "thread-id": tids[i], "target": "x86_64",
                        "props": {"core-id": i, "thread-id": 0, "socket-id": 0}} for i in range(n)]
            elif ex == "query-status":
                res = {"status": "running", "singlestep": False, "running": True}
            elif ex == "quit":
                f.write(b'{"return": {}}\r\n')
                f.flush()
                os._exit(0)
            else:
                f.write(json.dumps({"error": {"class": "CommandNotFound",
                                              "desc": "The command %s has not been found" % ex}}
                                   ).encode() + b"\r\n")
                f.flush()
                continue
            out = {"return": res}
            if "id" in cmd:
                out["id"] = cmd["id"]
            f.write(json.dumps(out).encode() + b"\r\n")
            f.flush()
    except OSError:
        pass
    finally:
        conn.close()


if __name__ == "__main__":
    main()
