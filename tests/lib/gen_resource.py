#!/usr/bin/env python3
"""gen_resource.py: synthetic cAdvisor and kubelet resource metrics for the metrics.k8s.io tests
(tests/e2e/test_resource_metrics.sh, config/resource-rules.yaml).

Usage: gen_resource.py OUT_DIR [--start-offset 1800] [--span 5400] [--step 15] [--now UNIX_S]

Writes into OUT_DIR:
  resource.om    OpenMetrics for `promtool tsdb create-blocks-from openmetrics` (timestamps in s)
  pods.json      EXTRA_PODS_JSON for tests/lib/fake_kube_apiserver.py: every pod below as
                 {namespace, name, labels, phase, nodeName}. The four `ml` pods also exist in the
                 recorded fixtures; listing them here moves them onto the nodes below. The fake
                 synthesises a Node object for every nodeName.
  expected.json  the pods and nodes with the usage each was generated with, and what the adapter
                 must serve for them: PodMetrics/NodeMetrics usage as canonical quantity strings
                 (or "left out" and why), and what `kubectl top` prints.

Series (cAdvisor-like, as the kubelet's /metrics/cadvisor and /metrics/resource expose them):
  container_cpu_usage_seconds_total{namespace,pod,container,...}   counter, CPU seconds
  container_memory_working_set_bytes{namespace,pod,container,...}  gauge, bytes
  node_cpu_usage_seconds_total{node,...}                           counter
  node_memory_working_set_bytes{node,...}                          gauge
plus, per pod, the pod-level cgroup series with container="" (cAdvisor's), which the rules'
container!="" must drop, and series for a pod that does not exist in the cluster.

DESIGN: every counter grows linearly (rate r cores from the first sample on), so rate() and
irate() over the window give r exactly up to float rounding; every r is (k + 0.5)/1000 cores, so
the adapter's int64(r*1000) truncation cannot flip on a rounding error (12.5m is served as 12m).
Samples run from now-START_OFFSET to now-START_OFFSET+SPAN every STEP seconds, reaching into the
future, so every query during a test run finds a full window.

Cases: a pod with two containers (vision/resnet-0); a pod whose containers have only cpu or only
memory each (ml/half-0: each gets 0 for the other); a NaN cpu and a negative memory (ml/neg-0 →
0, 0); a pod without memory series (ml/nomem-0: left out); a Pending pod with series
(ml/pending-0: left out, not Running); the same pod name in two namespaces (ml/bert-0,
vision/bert-0: never summed); a node without series (res-node-3) and one with NaN cpu and
negative memory (res-node-4 → 0, 0).
"""

import argparse
import json
import math
import os
import sys
import time

NAN = float("nan")

NODES = {
    # node: (cpu cores, memory bytes); None = no series at all
    "res-node-1": (1.2505, 8 * 2**30),
    "res-node-2": (0.5005, 3 * 2**30 + 512),
    "res-node-3": None,
    "res-node-4": (NAN, -1.0),
}

# (namespace, name, labels, phase, node, {container: (cpu cores or None, memory bytes or None)})
# None = no series for that resource.
PODS = [
    ("ml", "bert-0", {"app": "bert", "tier": "inference"}, "Running", "res-node-1",
     {"server": (0.0125, 34 * 2**20)}),
    ("ml", "bert-1", {"app": "bert", "tier": "inference"}, "Running", "res-node-1",
     {"server": (0.2505, 100000000)}),
    ("ml", "bert-2", {"app": "bert", "tier": "inference"}, "Running", "res-node-2",
     {"server": (1.0005, 2**30)}),
    ("ml", "other-0", {"app": "other", "tier": "inference"}, "Running", "res-node-1",
     {"server": (0.0005, 16 * 2**20)}),
    ("ml", "neg-0", {"app": "neg"}, "Running", "res-node-1",
     {"server": (NAN, -4096.0)}),
    ("ml", "nomem-0", {"app": "nomem"}, "Running", "res-node-4",
     {"server": (0.0305, None)}),
    ("ml", "half-0", {"app": "half"}, "Running", "res-node-2",
     {"app": (0.0205, None), "log": (None, 8 * 2**20)}),
    ("ml", "pending-0", {"app": "pending"}, "Pending", "res-node-3",
     {"server": (0.0505, 2**20)}),
    ("vision", "resnet-0", {"app": "resnet"}, "Running", "res-node-2",
     {"server": (0.9005, 2 * 2**30), "sidecar": (0.0055, 12345678)}),
    ("vision", "bert-0", {"app": "bert"}, "Running", "res-node-2",
     {"server": (0.0405, 50 * 2**20)}),
    ("default", "cuda-test-0", {"app": "cuda-test"}, "Running", "res-node-2",
     {"cuda-test": (0.0065, 3 * 2**20)}),
]

