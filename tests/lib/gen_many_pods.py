#!/usr/bin/env python3
"""gen_many_pods.py: one gauge for many pods of one namespace, for the query-size test.

Usage: gen_many_pods.py OUT_DIR [--pods 5000] [--others 1000] [--namespace big]
                        [--shape clone|real|small] [--pods-only]

Writes into OUT_DIR:
  metric.om      OpenMetrics for `promtool tsdb create-blocks-from openmetrics` (seconds)
  metric.prom    Prometheus text format with ms timestamps, for VictoriaMetrics'
                 /api/v1/import/prometheus
  pods.json      EXTRA_PODS_JSON for tests/lib/fake_kube_apiserver.py: PODS pods labelled
                 app=big and OTHERS pods labelled app=other, all Running
  (--pods-only writes pods.json alone, for bench/objcache_mem.sh)

--shape says what each pod object looks like as the fake serves it:
  clone  (default) the recorded bert-0 Running pod with only `app` as its labels (3.6 KB of JSON)
  real   the same object shaped like a Deployment's pod in a real cluster: five labels (app,
         pod-template-hash, app.kubernetes.io/name, app.kubernetes.io/instance, tier), three
         annotations, an ownerReference to its ReplicaSet and generateName, beside the recorded
         managedFields, spec and status (about 4 KB of JSON, as kube-apiserver serves such pods)
  small  only what the adapter reads: name, namespace, uid, resourceVersion, creationTimestamp,
         labels (app alone), spec.nodeName, status.phase (about 0.3 KB; the fake cuts the clone down)
  expected.txt   "pod value" for each app=big pod, in byte order of the names: what a by-selector request
                 for app=big must answer

DESIGN: `big_gauge{namespace, pod}` is constant over time, value = (index * 7) % 999 + 1 (an
integer below 1000, so the adapter serves it as a plain quantity, never "1k"), with a sample
every 60 s from now-300 s to now+3300 s: every instant query during a test run finds one.
Pod names are long (`worker-<index>-<hash>`, about 24 bytes, like a Deployment's), so the name
regex of 5,000 pods is about 125 KB, far over VictoriaMetrics' 16 KiB -search.maxQueryLen. The OTHERS pods have
series too: a query without the name matcher returns them, and only the requested ones must be
kept.
"""
import argparse
import hashlib
import json
import os
import time


def pod_name(i):
    h = hashlib.sha256(str(i).encode()).hexdigest()
    return f"worker-{i:05d}-{h[:5]}-{h[5:10]}"


def pod_entry(name, app, namespace, shape):
    entry = {"namespace": namespace, "name": name, "labels": {"app": app}, "phase": "Running"}
    if shape == "small":
        entry["shape"] = "small"
    elif shape == "real":
        h = hashlib.sha256(("rs-" + app).encode()).hexdigest()
        rs = f"worker-{app}-{h[:10]}"
        entry["generateName"] = rs + "-"
        entry["labels"] = {"app": app, "pod-template-hash": h[:10],
                           "app.kubernetes.io/name": "worker", "app.kubernetes.io/instance": app,
                           "tier": "inference"}
        entry["annotations"] = {"kubectl.kubernetes.io/restartedAt": "2026-11-21T21:30:00Z",
                                "prometheus.io/scrape": "true", "prometheus.io/port": "8002"}
        entry["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                     "uid": f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
                                     "controller": True, "blockOwnerDeletion": True}]
    return entry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--others", type=int, default=1000)
    ap.add_argument("--namespace", default="big")
    ap.add_argument("--shape", choices=("clone", "real", "small"), default="clone")
    ap.add_argument("--pods-only", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    now = int(time.time())
    times = list(range(now - 300, now + 3300, 60))
    pods = [(pod_name(i), "big", (i * 7) % 999 + 1) for i in range(a.pods)]
    pods += [(pod_name(a.pods + i), "other", (i * 3) % 500 + 1) for i in range(a.others)]
    with open(os.path.join(a.out, "pods.json"), "w") as f:
        json.dump([pod_entry(name, app, a.namespace, a.shape) for name, app, _ in pods], f)
    if a.pods_only:
        return
    with open(os.path.join(a.out, "metric.om"), "w") as om, \
            open(os.path.join(a.out, "metric.prom"), "w") as prom:
        om.write("# TYPE big_gauge gauge\n")
        for name, _, value in pods:
            labels = f'namespace="{a.namespace}",pod="{name}"'
            for t in times:
                om.write(f"big_gauge{{{labels}}} {value} {t}\n")
                prom.write(f"big_gauge{{{labels}}} {value} {t * 1000}\n")
        om.write("# EOF\n")
    with open(os.path.join(a.out, "expected.txt"), "w") as f:
        for name, _, value in sorted(p for p in pods if p[1] == "big"):
            f.write(f"{name} {value}\n")


if __name__ == "__main__":
    main()
