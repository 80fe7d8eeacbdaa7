#!/usr/bin/env python3
"""soak_client.py: the traffic and the sampling of bench/soak.sh. It owns the request mix, the
rate, the per-minute /proc samples of the adapter and the flat-or-not verdict; soak.sh only starts
and stops the servers.

DESIGN: --workers threads share a bounded rate (--rate requests/s in total), each on its own
keep-alive HTTPS connection that it closes and reopens every --reconnect-every requests (so TLS
handshakes and connection teardown are part of the soak). Each worker walks the whole mix in turn:
discovery documents, label selectors (custom, v1beta1 and v1beta2), by-name and namespace metrics,
external metrics, resource metrics (metrics.k8s.io) and bad requests (a selector that does not
parse, an unknown metric, an unknown path, POST, an Accept the adapter cannot serve, plain bytes
sent to the TLS port); every answer's status is checked against the one expected. During the
warm-up (--warmup-seconds, default the shorter of 2 minutes and a tenth of the run) the workers
send as fast as they can, so the adapter's connection pools and caches reach the size this
concurrency needs; then the rate holds. A sampler reads VmRSS every second and records, at start
and every --sample-seconds, VmRSS now and its minimum and maximum since the last row, VmHWM, open
fds and threads under load; then it pauses the traffic, closes every client connection and counts
the open fds again with the adapter idle ("fds_idle"), so a leaked descriptor cannot hide behind
connections that happen to be open. (RSS swings with each relist; the per-interval minimum is the
steady floor a leak would raise.)

Verdict (printed and in --out): over the second half of the run after the warm-up (at least its
last 10 minutes; all of it when shorter), the least-squares slope of the per-interval RSS minimum
is compared with a limit of 5 % of its mean per hour: RSS is "flat" when the upper end of the
slope's 95 % interval (slope + 2 standard errors) is under the limit, "growing" when the lower end
is over it, and "undecided" otherwise (too few or too noisy samples: run longer). The slope over
the whole post-warm-up part is reported too. fds are flat when the idle count
at the end is not above the idle count right after the warm-up. Exit status 0 when both are flat
and every answer had its expected status.

  soak_client.py --adapter URL --pid PID --seconds N --csv FILE --out FILE
                 [--rate 20] [--workers 4] [--sample-seconds 60] [--warmup-seconds W]
"""

import argparse
import collections
import http.client
import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.parse

C = "/apis/custom.metrics.k8s.io"
E = "/apis/external.metrics.k8s.io/v1beta1"
M = "/apis/metrics.k8s.io/v1beta1"
JSON = {"Accept": "application/json"}

# (kind, method, path, extra headers, expected status); kind "garbage" is not HTTP.
MIX = [
    ("discovery", "GET", C + "/v1beta1", JSON, 200),
    ("discovery", "GET", C + "/v1beta2", JSON, 200),
    ("discovery", "GET", E, JSON, 200),
    ("discovery", "GET", M, JSON, 200),
    ("discovery", "GET", "/apis", JSON, 200),
    ("selector", "GET", C + "/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3Dbert",
     JSON, 200),
    ("selector", "GET", C + "/v1beta2/namespaces/ml/pods/*/DCGM_FI_DEV_FB_USED?labelSelector=app+in+%28bert%2Cother%29",
     JSON, 200),
    ("selector", "GET", C + "/v1beta1/namespaces/vision/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=%21missing",
     JSON, 200),
    ("by-name", "GET", C + "/v1beta1/namespaces/ml/pods/bert-0/DCGM_FI_DEV_GPU_UTIL", JSON, 200),
    ("by-name", "GET", C + "/v1beta1/namespaces/ml/metrics/DCGM_FI_DEV_GPU_UTIL", JSON, 200),
    ("by-name", "GET", C + "/v1beta1/nodes/gpu-node-1/DCGM_FI_DEV_GPU_UTIL", JSON, 200),
    ("external", "GET", E + "/namespaces/ml/dcgm_fi_dev_gpu_util", JSON, 200),
    ("external", "GET", E + "/namespaces/ml/DCGM_FI_DEV_GPU_UTIL?labelSelector=pod%3Dbert-0", JSON, 200),
    ("resource", "GET", M + "/namespaces/ml/pods", JSON, 200),
    ("resource", "GET", M + "/pods", JSON, 200),
    ("resource", "GET", M + "/nodes", JSON, 200),
    ("resource", "GET", M + "/namespaces/ml/pods/bert-0", JSON, 200),
    ("bad", "GET", C + "/v1beta1/namespaces/ml/pods/*/DCGM_FI_DEV_GPU_UTIL?labelSelector=app%3D%3D%3D",
     JSON, 400),
    ("bad", "GET", C + "/v1beta1/namespaces/ml/pods/*/no_such_metric", JSON, 404),
    ("bad", "GET", "/apis/no.such.group/v1", JSON, 404),
    ("bad", "POST", C + "/v1beta1", JSON, 405),
    ("bad", "GET", C + "/v1beta1", {"Accept": "application/xml"}, 406),
    ("garbage", None, None, None, None),
]


