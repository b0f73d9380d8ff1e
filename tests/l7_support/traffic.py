#!/usr/bin/env python3
"""Real clients and servers for the L7 tests (tests/l7_live.rs,
tests/l7_make.rs): HTTP/1.1 and HTTPS (TLS 1.2 and 1.3, ALPN) from Python's
standard library, QUIC v1 and v2 from aioquic (PyPI, installed by
deploy/bootstrap.sh into its venv). DNS is dnsmasq and dig, run by the
Rust side.

  traffic.py serve DIR ADDR          # servers on ADDR, until killed
  traffic.py client DIR ADDR         # the client script against ADDR

DIR holds the self-signed certificate (made by `serve`) and `ready`, written
once every server listens. Every loop is bounded; the client exits when done.
"""

import asyncio
import http.server
import os
import socket
import ssl
import subprocess
import sys
import threading
import time

HTTP_PORT = 8080
HTTPS_PORT = 8443
HTTPS12_PORT = 8444
QUIC_PORT = 4433
NAME = "www.xdprobe.test"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self, code, data, chunked=False, length=True):
        self.send_response(code)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 700):
                part = data[i:i + 700]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nX-Trailer: done\r\n\r\n")
            return
        if length:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/chunked"):
            self.body(200, b"c" * 5000, chunked=True)
        elif self.path.startswith("/missing"):
            self.body(404, b"not here\n")
        elif self.path.startswith("/busy"):
            time.sleep(0.02)
            self.body(503, b"busy\n")
        elif self.path.startswith("/slow"):
            time.sleep(0.05)
            self.body(200, b"s" * 3000)
        else:
            self.body(200, b"x" * 20000)

    do_HEAD = do_GET

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(n)
        self.body(201, data[:100])


def make_cert(d):
    key, crt = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
    if not os.path.exists(crt):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
             "-keyout", key, "-out", crt, "-subj", "/O=xdprobe tests/CN=" + NAME,
             "-addext", "subjectAltName=DNS:" + NAME + ",DNS:alt.xdprobe.test"],
            check=True, capture_output=True)
    return crt, key


def https_server(addr, port, crt, key, tls12):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    # The server speaks HTTP/1.1 only (curl offers h2 first: the label
    # follows the offer where TLS 1.3 hides the choice).
    ctx.set_alpn_protocols(["http/1.1"])
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    srv = http.server.ThreadingHTTPServer((addr, port), Handler)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    return srv


async def quic_server(addr, crt, key):
    from aioquic.asyncio import serve
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.packet import QuicProtocolVersion
    cfg = QuicConfiguration(is_client=False, alpn_protocols=["h3"])
    cfg.supported_versions = [QuicProtocolVersion.VERSION_1, QuicProtocolVersion.VERSION_2]
    cfg.load_cert_chain(crt, key)
    await serve(addr, QUIC_PORT, configuration=cfg)
    await asyncio.Event().wait()


def serve(d, addr):
    crt, key = make_cert(d)
    servers = [
        http.server.ThreadingHTTPServer((addr, HTTP_PORT), Handler),
        https_server(addr, HTTPS_PORT, crt, key, False),
        https_server(addr, HTTPS12_PORT, crt, key, True),
    ]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    have_quic = True
    try:
        import aioquic  # noqa: F401
    except ImportError:
        have_quic = False
    open(os.path.join(d, "ready"), "w").write("quic\n" if have_quic else "no-quic\n")
    if have_quic:
        asyncio.run(quic_server(addr, crt, key))
    else:
        time.sleep(600)


def curl(*args):
    """curl, every URL's body to /dev/null (`-o` applies to one URL)."""
    out = []
    for a in args:
        if a.startswith(("http://", "https://")):
            out += ["-o", "/dev/null"]
        out.append(a)
    subprocess.run(["curl", "-s", "--max-time", "10", *out], check=True)


def pipelined(addr):
    """Three requests in one segment on one connection (pipelining)."""
    s = socket.create_connection((addr, HTTP_PORT), timeout=5)
    req = b"".join(b"GET /p%d HTTP/1.1\r\nHost: pipe.xdprobe.test\r\n\r\n" % i for i in range(3))
    s.sendall(req)
    got, end = b"", time.time() + 5
    while got.count(b"HTTP/1.1 200") < 3 and time.time() < end:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()


def split_request(addr):
    """A request whose head goes out in three segments."""
    s = socket.create_connection((addr, HTTP_PORT), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for part in (b"GET /split-", b"request HTTP/1.1\r\nHo", b"st: split.xdprobe.test\r\n\r\n"):
        s.sendall(part)
        time.sleep(0.01)
    s.recv(65536)
    s.close()


async def quic_client(addr, version, big):
    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration
    cfg = QuicConfiguration(is_client=True, alpn_protocols=["h3"], server_name="quic.xdprobe.test",
                            verify_mode=ssl.CERT_NONE, quantum_readiness_test=big)
    cfg.original_version = version
    async with connect(addr, QUIC_PORT, configuration=cfg) as c:
        await c.ping()


def client(d, addr):
    base = "http://%s:%d" % (addr, HTTP_PORT)
    host = ["-H", "Host: www.xdprobe.test"]
    # Keep-alive: four requests on one connection, then a POST and a HEAD.
    curl("--http1.1", *host, base + "/index.html?a=1", base + "/missing", base + "/chunked", base + "/slow")
    curl("--http1.1", *host, "-d", "x" * 3000, base + "/form")
    curl("--http1.1", *host, "-I", base + "/busy")
    pipelined(addr)
    split_request(addr)
    # TLS 1.3 with ALPN h2 and http/1.1 offered, and TLS 1.2 whose
    # certificate (and ALPN choice) is in clear.
    resolve = ["--resolve", "%s:%d:%s" % (NAME, HTTPS_PORT, addr), "--resolve", "%s:%d:%s" % (NAME, HTTPS12_PORT, addr)]
    curl("-k", *resolve, "https://%s:%d/" % (NAME, HTTPS_PORT))
    curl("-k", "--tlsv1.2", "--tls-max", "1.2", *resolve, "https://%s:%d/" % (NAME, HTTPS12_PORT))
    ready = open(os.path.join(d, "ready")).read().strip()
    if ready == "quic":
        from aioquic.quic.packet import QuicProtocolVersion
        for version, big in ((QuicProtocolVersion.VERSION_1, False), (QuicProtocolVersion.VERSION_2, False),
                             (QuicProtocolVersion.VERSION_1, True)):
            asyncio.run(asyncio.wait_for(quic_client(addr, version, big), 10))
            time.sleep(0.05)


if __name__ == "__main__":
    cmd, d, addr = sys.argv[1], sys.argv[2], sys.argv[3]
    {"serve": serve, "client": client}[cmd](d, addr)
