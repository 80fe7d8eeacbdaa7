#!/usr/bin/env python3
"""fleet_client.py: the load generator of bench/fleet.sh: replays a fleet of HPAs against the
adapter as the HPA controller would, open loop, and measures each request.

  fleet_client.py --url https://127.0.0.1:PORT --hpas hpas.json --cert C --key K
                  [--sync 15] [--seconds 60] [--connections 32] [--out result.json]

Every HPA of hpas.json ({namespace, app, metric}) asks for its metric over its workload's pods,
`GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/NS/pods/*/METRIC?labelSelector=app%3DAPP`,
once every --sync seconds (the HPA controller's default --horizontal-pod-autoscaler-sync-period),
HPA i at offset i * sync / N within each period, so the requests are spread evenly as the
controller's work queue spreads them: N / sync requests per second. The schedule is fixed in
advance (open loop): a request's latency runs from its scheduled time to the end of its answer, so
time spent waiting for a free connection because the adapter (or this client) fell behind counts
too. Requests go over --connections keep-alive TLS connections (the aggregator keeps a few to each
API server; more connections only hide queueing here). The client certificate authenticates it.

Writes JSON: requests, errors by status, p50/p90/p99/max latency (ms), the achieved rate, the
distinct queries per 5 s window, the client's own lag (how late requests were sent) and its CPU.
Nothing here decides pass or fail.
"""

import argparse
import asyncio
import json
import os
import resource
import ssl
import sys
import time

PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/%s/pods/%%2A/%s?labelSelector=app%%3D%s"


class Conn:
    def __init__(self, host, port, ctx):
        self.host, self.port, self.ctx = host, port, ctx
        self.reader = self.writer = None
        self.reconnects = 0

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, ssl=self.ctx)

    async def get(self, path):
        if self.writer is None:
            await self.open()
            self.reconnects += 1
        req = "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n" \
              "User-Agent: kube-controller-manager/v1.31.0 fleet-bench\r\n\r\n" % (path, self.host)
        self.writer.write(req.encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length, close = 0, False
        for line in lines[1:]:
            k, _, v = line.partition(":")
            k = k.strip().lower()
            if k == "content-length":
                length = int(v)
            elif k == "connection" and v.strip().lower() == "close":
                close = True
        body = await self.reader.readexactly(length)
        if close:
            self.writer.close()
            self.writer = None
        return status, body


def pct(sorted_ms, p):
    if not sorted_ms:
        return None
    i = min(len(sorted_ms) - 1, max(0, int(round(p / 100.0 * len(sorted_ms) + 0.5)) - 1))
    return sorted_ms[i]


async def run(args):
    with open(args.hpas, encoding="utf-8") as f:
        hpas = json.load(f)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(args.cert, args.key)
    host, port = args.url.split("//", 1)[1].rsplit(":", 1)
    conns = [Conn(host, int(port), ctx) for _ in range(args.connections)]
    for c in conns:
        await c.open()
    n = len(hpas)
    period = args.sync
    schedule = []  # (time offset, hpa index)
    k = 0
    while True:
        t = (k % n) * period / n + (k // n) * period
        if t >= args.seconds:
            break
        schedule.append((t, k % n))
        k += 1
    queue = asyncio.Queue()
    lat, lag, statuses, windows = [], [], {}, {}
    loop = asyncio.get_running_loop()
    t0 = loop.time() + 0.5

    async def worker(c):
        while True:
            item = await queue.get()
            if item is None:
                return
            when, i = item
            h = hpas[i]
            sent = loop.time()
            lag.append((sent - (t0 + when)) * 1000.0)
            try:
                status, _ = await c.get(PATH % (h["namespace"], h["metric"], h["app"]))
            except (OSError, asyncio.IncompleteReadError, ValueError):
                status = 0
                c.writer = None
            lat.append((loop.time() - (t0 + when)) * 1000.0)
            statuses[status] = statuses.get(status, 0) + 1
            windows.setdefault(int(when // 5), set()).add(i)

    workers = [asyncio.create_task(worker(c)) for c in conns]
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    for when, i in schedule:
        delay = t0 + when - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((when, i))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    elapsed = loop.time() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    lat.sort()
    lag.sort()
    ok = statuses.get(200, 0)
    distinct = [len(v) for _, v in sorted(windows.items())]
    return {
        "hpas": n, "sync_s": period, "seconds": args.seconds, "connections": args.connections,
        "requests": len(lat), "ok": ok, "errors": len(lat) - ok,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "rate_per_s": len(lat) / elapsed if elapsed > 0 else None,
        "scheduled_rate_per_s": len(schedule) / args.seconds,
        "p50_ms": pct(lat, 50), "p90_ms": pct(lat, 90), "p99_ms": pct(lat, 99),
        "max_ms": lat[-1] if lat else None,
        "send_lag_p50_ms": pct(lag, 50), "send_lag_p99_ms": pct(lag, 99),
        "distinct_per_5s_window": distinct,
        "reconnects": sum(c.reconnects for c in conns),
        "client_cpu_s": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
    }


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--hpas", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--sync", type=float, default=15.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
