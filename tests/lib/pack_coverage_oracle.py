#!/usr/bin/env python3
"""pack_coverage_oracle.py: what the rule packs (config/packs) must serve for the data of
tests/lib/gen_pack_coverage.py, computed in Python from the generated samples alone, following
the meaning docs/gpu.md gives each metric, never from the packs' PromQL.

Usage: pack_coverage_oracle.py DATA_OM
Prints JSON: {"pods": {metric: {"ns/pod": value}}, "namespaces": {metric: {ns: value}},
"nodes": {metric: {node: value}}, "external": {metric: {model: value}} (namespace `serve`; "" for
a server without a model label), "naive": the same shape, for a few keys, with the mistakes the
packs once made (the test checks that the data tells the two apart)}.

The meaning (docs/gpu.md, "What the packs serve"):
- DCGM: a unit is a whole GPU or a MIG instance (GPU_I_ID set), identified by UUID (or uuid),
  gpu, GPU_I_ID, instance, job and the host labels (Hostname, hostname, NodeName); the copies of
  one unit a time-sliced card gets (one per pod, same values) count once in a pod's, a
  namespace's or a node's value. Its
  workload: exported_pod/exported_namespace, else pod_name/pod_namespace, else PodName/
  NamespaceName, else pod/namespace unless those name a scrape target's own pod (an `up` series
  with the same job, instance, namespace, pod). Its node: node, else NodeName, else hostname,
  else Hostname. A card in MIG mode (a card - UUID, gpu, instance, job - with instance series of
  a metric's input) counts through its instances for that metric: its card-level series are left
  out. A unit without an input, or with a NaN reading, is left out of that metric.
- gpu_utilization_percent: GPU_UTIL of whole GPUs, 100 x GR_ENGINE_ACTIVE of MIG instances, mean;
  gpu_engine_active_percent: 100 x GR_ENGINE_ACTIVE, mean; gpu_mem_copy_utilization_percent:
  MEM_COPY_UTIL, mean; gpu_memory_used_bytes: FB_USED x 2^20, sum; gpu_memory_used_percent:
  100 x sum(FB_USED) / sum(FB_USED + FB_FREE) over the units that report both.
- inference: one reading per engine (the series' labels without the name): the KV cache from
  vllm:kv_cache_usage_perc, else vllm:gpu_cache_usage_perc; a queue from vllm:num_requests_*,
  else (a target without any vllm: series of that kind) tgi_queue_size/tgi_batch_current_size.
  Queues summed, KV cache 100 x mean. Triton: sum of queue-duration increase / sum of success
  increase, over the models reporting both counters (increase per second from the samples).
"""

import json
import math
import re
import sys

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s+(\S+)\s+(\d+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
GU, MC, FU, FF, EA = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED",
                      "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")


def read(path):
    """[(name, labels, first value, last value, first ts, last ts)]"""
    series = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = SAMPLE.match(line.strip())
            if not m:
                continue
            key = (m.group(1), m.group(2))
            value, ts = float(m.group(3)), int(m.group(4))
            if key not in series:
                series[key] = [value, value, ts, ts]
            else:
                series[key][1], series[key][3] = value, ts
    return [(name, dict(LABEL.findall(text)), *vals) for (name, text), vals in series.items()]


def card(labels):
    return tuple(labels.get(k, "") for k in ("UUID", "uuid", "gpu", "instance", "job"))


def workload(labels, targets):
    for pod, ns in (("exported_pod", "exported_namespace"), ("pod_name", "pod_namespace"),
                    ("PodName", "NamespaceName")):
        if labels.get(pod):
            return labels.get(ns, ""), labels[pod]
    if labels.get("pod"):
        key = tuple(labels.get(k, "") for k in ("job", "instance", "namespace", "pod"))
        if key not in targets:
            return labels.get("namespace", ""), labels["pod"]
    return None


def node_of(labels):
    return labels.get("node") or labels.get("NodeName") or labels.get("hostname") or labels.get("Hostname")


def unit_key(labels):
    return frozenset(labels.items())


