#!/usr/bin/env python3
"""benchclient.py: the measuring client of bench/run.sh. It owns every client-side timing and every
/proc sample of the benchmarks; run.sh only starts and stops servers and calls it.

DESIGN: each measurement holds ONE keep-alive connection per server for its whole run (HTTPS to the
adapter and to the fake kube-apiserver, plain HTTP to Prometheus) and times each request as the wall
time from sending it to having read the whole body (time.perf_counter_ns). http.client reopens a
connection silently when the server closed it, so every run counts reconnections and reports them.
Certificates are not verified: the adapter and the fake use fresh self-signed ones. Results are
JSON files that bench/report.py turns into docs/benchmarks.md; nothing here decides pass or fail.

  wait-discovery  poll the discovery document until it lists N entries; time since adapter start
  rss-watch       sample VmRSS/VmHWM every 0.1 s while the adapter relists K more times
  capture         one request per by-selector case; takes the PromQL from the adapter log (--v=5)
                  and the pod LISTs from the fake's request log, as the adapter sent them
  latency         interleaved rounds: adapter, same PromQL straight to Prometheus, same LIST(s)
                  straight to the fake kube-apiserver; plus /healthz and the discovery document
                  on the adapter's connection (the HTTPS baseline, "baseline" in the output)
  discovery-latency  N back-to-back discovery GETs on one TLS connection
  timed           run a command; wall time and peak RSS (promtool, the generator)
  breakdown       requests to an adapter at --v=6; its log splits each into LIST, query, own work
  loop            back-to-back GETs of one path for N seconds (load while a profiler samples)
  cpu             utime+stime of a pid in seconds
  smaps           resident memory of a pid per mapping
  relists         the finished relists in an adapter log (JSON)
  rss             one VmRSS/VmHWM reading of a pid
"""

import argparse
import calendar
import http.client
import json
import os
import re
import resource
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse

DISCOVERY_PATH = "/apis/custom.metrics.k8s.io/v1beta1"
# Same rule as the adapter's Prometheus client (src/clients/prom.c DEFAULT_MAX_GET_URL): a GET URL
# longer than this is sent as a form POST instead.
MAX_GET_URL_BYTES = 8 << 10
# Sent on every request of this client, so that the fake's request log tells its requests apart
# from the adapter's.
USER_AGENT = "cma-bench/1"


STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


