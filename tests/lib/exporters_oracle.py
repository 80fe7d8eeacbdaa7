#!/usr/bin/env python3
"""exporters_oracle.py: what the packs (config/packs) must serve for the fixtures in
../shared/fixtures/exporters, computed from the raw files alone, without PromQL or Prometheus.

Usage: exporters_oracle.py FIXTURES_DIR FIX_DIR [MORE_DIRS...]
  FIX_DIR: fixture_scrape.py prepare's output; MORE_DIRS: the other directories given to prepare
  (gen_dcgm.py --exposition's synthetic exporters/), read like FIXTURES_DIR
Prints JSON: {"pods": {metric: {"ns/pod": value}}, "namespaces": {metric: {ns: value}},
"nodes": {metric: {node: value}}, "external": {metric: {model_name or "": value}},
"exporter_pods": ["gpu-operator/<pod>", ...]}. Values are plain numbers (the test formats them
as Kubernetes quantities).

The rules, from the exporters' documented semantics, not from the packs' queries:
- a GPU series belongs to the workload named by its first non-empty pair of (pod, namespace),
  (pod_name, pod_namespace), (PodName, NamespaceName) in the exporter's own output; series
  without one (idle GPUs, pod="") belong to no pod;
- utilisation: DCGM_FI_DEV_GPU_UTIL for whole GPUs, 100 x DCGM_FI_PROF_GR_ENGINE_ACTIVE for MIG
  instances (series with GPU_I_ID); metric names in either case;
- per pod/namespace: mean (utilisation, engine active) or sum (memory, bytes = MiB x 2^20);
  memory percent: 100 x the sum of FB_USED / the sum of (FB_USED + FB_FREE), both over the GPUs
  that report both (a GPU's FB_FREE: the FB_FREE series with the same labels); none: no value;
- per node: the NodeName (ACK), hostname or Hostname label, first set wins (a host that is an
  exporter pod's name, dcgm-exporter-... or ...gpu-exporter-..., is no node), every GPU, idle or
  not; the stored series (no exposition) use their node label first;
- inference: the pod is the scrape target's (targets.json); waiting = vllm:num_requests_waiting +
  tgi_queue_size, running = vllm:num_requests_running + tgi_batch_current_size, KV cache = 100 x
  mean of vllm:gpu_cache_usage_perc; Triton queue time per request = queue_duration_us /
  request_success (the counters' totals since start); per model: by model_name.
"""

import json
import os
import re
import sys

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = SAMPLE.match(line)
            if line.startswith("#") or not m:
                continue
            yield m.group(1), dict(LABEL.findall(m.group(3) or "")), float(m.group(4))


def workload(labels):
    for pod, ns in (("pod", "namespace"), ("pod_name", "pod_namespace"), ("PodName", "NamespaceName")):
        if labels.get(pod) and labels.get(ns):
            return labels[ns], labels[pod]
    return None


def node_of(labels):
    host = (labels.get("node") or labels.get("NodeName") or labels.get("hostname")
            or labels.get("Hostname") or "")
    return host if host and "dcgm-exporter" not in host and "gpu-exporter" not in host else None


class Acc:
    def __init__(self):
        self.data = {}

    def add(self, group, metric, key, value):
        self.data.setdefault(group, {}).setdefault(metric, {}).setdefault(key, []).append(value)

    def result(self, how):
        out = {}
        for group, metrics in self.data.items():
            for metric, keys in metrics.items():
                agg = how[metric]
                if agg == "ratio":  # values are (used, used + free or None) pairs
                    pairs = {k: [(u, t) for u, t in v if t is not None] for k, v in keys.items()}
                    vals = {k: 100 * sum(u for u, _ in p) / sum(t for _, t in p)
                            for k, p in pairs.items() if p}
                else:
                    vals = {k: (sum(v) / len(v) if agg == "avg" else sum(v)) for k, v in keys.items()}
                if vals:
                    out.setdefault(group, {})[metric] = vals
        return out


