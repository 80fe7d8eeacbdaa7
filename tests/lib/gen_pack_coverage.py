#!/usr/bin/env python3
"""gen_pack_coverage.py: generated data for tests/e2e/test_pack_coverage.sh, the situations in
which the rule packs (config/packs) once counted GPUs or engines wrongly.

Usage: gen_pack_coverage.py OUT_DIR [--now UNIX_S]

Writes into OUT_DIR:
  data.om    OpenMetrics (timestamps in s) for `promtool tsdb create-blocks-from openmetrics`
  data.prom  the same samples in the Prometheus text format with ms timestamps, for
             VictoriaMetrics' /api/v1/import/prometheus
  pods.json  EXTRA_PODS_JSON for tests/lib/fake_kube_apiserver.py: every workload pod, exporter
             pod and inference server pod below, Running

The series are written as a Prometheus stores them after scraping (target labels job, instance,
namespace, pod, container, service, endpoint; honor_labels: true or false as each install says),
with the scrape's `up` series, every 15 s from now-900 s to now+3600 s (so an instant query during
the test finds a sample and a 2-minute rate has 8 points). Gauges are constant; counters grow by a
fixed step per sample. Expected values: tests/lib/pack_coverage_oracle.py, from these files.

Situations (one Prometheus holds them all):
- several dcgm-exporter installs: a 3.x install with the default collectors (FB_FREE, DCP) and
  honor_labels: true on cov-node-full; a 4.x install with a trimmed collectors file (GPU_UTIL and
  FB_USED only, lowercase `hostname`) scraped with honor_labels: false on cov-node-trim; Alibaba
  ACK's exporter (NodeName/NamespaceName/PodName) on cov-node-ack, where one card (no DCP, no
  FB_FREE, no MEM_COPY_UTIL) lacks inputs the other has and an idle card's GR_ENGINE_ACTIVE is NaN; pods of
  namespace `mixed` on all three, so the namespace mixes GPUs with and without FB_FREE (the
  issue's 136 % case: used summed over every GPU, capacity over those with FB_FREE); on
  cov-node-trim a card without GPU_UTIL, on cov-node-ack one without MEM_COPY_UTIL;
- a time-sliced card on cov-node-full shared by two pods of `shared` (one copy of its series per
  pod): one unit in the namespace's and the node's values;
- MIG beside whole GPUs on cov-node-mig: card 0 in MIG mode with two 3g.40gb instances and the
  card's own series (GPU_UTIL, MEM_COPY_UTIL, FB_USED/FB_FREE, GR_ENGINE_ACTIVE) beside them,
  card 1 a whole GPU;
- a rolling vLLM upgrade of model `chat` in namespace `serve`: a 0.8 replica (only
  vllm:gpu_cache_usage_perc, no engine label), a 0.10 replica printing both KV-cache names, a
  0.11 replica with two data-parallel engines (engine="0"/"1", only vllm:kv_cache_usage_perc);
  an IBM TGIS-style replica (model `granite`) printing vllm:num_requests_* and tgi_* for the same
  queue; a plain TGI pod (tgi_* only, no model label);
- Triton: triton-0 serves `resnet` (queue-duration and success counters) and `bert` with
  counter_latencies off (success counter only); triton-1 serves `resnet`.
Values are binary fractions or small integers so that PromQL's and the oracle's arithmetic give
the same doubles (the test compares milli-quantities exactly).
"""

import argparse
import json
import math
import os
import sys
import time

STEP = 15
BEFORE, AFTER = 900, 3600
DRIVER = "550.54.15"

GU, MC, FU, FF, EA = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED",
                      "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
NAN = float("nan")

