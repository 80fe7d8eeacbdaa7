#!/usr/bin/env python3
"""replay_prometheus.py: stands in for Prometheus in the data-driven cases (tests/cases/), serving the
answers a real Prometheus gave when the case was recorded, and records them in the first place.

Replay (default): serves GET and POST (form) /<case>/api/v1/query and /<case>/api/v1/series from
<root>/<case>/prometheus.json, keyed by what the adapter must send: the PromQL of `query` for
/api/v1/query, the `match[]` selector(s) for /api/v1/series (`time`, `start` and `end` are not part
of the key: they are "now" when the adapter runs). The recorded HTTP status and JSON body go back
unchanged. A request with no recorded answer gets 400 with a Prometheus error body
{"status":"error","errorType":"bad_data","error":"replay: no recorded answer for <kind> <key> in
case <case> ..."} so the adapter's error, and the case's diff, show the PromQL it sent. Each such
miss is also written to the request log, which the case runner (tests/e2e/test_cases.sh) reads to
fail the case even when the adapter answers without that query's data.

Record (--record-upstream URL): the same paths are proxied to a real Prometheus at URL (path prefix
<case> dropped, method, query string and form body kept) and each answer is stored into
<root>/<case>/prometheus.json (existing entries of the same key are replaced; entries are sorted
by key so re-recording gives small diffs). tests/cases/record.sh drives this.

One process serves every case: the case is the first path segment, so each adapter gets
--prometheus-url=http://127.0.0.1:PORT/<case>. GET /-/ready answers 200.

Usage:
  replay_prometheus.py --root DIR [--port 0] [--port-file F] [--request-log LOG.jsonl]
                       [--record-upstream URL] [--record-note TEXT]

prometheus.json:
  {"recorded": {...who, when, from what...},
   "query":  [{"query": PROMQL, "status": 200, "body": {...}}, ...],
   "series": [{"match": [SELECTOR, ...], "status": 200, "body": {...}}, ...]}
"""

import argparse
import http.server
import json
import os
import re
import socketserver
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

CASE_RE = re.compile(r"^/([A-Za-z0-9._-]+)(/api/v1/(query|series))$")


def answers_path(root, case):
    return os.path.join(root, case, "prometheus.json")


def load_answers(root, case):
    try:
        with open(answers_path(root, case), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {"query": [], "series": []}


def request_key(kind, params):
    """The key of a request: the PromQL (query) or the list of match[] selectors (series)."""
    if kind == "query":
        return (params.get("query") or [""])[0]
    return list(params.get("match[]") or [])


def find(answers, kind, key):
    field = "query" if kind == "query" else "match"
    for entry in answers.get(kind, []):
        if entry.get(field) == key:
            return entry
    return None


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, args):
        super().__init__(address, Handler)
        self.args = args
        self.lock = threading.Lock()

    def log(self, entry):
        if not self.args.request_log:
            return
        entry["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self.lock, open(self.args.request_log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    def store(self, case, kind, key, status, body):
        """Record mode: replace or add the answer for key in the case's prometheus.json."""
        field = "query" if kind == "query" else "match"
        with self.lock:
            answers = load_answers(self.args.root, case)
            entries = [e for e in answers.get(kind, []) if e.get(field) != key]
            entries.append({field: key, "status": status, "body": body})
            entries.sort(key=lambda e: json.dumps(e[field]))
            answers[kind] = entries
            answers.setdefault("query" if kind == "series" else "series", [])
            answers["recorded"] = {
                "by": "tests/cases/record.sh (tests/lib/replay_prometheus.py --record-upstream)",
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "from": self.args.record_note or self.args.record_upstream,
            }
            ordered = {k: answers[k] for k in ("recorded", "series", "query")}
            path = answers_path(self.args.root, case)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(ordered, f, indent=1, sort_keys=False)
                f.write("\n")
            os.replace(path + ".tmp", path)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "replay-prometheus"

    def log_message(self, fmt, *args):  # the JSONL request log replaces the access log
        pass

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.handle_request(b"")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.handle_request(self.rfile.read(length))

    def handle_request(self, form):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/-/ready":
            self.send_json(200, {"status": "success"})
            return
        m = CASE_RE.match(url.path)
        if not m:
            self.send_json(404, {"status": "error", "errorType": "not_found",
                                 "error": "replay: unknown path %s (want /<case>/api/v1/query or "
                                          "/<case>/api/v1/series)" % url.path})
            return
        case, api_path, kind = m.group(1), m.group(2), m.group(3)
        params = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        for k, v in urllib.parse.parse_qs(form.decode(), keep_blank_values=True).items():
            params.setdefault(k, []).extend(v)
        key = request_key(kind, params)
        if self.server.args.record_upstream:
            self.record(case, api_path, kind, key, url.query, form)
        else:
            self.replay(case, kind, key)

    def replay(self, case, kind, key):
        entry = find(load_answers(self.server.args.root, case), kind, key)
        if entry is not None:
            self.server.log({"case": case, "kind": kind, "key": key, "hit": True})
            self.send_json(entry["status"], entry["body"])
            return
        self.server.log({"case": case, "kind": kind, "key": key, "hit": False})
        shown = key if kind == "query" else " ".join(key)
        self.send_json(400, {
            "status": "error", "errorType": "bad_data",
            "error": "replay: no recorded answer for %s %s in case %s (re-record with "
                     "tests/cases/record.sh %s if the adapter is right to send it)"
                     % (kind, shown, case, case)})

    def record(self, case, api_path, kind, key, query, form):
        target = self.server.args.record_upstream.rstrip("/") + api_path
        if query:
            target += "?" + query
        req = urllib.request.Request(target, data=form if self.command == "POST" else None,
                                     method=self.command)
        if self.command == "POST":
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        body = json.loads(raw)
        self.server.store(case, kind, key, status, body)
        self.server.log({"case": case, "kind": kind, "key": key, "recorded": status})
        self.send_json(status, body)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", required=True, help="the cases directory (tests/cases)")
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = let the OS choose")
    parser.add_argument("--port-file", help="write the port here once listening")
    parser.add_argument("--request-log", help="JSONL log of every answered key (appended)")
    parser.add_argument("--record-upstream", help="record mode: the real Prometheus to ask")
    parser.add_argument("--record-note", help="record mode: what the data is, for 'recorded'")
    args = parser.parse_args(argv)
    server = Server((args.bind, args.port), args)
    if args.port_file:
        with open(args.port_file + ".tmp", "w", encoding="utf-8") as f:
            f.write("%d\n" % server.server_address[1])
        os.replace(args.port_file + ".tmp", args.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
