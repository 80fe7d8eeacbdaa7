#!/usr/bin/env python3
"""slow_backend.py: stands in for a hung Prometheus: one that still lists series quickly (the index
answers) but whose query engine is stuck (an overloaded TSDB, a heavy query holding every query slot,
a network path that drops packets after the connection was set up). It accepts the connection and the
request and then answers nothing for --sleep seconds (default 30). The end-to-end tests use it to show
that the adapter's --prometheus-timeout turns such a backend into a 504 quickly, and that a hung
backend blocks neither health probes, nor discovery documents, nor other requests.

Usage:
  slow_backend.py --series-body FILE [--sleep 30] [--port 0] [--port-file F] [--request-log LOG.jsonl]
                  [--notice-close]

Serves (GET or POST, HTTP/1.1 keep-alive):
  /api/v1/series   at once: the canned Prometheus answer in FILE (e.g. recorded from a real
                   Prometheus), whatever match[] asks for
  /api/v1/query    sleeps --sleep seconds, then an empty vector (status success)
  /api/v1/query_range  the same
  /debug/in-flight JSON {"in_flight": queries sleeping now, "started": queries received in all}
  anything else    404 text/plain
Every request is appended to --request-log as one JSON line (time, method, path, phase "start" or
"end"), so a test can see what reached the backend and in which order.
With --notice-close a sleeping query also watches its connection, as Prometheus does (a closed
connection cancels the query's context): when the client closes it, the query stops at once, leaves
/debug/in-flight and logs phase "closed" instead of answering.
"""

import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls
    server_version = "slow-backend"

    def log_message(self, fmt, *args):
        pass

    def _reply(self, status, content_type, body):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self):
        srv = self.server
        path = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(length)
        srv.log_line({"time": time.time(), "method": self.command, "path": path, "phase": "start"})
        if path == "/api/v1/series":
            self._reply(200, "application/json", srv.series_body)
        elif path in ("/api/v1/query", "/api/v1/query_range"):
            with srv.lock:
                srv.in_flight += 1
                srv.started += 1
            try:
                closed = self._sleep()
            finally:
                with srv.lock:
                    srv.in_flight -= 1
            if closed:
                srv.log_line({"time": time.time(), "method": self.command, "path": path,
                              "phase": "closed"})
                self.close_connection = True
                return
            try:
                self._reply(200, "application/json", EMPTY_VECTOR)
            except OSError:  # the client gave up long ago
                pass
        elif path == "/debug/in-flight":
            with srv.lock:
                body = json.dumps({"in_flight": srv.in_flight, "started": srv.started}).encode()
            self._reply(200, "application/json", body)
        else:
            self._reply(404, "text/plain; charset=utf-8", b"404 page not found\n")
        srv.log_line({"time": time.time(), "method": self.command, "path": path, "phase": "end"})

    def _client_closed(self):
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _sleep(self):
        """Sleeps --sleep seconds; True when --notice-close saw the client close first."""
        srv = self.server
        if not srv.notice_close:
            srv.stopping.wait(srv.sleep_s)
            return False
        end = time.monotonic() + srv.sleep_s
        while not srv.stopping.is_set() and time.monotonic() < end:
            if self._client_closed():
                return True
            srv.stopping.wait(0.05)
        return False

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, series_body, sleep_s, request_log):
        super().__init__(address, Handler)
        self.series_body = series_body
        self.sleep_s = sleep_s
        self.request_log = request_log
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.in_flight = 0
        self.started = 0
        self.notice_close = False

    def log_line(self, entry):
        if not self.request_log:
            return
        with self.lock, open(self.request_log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series-body", required=True, help="canned /api/v1/series answer (JSON)")
    parser.add_argument("--sleep", type=float, default=30.0, help="seconds a query hangs (default 30)")
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = let the OS choose")
    parser.add_argument("--port-file", help="write the port here once listening")
    parser.add_argument("--request-log", help="JSONL request log (appended)")
    parser.add_argument("--notice-close", action="store_true",
                        help="stop a sleeping query when its client closes the connection")
    args = parser.parse_args(argv)
    with open(args.series_body, "rb") as f:
        series_body = f.read()
    json.loads(series_body)  # fail early on a broken canned body

    server = Server((args.bind, args.port), series_body, args.sleep, args.request_log)
    server.notice_close = args.notice_close
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    sys.stderr.write("slow_backend: listening on http://%s:%d (queries sleep %gs)\n"
                     % (args.bind, port, args.sleep))
    sys.stderr.flush()

    def stop(signum, frame):
        server.stopping.set()
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