# dcgm-exporter installs: name, job, instance, exporter (namespace, pod), node, host label,
# honor_labels, workload label style, families the collectors file has, model name.
INSTALLS = [
    ("full-3.x", "gpu-metrics", "10.0.1.1:9400", ("gpu-operator", "nvidia-dcgm-exporter-f5x2q"),
     "cov-node-full", "Hostname", True, "k8s", (GU, MC, FU, FF, EA), "NVIDIA A100-SXM4-40GB"),
    ("trimmed-4.x", "nvidia-dcgm-exporter", "10.0.2.1:9400", ("gpu-operator", "nvidia-dcgm-exporter-t7k9m"),
     "cov-node-trim", "hostname", False, "k8s", (GU, FU), "NVIDIA L40S"),
    ("ack", "ack-gpu-exporter", "10.0.3.1:9500", ("arms-prom", "ack-prometheus-gpu-exporter-w2cz8"),
     "cov-node-ack", "NodeName", True, "ack", (GU, MC, FU, FF, EA), "NVIDIA A10"),
    ("mig", "gpu-metrics", "10.0.4.1:9400", ("gpu-operator", "nvidia-dcgm-exporter-m3g4n"),
     "cov-node-mig", "Hostname", True, "k8s", (GU, MC, FU, FF, EA), "NVIDIA A100 80GB PCIe"),
]
# Per install: gpu, MIG instance id (None: the card itself), owner (namespace, pod) or None,
# {family: value} (a family missing from the dict is not reported for that unit), and optionally
# more labels.
UNITS = {
    "full-3.x": [
        (0, None, ("mixed", "train-0"), {GU: 80, MC: 40, FU: 30000, FF: 10000, EA: 0.75}),
        (1, None, ("mixed", "train-0"), {GU: 20, MC: 10, FU: 6000, FF: 34000, EA: 0.25}),
        (2, None, None, {GU: 0, MC: 0, FU: 0, FF: 40000, EA: 0}),
        # a time-sliced card (--kubernetes-virtual-gpus): one copy of its series per pod, with
        # the card's values
        (3, None, ("shared", "ts-0"), {GU: 60, MC: 30, FU: 4000, FF: 36000, EA: 0.5}, {"vgpu": "0"}),
        (3, None, ("shared", "ts-1"), {GU: 60, MC: 30, FU: 4000, FF: 36000, EA: 0.5}, {"vgpu": "1"}),
    ],
    "trimmed-4.x": [
        (0, None, ("mixed", "train-1"), {GU: 90, FU: 40000}),
        (1, None, ("mixed", "infer-0"), {GU: 50, FU: 30000}),
        # a card whose GPU_UTIL the exporter does not write (DCGM answered blank)
        (2, None, ("mixed", "infer-0"), {FU: 2048}),
    ],
    "ack": [
        (0, None, ("mixed", "ack-0"), {GU: 70, MC: 35, FU: 12000, FF: 12000, EA: 0.5}),
        # an older card on the same node: no DCP profiling, no FB_FREE, no MEM_COPY_UTIL
        (1, None, ("mixed", "ack-0"), {GU: 30, FU: 8000}),
        (2, None, None, {GU: 10, MC: 5, FU: 1000, FF: 23000, EA: NAN}),
    ],
    "mig": [
        # card 0 in MIG mode: the card's own series (no GPU_I_ID, no pod) beside its instances
        (0, None, None, {GU: 100, MC: 12, FU: 8500, FF: 72000, EA: 0.875}),
        (0, "1", ("mig", "mig-0"), {FU: 5000, FF: 35000, EA: 0.25}),
        (0, "2", ("mig", "mig-1"), {FU: 3000, FF: 37000, EA: 0.75}),
        (1, None, ("mig", "whole-0"), {GU: 40, MC: 20, FU: 8000, FF: 32000, EA: 0.375}),
    ],
}
# Inference servers in namespace `serve`: pod, job, instance, [(metric, labels, value)].
CHAT = {"model_name": "chat"}
INFERENCE = [
    ("chat-old-0", "vllm", "10.1.0.1:8000", [  # vLLM 0.8 (V0): old KV-cache name, no engine label
        ("vllm:num_requests_waiting", CHAT, 4), ("vllm:num_requests_running", CHAT, 8),
        ("vllm:gpu_cache_usage_perc", CHAT, 0.5)]),
    ("chat-mid-0", "vllm", "10.1.0.2:8000", [  # vLLM 0.10: both KV-cache names, engine="0"
        ("vllm:num_requests_waiting", dict(CHAT, engine="0"), 2),
        ("vllm:num_requests_running", dict(CHAT, engine="0"), 6),
        ("vllm:kv_cache_usage_perc", dict(CHAT, engine="0"), 0.25),
        ("vllm:gpu_cache_usage_perc", dict(CHAT, engine="0"), 0.25)]),
    ("chat-new-0", "vllm", "10.1.0.3:8000", [  # vLLM 0.11, data-parallel size 2
        ("vllm:num_requests_waiting", dict(CHAT, engine="0"), 3),
        ("vllm:num_requests_waiting", dict(CHAT, engine="1"), 1),
        ("vllm:num_requests_running", dict(CHAT, engine="0"), 5),
        ("vllm:num_requests_running", dict(CHAT, engine="1"), 7),
        ("vllm:kv_cache_usage_perc", dict(CHAT, engine="0"), 0.75),
        ("vllm:kv_cache_usage_perc", dict(CHAT, engine="1"), 0.125)]),
    ("tgis-0", "tgis", "10.1.0.4:3000", [  # IBM's vLLM fork: vllm: and tgi_ names for one queue
        ("vllm:num_requests_waiting", {"model_name": "granite"}, 6),
        ("vllm:num_requests_running", {"model_name": "granite"}, 3),
        ("vllm:gpu_cache_usage_perc", {"model_name": "granite"}, 0.375),
        ("tgi_queue_size", {}, 6), ("tgi_batch_current_size", {}, 3)]),
    ("tgi-0", "tgi", "10.1.0.5:80", [  # HF TGI: tgi_ names only, no model label
        ("tgi_queue_size", {}, 5), ("tgi_batch_current_size", {}, 2)]),
]
# Triton counters: pod, instance, model, queue-duration step (us per sample, None: counter
# latencies off), success step (requests per sample).
TRITON = [
    ("triton-0", "10.1.1.1:8002", "resnet", 1789, 27),
    ("triton-0", "10.1.1.1:8002", "bert", None, 40),
    ("triton-1", "10.1.1.2:8002", "resnet", 2113, 31),
]


