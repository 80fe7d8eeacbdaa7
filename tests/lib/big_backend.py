#!/usr/bin/env python3
"""big_backend.py: stands in for a Prometheus whose instant queries return a very large answer
(tens of MB), and whose series listing can be made to hang. A real Prometheus cannot cheaply
produce a 50 MB answer to one query (it needs hundreds of thousands of ingested series and a
query that returns them all; its own memory and time would dominate the test), while the answer's
format is simple and stable (Prometheus HTTP API, /api/v1/query, resultType vector), so this
serves one built the way Prometheus writes it. It is used to show that the adapter decodes such
answers as a stream, keeping only the samples a request needs, and that a hung /api/v1/series
call is bounded by --prometheus-series-timeout.

Usage:
  big_backend.py --metric NAME --wanted NS/POD=VALUE [--wanted ...] --answer-bytes N
                 [--port 0] [--port-file F] [--request-log LOG.jsonl]

Serves (GET or POST, HTTP/1.1 keep-alive):
  /api/v1/series   at once: one series of --metric per --wanted pod (labels __name__, namespace,
                   pod), whatever match[] asks for; while hanging (see below) it answers nothing
                   until released
  /api/v1/query    the big answer, whatever the query: a vector of --metric samples; the --wanted
                   pods are one at the start and the rest at the very end, with filler series of
                   namespace "filler" in between until the body is at least --answer-bytes long.
                   Sent with Content-Length, or chunked (no length) after /debug/mode?chunked=1.
  /debug/counts    JSON {"query": N, "series": N, "series_hanging": N}
  /debug/hang-series?on=1|0   series calls hang (until set back to 0, or 300 s) / answer again
  /debug/mode?chunked=1|0     how /api/v1/query is framed
  anything else    404 text/plain
Every request is appended to --request-log as one JSON line (time, method, path, phase).
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

CHUNK = 1 << 20


def build_answer(metric, wanted, answer_bytes, ts):
    """The vector answer as bytes: first wanted pod, filler, the other wanted pods."""
    def sample(ns, pod, value):
        return ('{"metric":{"__name__":"%s","namespace":"%s","pod":"%s","container":"main",'
                '"instance":"10.0.0.1:9400","job":"dcgm-exporter"},"value":[%.3f,"%s"]}'
                % (metric, ns, pod, ts, value))
    head = '{"status":"success","data":{"resultType":"vector","result":['
    tail = ']}}'
    parts = [sample(*wanted[0])] if wanted else []
    last = [sample(*w) for w in wanted[1:]]
    size = len(head) + len(tail) + sum(len(p) + 1 for p in parts + last)
    i = 0
    while size < answer_bytes:
        s = sample("filler", "filler-%08d" % i, "%d" % (i % 100))
        parts.append(s)
        size += len(s) + 1
        i += 1
    return (head + ",".join(parts + last) + tail).encode(), i


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "big-backend"

    def log_message(self, fmt, *args):
        pass

    def _reply(self, status, content_type, body, chunked=False):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not chunked:
            self.wfile.write(body)
            return
        view = memoryview(body)
        for i in range(0, len(body), CHUNK):
            part = view[i:i + CHUNK]
            self.wfile.write(b"%x\r\n" % len(part))
            self.wfile.write(part)
            self.wfile.write(b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def _series(self, srv):
        with srv.lock:
            srv.counts["series"] += 1
        if srv.hang.is_set():
            with srv.lock:
                srv.counts["series_hanging"] += 1
            srv.release.wait(300)
        self._reply(200, "application/json", srv.series_body)

    def _debug(self, srv, path, query):
        q = parse_qs(query)
        if path == "/debug/hang-series":
            if q.get("on", ["0"])[0] == "1":
                srv.release.clear()
                srv.hang.set()
            else:
                srv.hang.clear()
                srv.release.set()
        elif path == "/debug/mode":
            srv.chunked = q.get("chunked", ["0"])[0] == "1"
        with srv.lock:
            body = json.dumps(srv.counts).encode()
        self._reply(200, "application/json", body)

    def _handle(self):
        srv = self.server
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(length)
        srv.log_line({"time": time.time(), "method": self.command, "path": url.path, "phase": "start"})
        try:
            if url.path == "/api/v1/series":
                self._series(srv)
            elif url.path == "/api/v1/query":
                with srv.lock:
                    srv.counts["query"] += 1
                self._reply(200, "application/json", srv.answer, srv.chunked)
            elif url.path.startswith("/debug/"):
                self._debug(srv, url.path, url.query)
            else:
                self._reply(404, "text/plain; charset=utf-8", b"404 page not found\n")
        except OSError:  # the client gave up (the adapter refused the answer early)
            self.close_connection = True
        srv.log_line({"time": time.time(), "method": self.command, "path": url.path, "phase": "end"})

    do_GET = _handle
    do_POST = _handle


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr, request_log):
        super().__init__(addr, Handler)
        self.lock = threading.Lock()
        self.counts = {"query": 0, "series": 0, "series_hanging": 0}
        self.hang = threading.Event()
        self.release = threading.Event()
        self.chunked = False
        self.request_log = request_log
        self.answer = b""
        self.series_body = b""

    def log_line(self, entry):
        if not self.request_log:
            return
        with self.lock, open(self.request_log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--metric", required=True)
    p.add_argument("--wanted", action="append", default=[], help="NS/POD=VALUE, repeatable")
    p.add_argument("--answer-bytes", type=int, default=50_000_000)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    p.add_argument("--request-log")
    args = p.parse_args()
    wanted = []
    for w in args.wanted:
        target, value = w.split("=", 1)
        ns, pod = target.split("/", 1)
        wanted.append((ns, pod, value))
    srv = Server(("127.0.0.1", args.port), args.request_log)
    srv.answer, n_filler = build_answer(args.metric, wanted, args.answer_bytes, time.time())
    srv.series_body = json.dumps({"status": "success", "data": [
        {"__name__": args.metric, "namespace": ns, "pod": pod} for ns, pod, _ in wanted]}).encode()
    sys.stderr.write("big_backend: answer of %d bytes (%d filler series), port %d\n"
                     % (len(srv.answer), n_filler, srv.server_address[1]))
    signal.signal(signal.SIGTERM, lambda *_: (srv.release.set(), os._exit(0)))
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("%d\n" % srv.server_address[1])
        os.replace(tmp, args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