def gpu_values(name, labels, value, fb_free):
    """(served metric, value) pairs one DCGM series contributes to."""
    n = name.upper()
    mig = bool(labels.get("GPU_I_ID"))
    if n == "DCGM_FI_DEV_GPU_UTIL" and not mig:
        yield "gpu_utilization_percent", value
    if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
        if mig:
            yield "gpu_utilization_percent", 100 * value
        yield "gpu_engine_active_percent", 100 * value
    if n == "DCGM_FI_DEV_MEM_COPY_UTIL":
        yield "gpu_mem_copy_utilization_percent", value
    if n == "DCGM_FI_DEV_FB_USED":
        yield "gpu_memory_used_bytes", value * 1048576
        free = fb_free.get(frozenset(labels.items()))
        yield "gpu_memory_used_percent", (value, None if free is None else value + free)


def fb_free_of(series):
    """{frozenset(labels): FB_FREE value} of a file's series."""
    return {frozenset(labels.items()): value for name, labels, value in series
            if name.upper() == "DCGM_FI_DEV_FB_FREE"}


def main(fixture_dirs, fix_dir):
    how = {"gpu_utilization_percent": "avg", "gpu_engine_active_percent": "avg",
           "gpu_mem_copy_utilization_percent": "avg", "gpu_memory_used_bytes": "sum",
           "gpu_memory_used_percent": "ratio",
           "inference_requests_waiting": "sum", "inference_requests_running": "sum",
           "inference_kv_cache_usage_percent": "avg"}
    acc = Acc()
    with open(os.path.join(fix_dir, "targets.json"), encoding="utf-8") as f:
        targets = json.load(f)
    inference_pod = {t["fixture"]: t["labels"] for t in targets if t["kind"] == "inference"}
    queue = {}  # (ns, pod) or model -> [duration, success]
    for name, path in sorted((n, os.path.join(d, n)) for d in fixture_dirs for n in os.listdir(d)):
        if not name.endswith(".prom"):
            continue
        if name in inference_pod:
            ns, pod = inference_pod[name]["namespace"], inference_pod[name]["pod"]
            for metric, labels, value in samples(path):
                served = {"vllm:num_requests_waiting": "inference_requests_waiting",
                          "tgi_queue_size": "inference_requests_waiting",
                          "vllm:num_requests_running": "inference_requests_running",
                          "tgi_batch_current_size": "inference_requests_running",
                          "vllm:gpu_cache_usage_perc": "inference_kv_cache_usage_percent"}.get(metric)
                if served:
                    v = 100 * value if served.endswith("_percent") else value
                    acc.add("pods", served, ns + "/" + pod, v)
                    acc.add("namespaces", served, ns, v)
                    acc.add("external", served, labels.get("model_name", ""), v)
                if metric in ("nv_inference_queue_duration_us", "nv_inference_request_success"):
                    i = 0 if metric == "nv_inference_queue_duration_us" else 1
                    for key in ((ns, pod), ns, "model:" + labels.get("model", "")):
                        queue.setdefault(key, [0.0, 0.0])[i] += value
            continue
        series = list(samples(path))
        free = fb_free_of(series)
        for metric, labels, value in series:
            owner, node = workload(labels), node_of(labels)
            for served, v in gpu_values(metric, labels, value, free):
                if owner:
                    acc.add("pods", served, owner[0] + "/" + owner[1], v)
                    acc.add("namespaces", served, owner[0], v)
                if node:
                    acc.add("nodes", served, node, v)
    stored = os.path.join(fix_dir, "stored.json")
    for s in json.load(open(stored, encoding="utf-8")) if os.path.exists(stored) else []:
        node = node_of(s["labels"])
        for served, v in gpu_values(s["name"], s["labels"], s["value"], {}):
            if node:
                acc.add("nodes", served, node, v)
    out = acc.result(how)
    for key, (duration, success) in queue.items():
        if not success:
            continue
        if isinstance(key, tuple):
            group, k = "pods", key[0] + "/" + key[1]
        elif key.startswith("model:"):
            group, k = "external", key[len("model:"):]
        else:
            group, k = "namespaces", key
        out.setdefault(group, {}).setdefault("inference_queue_time_us_per_request", {})[k] = duration / success
    out["exporter_pods"] = sorted({"%s/%s" % (t["labels"]["namespace"], t["labels"]["pod"])
                                   for t in targets if t["kind"] == "dcgm"})
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main([sys.argv[1]] + sys.argv[3:], sys.argv[2])
