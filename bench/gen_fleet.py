#!/usr/bin/env python3
"""gen_fleet.py: the dataset of the fleet simulation (bench/fleet.sh): NS namespaces, each with APPS
workloads (Deployments, label app=app-NN) of PODS pods, and three per-pod metrics that the
workloads' HPAs scale on.

  gen_fleet.py NS APPS PODS OUT_DIR

Writes into OUT_DIR:
  fleet.om    OpenMetrics for `promtool tsdb create-blocks-from openmetrics` (start_prometheus in
              tests/lib/common.sh): fleet_gpu_utilization, fleet_queue_depth and
              fleet_requests_per_second for every pod {namespace="ns-NNN",pod="app-NN-P",
              container="main"}, one sample every 240 s from now-120 s to now+3,480 s (as
              bench/gen_om.py), value a pure function of (metric, namespace, app, pod).
  pods.json   EXTRA_PODS_JSON for tests/lib/fake_kube_apiserver.py: every pod, labels
              {app: app-NN}, phase Running.
  hpas.json   the fleet's HPAs, one per (namespace, app) pair: {namespace, app, metric}, the
              metric taken in turn from the three above; bench/fleet_client.py replays them.
"""

import json
import os
import sys
import time

METRICS = ["fleet_gpu_utilization", "fleet_queue_depth", "fleet_requests_per_second"]


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    ns_count, apps, pods, out = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    os.makedirs(out, exist_ok=True)
    t0 = int(time.time()) - 120
    stamps = list(range(t0, t0 + 3601, 240))
    pod_list, hpas = [], []
    with open(os.path.join(out, "fleet.om"), "w", buffering=1 << 22) as f:
        for m, metric in enumerate(METRICS):
            f.write("# TYPE %s gauge\n" % metric)
            for n in range(ns_count):
                for a in range(apps):
                    for p in range(pods):
                        pre = '%s{namespace="ns-%03d",pod="app-%02d-%d",container="main"} %d ' % (
                            metric, n, a, p, (m * 31 + n * 7 + a * 3 + p) % 100)
                        f.write("".join("%s%d\n" % (pre, t) for t in stamps))
        f.write("# EOF\n")
    for n in range(ns_count):
        for a in range(apps):
            hpas.append({"namespace": "ns-%03d" % n, "app": "app-%02d" % a,
                         "metric": METRICS[(n * apps + a) % len(METRICS)]})
            for p in range(pods):
                pod_list.append({"namespace": "ns-%03d" % n, "name": "app-%02d-%d" % (a, p),
                                 "labels": {"app": "app-%02d" % a}, "phase": "Running",
                                 "nodeName": "node-%d" % (n % 50)})
    with open(os.path.join(out, "pods.json"), "w", encoding="utf-8") as f:
        json.dump(pod_list, f)
    with open(os.path.join(out, "hpas.json"), "w", encoding="utf-8") as f:
        json.dump(hpas, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
