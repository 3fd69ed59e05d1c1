# Small helpers shared by the simulator modules: time, atomic files, quantities, logging.
# SPDX-License-Identifier: Apache-2.0
import datetime
import json
import os
import re
import sys
import tempfile
import threading
import time
from decimal import Decimal, InvalidOperation

_log_lock = threading.Lock()
LOG_LEVEL = int(os.environ.get("PVESCALE_SIM_VERBOSE", "1"))
T0 = time.monotonic()


def log(msg, level=1):
    if level > LOG_LEVEL:
        return
    with _log_lock:
        sys.stderr.write("sim[%7.3f] %s\n" % (time.monotonic() - T0, msg))
        sys.stderr.flush()


def now():
    return time.time()


def rfc3339(ts=None):
    if ts is None:
        ts = time.time()
    d = datetime.datetime.fromtimestamp(int(ts), datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s):
    try:
        s = s.strip().replace("Z", "+00:00")
        return datetime.datetime.fromisoformat(s).timestamp()
    except (ValueError, AttributeError):
        return None


def atomic_write(path, data, mode=0o644):
    """Write temp file, fsync, rename: readers never see half a file."""
    if isinstance(data, str):
        data = data.encode()
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        os.write(fd, data)
        os.fsync(fd)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def write_json(path, obj):
    atomic_write(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def json_bytes(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_QRE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$")


def parse_quantity(q):
    """Kubernetes resource.Quantity -> Decimal (cpu in cores, memory in bytes)."""
    if isinstance(q, (int, float)):
        return Decimal(str(q))
    if not isinstance(q, str):
        raise ValueError("quantity must be a string or number")
    m = _QRE.match(q.strip())
    if not m:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    try:
        base = Decimal(m.group(1))
    except InvalidOperation:
        raise ValueError("invalid quantity")
    if m.group(3) is not None:
        return base * (Decimal(10) ** int(m.group(3)))
    return base * Decimal(_SUFFIX[m.group(2) or ""])


def fmt_cpu(dec):
    """Decimal cores -> canonical quantity string."""
    milli = int((dec * 1000).to_integral_value())
    if milli % 1000 == 0:
        return str(milli // 1000)
    return "%dm" % milli


def cpulist_parse(s, sep=","):
    """"0-3,8" (or with another separator, "0-3;8" as in numaN) -> [0, 1, 2, 3, 8]."""
    out = []
    for part in (s or "").split(sep):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def cpulist_format(cpus):
    cpus = sorted(set(cpus))
    parts = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else "%d-%d" % (cpus[i], cpus[j]))
        i = j + 1
    return ",".join(parts)
