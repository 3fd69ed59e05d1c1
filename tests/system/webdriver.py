"""webdriver: a small W3C WebDriver client (urllib + json) for Debian's chromedriver driving headless chromium."""
# SPDX-License-Identifier: Apache-2.0
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# Flags known to work on these machines: headless as root, and no background connections (the network
# is closed; without these flags chromium keeps trying to reach Google's hosts).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spki_sha256(cert_pem):
    """base64(SHA-256(SubjectPublicKeyInfo)) of a certificate: what --ignore-certificate-errors-spki-list
    takes, so that chromium trusts exactly this server key and no other."""
    pub = subprocess.run(["openssl", "x509", "-in", cert_pem, "-pubkey", "-noout"], check=True,
                         capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, check=True,
                         capture_output=True).stdout
    digest = subprocess.run(["openssl", "dgst", "-sha256", "-binary"], input=der, check=True,
                            capture_output=True).stdout
    return base64.b64encode(digest).decode()


class WebDriverError(RuntimeError):
    pass


class Browser:
    """chromedriver + one headless chromium session. Use as a context manager."""

    def __init__(self, extra_flags=(), timeout=60):
        self.profile = tempfile.mkdtemp(prefix="pvescale-chromium-")
        self.port = free_port()
        self.log = open(os.path.join(self.profile, "chromedriver.log"), "w")
        self.driver = subprocess.Popen([CHROMEDRIVER, "--port=%d" % self.port], stdout=self.log,
                                       stderr=subprocess.STDOUT)
        self.base = "http://127.0.0.1:%d" % self.port
        self._wait_ready(timeout)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": CHROMIUM_FLAGS + ["--user-data-dir=" + os.path.join(self.profile, "user-data")]
                + list(extra_flags),
            },
        }}}
        self.session = self._call("POST", "/session", caps, timeout=timeout)["sessionId"]

    def _wait_ready(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if self._call("GET", "/status", timeout=2).get("ready"):
                    return
            except (OSError, WebDriverError):
                pass
            if self.driver.poll() is not None:
                break
            time.sleep(0.2)
        raise WebDriverError("chromedriver did not start (see %s)" % self.log.name)

    def _call(self, method, path, body=None, timeout=30):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            raise WebDriverError("%s %s: HTTP %d %s" % (method, path, e.code, e.read()[:500]))

    def cmd(self, method, path, body=None, timeout=30):
        return self._call(method, "/session/%s%s" % (self.session, path), body, timeout)

    def get(self, url):
        self.cmd("POST", "/url", {"url": url}, timeout=60)

    def run(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def element(self, css):
        found = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(found.values()))

    def type_into(self, css, text):
        self.cmd("POST", "/element/%s/value" % self.element(css), {"text": text})

    def click(self, css):
        self.cmd("POST", "/element/%s/click" % self.element(css), {})

    def wait_for(self, script, timeout=30, *args):
        """Poll a script until it returns something truthy; return that."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.run(script, *args)
            if value:
                return value
            time.sleep(0.2)
        raise WebDriverError("timed out waiting for: " + script)

    def set_window(self, width, height):
        self.cmd("POST", "/window/rect", {"width": width, "height": height})

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.cmd("GET", "/screenshot")))

    def close(self):
        try:
            self.cmd("DELETE", "", timeout=10)
        except (OSError, WebDriverError):
            pass
        self.driver.terminate()
        try:
            self.driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.driver.kill()
            self.driver.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
