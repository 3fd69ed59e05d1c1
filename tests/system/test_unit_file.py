"""System test: systemd/pvescale-agent.service passes `systemd-analyze verify` and scores <= 4.0 in `security --offline=yes`."""
# SPDX-License-Identifier: Apache-2.0
#
# PID 1 is not systemd on CI machines, so the unit is checked offline. `verify` needs the ExecStart binary to
# exist: here it checks a copy of the unit whose ExecStart points at the agent of this build (the only line
# changed); test_package.py verifies the installed unit as it is, with /usr/sbin/pvescale-agent in place.
import os
import re
import subprocess
import sys
import tempfile

from checks import check, summary

SOURCE = os.environ.get("PVESCALE_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
BUILD = os.environ.get("PVESCALE_BUILD_DIR") or os.path.join(SOURCE, "build")
UNIT = os.path.join(SOURCE, "systemd", "pvescale-agent.service")
MAX_EXPOSURE = 4.0


def security(unit_path):
    """The overall exposure `systemd-analyze security --offline=yes` gives the unit, and its full output."""
    p = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", unit_path],
                       capture_output=True, text=True)
    out = p.stdout + p.stderr
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out)
    return (float(m.group(1)) if m else None), out


def verify_copy(tmp):
    agent = os.path.abspath(os.path.join(BUILD, "agent", "pvescale-agent"))
    text = open(UNIT).read()
    check(text.count("ExecStart=/usr/sbin/pvescale-agent serve\n") == 1, "unit starts /usr/sbin/pvescale-agent serve")
    path = os.path.join(tmp, "pvescale-agent.service")
    with open(path, "w") as f:
        f.write(text.replace("ExecStart=/usr/sbin/pvescale-agent", "ExecStart=" + agent))
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", path], capture_output=True, text=True)
    out = (p.stdout + p.stderr).strip()
    print(out)
    check(p.returncode == 0 and not out, "systemd-analyze verify is clean (rc %d)" % p.returncode)


def main():
    with tempfile.TemporaryDirectory(prefix="pvescale-unit-") as tmp:
        verify_copy(tmp)
    exposure, out = security(UNIT)
    print(out)
    print("SECURITY pvescale-agent.service exposure=%s (limit %.1f)" % (exposure, MAX_EXPOSURE))
    check(exposure is not None and exposure <= MAX_EXPOSURE,
          "systemd-analyze security --offline=yes: exposure %s <= %.1f" % (exposure, MAX_EXPOSURE))
    return summary()


if __name__ == "__main__":
    sys.exit(main())