def read_status(pid):
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of pid in kB, or None when it is gone."""
    out = {}
    try:
        with open("/proc/%d/status" % pid, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in STATUS_FIELDS:
                    out[key] = int(value.split()[0])
    except OSError:
        return None
    return out if "VmRSS" in out and "VmHWM" in out else None


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n*q/100), at least 1
    return ordered[int(rank) - 1]


def stats_ms(samples_ns):
    ms = [s / 1e6 for s in samples_ns]
    return {"n": len(ms), "p50": percentile(ms, 50), "p90": percentile(ms, 90),
            "p99": percentile(ms, 99), "min": min(ms), "max": max(ms), "mean": sum(ms) / len(ms)}


class Conn:
    """One keep-alive connection; counts how often http.client had to (re)open it."""

    def __init__(self, url, headers=None):
        parts = urllib.parse.urlsplit(url)
        self.headers = {"User-Agent": USER_AGENT}
        self.headers.update(headers or {})
        if parts.scheme == "https":
            ctx = ssl._create_unverified_context()  # noqa: S323 - self-signed test certificates
            self.conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=ctx, timeout=60)
        else:
            self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.opens = 0
        self._sock = None

    def request(self, method, path, body=None, headers=None):
        """(status, body bytes, elapsed ns) of one request on this connection."""
        if self.conn.sock is None:
            # Connecting is not part of any request's time. TCP_NODELAY as curl sets it.
            self.conn.connect()
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        h = dict(self.headers)
        if headers:
            h.update(headers)
        if body is not None:
            h.setdefault("Content-Type", "application/x-www-form-urlencoded")
        start = time.perf_counter_ns()
        self.conn.request(method, path, body=body, headers=h)
        resp = self.conn.getresponse()
        data = resp.read()
        elapsed = time.perf_counter_ns() - start
        if self.conn.sock is not self._sock:
            self.opens += 1
            self._sock = self.conn.sock
        return resp.status, data, elapsed

    def tls_info(self):
        sock = self.conn.sock
        if isinstance(sock, ssl.SSLSocket):
            return {"version": sock.version(), "cipher": sock.cipher()[0]}
        return None

    def close(self):
        self.conn.close()


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


# --- wait-discovery ------------------------------------------------------------------------------

def cmd_wait_discovery(args):
    """Polls https://127.0.0.1:PORT/apis/custom.metrics.k8s.io/v1beta1 every 10 ms (connection
    refused counts as not yet) until it lists --expect entries. The start time is the one run.sh
    wrote to --t0-file just before it started the adapter; the poller starts before the adapter."""
    deadline = time.monotonic() + args.timeout
    ctx = ssl._create_unverified_context()  # noqa: S323
    conn = None
    first_answer = None
    while time.monotonic() < deadline:
        try:
            if conn is None:
                conn = http.client.HTTPSConnection("127.0.0.1", args.port, context=ctx, timeout=10)
            conn.request("GET", DISCOVERY_PATH, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
            now = time.time()
            if first_answer is None:
                first_answer = now
            if resp.status == 200:
                entries = len(json.loads(body).get("resources") or [])
                if entries >= args.expect:
                    with open(args.t0_file, encoding="ascii") as f:
                        t0 = float(f.read().strip())
                    write_json(args.out, {"seconds_to_discovery": now - t0, "entries": entries,
                                          "bytes": len(body),
                                          "seconds_to_first_answer": first_answer - t0})
                    return 0
        except (OSError, http.client.HTTPException, ValueError):
            if conn is not None:
                conn.close()
            conn = None
        time.sleep(0.01)
    sys.stderr.write("wait-discovery: fewer than %d entries after %ss\n" % (args.expect, args.timeout))
    return 1


# --- rss-watch -----------------------------------------------------------------------------------

LOG_TIME_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z ")
RELIST_DONE_RE = re.compile(r"discovery: (\d+) series from (\d+) queries gave (\d+) custom")
SERIES_TOOK_RE = re.compile(r"discovery: (\d+) series for .* in (\d+) ms")


def log_time(line):
    m = LOG_TIME_RE.match(line)
    if not m:
        return None
    return calendar.timegm(time.strptime(m.group(1)[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + m.group(1)[19:])


def relists_in_log(path):
    """[(end time, series, series-query ms)] for every finished relist in the adapter log."""
    done, took = [], None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = SERIES_TOOK_RE.search(line)
            if m:
                took = int(m.group(2))
                continue
            m = RELIST_DONE_RE.search(line)
            if m:
                done.append({"time": log_time(line), "series": int(m.group(1)),
                             "custom_metrics": int(m.group(3)), "series_query_ms": took})
                took = None
    return done


def cmd_rss_watch(args):
    """Samples the adapter every --interval s until --relists more relists than already logged
    have finished (each one found as the 'discovery: ... gave ...' line at --v>=1)."""
    base = len(relists_in_log(args.log))
    deadline = time.monotonic() + args.timeout
    samples = []
    while time.monotonic() < deadline:
        st = read_status(args.pid)
        if st is None:
            sys.stderr.write("rss-watch: process %d is gone\n" % args.pid)
            return 1
        done = relists_in_log(args.log)
        samples.append({"t": time.time(), "rss_kb": st["VmRSS"], "hwm_kb": st["VmHWM"],
                        "relists": len(done)})
        if len(done) >= base + args.relists:
            break
        time.sleep(args.interval)
    else:
        sys.stderr.write("rss-watch: fewer than %d relists after %ss\n" % (args.relists, args.timeout))
        return 1
    time.sleep(1.0)  # let the last relist's memory settle before the final reading
    final = read_status(args.pid)
    done = relists_in_log(args.log)
    cycles = [b["time"] - a["time"] for a, b in zip(done, done[1:]) if a["time"] and b["time"]]
    rss = [s["rss_kb"] for s in samples]
    write_json(args.out, {"samples": len(samples), "interval_s": args.interval,
                          "relists_watched": len(done) - base, "relists_total": len(done),
                          "rss_min_kb": min(rss), "rss_max_kb": max(rss),
                          "final_rss_kb": final["VmRSS"], "final_hwm_kb": final["VmHWM"],
                          "relist_cycles_s": cycles,
                          "series_query_ms": [d["series_query_ms"] for d in done]})
    return 0


# --- capture -------------------------------------------------------------------------------------

PROMQL_RE = re.compile(r"custom metric ([^:]+): (.*)$")
# src/base/log.c writes each line from a 4 KiB buffer and cuts longer ones without a mark.
LOG_LINE_BYTES = 4096


def tail_from(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def looks_complete(promql, line):
    if len(line.encode()) + 2 >= LOG_LINE_BYTES:
        return False
    return promql.count("(") == promql.count(")") and promql.count('"') % 2 == 0


def rebuild_promql(text, names, shape):
    """The PromQL whose start is `text` (a cut log line) with its last `=~"..."` alternation being
    `names` joined by `|`, ending as `shape` (a complete query of the same rule) ends after its
    own alternation. None when `text` does not fit that form."""
    i = text.rfind('=~"')
    j = shape.rfind('=~"')
    if i < 0 or j < 0:
        return None
    alternation = "|".join(names)
    seen = text[i + 3:]
    if '"' in seen:
        seen = seen[:seen.index('"')]
    if not alternation.startswith(seen):
        return None
    k = shape.find('"', j + 3)
    return text[:i + 3] + alternation + shape[k:] if k >= 0 else None


def cmd_capture(args):
    """For each case: one adapter request, then the PromQL it logged (--v=5) and the pod LISTs it
    made (the fake's request log) are stored so that `latency` can replay them directly. A PromQL
    line cut by the logger is rebuilt from its start, the pods the LIST returned, and the end of a
    complete line; the rebuild is checked against every complete line first."""
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)
    adapter = Conn(args.adapter, {"Accept": "application/json"})
    kube = Conn(args.kube, {"Authorization": "Bearer " + args.token})
    out = []
    for case in cases:
        log_off = os.path.getsize(args.adapter_log)
        kube_off = os.path.getsize(args.kube_log)
        status, body, _ = adapter.request("GET", case["path"])
        if status != 200:
            sys.stderr.write("capture: %s answered %d: %s\n" % (case["path"], status, body[:300]))
            return 1
        items = len(json.loads(body).get("items") or [])
        time.sleep(0.3)  # the fake logs each request after answering it
        promql, line = None, ""
        for line_ in tail_from(args.adapter_log, log_off).splitlines():
            m = PROMQL_RE.search(line_)
            if m:
                promql, line = m.group(2), line_
        if promql is None:
            sys.stderr.write("capture: no 'custom metric' line (--v=5) for %s\n" % case["path"])
            return 1
        lists, names = [], []
        for entry_line in tail_from(args.kube_log, kube_off).splitlines():
            entry = json.loads(entry_line)
            if entry.get("headers", {}).get("User-Agent") == USER_AGENT:
                continue  # a replay of ours, logged late
            if entry.get("method") == "GET" and "/pods" in entry.get("path", ""):
                target = entry["path"] + ("?" + entry["query"] if entry.get("query") else "")
                accept = entry.get("headers", {}).get("Accept")
                lists.append({"target": target, "accept": accept, "status": entry.get("status"),
                              "bytes": entry.get("bytes")})
                st, lbody, _ = kube.request("GET", target, headers={"Accept": accept} if accept else None)
                if st == 200:
                    names += [it["metadata"]["name"] for it in json.loads(lbody).get("items") or []]
        if not lists:
            # the adapter's pod watch cache answered the selector (no LIST made): the pod names
            # the PromQL carries come from the same selector, asked of the fake directly
            ns = case["path"].split("/namespaces/", 1)[1].split("/", 1)[0]
            st, lbody, _ = kube.request("GET", "/api/v1/namespaces/%s/pods?%s" % (
                ns, urllib.parse.urlencode({"labelSelector": case["selector"]})))
            if st != 200:
                sys.stderr.write("capture: LIST of %s's pods answered %d\n" % (case["name"], st))
                return 1
            names = [it["metadata"]["name"] for it in json.loads(lbody).get("items") or []]
        c = dict(case)
        c.update({"promql": promql, "promql_source": "log", "kube_lists": lists, "pod_names": names,
                  "adapter_items": items, "adapter_bytes": len(body), "log_line_complete": looks_complete(promql, line)})
        out.append(c)
    complete = [c for c in out if c["log_line_complete"]]
    for c in out:
        if c["log_line_complete"]:
            continue
        if not complete:
            sys.stderr.write("capture: %s: PromQL line cut and no complete line to rebuild it from\n" % c["name"])
            return 1
        shape = complete[0]["promql"]
        for ok in complete:
            if rebuild_promql(ok["promql"], ok["pod_names"], shape) != ok["promql"]:
                sys.stderr.write("capture: rebuilding %s's complete PromQL does not give it back\n" % ok["name"])
                return 1
        rebuilt = rebuild_promql(c["promql"], c["pod_names"], shape)
        if rebuilt is None:
            sys.stderr.write("capture: %s: cannot rebuild the cut PromQL line\n" % c["name"])
            return 1
        c.update({"promql": rebuilt, "promql_source": "rebuilt: log line cut at %d bytes; method checked on %d complete lines"
                  % (LOG_LINE_BYTES, len(complete))})
    for c in out:
        url_len = len(args.prom) + len("/api/v1/query?") + len(
            urllib.parse.urlencode({"query": c["promql"], "time": "%.3f" % time.time()}))
        c["prom_method"] = "POST" if url_len > MAX_GET_URL_BYTES else "GET"
        c["prom_get_url_bytes"] = url_len
        del c["pod_names"]
    adapter.close()
    kube.close()
    write_json(args.out, out)
    return 0


# --- latency -------------------------------------------------------------------------------------

def prom_request(conn, case):
    params = urllib.parse.urlencode({"query": case["promql"], "time": "%.3f" % time.time()})
    if case["prom_method"] == "POST":
        return conn.request("POST", "/api/v1/query", body=params)
    return conn.request("GET", "/api/v1/query?" + params)


# The baselines of `latency`, on the adapter's connection, timed after the case rounds.
BASELINE_PATHS = {"healthz": "/healthz", "discovery": DISCOVERY_PATH}


def cmd_latency(args):
    """--rounds rounds; each round runs every case as: adapter request, the same PromQL straight
    to Prometheus, the same pod LIST(s) straight to the fake. Checks statuses and item counts.
    Then as many rounds of the baselines (BASELINE_PATHS) on the same adapter connection; they go
    to the result's "baseline" (p50 etc. in ms, like the cases)."""
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)
    adapter = Conn(args.adapter, {"Accept": "application/json"})
    prom = Conn(args.prom)
    kube = Conn(args.kube, {"Authorization": "Bearer " + args.token})
    times = {c["name"]: {"adapter": [], "direct": [], "kube_list": []} for c in cases}
    baseline = {name: [] for name in BASELINE_PATHS}
    sizes = {}
    errors = []
    for rnd in range(args.rounds + args.warmup):
        for case in cases:
            t = times[case["name"]]
            status, body, a_ns = adapter.request("GET", case["path"])
            if status != 200:
                errors.append("adapter %s: HTTP %d" % (case["name"], status))
            elif rnd == 0:
                n = len(json.loads(body).get("items") or [])
                if n != case["expect_items"]:
                    errors.append("adapter %s: %d items, want %d" % (case["name"], n, case["expect_items"]))
            a_bytes = len(body)
            status, body, p_ns = prom_request(prom, case)
            if status != 200:
                errors.append("prometheus %s: HTTP %d" % (case["name"], status))
            elif rnd == 0:
                n = len(json.loads(body)["data"]["result"])
                if n != case["expect_items"]:
                    errors.append("prometheus %s: %d series, want %d" % (case["name"], n, case["expect_items"]))
            p_bytes = len(body)
            k_ns, k_bytes = 0, 0
            for lst in case["kube_lists"]:
                headers = {"Accept": lst["accept"]} if lst.get("accept") else None
                status, body, ns = kube.request("GET", lst["target"], headers=headers)
                if status != 200:
                    errors.append("kube %s: HTTP %d" % (case["name"], status))
                k_ns += ns
                k_bytes += len(body)
            sizes[case["name"]] = {"adapter_bytes": a_bytes, "prometheus_bytes": p_bytes,
                                   "kube_list_bytes": k_bytes, "kube_list_requests": len(case["kube_lists"])}
            if rnd >= args.warmup:
                t["adapter"].append(a_ns)
                t["direct"].append(p_ns)
                t["kube_list"].append(k_ns)
    # The baselines, after the cases so that these stay measured as before: what any HTTPS
    # request on the same keep-alive connection costs (/healthz, answered from memory on the
    # event thread; the discovery document, answered from memory once authorized). Each follows
    # an untimed direct query, so the adapter's connection has been idle for about as long as
    # before a case's request (a request right after another on a hot connection is ~0.2 ms
    # faster than one after a pause, which would flatter the baseline).
    for rnd in range(args.rounds + args.warmup):
        for name, path in BASELINE_PATHS.items():
            prom_request(prom, cases[0])
            status, _, b_ns = adapter.request("GET", path)
            if status != 200:
                errors.append("adapter %s: HTTP %d" % (path, status))
            if rnd >= args.warmup:
                baseline[name].append(b_ns)
    result = {"rounds": args.rounds, "warmup": args.warmup, "errors": errors[:20],
              "error_count": len(errors),
              "connections_opened": {"adapter": adapter.opens, "prometheus": prom.opens, "kube": kube.opens},
              "tls": adapter.tls_info(), "cases": {},
              "baseline": {name: dict(stats_ms(ns), path=BASELINE_PATHS[name])
                           for name, ns in baseline.items()}}
    for case in cases:
        t = times[case["name"]]
        diffs = [a - p for a, p in zip(t["adapter"], t["direct"])]
        result["cases"][case["name"]] = {
            "pods": case["expect_items"], "path": case["path"], "prom_method": case["prom_method"],
            "adapter": stats_ms(t["adapter"]), "direct": stats_ms(t["direct"]),
            "kube_list": stats_ms(t["kube_list"]) if case["kube_lists"] else None,
            "paired_difference": stats_ms(diffs), **sizes[case["name"]]}
    for c in (adapter, prom, kube):
        c.close()
    write_json(args.out, result)
    return 1 if errors else 0


