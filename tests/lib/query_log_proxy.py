#!/usr/bin/env python3
"""query_log_proxy.py: a plain HTTP proxy in front of a Prometheus-compatible backend that logs
every request's PromQL, so a test can assert what the adapter sent (e.g. that every query of a
MetricRule carries its namespace matcher), and can hold chosen queries to make them slow.

  query_log_proxy.py UPSTREAM PORT_FILE LOG [--hold SUBSTRING SECONDS]

Listens on 127.0.0.1 on a free port (written to PORT_FILE once listening, atomically), forwards
GET and POST to UPSTREAM unchanged and answers what UPSTREAM answered. Appends one JSON line per
request to LOG: {"path": ..., "query": [query=...], "match": [match[]=...]} with the form fields of
the query string and a urlencoded body together. --hold: a request whose query contains SUBSTRING
waits SECONDS before it is forwarded (logged first).
"""

import argparse
import json
import os
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("upstream")
    ap.add_argument("port_file")
    ap.add_argument("log")
    ap.add_argument("--hold", nargs=2, metavar=("SUBSTRING", "SECONDS"))
    args = ap.parse_args()
    lock = threading.Lock()
    hold = (args.hold[0], float(args.hold[1])) if args.hold else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def handle_any(self, body):
            u = urlsplit(self.path)
            form = parse_qs(u.query)
            if body:
                for k, v in parse_qs(body.decode()).items():
                    form.setdefault(k, []).extend(v)
            queries = form.get("query", [])
            with lock, open(args.log, "a") as f:
                f.write(json.dumps({"path": u.path, "query": queries,
                                    "match": form.get("match[]", [])}) + "\n")
            if hold and any(hold[0] in q for q in queries):
                time.sleep(hold[1])
            req = urllib.request.Request(args.upstream + self.path, data=body or None,
                                         method=self.command)
            if body:
                req.add_header("Content-Type", self.headers.get("Content-Type", ""))
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    status, ctype, data = r.status, r.headers.get("Content-Type", ""), r.read()
            except urllib.error.HTTPError as e:
                status, ctype, data = e.code, e.headers.get("Content-Type", ""), e.read()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.handle_any(b"")

        def do_POST(self):
            self.handle_any(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