def unit_id(labels):
    return tuple(labels.get(k, "") for k in ("UUID", "uuid", "gpu", "GPU_I_ID", "instance", "job",
                                               "Hostname", "hostname", "NodeName"))


class Groups:
    """values per (level, metric, key) and unit: pods "ns/pod", namespaces ns, nodes node."""

    def __init__(self):
        self.data = {}

    def add(self, metric, owner, node, labels, value):
        unit = unit_id(labels)
        if owner:
            self.data.setdefault(("pods", metric, owner[0] + "/" + owner[1]), {})[unit] = value
            self.data.setdefault(("namespaces", metric, owner[0]), {})[unit] = value
        if node:
            self.data.setdefault(("nodes", metric, node), {})[unit] = value

    def result(self, out, how):
        for (level, metric, key), values in self.data.items():
            out.setdefault(level, {}).setdefault(metric, {})[key] = how(list(values.values()))


def mean(values):
    return sum(values) / len(values)


def dcgm(series, targets, out, naive):
    units = {}  # family -> {unit labels: value}
    for name, labels, _, value, _, _ in series:
        if name.upper().startswith("DCGM_FI_"):
            units.setdefault(name.upper(), {})[unit_key(labels)] = value

    def mig_cards(family):
        return {card(dict(u)) for u in units.get(family, {}) if dict(u).get("GPU_I_ID")}

    def counted(family, input_family):
        """the units of FAMILY counted for a metric whose MIG input is INPUT_FAMILY"""
        cards = mig_cards(input_family)
        for u, value in units.get(family, {}).items():
            labels = dict(u)
            if not labels.get("GPU_I_ID") and card(labels) in cards:
                continue  # a card in MIG mode counts through its instances
            if math.isnan(value):
                continue
            yield labels, value

    def place(labels):
        return workload(labels, targets), node_of(labels), labels

    means, sums, ratio = Groups(), Groups(), Groups()
    for labels, value in counted(GU, EA):
        if not labels.get("GPU_I_ID"):
            means.add("gpu_utilization_percent", *place(labels), value)
    for labels, value in counted(EA, EA):
        if labels.get("GPU_I_ID"):
            means.add("gpu_utilization_percent", *place(labels), 100 * value)
        means.add("gpu_engine_active_percent", *place(labels), 100 * value)
    for labels, value in counted(MC, MC):
        means.add("gpu_mem_copy_utilization_percent", *place(labels), value)
    free = {unit_key(labels): value for labels, value in counted(FF, FU)}
    for labels, value in counted(FU, FU):
        sums.add("gpu_memory_used_bytes", *place(labels), value * 1048576)
        if unit_key(labels) in free:
            ratio.add("gpu_memory_used_percent", *place(labels), (value, value + free[unit_key(labels)]))
    means.result(out, mean)
    sums.result(out, sum)
    ratio.result(out, lambda pairs: 100 * sum(u for u, _ in pairs) / sum(t for _, t in pairs))

    # The mistakes of the packs before issue 22: the namespace's used memory over every GPU
    # against the capacity of those with FB_FREE; a MIG card's own GPU_UTIL beside its instances.
    used = [v for u, v in units[FU].items() if (workload(dict(u), targets) or ("",))[0] == "mixed"]
    total = [v + units[FF][u] for u, v in units[FU].items()
             if u in units[FF] and (workload(dict(u), targets) or ("",))[0] == "mixed"]
    naive.setdefault("namespaces", {})["gpu_memory_used_percent"] = {"mixed": 100 * sum(used) / sum(total)}
    mig = [v for u, v in units[GU].items() if node_of(dict(u)) == "cov-node-mig" and not dict(u).get("GPU_I_ID")]
    mig += [100 * v for u, v in units[EA].items() if node_of(dict(u)) == "cov-node-mig" and dict(u).get("GPU_I_ID")]
    naive.setdefault("nodes", {})["gpu_utilization_percent"] = {"cov-node-mig": mean(mig)}
    # and a time-sliced card's copies (one per pod) each counted in the node's memory
    naive["nodes"]["gpu_memory_used_bytes"] = {"cov-node-full": 1048576 * sum(
        v for u, v in units[FU].items() if node_of(dict(u)) == "cov-node-full")}


