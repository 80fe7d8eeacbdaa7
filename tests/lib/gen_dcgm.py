#!/usr/bin/env python3
"""gen_dcgm.py: synthetic NVIDIA DCGM-exporter data for the end-to-end tests and the demo.

Usage: gen_dcgm.py OUT_DIR [--start-offset 120] [--span 3600] [--step 60]
                           [--ack-labels] [--exported-labels] [--hostname-label Hostname]
                           [--exposition] [--vllm]

Writes into OUT_DIR:
  dcgm.om        OpenMetrics for `promtool tsdb create-blocks-from openmetrics` (timestamps in s)
  dcgm.prom      Prometheus text format with ms timestamps, for VictoriaMetrics'
                 /api/v1/import/prometheus
  pods.json      EXTRA_PODS_JSON for tests/lib/fake_kube_apiserver.py: every pod below as
                 {namespace, name, labels, phase, nodeName}. The four `ml` pods also exist in the
                 recorded fixtures; listing them here moves them onto the GPU nodes below.
  expected.json  every series (name, labels, constant value) plus the pods, nodes, the time
                 range and the expected value of the seed-004 recording rule.
  vllm.om        with --vllm only: vLLM 0.x queue gauges (num_requests_waiting/_running,
                 gpu_cache_usage_perc) of the bert pods as a scrape of each pod stores them
                 (namespace, pod, model_name="bert-intent"), from VLLM_PODS; the demo's data.
                 expected.json then lists them under "vllm" (same shape as "series").
  exporters/     with --exposition only: SYNTHETIC exporter output in the exposition format, to
                 be served to and scraped by a real Prometheus (tests/lib/fixture_scrape.py
                 prepare takes this directory next to ../shared/fixtures/exporters). Every file is
                 named synthetic_*.prom and starts with a "# SYNTHETIC" comment. One DCGM exporter
                 per workload-label variant, each on its own node and namespace, with label sets
                 copied from the real fixtures (see EXPOSITION_VARIANTS), and two vLLM pods shaped
                 like the real vLLM 0.x fixture but with non-zero queues and a served model name
                 without '/' (model_name="qwen-coder"). Expected values: exporters_oracle.py, from
                 these files.

DESIGN: values are constant over time and a pure function of the GPU slot table below (so of
the labels), so a test can compute any expected answer with jq from expected.json. Samples run
from now-START_OFFSET to now-START_OFFSET+SPAN every STEP seconds: they reach into the future on
purpose, so every instant query (5 m lookback) during a test run finds a sample.

Label set (dcgm-exporter with --kubernetes, scraped with honorLabels: true, the common default):
gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION, container,
namespace, pod. Idle GPUs carry no pod/namespace/container labels (the exporter writes them as
"", which Prometheus drops). Variants, see reference/field-notes.md 5.2:
  --exported-labels   scraped with honorLabels: false: the workload's labels become
                      exported_namespace/exported_pod/exported_container and namespace/pod/
                      container name the exporter pod; job/instance/service/endpoint are added.
  --hostname-label L  the host label's name (dcgm-exporter master renamed Hostname to hostname).
  --ack-labels        Alibaba ACK flavour: device series also carry NodeName (seed 001's rules
                      map NodeName to nodes).
Always present as well: ACK per-process series (DCGM_CUSTOM_PROCESS_SM_UTIL,
DCGM_CUSTOM_PROCESS_MEM_USED, DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED with NodeName/NamespaceName/
PodName labels, seed 001) and seed 004's dcgm_gpu_utilization{node,pod,namespace} and
kube_pod_labels{pod,namespace,label_app}.

Values that exercise formatting: GPU_UTIL 12.5 (fractional), 0 (other-0 and the idle GPU),
DCGM_FI_PROF_GR_ENGINE_ACTIVE NaN for ml/other-0 (profiling unavailable), memory ratios such as
1024/16384 = 0.0625 (62.5m, which milli-quantities truncate). VictoriaMetrics does not store NaN
samples, so that one series is missing there (expected.json marks it "in_victoria_metrics": false).
"""

import argparse
import json
import math
import os
import sys
import time
import uuid

