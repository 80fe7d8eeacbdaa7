#!/usr/bin/env python3
"""gen_om.py: the benchmark dataset generator of ../shared/reference/prometheus-adapter-figures.md
("Datasets"), so that our benchmarks load exactly the datasets behind the peer's figures.

  gen_om.py NAMES PODS OUT [STEP [SPAN [BACK]]]
      OpenMetrics for `promtool tsdb create-blocks-from openmetrics OUT DIR`: NAMES metrics
      bench_metric_0000... x PODS series {namespace="bench",pod="pod-0000"...,container="main"},
      value (n*7+p) % 100, samples every STEP s (240) from now-BACK (120) to now-BACK+SPAN (3600).
      Same arguments and byte-identical output as the reference generator.
        gen_om.py 100 1000 ds100k.om     # dataset 1: 100,000 series
        gen_om.py 1000 1000 ds1m.om      # dataset 2: 1,000,000 series

  gen_om.py --kube-pods N OUT.json
      EXTRA_PODS_JSON for tests/lib/fake_kube_apiserver.py with the figures' Kubernetes side:
      namespace bench, pods pod-0000..pod-(N-1) (100 in the figures), labels app=bench,
      bench100=yes, and bench10=yes on the first 10.
"""

import json
import sys
import time


def write_dataset(names, pods, out, step=240, span=3600, back=120):
    t0 = int(time.time()) - back
    ts = list(range(t0, t0 + span + 1, step))
    podlab = ['{namespace="bench",pod="pod-%04d",container="main"} ' % p for p in range(pods)]
    with open(out, "w", buffering=1 << 22) as f:
        for n in range(names):
            name = "bench_metric_%04d" % n
            f.write("# TYPE %s gauge\n" % name)
            for p in range(pods):
                pre = name + podlab[p]
                v = (n * 7 + p) % 100
                f.write("".join("%s%d %d\n" % (pre, v, t) for t in ts))
        f.write("# EOF\n")


def write_kube_pods(count, out):
    pods = []
    for p in range(count):
        labels = {"app": "bench", "bench100": "yes"}
        if p < 10:
            labels["bench10"] = "yes"
        pods.append({"namespace": "bench", "name": "pod-%04d" % p, "labels": labels,
                     "phase": "Pending", "nodeName": ""})
    with open(out, "w", encoding="utf-8") as f:
        json.dump(pods, f, indent=1)
        f.write("\n")


def main(argv):
    if len(argv) == 3 and argv[0] == "--kube-pods":
        write_kube_pods(int(argv[1]), argv[2])
        return 0
    if not 3 <= len(argv) <= 6:
        sys.stderr.write(__doc__)
        return 2
    names, pods, out = int(argv[0]), int(argv[1]), argv[2]
    step = int(argv[3]) if len(argv) > 3 else 240
    span = int(argv[4]) if len(argv) > 4 else 3600
    back = int(argv[5]) if len(argv) > 5 else 120
    write_dataset(names, pods, out, step, span, back)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