def read_proc(pid):
    """{rss_kb, hwm_kb, threads, fds} of pid, or None when it is gone."""
    out = {}
    try:
        with open("/proc/%d/status" % pid, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "VmRSS":
                    out["rss_kb"] = int(value.split()[0])
                elif key == "VmHWM":
                    out["hwm_kb"] = int(value.split()[0])
                elif key == "Threads":
                    out["threads"] = int(value.split()[0])
        out["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, ValueError):
        return None
    return out if len(out) == 4 else None


def slope_per_min(points):
    """Least-squares slope of [(seconds, value)] in value units per minute."""
    return slope_and_error(points)[0]


def slope_and_error(points):
    """(slope, its standard error) of the least-squares line through [(seconds, value)], in value
    units per minute; the error is 0 with fewer than 3 points."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return 0.0, 0.0
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    if n < 3:
        return slope * 60, 0.0
    residuals = sum((p[1] - my - slope * (p[0] - mx)) ** 2 for p in points)
    return slope * 60, (residuals / (n - 2) / sxx) ** 0.5 * 60


class Traffic:
    """The workers, their counters and the pause switch the quiescent measurements use."""

    def __init__(self, url, rate, workers, reconnect_every, burst_until):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.ctx = ssl._create_unverified_context()  # noqa: S323 - the adapter's self-signed certificate
        self.interval = workers / rate
        self.n_workers = workers
        self.reconnect_every = reconnect_every
        self.burst_until = burst_until  # monotonic time: no pacing before it (warm-up)
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.lock = threading.Lock()
        self.idle = 0  # workers parked while paused, connections closed
        self.counts = collections.defaultdict(collections.Counter)  # kind -> status -> n
        self.unexpected = 0
        self.samples_bad = []
        self.threads = []

    def total(self):
        with self.lock:
            return sum(sum(c.values()) for c in self.counts.values()), self.unexpected

    def record(self, kind, status, want, path, detail=""):
        with self.lock:
            self.counts[kind][str(status)] += 1
            if status != want:
                self.unexpected += 1
                if len(self.samples_bad) < 20:
                    self.samples_bad.append({"kind": kind, "path": path, "status": status,
                                             "want": want, "detail": detail[:300]})

    def garbage(self):
        """Plain bytes to the TLS port: the adapter must close the connection (no hang)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=10) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                while s.recv(4096):
                    pass
            self.record("garbage", "closed", "closed", "-")
        except OSError as e:
            self.record("garbage", "error", "closed", "-", repr(e))

    def one(self, conn, item):
        kind, method, path, headers, want = item
        try:
            conn.request(method, path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            self.record(kind, resp.status, want, path, body[:300].decode("utf-8", "replace"))
            return True
        except (OSError, http.client.HTTPException) as e:
            self.record(kind, "error", want, path, repr(e))
            return False

    def connect(self):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=30)

    def worker(self, index):
        conn, n = None, 0
        next_t = time.monotonic() + index * self.interval / self.n_workers
        while not self.stop.is_set():
            if self.paused.is_set():
                if conn is not None:
                    conn.close()
                    conn = None
                with self.lock:
                    self.idle += 1
                while self.paused.is_set() and not self.stop.is_set():
                    time.sleep(0.05)
                with self.lock:
                    self.idle -= 1
                next_t = time.monotonic()
                continue
            item = MIX[(index * 7 + n) % len(MIX)]
            n += 1
            if item[0] == "garbage":
                self.garbage()
            else:
                if conn is None:
                    conn = self.connect()
                if not self.one(conn, item) or n % self.reconnect_every == 0:
                    conn.close()
                    conn = None
            next_t += self.interval
            delay = next_t - time.monotonic()
            if time.monotonic() < self.burst_until:
                next_t = time.monotonic()
            elif delay > 0:
                self.stop.wait(delay)
            else:
                next_t = time.monotonic()  # behind: do not burst to catch up
        if conn is not None:
            conn.close()

    def start(self):
        for i in range(self.n_workers):
            t = threading.Thread(target=self.worker, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)

    def pause(self, timeout=60):
        """Stops traffic and waits until every worker has closed its connection."""
        self.paused.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.idle == self.n_workers:
                    return True
            time.sleep(0.05)
        return False

    def resume(self):
        self.paused.clear()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def idle_fds(pid, traffic):
    """Open fds of the adapter with every client connection closed (median of 3 readings); the
    traffic stays paused (the caller resumes it)."""
    traffic.pause()
    time.sleep(1.5)  # the adapter notices the closed connections
    readings = []
    for _ in range(3):
        p = read_proc(pid)
        if p:
            readings.append(p["fds"])
        time.sleep(0.2)
    return sorted(readings)[len(readings) // 2] if readings else -1


def verdict(samples, warmup_s, quiet_warm, quiet_end):
    end = samples[-1]["elapsed_s"]
    # the second half of the run after the warm-up, but at least its last 10 minutes
    lo = max(warmup_s, min(end - 600, warmup_s + (end - warmup_s) / 2))
    window = [s for s in samples if s["elapsed_s"] > lo]  # rows whose interval is inside it
    out = {"window_start_s": lo, "window_end_s": end, "window_samples": len(window),
           "fds_idle_after_warmup": quiet_warm, "fds_idle_end": quiet_end}
    for key in ("rss_kb", "rss_min_kb", "rss_max_kb", "fds", "fds_idle", "threads"):
        vals = [s[key] for s in samples]
        out[key] = {"first": vals[0], "last": vals[-1], "max": max(vals), "min": min(vals)}
    out["fds_flat"] = quiet_warm is not None and quiet_end is not None and quiet_end <= quiet_warm
    out["fds_verdict"] = "flat" if out["fds_flat"] else "growing"
    if len(window) < 3:
        out["rss_verdict"] = "undecided"
        out["reason"] = "fewer than 3 samples after the warm-up: run longer or sample more often"
        return out
    mean = sum(s["rss_min_kb"] for s in window) / len(window)
    slope, err = slope_and_error([(s["elapsed_s"], s["rss_min_kb"]) for s in window])
    after = [s for s in samples if s["elapsed_s"] > warmup_s]
    out["rss_slope_kb_per_min_after_warmup"] = round(
        slope_per_min([(s["elapsed_s"], s["rss_min_kb"]) for s in after]), 2)
    out["rss_slope_kb_per_min"] = round(slope, 2)
    out["rss_slope_error_kb_per_min"] = round(err, 2)
    out["rss_projected_growth_pct_per_hour"] = round(slope * 60 / mean * 100, 2)
    limit = 0.05 * mean / 60  # kB/min: 5 % of the mean per hour
    out["rss_limit_kb_per_min"] = round(limit, 2)
    if slope + 2 * err < limit:
        out["rss_verdict"] = "flat"
    elif slope - 2 * err > limit:
        out["rss_verdict"] = "growing"
    else:
        out["rss_verdict"] = "undecided"
        out["reason"] = "the RSS slope's 95 % interval straddles the limit: run longer"
    out["fds_slope_per_min_under_load"] = round(
        slope_per_min([(s["elapsed_s"], s["fds"]) for s in window]), 3)
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--adapter", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--rate", type=float, default=20)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--sample-seconds", type=float, default=60)
    p.add_argument("--warmup-seconds", type=float, default=None)
    p.add_argument("--reconnect-every", type=int, default=100)
    args = p.parse_args(argv)
    warmup = args.warmup_seconds if args.warmup_seconds is not None else min(120, args.seconds / 10)
    t0 = time.monotonic()
    traffic = Traffic(args.adapter, args.rate, args.workers, args.reconnect_every, t0 + warmup)
    samples = []
    quiet_warm = quiet_end = None
    csv = open(args.csv, "w", encoding="ascii")
    csv.write("elapsed_s,rss_kb,rss_min_kb,rss_max_kb,hwm_kb,fds,fds_idle,threads,requests,"
              "unexpected\n")
    span = {"min": None, "max": None}  # VmRSS since the last row

    def watch_rss():
        proc = read_proc(args.pid)
        if proc:
            r = proc["rss_kb"]
            span["min"] = r if span["min"] is None else min(span["min"], r)
            span["max"] = r if span["max"] is None else max(span["max"], r)

    def sample():
        """One row: /proc under load, then the idle fd count; None when the adapter is gone."""
        proc = read_proc(args.pid)
        if proc is None:
            return None
        n, bad = traffic.total()
        s = dict(proc, elapsed_s=round(time.monotonic() - t0, 1), requests=n, unexpected=bad)
        watch_rss()
        s["rss_min_kb"], s["rss_max_kb"] = span["min"], span["max"]
        span["min"] = span["max"] = None
        s["fds_idle"] = idle_fds(args.pid, traffic) if traffic.threads else s["fds"]
        traffic.resume()
        samples.append(s)
        csv.write("%(elapsed_s)s,%(rss_kb)d,%(rss_min_kb)d,%(rss_max_kb)d,%(hwm_kb)d,%(fds)d,"
                  "%(fds_idle)d,%(threads)d,%(requests)d,%(unexpected)d\n" % s)
        csv.flush()
        sys.stderr.write("soak: %6.0fs rss %d kB (min %d, max %d) fds %d (idle %d) threads %d "
                         "requests %d unexpected %d\n"
                         % (s["elapsed_s"], s["rss_kb"], s["rss_min_kb"], s["rss_max_kb"],
                            s["fds"], s["fds_idle"], s["threads"], n, bad))
        return s

    alive = sample() is not None
    traffic.start()
    next_sample = t0 + args.sample_seconds
    next_watch = t0 + 1
    end = t0 + args.seconds
    while alive and time.monotonic() < end:
        now = time.monotonic()
        if now >= next_watch:
            watch_rss()
            next_watch = now + 1
        if now >= next_sample or (quiet_warm is None and now - t0 >= warmup):
            s = sample()
            alive = s is not None
            if s and quiet_warm is None and s["elapsed_s"] >= warmup:
                quiet_warm = s["fds_idle"]  # the first row at or after the end of the warm-up
            if now >= next_sample:
                next_sample += args.sample_seconds
            continue
        time.sleep(min(0.2, max(0.0, min(next_sample, end) - now)))
    if alive:
        s = sample()
        alive = s is not None
        quiet_end = s["fds_idle"] if s else None
    traffic.finish()
    csv.close()
    n, bad = traffic.total()
    result = {"seconds": args.seconds, "rate": args.rate, "workers": args.workers,
              "sample_seconds": args.sample_seconds, "warmup_seconds": warmup,
              "adapter_alive": alive, "requests": n, "unexpected": bad,
              "by_kind": {k: dict(v) for k, v in traffic.counts.items()},
              "unexpected_samples": traffic.samples_bad}
    if samples:
        result["verdict"] = verdict(samples, warmup, quiet_warm, quiet_end)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    v = result.get("verdict", {})
    ok = alive and bad == 0 and v.get("rss_verdict") == "flat" and v.get("fds_flat") is True
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