DRIVER_VERSION = "535.129.03"
UUID_NAMESPACE = uuid.UUID("6d1f9e5c-55c1-4f4e-9c59-3c4b0a7e2f10")

NODES = {
    "gpu-node-1": {"model": "NVIDIA A100-SXM4-40GB", "fb_total": 40960, "bus": 0x07},
    "gpu-node-2": {"model": "NVIDIA H100 80GB HBM3", "fb_total": 81559, "bus": 0x18},
}
FB_RESERVED = 512  # MiB the driver keeps back on every card

# One row per GPU: node, gpu index, owning pod (namespace, name) or None for an idle GPU,
# DCGM_FI_DEV_GPU_UTIL (%), framebuffer used by the pod's process (MiB), ACK per-process SM
# utilisation (%).
GPU_SLOTS = [
    ("gpu-node-1", 0, ("ml", "bert-0"), 12.5, 8192, 23),
    ("gpu-node-1", 1, ("ml", "bert-1"), 40, 4096, 18),
    ("gpu-node-1", 2, ("vision", "resnet-0"), 90, 16384, 70),
    ("gpu-node-1", 3, ("default", "cuda-test-0"), 6, 1024, 4),
    ("gpu-node-2", 0, ("ml", "bert-2"), 75, 12288, 40),
    ("gpu-node-2", 1, ("ml", "bert-2"), 25, 4096, 20.5),
    ("gpu-node-2", 2, ("ml", "other-0"), 0, 2048, 0),
    ("gpu-node-2", 3, ("vision", "resnet-1"), 60, 30720, 45),
    ("gpu-node-2", 4, None, 0, 0, 0),
]

# Pods: labels, container name, GPU memory allocated to the container (MiB, ACK).
PODS = [
    ("ml", "bert-0", {"app": "bert", "tier": "inference"}, "server", 16384),
    ("ml", "bert-1", {"app": "bert", "tier": "inference"}, "server", 16384),
    ("ml", "bert-2", {"app": "bert", "tier": "inference"}, "server", 32768),
    ("ml", "other-0", {"app": "other", "tier": "inference"}, "server", 16384),
    ("vision", "resnet-0", {"app": "resnet"}, "server", 16384),
    ("vision", "resnet-1", {"app": "resnet"}, "server", 32768),
    ("default", "cuda-test-0", {"app": "cuda-test"}, "cuda-test", 16384),
]

# GR_ENGINE_ACTIVE is NaN for this pod (DCP profiling unavailable on its card).
NAN_PROFILING_POD = ("ml", "other-0")


# --exposition: one synthetic dcgm-exporter per label variant. Label order and names copied from
# the real fixtures (../shared/fixtures/exporters):
#   k8s-Hostname   dcgm-exporter 3.x --kubernetes (issue363/issue713 shape): Hostname=<node>,
#                  DCGM_FI_DRIVER_VERSION, container/namespace/pod; scraped with honor_labels: false
#                  these become exported_container/exported_namespace/exported_pod;
#   k8s-hostname   dcgm-exporter HEAD (T4 hami-workshop shape): pci_bus_id, lowercase hostname;
#   old-namespace  --use-old-namespace on a GKE-style build (issue272 shape): lowercase metric
#                  names, lowercase uuid, container_name/pod_name/pod_namespace. The excerpt
#                  has no host label; Hostname=<node> is added here (3.x writes it) so the variant
#                  has a node value;
#   ack            Alibaba ACK (the label names of seed 001's per-process series, on DCGM_FI_*
#                  device series; no real ACK device sample is public): NodeName=<node>,
#                  NamespaceName/PodName/ContainerName, and Hostname holding the exporter pod's
#                  name (DaemonSet without hostNetwork), so the node comes from NodeName alone.
# Idle GPUs carry the workload labels with empty values, as every exporter writes them.
EXPOSITION_VARIANTS = [
    # name, node, namespace, pod prefix, model name
    ("k8s-Hostname", "syn-node-k8s", "syn-k8s", "k8s", "NVIDIA A100-SXM4-80GB"),
    ("k8s-hostname", "syn-node-hostname", "syn-hostname", "hn", "Tesla T4"),
    ("old-namespace", "syn-node-oldns", "syn-oldns", "oldns", "NVIDIA A100 80GB PCIe"),
    ("ack", "syn-node-ack", "syn-ack", "ack", "NVIDIA A10"),
]
# One row per GPU or MIG instance: gpu, MIG instance id (None: whole GPU), owner ("train", "infer"
# or None: idle), GPU_UTIL (%), FB_USED, FB_FREE (MiB), GR_ENGINE_ACTIVE (ratio). A variant's
# values are offset by its index (utilisation +3 x index, engine +index/32, FB_USED +256 x
# index MiB, FB_FREE as much less) so that no two variants agree. Engine ratios are binary
# fractions: 100 x avg(ratios) (PromQL) and avg(100 x ratio) (the oracle) are then the same
# double, so neither truncates to one milli-unit less than the other.
EXPOSITION_SLOTS = [
    (0, None, "train", 31, 4000, 12000, 0.25),
    (1, None, "train", 57, 6000, 10000, 0.5),
    (2, None, "infer", 82, 12000, 4000, 0.75),
    (3, None, None, 0, 0, 16000, 0),
    (4, "1", "infer", None, 9000, 11000, 0.625),
    (4, "2", None, None, 0, 20000, 0),
]
EXPOSITION_HELP = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "Memory utilization (in %).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
}
# --vllm (scripts/demo.sh): per bert pod, vllm:num_requests_waiting, vllm:num_requests_running,
# vllm:gpu_cache_usage_perc.
VLLM_PODS = [("bert-0", 2, 4, 0.35), ("bert-1", 7, 8, 0.82), ("bert-2", 0, 3, 0.12)]
VLLM_NAMES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:gpu_cache_usage_perc")


