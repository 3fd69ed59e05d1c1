# Creates the simulator's CA and loopback server certificate with the openssl command line tool.
# SPDX-License-Identifier: Apache-2.0
import os
import subprocess


def _run(args, cwd):
    r = subprocess.run(["openssl"] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (args[0], r.stderr.decode(errors="replace")))


def _start(args, cwd):
    return subprocess.Popen(["openssl"] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def make_certs(tls_dir, ca_pair=None):
    """Returns (ca.pem, server.pem, server.key); reuses existing files in tls_dir. ca_pair: (certificate, key) of
    an existing CA to sign with (real mode: the Kubernetes cluster's, so one CA file trusts both APIs)."""
    os.makedirs(tls_dir, exist_ok=True)
    if ca_pair:
        return _sign_with(tls_dir, *ca_pair)
    ca, crt, key = (os.path.join(tls_dir, n) for n in ("ca.pem", "server.pem", "server.key"))
    if all(os.path.exists(p) for p in (ca, crt, key)):
        return ca, crt, key
    ext = os.path.join(tls_dir, "server.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n")
    procs = [_start(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", "ca.key", "-out", "ca.pem", "-days", "3650", "-subj", "/CN=pvescale-sim CA",
                     "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign"], tls_dir),
             _start(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"], tls_dir)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError("openssl req failed: %s" % err.decode(errors="replace"))
    _run(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
          "-CAcreateserial", "-out", "server.pem", "-days", "3650", "-extfile", "server.ext"], tls_dir)
    return ca, crt, key


def _sign_with(tls_dir, ca_crt, ca_key):
    crt, key = os.path.join(tls_dir, "server.pem"), os.path.join(tls_dir, "server.key")
    with open(os.path.join(tls_dir, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    _run(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "server.key",
          "-out", "server.csr", "-subj", "/CN=localhost"], tls_dir)
    _run(["x509", "-req", "-in", "server.csr", "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
          "-CAserial", os.path.join(tls_dir, "ca.srl"), "-out", "server.pem", "-days", "3650",
          "-extfile", "server.ext"], tls_dir)
    return ca_crt, crt, key


def fingerprint(cert):
    import hashlib
    import ssl
    with open(cert) as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    h = hashlib.sha256(der).hexdigest().upper()
    return ":".join(h[i:i + 2] for i in range(0, len(h), 2))
