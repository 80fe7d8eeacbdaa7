#!/usr/bin/env python3
"""auth_proxy.py: stands in for Grafana Mimir's query path as seed 000 (Giant Swarm) reaches it:
an authenticating gateway in front of Mimir's Prometheus-compatible API, served under the path prefix
/prometheus, that needs credentials (HTTP basic auth, or a bearer token) and the tenant header
`X-Scope-OrgID`. No Mimir can run here; the gateway's checks are re-created and every accepted request
is forwarded to a real Prometheus, which answers exactly as Mimir's API would for the tenant's data.

Usage:
  auth_proxy.py --upstream http://127.0.0.1:9090 [--prefix /prometheus] [--port 0] [--port-file F]
                [--basic-user U --basic-password P | --bearer-token T] [--org-id giantswarm]
                [--request-log LOG.jsonl]

Answers, in the order the real path checks them (the wording follows Mimir and its gateway):
  - a path outside PREFIX/: 404 text/plain "404 page not found" (Go's mux, as Mimir answers);
  - missing or wrong credentials: 401 text/html with the nginx gateway's "401 Authorization Required"
    page and `WWW-Authenticate: Basic realm="Mimir"` for basic auth; bearer mode answers 401 too;
  - no X-Scope-OrgID header: 401 text/plain "no org id" (Mimir's tenant middleware, weaveworks/dskit
    user.ErrNoOrgID);
  - another tenant than --org-id: a tenant without data: /api/v1/series answers an empty list and
    /api/v1/query an empty vector (Mimir never errors for an unknown tenant, it has no series);
  - otherwise the request (method, path below the prefix, query string, form body) goes to
    --upstream and its status, Content-Type and body come back unchanged.
Credentials and the tenant header are not forwarded (the real gateway strips them too).

Every request is appended to --request-log as one JSON line: time, method, path, query, the
Authorization header as received, X-Scope-OrgID, the body length and the status answered.
"""

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

NGINX_401 = (b"<html>\r\n<head><title>401 Authorization Required</title></head>\r\n<body>\r\n"
             b"<center><h1>401 Authorization Required</h1></center>\r\n<hr><center>nginx</center>\r\n"
             b"</body>\r\n</html>\r\n")
EMPTY_SERIES = b'{"status":"success","data":[]}'
EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls
    server_version = "auth-proxy"

    def log_message(self, fmt, *args):  # the JSONL request log replaces the default stderr lines
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _reply(self, status, content_type, body, extra_headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in extra_headers:
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return status

    def _authorized(self):
        cfg = self.server.cfg
        got = self.headers.get("Authorization")
        if cfg.bearer_token is not None:
            return got == "Bearer " + cfg.bearer_token
        if cfg.basic_user is not None:
            want = base64.b64encode(("%s:%s" % (cfg.basic_user, cfg.basic_password)).encode()).decode()
            return got == "Basic " + want
        return True

    def _forward(self, path, query, body):
        cfg = self.server.cfg
        url = cfg.upstream + path + ("?" + query if query else "")
        headers = {}
        for key in ("Content-Type", "Accept", "User-Agent"):
            if self.headers.get(key):
                headers[key] = self.headers[key]
        req = urllib.request.Request(url, data=body if self.command == "POST" else None,
                                     headers=headers, method=self.command)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return self._reply(resp.status, resp.headers.get("Content-Type", "application/json"),
                                   resp.read())
        except urllib.error.HTTPError as e:
            return self._reply(e.code, e.headers.get("Content-Type", "text/plain"), e.read())
        except (urllib.error.URLError, OSError) as e:
            return self._reply(502, "text/plain; charset=utf-8",
                               ("error proxying to upstream: %s\n" % e).encode())

    def _handle(self):
        cfg = self.server.cfg
        parts = urlsplit(self.path)
        body = self._body() if self.command == "POST" else b""
        org = self.headers.get("X-Scope-OrgID")
        if not (parts.path == cfg.prefix or parts.path.startswith(cfg.prefix + "/")):
            status = self._reply(404, "text/plain; charset=utf-8", b"404 page not found\n")
        elif not self._authorized():
            extra = [("WWW-Authenticate", 'Basic realm="Mimir"')] if cfg.basic_user is not None else []
            status = self._reply(401, "text/html", NGINX_401, extra)
        elif not org:
            status = self._reply(401, "text/plain; charset=utf-8", b"no org id\n")
        else:
            path = parts.path[len(cfg.prefix):] or "/"
            if cfg.org_id is not None and org != cfg.org_id:
                if path == "/api/v1/series":
                    status = self._reply(200, "application/json", EMPTY_SERIES)
                elif path == "/api/v1/query":
                    status = self._reply(200, "application/json", EMPTY_VECTOR)
                else:
                    status = self._reply(404, "text/plain; charset=utf-8", b"404 page not found\n")
            else:
                status = self._forward(path, parts.query, body)
        self.server.log_request_line({
            "time": time.time(), "method": self.command, "path": parts.path, "query": parts.query,
            "authorization": self.headers.get("Authorization"), "org_id": org,
            "body_bytes": len(body), "status": status})

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()

    def do_HEAD(self):
        self._handle()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, cfg):
        super().__init__(address, Handler)
        self.cfg = cfg
        self._log_lock = threading.Lock()

    def log_request_line(self, entry):
        if not self.cfg.request_log:
            return
        with self._log_lock, open(self.cfg.request_log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--prefix", default="/prometheus")
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = let the OS choose")
    parser.add_argument("--port-file", help="write the port here once listening")
    parser.add_argument("--basic-user")
    parser.add_argument("--basic-password")
    parser.add_argument("--bearer-token")
    parser.add_argument("--org-id", help="the one tenant that has data (any non-empty id passes the check)")
    parser.add_argument("--request-log", help="JSONL request log (appended)")
    cfg = parser.parse_args(argv)
    if cfg.bearer_token is not None and cfg.basic_user is not None:
        parser.error("choose one of --basic-user and --bearer-token")
    if (cfg.basic_user is None) != (cfg.basic_password is None):
        parser.error("--basic-user and --basic-password go together")
    cfg.upstream = cfg.upstream.rstrip("/")
    cfg.prefix = "/" + cfg.prefix.strip("/")

    server = Server((cfg.bind, cfg.port), cfg)
    port = server.server_address[1]
    if cfg.port_file:
        tmp = cfg.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("%d\n" % port)
        os.replace(tmp, cfg.port_file)
    sys.stderr.write("auth_proxy: listening on http://%s:%d%s -> %s\n" % (cfg.bind, port, cfg.prefix, cfg.upstream))
    sys.stderr.flush()

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