def dcgm_series(install):
    name, job, instance, (exp_ns, exp_pod), node, host, honor, style, families, model = install
    target = {"job": job, "instance": instance, "namespace": exp_ns, "pod": exp_pod,
              "container": "exporter", "service": "gpu-exporter", "endpoint": "metrics"}
    out = [("up", dict(target), 1.0)]
    for gpu, mig, owner, values, *more in UNITS[name]:
        labels = {"gpu": str(gpu), "UUID": "GPU-%s-%d" % (node, gpu), "device": "nvidia%d" % gpu,
                  "modelName": model}
        for extra in more:
            labels.update(extra)
        if mig:
            labels.update({"GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": mig})
        if style == "ack":
            labels.update({"Hostname": exp_pod, "NodeName": node})
            if owner:
                labels.update({"NamespaceName": owner[0], "PodName": owner[1], "ContainerName": "main"})
        else:
            labels.update({host: node, "DCGM_FI_DRIVER_VERSION": DRIVER})
            if owner:
                workload = {"namespace": owner[0], "pod": owner[1], "container": "main"}
                if honor:
                    labels.update(workload)
                else:
                    labels.update({"exported_" + k: v for k, v in workload.items()})
        # honor_labels true: target labels fill in what the exporter did not write (an empty
        # pod="" counts as not written); false: they always win, the exporter's went to exported_*
        for key, value in target.items():
            if not honor or key not in labels:
                labels[key] = value
        for family in families:
            if family in values:
                out.append((family, dict(labels), float(values[family])))
    return out