def build_vllm_series():
    """[(metric name, labels, value)], family by family."""
    return [(name, {"namespace": "ml", "pod": row[0], "model_name": "bert-intent"}, float(row[1 + i]))
            for i, name in enumerate(VLLM_NAMES) for row in VLLM_PODS]


# vLLM 0.x pods (shape of vllm-v0_metrics_Qwen2.5-Coder-32B_production-stack-issue318.prom, whose
# queue is empty): file stem (tests/lib/fixture_scrape.py maps it to pod vllm-qwen-N), running,
# waiting, KV-cache ratio.
EXPOSITION_VLLM = [
    ("synthetic_vllm-qwen-1", 6, 12, 0.83),
    ("synthetic_vllm-qwen-2", 4, 7, 0.41),
]
VLLM_HELP = [
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage."),
]


def exposition_labels(variant, gpu, mig, owner):
    name, node, namespace, prefix, model = variant
    pod = "%s-%s-0" % (prefix, owner) if owner else ""
    ns = namespace if owner else ""
    container = owner if owner else ""
    uid = gpu_uuid(node, gpu)
    mig_labels = [("GPU_I_PROFILE", "3g.40gb"), ("GPU_I_ID", mig)] if mig else []
    if name == "k8s-Hostname":
        return ([("gpu", str(gpu)), ("UUID", uid), ("device", "nvidia%d" % gpu), ("modelName", model)]
                + mig_labels + [("Hostname", node), ("DCGM_FI_DRIVER_VERSION", DRIVER_VERSION),
                                ("container", container), ("namespace", ns), ("pod", pod)])
    if name == "k8s-hostname":
        return ([("gpu", str(gpu)), ("UUID", uid), ("pci_bus_id", "00000000:00:%02X.0" % (4 + gpu)),
                 ("device", "nvidia%d" % gpu), ("modelName", model)]
                + mig_labels + [("hostname", node), ("container", container), ("namespace", ns),
                                ("pod", pod)])
    if name == "old-namespace":
        return ([("gpu", str(gpu)), ("uuid", uid), ("device", "nvidia%d" % gpu), ("modelName", model)]
                + mig_labels + [("Hostname", node), ("container_name", container),
                                ("pod_name", pod), ("pod_namespace", ns)])
    return ([("gpu", str(gpu)), ("UUID", uid), ("device", "nvidia%d" % gpu), ("modelName", model)]
            + mig_labels + [("Hostname", "ack-prometheus-gpu-exporter-" + str(uuid.uuid5(UUID_NAMESPACE, node))[:5]),
                            ("NodeName", node), ("NamespaceName", ns), ("PodName", pod),
                            ("ContainerName", container)])