def cmd_discovery_latency(args):
    conn = Conn(args.adapter, {"Accept": "application/json"})
    samples, size, errors = [], 0, 0
    for i in range(args.n + args.warmup):
        status, body, ns = conn.request("GET", DISCOVERY_PATH)
        if status != 200:
            errors += 1
        size = len(body)
        if i >= args.warmup:
            samples.append(ns)
    tls = conn.tls_info()
    # what a curl User-Agent receives (the peer pretty-prints for it)
    status, body, _ = conn.request("GET", DISCOVERY_PATH, headers={"User-Agent": "curl/7.88.1"})
    conn.close()
    write_json(args.out, {"requests": args.n, "errors": errors, "bytes": size,
                          "bytes_curl_user_agent": len(body), "opens": conn.opens, "tls": tls,
                          "latency": stats_ms(samples)})
    return 1 if errors else 0


def cmd_timed(args):
    """Runs a command; writes its wall time and peak RSS (children's ru_maxrss) to --out."""
    start = time.monotonic()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    rc = subprocess.call(command)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    write_json(args.out, {"seconds": time.monotonic() - start, "peak_rss_kb": usage.ru_maxrss,
                          "cpu_s": usage.ru_utime + usage.ru_stime, "exit": rc})
    return rc


def cpu_seconds(pid):
    """utime + stime of pid (all its threads) in seconds, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cmd_cpu(args):
    value = cpu_seconds(args.pid)
    if value is None:
        return 1
    print("%.3f" % value)
    return 0


def cmd_smaps(args):
    """Resident memory of pid per mapping (file path, or [heap], [stack], anonymous), largest first."""
    per, current = {}, None
    try:
        with open("/proc/%d/smaps" % args.pid, encoding="utf-8", errors="replace") as f:
            for line in f:
                first = line.split(None, 5)
                if len(first) >= 5 and "-" in first[0] and ":" not in first[0]:
                    current = first[5].strip() if len(first) > 5 else "[anonymous]"
                    current = current or "[anonymous]"
                elif line.startswith("Rss:") and current is not None:
                    per[current] = per.get(current, 0) + int(line.split()[1])
    except OSError:
        return 1
    rows = sorted(({"mapping": k, "rss_kb": v} for k, v in per.items() if v), key=lambda r: -r["rss_kb"])
    write_json(args.out, rows)
    return 0


ACCESS_RE = re.compile(r" I GET (/apis/custom\.metrics\.k8s\.io/\S*) (\d+) (\d+)ms")
TOOK_RE = re.compile(r"-> \d+ \((\d+) ms\)$")


def cmd_breakdown(args):
    """--rounds rounds of every case against an adapter at --v=6; the adapter's own log then tells,
    per request, the server-side total, the pod LIST(s) and the Prometheus query (ms resolution,
    so the figures are means). Client-side times are taken too."""
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)
    conn = Conn(args.adapter, {"Accept": "application/json"})
    offset = os.path.getsize(args.log)
    sent, client = [], {c["name"]: [] for c in cases}
    for rnd in range(args.rounds + args.warmup):
        for case in cases:
            status, _, ns = conn.request("GET", case["path"])
            sent.append((case["name"], rnd >= args.warmup and status == 200))
            if rnd >= args.warmup:
                client[case["name"]].append(ns)
    conn.close()
    time.sleep(0.5)
    records, kube_ms, prom_ms = [], [], []
    for line in tail_from(args.log, offset).splitlines():
        m = TOOK_RE.search(line)
        if m and " kube GET " in line and "/pods" in line:
            kube_ms.append(int(m.group(1)))
        elif m and " prometheus " in line and "/api/v1/query" in line:
            prom_ms.append(int(m.group(1)))
        else:
            m = ACCESS_RE.search(line)
            if m:
                records.append({"server_ms": int(m.group(3)), "kube_ms": sum(kube_ms),
                                "kube_requests": len(kube_ms), "prom_ms": sum(prom_ms)})
                kube_ms, prom_ms = [], []
    if len(records) != len(sent):
        sys.stderr.write("breakdown: %d requests sent, %d found in the log\n" % (len(sent), len(records)))
        return 1
    out = {"rounds": args.rounds, "cases": {}}
    for case in cases:
        rs = [r for (name, keep), r in zip(sent, records) if keep and name == case["name"]]

        def mean(key):
            return sum(r[key] for r in rs) / len(rs) if rs else None
        server, kube, prom = mean("server_ms"), mean("kube_ms"), mean("prom_ms")
        cl = client[case["name"]]
        out["cases"][case["name"]] = {
            "requests": len(rs), "client_mean_ms": sum(cl) / len(cl) / 1e6 if cl else None,
            "server_mean_ms": server, "kube_list_mean_ms": kube, "prometheus_mean_ms": prom,
            "kube_requests": rs[0]["kube_requests"] if rs else None,
            "own_mean_ms": None if server is None else server - kube - prom}
    write_json(args.out, out)
    return 0


def cmd_loop(args):
    """Sends GET --path back to back on one connection for --seconds (load for a profiler)."""
    conn = Conn(args.adapter, {"Accept": "application/json"})
    end, n, bad = time.monotonic() + args.seconds, 0, 0
    while time.monotonic() < end:
        status, _, _ = conn.request("GET", args.path)
        n += 1
        bad += status != 200
    conn.close()
    print("%d requests, %d not 200" % (n, bad))
    return 1 if bad else 0


def cmd_relists(args):
    print(json.dumps(relists_in_log(args.log)))
    return 0


def cmd_rss(args):
    st = read_status(args.pid)
    if st is None:
        return 1
    print(json.dumps({"rss_kb": st["VmRSS"], "hwm_kb": st["VmHWM"], "anon_kb": st.get("RssAnon"),
                      "file_kb": st.get("RssFile"), "shmem_kb": st.get("RssShmem")}))
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("wait-discovery")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--expect", type=int, required=True)
    s.add_argument("--t0-file", required=True)
    s.add_argument("--timeout", type=float, default=300)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_wait_discovery)

    s = sub.add_parser("rss-watch")
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--relists", type=int, default=3)
    s.add_argument("--interval", type=float, default=0.1)
    s.add_argument("--timeout", type=float, default=600)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_rss_watch)

    s = sub.add_parser("capture")
    for name in ("--adapter", "--prom", "--kube", "--cases", "--adapter-log", "--kube-log", "--out"):
        s.add_argument(name, required=True)
    s.add_argument("--token", default="fake-admin")
    s.set_defaults(fn=cmd_capture)

    s = sub.add_parser("latency")
    for name in ("--adapter", "--prom", "--kube", "--cases", "--out"):
        s.add_argument(name, required=True)
    s.add_argument("--token", default="fake-admin")
    s.add_argument("--rounds", type=int, default=200)
    s.add_argument("--warmup", type=int, default=5)
    s.set_defaults(fn=cmd_latency)

    s = sub.add_parser("discovery-latency")
    s.add_argument("--adapter", required=True)
    s.add_argument("--n", type=int, default=200)
    s.add_argument("--warmup", type=int, default=5)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_discovery_latency)

    s = sub.add_parser("timed")
    s.add_argument("--out", required=True)
    s.add_argument("command", nargs=argparse.REMAINDER)
    s.set_defaults(fn=cmd_timed)

    s = sub.add_parser("cpu")
    s.add_argument("--pid", type=int, required=True)
    s.set_defaults(fn=cmd_cpu)

    s = sub.add_parser("smaps")
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_smaps)

    s = sub.add_parser("breakdown")
    for name in ("--adapter", "--cases", "--log", "--out"):
        s.add_argument(name, required=True)
    s.add_argument("--rounds", type=int, default=50)
    s.add_argument("--warmup", type=int, default=3)
    s.set_defaults(fn=cmd_breakdown)

    s = sub.add_parser("loop")
    s.add_argument("--adapter", required=True)
    s.add_argument("--path", required=True)
    s.add_argument("--seconds", type=float, default=10)
    s.set_defaults(fn=cmd_loop)

    s = sub.add_parser("relists")
    s.add_argument("--log", required=True)
    s.set_defaults(fn=cmd_relists)

    s = sub.add_parser("rss")
    s.add_argument("--pid", type=int, required=True)
    s.set_defaults(fn=cmd_rss)

    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