def inference_series():
    out = []
    for pod, job, instance, rows in INFERENCE:
        target = {"job": job, "instance": instance, "namespace": "serve", "pod": pod,
                  "container": "server", "service": pod.rsplit("-", 2)[0], "endpoint": "metrics"}
        out.append(("up", dict(target), 1.0))
        for metric, labels, value in rows:
            out.append((metric, dict(labels, **target), float(value)))
    for pod in sorted({row[0] for row in TRITON}):
        instance = [row[1] for row in TRITON if row[0] == pod][0]
        out.append(("up", {"job": "triton", "instance": instance, "namespace": "serve", "pod": pod,
                           "container": "triton", "service": "triton", "endpoint": "metrics"}, 1.0))
    return out


def triton_counters():
    """[(metric, labels, step)]: counters, value = step x sample index."""
    out = []
    for pod, instance, model, duration, success in TRITON:
        labels = {"model": model, "version": "1", "job": "triton", "instance": instance,
                  "namespace": "serve", "pod": pod, "container": "triton", "service": "triton",
                  "endpoint": "metrics"}
        if duration is not None:
            out.append(("nv_inference_queue_duration_us", labels, duration))
        out.append(("nv_inference_request_success", labels, success))
    return out


def fmt_value(v):
    if math.isnan(v):
        return "NaN"
    return str(int(v)) if v == int(v) else repr(v)


def fmt_labels(labels):
    return ",".join('%s="%s"' % (k, labels[k]) for k in sorted(labels))


def write(out_dir, gauges, counters, now):
    stamps = list(range(now - BEFORE, now + AFTER + 1, STEP))
    families = {}
    for metric, labels, value in gauges:
        families.setdefault(metric, []).append((labels, lambda i, v=value: v))
    for metric, labels, step in counters:
        families.setdefault(metric, []).append((labels, lambda i, s=step: float(s * i)))
    with open(os.path.join(out_dir, "data.om"), "w", encoding="utf-8") as om, \
            open(os.path.join(out_dir, "data.prom"), "w", encoding="utf-8") as prom:
        for metric in sorted(families):
            # Typed gauge even for the counters: OpenMetrics counters need a _total suffix, and
            # a stored series has no type anyway (rate() reads the same samples).
            om.write("# TYPE %s gauge\n" % metric)
            for labels, value_at in families[metric]:
                text = fmt_labels(labels)
                for i, ts in enumerate(stamps):
                    v = fmt_value(value_at(i))
                    om.write("%s{%s} %s %d\n" % (metric, text, v, ts))
                    prom.write("%s{%s} %s %d\n" % (metric, text, v, ts * 1000))
        om.write("# EOF\n")


def pods():
    out = []
    for install in INSTALLS:
        ns, pod = install[3]
        out.append({"namespace": ns, "name": pod, "labels": {"app": "gpu-exporter"},
                    "phase": "Running", "nodeName": install[4]})
        for _, _, owner, *_ in UNITS[install[0]]:
            spec = owner and {"namespace": owner[0], "name": owner[1], "labels": {"app": owner[1].rsplit("-", 1)[0]},
                              "phase": "Running", "nodeName": install[4]}
            if spec and spec not in out:
                out.append(spec)
    for pod in [row[0] for row in INFERENCE] + sorted({row[0] for row in TRITON}):
        out.append({"namespace": "serve", "name": pod, "labels": {"app": pod.rsplit("-", 2)[0] if pod.startswith("chat") else pod.rsplit("-", 1)[0]},
                    "phase": "Running", "nodeName": "cov-node-serve"})
    return out


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--now", type=int, default=None)
    args = parser.parse_args(argv)
    now = args.now if args.now is not None else int(time.time())
    os.makedirs(args.out_dir, exist_ok=True)
    gauges = [s for install in INSTALLS for s in dcgm_series(install)] + inference_series()
    write(args.out_dir, gauges, triton_counters(), now)
    with open(os.path.join(args.out_dir, "pods.json"), "w", encoding="utf-8") as out:
        json.dump(pods(), out, indent=1)
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
