#!/usr/bin/env python3
"""gen_metricrules.py: the dataset of bench/metricrules.sh (docs/benchmarks.md, "MetricRules").

  gen_metricrules.py om NAMESPACES METRICS SPARE OUT
      OpenMetrics for `promtool tsdb create-blocks-from openmetrics OUT DIR`: for each namespace
      team-000.. and each k < METRICS one series team_queue_depth_<k>{namespace="team-nnn",
      queue="q"} plus, in team-000 only, SPARE series team_spare_depth_<k> (for the apply-to-value
      runs), samples every 60 s from now-120 s for an hour. Value of (namespace i, metric k):
      i * 1000 + k (spare k: 500000 + k), so the bench can check what it is served.

  gen_metricrules.py rules NAMESPACES METRICS OUT.jsonl
      One MetricRule per line (JSON, what /__fake/metricrules/apply takes): team-nnn/depth-<k>, an
      external rule serving team_queue_depth_<k> as queue_depth_<k> (the worked example of
      docs/metric-rules.md, one metric each).

  gen_metricrules.py spare K
      The MetricRule team-000/spare-<K> serving team_spare_depth_<K> as spare_depth_<K> (JSON).
"""

import json
import sys
import time


def om(namespaces, metrics, spare, out):
    t0 = int(time.time()) - 120
    stamps = list(range(t0, t0 + 3601, 60))
    with open(out, "w", buffering=1 << 20) as f:
        for k in range(metrics):
            name = "team_queue_depth_%d" % k
            f.write("# TYPE %s gauge\n" % name)
            for i in range(namespaces):
                lab = '%s{namespace="team-%03d",queue="q"} %d' % (name, i, i * 1000 + k)
                for t in stamps:
                    f.write("%s %d\n" % (lab, t))
        for k in range(spare):
            name = "team_spare_depth_%d" % k
            f.write("# TYPE %s gauge\n" % name)
            lab = '%s{namespace="team-000",queue="q"} %d' % (name, 500000 + k)
            for t in stamps:
                f.write("%s %d\n" % (lab, t))
        f.write("# EOF\n")


def rule(namespace, name, series, metric):
    return {
        "apiVersion": "metrics.custom-metrics-adapter.dev/v1alpha1",
        "kind": "MetricRule",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "externalRules": [{
                "seriesQuery": '%s{namespace!="",queue!=""}' % series,
                "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
                "name": {"matches": "^%s$" % series, "as": metric},
                "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)",
            }]
        },
    }


def main(argv):
    if len(argv) == 6 and argv[1] == "om":
        om(int(argv[2]), int(argv[3]), int(argv[4]), argv[5])
    elif len(argv) == 5 and argv[1] == "rules":
        with open(argv[4], "w") as f:
            for i in range(int(argv[2])):
                for k in range(int(argv[3])):
                    obj = rule("team-%03d" % i, "depth-%d" % k, "team_queue_depth_%d" % k,
                               "queue_depth_%d" % k)
                    f.write(json.dumps(obj) + "\n")
    elif len(argv) == 3 and argv[1] == "spare":
        k = int(argv[2])
        print(json.dumps(rule("team-000", "spare-%d" % k, "team_spare_depth_%d" % k,
                              "spare_depth_%d" % k)))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
