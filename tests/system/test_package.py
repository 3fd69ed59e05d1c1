"""System test: build the .deb, lintian it, install it with apt-get, upgrade it, remove and purge it, on this machine."""
# SPDX-License-Identifier: Apache-2.0
#
# Needs root (it installs pvescale-agent for real) and Debian's dpkg-dev, debhelper, lintian, openssl, curl.
# Steps: packaging/build-deb (DEB_BUILD_OPTIONS=nocheck: the unit suite already runs in this build) ->
# lintian (no errors; every tag it reports is explained in docs/packaging.md) -> `apt-get install ./deb`
# -> files, modes, --version, generated token and certificate, the installed agent serving HTTPS with
# them, `systemd-analyze verify` of the installed unit -> upgrade to a repacked higher version with an
# edited conffile, which survives with the token, certificate and reservations -> remove (binary gone,
# config and state kept) -> purge (state and generated secrets gone). PID 1 is not systemd here, so
# starting and stopping the service is checked in the maintainer scripts, not by systemctl.
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import agentlib  # noqa: E402
from checks import check, failures, summary  # noqa: E402

SOURCE = os.path.abspath(os.environ.get("PVESCALE_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(os.environ.get("PVESCALE_BUILD_DIR") or os.path.join(SOURCE, "build"))
PKG = "pvescale-agent"
CONF, TOKEN, CERT, KEY = ("/etc/pvescale/" + n for n in ("agent.conf", "agent.token", "agent.crt", "agent.key"))
STATE = "/var/lib/pvescale-agent"
UNIT = "/lib/systemd/system/pvescale-agent.service"
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")


def sh(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def installed_version():
    p = sh(["dpkg-query", "-W", "-f=${Status} ${Version}", PKG])
    return p.stdout.split()[-1] if p.returncode == 0 and "install ok installed" in p.stdout else None


def purge_quietly():
    sh(["apt-get", "purge", "-y", PKG], env=APT_ENV, stdin=subprocess.DEVNULL)


def mode_owner(path):
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def changelog_version():
    first = open(os.path.join(SOURCE, "packaging", "debian", "changelog")).readline()
    return re.match(r"\S+ \(([^)]+)\)", first).group(1)


# ---- build and lintian ----

def build(out):
    env = dict(os.environ, DEB_BUILD_OPTIONS="nocheck")
    p = sh([os.path.join(SOURCE, "packaging", "build-deb"), out], env=env)
    print(p.stdout[-3000:] + p.stderr[-3000:])
    check(p.returncode == 0, "packaging/build-deb (dpkg-buildpackage -us -uc -b) succeeded")
    deb = p.stdout.strip().splitlines()[-1] if p.returncode == 0 else ""
    check(os.path.basename(deb) == "%s_%s_%s.deb" % (PKG, changelog_version(), arch()), "built " + deb)
    return deb


def arch():
    return sh(["dpkg", "--print-architecture"]).stdout.strip()


def lintian(out):
    changes = [f for f in os.listdir(out) if f.endswith(".changes")]
    p = sh(["lintian", "--info", "--display-info", os.path.join(out, changes[0])])
    report = p.stdout + p.stderr
    print(report)
    tags = set(re.findall(r"^([EWIXP]): \S+: (\S+)", report, re.M))
    check(p.returncode == 0 and not any(sev == "E" for sev, _ in tags), "lintian: no errors")
    documented = open(os.path.join(SOURCE, "docs", "packaging.md")).read()
    for sev, tag in sorted(tags):
        check(tag in documented, "lintian %s: %s is explained in docs/packaging.md" % (sev, tag))


# ---- install ----

def install(deb, what):
    p = sh(["apt-get", "install", "-y", "--allow-downgrades", deb], env=APT_ENV, stdin=subprocess.DEVNULL)
    print(p.stdout[-2000:] + p.stderr[-2000:])
    check(p.returncode == 0, "apt-get install %s (%s)" % (os.path.basename(deb), what))
    return p.stdout


def check_files():
    for path in ("/usr/sbin/pvescale-agent", UNIT, CONF, "/usr/share/man/man8/pvescale-agent.8.gz",
                 "/usr/share/doc/pvescale-agent/copyright", "/usr/share/doc/pvescale-agent/changelog.gz"):
        check(os.path.exists(path), "installed " + path)
    for doc in ("README.md", "agent.md", "install.md", "packaging.md"):  # dh_compress gzips those over 4 kB
        path = "/usr/share/doc/pvescale-agent/" + doc
        check(os.path.exists(path) or os.path.exists(path + ".gz"), "installed %s[.gz]" % path)
    check(mode_owner("/usr/sbin/pvescale-agent") == (0o755, 0, 0), "/usr/sbin/pvescale-agent is 0755 root")
    conffiles = sh(["dpkg-query", "-W", "-f=${Conffiles}", PKG]).stdout
    check(CONF in conffiles, "%s is a conffile" % CONF)
    v = sh(["/usr/sbin/pvescale-agent", "--version"])
    upstream = changelog_version().split("-")[0].split("+")[0]
    check(v.returncode == 0 and v.stdout.strip() == "pvescale-agent " + upstream,
          "pvescale-agent --version = %r" % v.stdout.strip())
    check(os.path.islink("/etc/systemd/system/multi-user.target.wants/pvescale-agent.service"),
          "unit enabled (multi-user.target.wants symlink)")
    prerm = open("/var/lib/dpkg/info/%s.prerm" % PKG).read()
    check(re.search(r'"\$1" = remove .*\n\s*deb-systemd-invoke stop .pvescale-agent.service', prerm) is not None,
          "prerm stops the service on remove")
    postinst = open("/var/lib/dpkg/info/%s.postinst" % PKG).read()
    check("deb-systemd-invoke $_dh_action 'pvescale-agent.service'" in postinst,
          "postinst starts the service on install and restarts it on upgrade")


def check_secrets():
    check(mode_owner(TOKEN) == (0o600, 0, 0), "token %s is 0600 root" % TOKEN)
    check(re.fullmatch(r"[0-9a-f]{64}\n", open(TOKEN).read()) is not None, "token is 256 random bits, hex")
    check(mode_owner(KEY) == (0o600, 0, 0), "key %s is 0600 root" % KEY)
    check(mode_owner(CERT)[0] == 0o644, "certificate %s is 0644" % CERT)
    check(mode_owner(STATE) == (0o700, 0, 0), "state dir %s is 0700 root" % STATE)
    text = sh(["openssl", "x509", "-in", CERT, "-noout", "-text"]).stdout
    short = socket.gethostname().split(".")[0]
    check("DNS:%s" % short in text and "IP Address:127.0.0.1" in text and "DNS:localhost" in text,
          "certificate names this host (%s), localhost and 127.0.0.1" % short)
    check(sh(["openssl", "x509", "-in", CERT, "-noout", "-checkend", str(365 * 86400)]).returncode == 0,
          "certificate valid for more than a year")
    pub_cert = sh(["openssl", "x509", "-in", CERT, "-noout", "-pubkey"]).stdout
    pub_key = sh(["openssl", "pkey", "-in", KEY, "-pubout"]).stdout
    check(pub_cert == pub_key and pub_cert, "key matches the certificate")


def serve_with_generated_secrets():
    """The installed agent, with the installed config, token, certificate and state dir, on a free port."""
    with tempfile.TemporaryDirectory(prefix="pvescale-pkg-") as tmp:
        proc = subprocess.Popen(["/usr/sbin/pvescale-agent", "serve", "--port", "0", "--bind-address", "127.0.0.1",
                                 "--pve-config-dir", tmp, "--pve-run-dir", tmp],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        port = None
        for line in proc.stdout:
            m = re.search(r"listening on port (\d+)", line)
            if m:
                port = int(m.group(1))
                break
        check(port is not None, "installed agent starts with the generated certificate and token")
        token = open(TOKEN).read().strip()
        url = "https://localhost:%d" % (port or 1)
        status, body = agentlib.curl(url + "/v1/capacity", ca=CERT, token=token)
        check(status == 200 and "cpus_free" in body, "HTTPS verified against the generated certificate: 200")
        status, _ = agentlib.curl(url + "/v1/reservations", ca=CERT, token=token, method="POST",
                                  body=json.dumps({"vcpus": 1, "memory_bytes": 64 << 20, "owner": "pkg-test"}))
        check(status == 201, "a reservation is persisted in " + STATE)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    check(os.path.exists(os.path.join(STATE, "reservations.json")), "reservations.json written")


def verify_installed_unit():
    p = sh(["systemd-analyze", "verify", UNIT])
    out = (p.stdout + p.stderr).strip()
    print(out)
    check(p.returncode == 0 and not out, "systemd-analyze verify %s is clean (man page found too)" % UNIT)
    p = sh(["systemd-analyze", "security", "--offline=yes", "--no-pager", UNIT])
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", p.stdout + p.stderr)
    print("SECURITY installed unit exposure=%s" % (m.group(1) if m else "?"))
    check(m is not None and float(m.group(1)) <= 4.0, "installed unit exposure <= 4.0")


# ---- upgrade, remove, purge ----

def repack_upgrade(deb, tmp):
    """The same package as a higher version (dpkg-deb -R, bump Version, dpkg-deb -b): a real upgrade path."""
    root = os.path.join(tmp, "upgrade")
    sh(["dpkg-deb", "-R", deb, root]).check_returncode()
    control = os.path.join(root, "DEBIAN", "control")
    text = open(control).read()
    version = re.search(r"^Version: (\S+)$", text, re.M).group(1) + "+upgradetest1"
    with open(control, "w") as f:
        f.write(re.sub(r"^Version: \S+$", "Version: " + version, text, flags=re.M))
    out = os.path.join(tmp, "%s_%s_%s.deb" % (PKG, version, arch()))
    sh(["dpkg-deb", "--root-owner-group", "-b", root, out]).check_returncode()
    return out, version


def upgrade(deb, tmp):
    with open(CONF, "a") as f:
        # An edit that changes no value: agents other tests start meanwhile read this file too.
        f.write("rescan_interval: 10  # edited by the package test\n")
    before = {p: sha(p) for p in (CONF, TOKEN, CERT, KEY, os.path.join(STATE, "reservations.json"))}
    new_deb, version = repack_upgrade(deb, tmp)
    out = install(new_deb, "upgrade")
    check(installed_version() == version, "upgraded to " + version)
    check("created the" not in out, "postinst created nothing on upgrade")
    for path, digest in before.items():
        check(os.path.exists(path) and sha(path) == digest, "upgrade kept %s unchanged" % path)
    check(not os.path.exists(CONF + ".dpkg-dist") and not os.path.exists(CONF + ".dpkg-new"),
          "no conffile prompt or .dpkg-dist copy")
    check(mode_owner(TOKEN) == (0o600, 0, 0), "token still 0600 root")


def rotate_certificate():
    """install.md's recipe: delete the pair, dpkg-reconfigure makes a new one and keeps the token."""
    token, cert = sha(TOKEN), sha(CERT)
    os.unlink(CERT)
    os.unlink(KEY)
    p = sh(["dpkg-reconfigure", "-fnoninteractive", PKG], env=APT_ENV, stdin=subprocess.DEVNULL)
    print(p.stdout + p.stderr)
    check(p.returncode == 0 and os.path.exists(CERT) and os.path.exists(KEY) and sha(CERT) != cert,
          "dpkg-reconfigure made a new certificate and key")
    check(sha(TOKEN) == token, "dpkg-reconfigure kept the token")
    check(mode_owner(KEY) == (0o600, 0, 0), "new key is 0600 root")


def remove():
    p = sh(["apt-get", "remove", "-y", PKG], env=APT_ENV, stdin=subprocess.DEVNULL)
    check(p.returncode == 0, "apt-get remove")
    check(not os.path.exists("/usr/sbin/pvescale-agent"), "remove: binary gone")
    for path in (CONF, TOKEN, CERT, KEY, os.path.join(STATE, "reservations.json")):
        check(os.path.exists(path), "remove keeps " + path)


def purge():
    p = sh(["apt-get", "purge", "-y", PKG], env=APT_ENV, stdin=subprocess.DEVNULL)
    check(p.returncode == 0, "apt-get purge")
    check(installed_version() is None and "pvescale-agent" not in sh(["dpkg", "-l", PKG]).stdout.replace(
        "no packages found", ""), "purge: package unknown to dpkg")
    for path in (CONF, TOKEN, CERT, KEY, STATE, "/etc/pvescale",
                 "/etc/systemd/system/multi-user.target.wants/pvescale-agent.service"):
        check(not os.path.lexists(path), "purge removes " + path)


def main():
    if os.geteuid() != 0:
        print("SKIP: installing a package needs root")
        return 77
    for tool in ("dpkg-buildpackage", "dh", "lintian", "apt-get", "openssl", "curl", "systemd-analyze"):
        check(shutil.which(tool) is not None, tool + " installed")
    if failures:
        return 1
    out = os.path.join(BUILD, "deb")
    left = installed_version()
    if left and left.split("+upgradetest")[0] != changelog_version():
        print("SKIP: pvescale-agent %s is installed on this machine and this test would purge it" % left)
        return 77
    if left:  # left behind by an interrupted run of this test
        purge_quietly()
    deb = build(out)
    if not deb:
        return 1
    lintian(out)
    try:
        with tempfile.TemporaryDirectory(prefix="pvescale-deb-") as tmp:
            out_text = install(deb, "first install")
            check("created the API token" in out_text and "created the self-signed TLS certificate" in out_text,
                  "postinst created the token and the certificate")
            check_files()
            check_secrets()
            serve_with_generated_secrets()
            verify_installed_unit()
            upgrade(deb, tmp)
            rotate_certificate()
            remove()
            purge()
    finally:
        if installed_version():
            purge_quietly()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
