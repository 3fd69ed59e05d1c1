# Cloud images for Proxmox's download-url in tests: qcow2 headers served over HTTP by a thread of the test.
# SPDX-License-Identifier: Apache-2.0
import http.server
import struct
import threading


def qcow2(virtual_bytes):
    """The first bytes of a qcow2 image: magic, version 3, no backing file, the virtual size at byte 24 (all the
    simulated Proxmox reads of an image)."""
    return b"QFI\xfb" + struct.pack(">I", 3) + b"\0" * 16 + struct.pack(">Q", virtual_bytes) + b"\0" * 72


class ImageServer:
    """Serves files (path -> bytes) on 127.0.0.1 at self.base; self.hits lists the paths asked for, in order."""

    def __init__(self, files):
        self.files, self.hits = dict(files), []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.hits.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.base = "http://127.0.0.1:%d" % self.http.server_address[1]

    def stop(self):
        self.http.shutdown()
        self.http.server_close()