def engine_of(labels):
    return frozenset(labels.items())


def inference(series, out, naive):
    gauges = {}
    for name, labels, _, value, _, _ in series:
        if name.startswith(("vllm:", "tgi_")) and labels.get("namespace") == "serve":
            gauges.setdefault(name, {})[engine_of(labels)] = value

    def one_per_engine(new, old):
        """new name's series, plus old name's series of engines without a new one"""
        result = dict(gauges.get(new, {}))
        for engine, value in gauges.get(old, {}).items():
            result.setdefault(engine, value)
        return result

    def one_per_target(vllm, tgi):
        result = dict(gauges.get(vllm, {}))
        with_vllm = {tuple(dict(e).get(k, "") for k in ("namespace", "pod", "instance")) for e in result}
        for engine, value in gauges.get(tgi, {}).items():
            if tuple(dict(engine).get(k, "") for k in ("namespace", "pod", "instance")) not in with_vllm:
                result[engine] = value
        return result

    def serve(metric, readings, how):
        for level, key in (("pods", lambda l: "serve/" + l["pod"]), ("namespaces", lambda l: "serve"),
                           ("external", lambda l: l.get("model_name", ""))):
            groups = {}
            for engine, value in readings.items():
                groups.setdefault(key(dict(engine)), []).append(value)
            out.setdefault(level, {})[metric] = {k: how(v) for k, v in groups.items()}

    serve("inference_requests_waiting", one_per_target("vllm:num_requests_waiting", "tgi_queue_size"), sum)
    serve("inference_requests_running", one_per_target("vllm:num_requests_running", "tgi_batch_current_size"), sum)
    serve("inference_kv_cache_usage_percent",
          {e: 100 * v for e, v in one_per_engine("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc").items()},
          mean)
    # before: every series of both names
    both = list(gauges.get("vllm:kv_cache_usage_perc", {}).items()) + list(gauges.get("vllm:gpu_cache_usage_perc", {}).items())
    naive.setdefault("external", {})["inference_kv_cache_usage_percent"] = {
        "chat": mean([100 * v for e, v in both if dict(e).get("model_name") == "chat"])}
    naive.setdefault("namespaces", {})["inference_requests_waiting"] = {
        "serve": sum(gauges["vllm:num_requests_waiting"].values()) + sum(gauges["tgi_queue_size"].values())}


def triton(series, out, naive):
    rates = {}  # counter -> {labels without name: increase per second}
    for name, labels, first, last, t0, t1 in series:
        if name.startswith("nv_inference_") and t1 > t0:
            rates.setdefault(name, {})[frozenset(labels.items())] = (last - first) / (t1 - t0)
    duration, success = rates["nv_inference_queue_duration_us"], rates["nv_inference_request_success"]
    both = [k for k in duration if k in success]
    for level, key in (("pods", lambda l: "serve/" + l["pod"]), ("namespaces", lambda l: "serve"),
                       ("external", lambda l: l.get("model", ""))):
        sums = {}
        for k in both:
            acc = sums.setdefault(key(dict(k)), [0.0, 0.0])
            acc[0] += duration[k]
            acc[1] += success[k]
        out.setdefault(level, {})["inference_queue_time_us_per_request"] = {
            k: d / s for k, (d, s) in sums.items() if s}
    # before: the success counters of every model of the pod in the denominator
    pod0 = [k for k in success if dict(k)["pod"] == "triton-0"]
    naive.setdefault("pods", {})["inference_queue_time_us_per_request"] = {
        "serve/triton-0": sum(duration.get(k, 0) for k in pod0) / sum(success[k] for k in pod0)}


def main(path):
    series = read(path)
    targets = {tuple(labels.get(k, "") for k in ("job", "instance", "namespace", "pod"))
               for name, labels, *_ in series if name == "up"}
    out, naive = {}, {}
    dcgm(series, targets, out, naive)
    inference(series, out, naive)
    triton(series, out, naive)
    out["naive"] = naive
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