# Series for a pod the cluster does not have: the adapter never asks for it, nothing shows it.
GHOST_POD = ("ml", "ghost-0", "server", 0.7005, 2**30)

SUFFIX_DECIMAL = {-3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
SUFFIX_BINARY = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


def milli(value):
    """What the adapter serves for a sample: int64(v*1000), NaN/Inf/negative → 0."""
    if value is None or math.isnan(value) or math.isinf(value) or value <= 0:
        return 0
    return int(value * 1000)


def decimal_si(m):
    """resource.NewMilliQuantity(m, DecimalSI).String() for m >= 0 (reference section 4.2)."""
    if m == 0:
        return "0"
    e = -3
    while m % 10 == 0:
        m //= 10
        e += 1
    while e % 3 != 0:
        m *= 10
        e -= 1
    return "%d%s" % (m, SUFFIX_DECIMAL[e])


def binary_si(m):
    """resource.NewMilliQuantity(m, BinarySI).String() for m >= 0."""
    if m % 1000 != 0 or m < 1024 * 1000:
        return decimal_si(m)
    v, i = m // 1000, 0
    while i < 6 and v % 1024 == 0:
        v //= 1024
        i += 1
    return "%d%s" % (v, SUFFIX_BINARY[i])


def fmt(value):
    if math.isnan(value):
        return "NaN"
    if value == int(value):
        return str(int(value))
    return repr(value)


def labels_text(labels):
    return ",".join('%s="%s"' % (k, v) for k, v in labels.items())


def node_ip(node):
    return "10.0.0.%d" % (sorted(NODES).index(node) + 11)


def cadvisor_labels(namespace, pod, container, node):
    labels = {"container": container, "endpoint": "https-metrics",
              "id": "/kubepods/burstable/pod-%s-%s/%s" % (namespace, pod, container),
              "image": "registry.example/%s:1.0" % (container or "pause"),
              "instance": node_ip(node) + ":10250", "job": "kubelet",
              "metrics_path": "/metrics/cadvisor", "name": "k8s_%s_%s_%s" % (container, pod, namespace),
              "namespace": namespace, "node": node, "pod": pod, "service": "kubelet"}
    if not container:
        del labels["image"]
        labels["name"] = ""
        labels["id"] = "/kubepods/burstable/pod-%s-%s" % (namespace, pod)
    return {k: v for k, v in labels.items() if v != ""}


def build(timestamps):
    """Returns {family: (type, [(labels, [values])])} in output order."""
    t0 = timestamps[0]
    cpu, mem, node_cpu, node_mem = [], [], [], []

    def counter(rate):
        return [NAN if math.isnan(rate) else rate * (t - t0) for t in timestamps]

    def gauge(value):
        return [value] * len(timestamps)

    for namespace, name, _, _, node, containers in PODS:
        pod_cpu = sum(c for c, _ in containers.values() if c is not None and not math.isnan(c))
        pod_mem = sum(m for _, m in containers.values() if m is not None and m > 0)
        for container, (c, m) in containers.items():
            if c is not None:
                cpu.append((cadvisor_labels(namespace, name, container, node), counter(c)))
            if m is not None:
                mem.append((cadvisor_labels(namespace, name, container, node), gauge(m)))
        # the pod-level cgroup (container=""): the rules must not add it to the containers
        cpu.append((cadvisor_labels(namespace, name, "", node), counter(pod_cpu + 0.001)))
        mem.append((cadvisor_labels(namespace, name, "", node), gauge(pod_mem + 4096)))
    namespace, name, container, c, m = GHOST_POD
    cpu.append((cadvisor_labels(namespace, name, container, "res-node-1"), counter(c)))
    mem.append((cadvisor_labels(namespace, name, container, "res-node-1"), gauge(m)))
    for node, usage in NODES.items():
        if usage is None:
            continue
        labels = {"endpoint": "https-metrics", "instance": node_ip(node) + ":10250", "job": "kubelet",
                  "metrics_path": "/metrics/resource", "node": node, "service": "kubelet"}
        node_cpu.append((labels, counter(usage[0])))
        node_mem.append((dict(labels), gauge(usage[1])))
    return {
        "container_cpu_usage_seconds_total": ("counter", cpu),
        "container_memory_working_set_bytes": ("gauge", mem),
        "node_cpu_usage_seconds_total": ("counter", node_cpu),
        "node_memory_working_set_bytes": ("gauge", node_mem),
    }


def write_openmetrics(path, families, timestamps):
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        for family, (kind, series) in families.items():
            base = family[:-len("_total")] if kind == "counter" else family
            out.write("# TYPE %s %s\n" % (base, kind))
            for labels, values in series:
                prefix = "%s{%s} " % (family, labels_text(labels))
                out.write("".join("%s%s %d\n" % (prefix, fmt(v), t) for v, t in zip(values, timestamps)))
        out.write("# EOF\n")


def expected_pods():
    pods = []
    for namespace, name, labels, phase, node, containers in PODS:
        has_cpu = any(c is not None for c, _ in containers.values())
        has_mem = any(m is not None for _, m in containers.values())
        if phase != "Running":
            left_out = "not Running"
        elif not (has_cpu and has_mem):
            left_out = "no %s series" % ("memory" if has_cpu else "cpu")
        else:
            left_out = None
        served = []
        for container in sorted(containers):
            c, m = containers[container]
            served.append({"name": container, "cpu_milli": milli(c), "memory_milli": milli(m),
                           "cpu": decimal_si(milli(c)), "memory": binary_si(milli(m))})
        cpu_milli = sum(c["cpu_milli"] for c in served)
        mem_bytes = sum(c["memory_milli"] for c in served) // 1000
        pods.append({
            "namespace": namespace, "name": name, "labels": labels, "phase": phase, "node": node,
            "generated": {k: {"cpu_cores": None if c is None else fmt(c),
                              "memory_bytes": None if m is None else fmt(m)}
                          for k, (c, m) in containers.items()},
            "served": left_out is None,
            "left_out": left_out,
            "containers": served,
            # kubectl top pod: CPU(cores) = MilliValue()m, MEMORY(bytes) = Value()/2^20 Mi
            "kubectl": {"cpu": "%dm" % cpu_milli, "memory": "%dMi" % (mem_bytes // 2**20)},
        })
    return sorted(pods, key=lambda p: (p["namespace"], p["name"]))


def expected_nodes():
    nodes = []
    for node in sorted(NODES):
        usage = NODES[node]
        entry = {"name": node, "served": usage is not None}
        if usage is not None:
            c, m = milli(usage[0]), milli(usage[1])
            entry.update({"cpu_milli": c, "memory_milli": m, "cpu": decimal_si(c),
                          "memory": binary_si(m), "memory_bytes": m // 1000,
                          "kubectl": {"cpu": "%dm" % c, "memory": "%dMi" % (m // 1000 // 2**20)}})
        nodes.append(entry)
    return nodes


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--start-offset", type=int, default=1800,
                        help="first sample at now minus this many seconds (default 1800)")
    parser.add_argument("--span", type=int, default=5400, help="seconds covered (default 5400)")
    parser.add_argument("--step", type=int, default=15, help="seconds between samples (default 15)")
    parser.add_argument("--now", type=int, default=None, help="fix 'now' (unix s) for reproducibility")
    args = parser.parse_args(argv)
    if args.step <= 0 or args.span <= 0 or args.start_offset < 600:
        parser.error("--step and --span must be > 0, --start-offset >= 600 (two 5m windows)")

    now = args.now if args.now is not None else int(time.time())
    start = now - args.start_offset
    timestamps = list(range(start, start + args.span + 1, args.step))
    os.makedirs(args.out_dir, exist_ok=True)
    write_openmetrics(os.path.join(args.out_dir, "resource.om"), build(timestamps), timestamps)

    pods = [{"namespace": ns, "name": name, "labels": labels, "phase": phase, "nodeName": node}
            for ns, name, labels, phase, node, _ in PODS]
    with open(os.path.join(args.out_dir, "pods.json"), "w", encoding="utf-8") as out:
        json.dump(pods, out, indent=1)
        out.write("\n")
    expected = {"now": now, "start": timestamps[0], "end": timestamps[-1], "step": args.step,
                "window": "5m0s", "pods": expected_pods(), "nodes": expected_nodes(),
                "ghost_pod": "%s/%s" % GHOST_POD[:2]}
    with open(os.path.join(args.out_dir, "expected.json"), "w", encoding="utf-8") as out:
        json.dump(expected, out, indent=1)
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