def write_exposition(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for index, variant in enumerate(EXPOSITION_VARIANTS):
        lowercase = variant[0] == "old-namespace"
        lines = ["# SYNTHETIC dcgm-exporter output (tests/lib/gen_dcgm.py --exposition), label variant "
                 "%s: not a real exporter's output\n" % variant[0]]
        for metric, help_text in EXPOSITION_HELP.items():
            name = metric.lower() if lowercase else metric
            lines.append("# HELP %s %s\n# TYPE %s gauge\n" % (name, help_text, name))
            for gpu, mig, owner, util, used, free, active in EXPOSITION_SLOTS:
                if metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL") and mig:
                    continue  # not reported on MIG instances
                value = {"DCGM_FI_DEV_GPU_UTIL": util + 3 * index if util else 0,
                         "DCGM_FI_DEV_MEM_COPY_UTIL": (util + 3 * index) / 2 if util else 0,
                         "DCGM_FI_DEV_FB_USED": used + 256 * index if used else 0,
                         "DCGM_FI_DEV_FB_FREE": free - 256 * index if used else free,
                         "DCGM_FI_PROF_GR_ENGINE_ACTIVE": active + index / 32 if active else 0}[metric]
                labels = ",".join('%s="%s"' % kv for kv in exposition_labels(variant, gpu, mig, owner))
                lines.append("%s{%s} %s\n" % (name, labels, format_value(float(value))))
        with open(os.path.join(out_dir, "synthetic_dcgm-exporter_%s.prom" % variant[0]), "w",
                  encoding="utf-8") as out:
            out.writelines(lines)
    for stem, running, waiting, cache in EXPOSITION_VLLM:
        with open(os.path.join(out_dir, stem + ".prom"), "w", encoding="utf-8") as out:
            out.write("# SYNTHETIC vLLM 0.x output (tests/lib/gen_dcgm.py --exposition), served as "
                      "--served-model-name qwen-coder: not a real server's output\n")
            for (name, help_text), value in zip(VLLM_HELP, (running, waiting, cache)):
                out.write("# HELP %s %s\n# TYPE %s gauge\n" % (name, help_text, name))
                out.write('%s{model_name="qwen-coder"} %s\n' % (name, float(value)))


def gpu_uuid(node, gpu):
    return "GPU-" + str(uuid.uuid5(UUID_NAMESPACE, "%s/%d" % (node, gpu)))


def pod_node(namespace, name):
    for node, _, owner, _, _, _ in GPU_SLOTS:
        if owner == (namespace, name):
            return node
    raise KeyError((namespace, name))


def pod_row(namespace, name):
    for row in PODS:
        if (row[0], row[1]) == (namespace, name):
            return row
    raise KeyError((namespace, name))


def exporter_pod(node):
    return "nvidia-dcgm-exporter-" + str(uuid.uuid5(UUID_NAMESPACE, node))[:5]


def device_labels(args, node, gpu, owner):
    """dcgm-exporter's label set for one GPU, in the exporter's order."""
    spec = NODES[node]
    labels = {
        "gpu": str(gpu),
        "UUID": gpu_uuid(node, gpu),
        "pci_bus_id": "00000000:%02X:00.0" % (spec["bus"] + gpu),
        "device": "nvidia%d" % gpu,
        "modelName": spec["model"],
        args.hostname_label: node,
        "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
    }
    if args.ack_labels:
        labels["NodeName"] = node
    workload = {}
    if owner is not None:
        namespace, name = owner
        workload = {"container": pod_row(namespace, name)[3], "namespace": namespace, "pod": name}
    if args.exported_labels:
        for key, value in workload.items():
            labels["exported_" + key] = value
        labels.update({
            "container": "nvidia-dcgm-exporter",
            "endpoint": "gpu-metrics",
            "instance": "10.0.%d.10:9400" % (list(NODES).index(node) + 1),
            "job": "nvidia-dcgm-exporter",
            "namespace": "gpu-operator",
            "pod": exporter_pod(node),
            "service": "nvidia-dcgm-exporter",
        })
    else:
        labels.update(workload)
    return labels


def build_series(args):
    """Returns [(metric name, labels dict, value float)] in output order."""
    series = []

    def add(name, labels, value):
        series.append((name, labels, float(value)))

    for node, gpu, owner, util, _, _ in GPU_SLOTS:
        add("DCGM_FI_DEV_GPU_UTIL", device_labels(args, node, gpu, owner), util)
    for node, gpu, owner, util, _, _ in GPU_SLOTS:
        add("DCGM_FI_DEV_MEM_COPY_UTIL", device_labels(args, node, gpu, owner), util / 2)
    for node, gpu, owner, _, fb_used, _ in GPU_SLOTS:
        add("DCGM_FI_DEV_FB_USED", device_labels(args, node, gpu, owner), fb_used)
    for node, gpu, owner, _, fb_used, _ in GPU_SLOTS:
        free = NODES[node]["fb_total"] - FB_RESERVED - fb_used
        add("DCGM_FI_DEV_FB_FREE", device_labels(args, node, gpu, owner), free)
    for node, gpu, owner, util, _, _ in GPU_SLOTS:
        value = math.nan if owner == NAN_PROFILING_POD else util / 100
        add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", device_labels(args, node, gpu, owner), value)

    # ACK (seed 001): one process per pod and GPU.
    def process_labels(node, gpu, owner, index):
        namespace, name = owner
        return {
            "gpu": str(gpu),
            "UUID": gpu_uuid(node, gpu),
            "device": "nvidia%d" % gpu,
            "modelName": NODES[node]["model"],
            "Hostname": node,
            "NodeName": node,
            "NamespaceName": namespace,
            "PodName": name,
            "ContainerName": pod_row(namespace, name)[3],
            "ProcessId": str(4100 + index),
            "ProcessName": "python",
            "AllocateMode": "1",
        }

    busy = [slot for slot in GPU_SLOTS if slot[2] is not None]
    for index, (node, gpu, owner, _, _, sm_util) in enumerate(busy):
        add("DCGM_CUSTOM_PROCESS_SM_UTIL", process_labels(node, gpu, owner, index), sm_util)
    for index, (node, gpu, owner, _, fb_used, _) in enumerate(busy):
        add("DCGM_CUSTOM_PROCESS_MEM_USED", process_labels(node, gpu, owner, index), fb_used)
    for namespace, name, _, container, allocated in PODS:
        labels = {
            "NodeName": pod_node(namespace, name),
            "NamespaceName": namespace,
            "PodName": name,
            "ContainerName": container,
        }
        add("DCGM_CUSTOM_CONTAINER_MEM_ALLOCATED", labels, allocated)

    # Seed 004: the old exporter's name with node/pod/namespace, and kube-state-metrics' labels.
    for node, gpu, owner, util, _, _ in GPU_SLOTS:
        labels = {"gpu": str(gpu), "uuid": gpu_uuid(node, gpu), "node": node}
        if owner is not None:
            labels.update({"namespace": owner[0], "pod": owner[1]})
        add("dcgm_gpu_utilization", labels, util)
    for namespace, name, labels, _, _ in PODS:
        add("kube_pod_labels", {"namespace": namespace, "pod": name, "label_app": labels["app"]}, 1)
    return series


def cuda_test_gpu_avg(series):
    """Evaluates seed 004's rule on `series`:
    avg(max by(node,pod,namespace)(dcgm_gpu_utilization)
        * on(pod) group_left(label_app) max by(pod,label_app)(kube_pod_labels{label_app="cuda-test"}))
    """
    per_pod = {}
    for name, labels, value in series:
        if name == "dcgm_gpu_utilization" and "pod" in labels:
            key = (labels["node"], labels["pod"], labels["namespace"])
            per_pod[key] = max(per_pod.get(key, -math.inf), value)
    cuda_pods = {labels["pod"]: value for name, labels, value in series
                 if name == "kube_pod_labels" and labels.get("label_app") == "cuda-test"}
    products = [value * cuda_pods[pod] for (_, pod, _), value in per_pod.items() if pod in cuda_pods]
    return sum(products) / len(products) if products else None


def format_value(value):
    if math.isnan(value):
        return "NaN"
    if value == int(value):
        return str(int(value))
    return repr(value)


def escape_label_value(value):
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_labels(labels):
    return ",".join('%s="%s"' % (key, escape_label_value(value)) for key, value in labels.items())


def write_samples(path, series, timestamps, ts_scale, trailer):
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        current = None
        for name, labels, value in series:
            if name != current:
                out.write("# TYPE %s gauge\n" % name)
                current = name
            prefix = "%s{%s} %s " % (name, format_labels(labels), format_value(value))
            out.write("".join("%s%d\n" % (prefix, ts * ts_scale) for ts in timestamps))
        out.write(trailer)


def check_families_contiguous(series):
    seen, previous = set(), None
    for name, _, _ in series:
        if name != previous:
            if name in seen:
                raise SystemExit("gen_dcgm: metric family %s is not contiguous" % name)
            seen.add(name)
            previous = name


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--start-offset", type=int, default=120,
                        help="first sample at now minus this many seconds (default 120)")
    parser.add_argument("--span", type=int, default=3600, help="seconds covered (default 3600)")
    parser.add_argument("--step", type=int, default=60, help="seconds between samples (default 60)")
    parser.add_argument("--now", type=int, default=None, help="fix 'now' (unix s) for reproducibility")
    parser.add_argument("--ack-labels", action="store_true",
                        help="device series also carry NodeName (Alibaba ACK exporter)")
    parser.add_argument("--exported-labels", action="store_true",
                        help="honorLabels: false scrape: exported_namespace/exported_pod/...")
    parser.add_argument("--hostname-label", default="Hostname",
                        help="name of the host label (Hostname, or hostname on dcgm-exporter master)")
    parser.add_argument("--vllm", action="store_true",
                        help="also write vllm.om (the demo's vLLM queue gauges, see the docstring)")
    parser.add_argument("--exposition", action="store_true",
                        help="also write OUT_DIR/exporters/synthetic_*.prom (see the docstring)")
    args = parser.parse_args(argv)
    if args.step <= 0 or args.span < 0:
        parser.error("--step must be > 0 and --span >= 0")

    now = args.now if args.now is not None else int(time.time())
    start = now - args.start_offset
    timestamps = list(range(start, start + args.span + 1, args.step))
    series = build_series(args)
    check_families_contiguous(series)

    os.makedirs(args.out_dir, exist_ok=True)
    if args.exposition:
        write_exposition(os.path.join(args.out_dir, "exporters"))
    vllm = build_vllm_series() if args.vllm else []
    if vllm:
        write_samples(os.path.join(args.out_dir, "vllm.om"), vllm, timestamps, 1, "# EOF\n")
    write_samples(os.path.join(args.out_dir, "dcgm.om"), series, timestamps, 1, "# EOF\n")
    write_samples(os.path.join(args.out_dir, "dcgm.prom"), series, timestamps, 1000, "")

    pods = [{"namespace": ns, "name": name, "labels": labels, "phase": "Running",
             "nodeName": pod_node(ns, name)} for ns, name, labels, _, _ in PODS]
    with open(os.path.join(args.out_dir, "pods.json"), "w", encoding="utf-8") as out:
        json.dump(pods, out, indent=1)
        out.write("\n")

    expected = {
        "now": now,
        "start": timestamps[0],
        "end": timestamps[-1],
        "step": args.step,
        "samples_per_series": len(timestamps),
        "variant": {"ack_labels": args.ack_labels, "exported_labels": args.exported_labels,
                    "hostname_label": args.hostname_label},
        "nodes": sorted(NODES),
        "pods": pods,
        "series": [{"name": name, "labels": labels,
                    "value": "NaN" if math.isnan(value) else value,
                    "in_victoria_metrics": not math.isnan(value)}
                   for name, labels, value in series],
        "recording_rules": {
            "cuda_test_gpu_avg": {"labels": {"namespace": "default", "deployment": "cuda-test"},
                                  "value": cuda_test_gpu_avg(series)},
        },
    }
    if vllm:
        expected["vllm"] = [{"name": name, "labels": labels, "value": value} for name, labels, value in vllm]
    with open(os.path.join(args.out_dir, "expected.json"), "w", encoding="utf-8") as out:
        json.dump(expected, out, indent=1)
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
