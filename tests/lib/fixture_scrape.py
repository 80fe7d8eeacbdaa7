#!/usr/bin/env python3
"""fixture_scrape.py: real exporter output (../shared/fixtures/exporters) as scrape targets for a
real Prometheus, the way a Kubernetes cluster presents it.

Usage:
  fixture_scrape.py prepare OUT_DIR FIXTURES_DIR [MORE_DIRS...]
                                                    serve/ tree, targets.json, pods.json, stored.om
                                                    (MORE_DIRS: e.g. gen_dcgm.py --exposition's
                                                    SYNTHETIC exporters/, served the same way)
  fixture_scrape.py config OUT_DIR HTTP_PORT HONOR prometheus.yml on stdout (HONOR: true|false)
  fixture_scrape.py started OUT_DIR                 the Triton target's counters go from 0 to the
                                                    fixture's values (see below)
  fixture_scrape.py zero OUT_DIR                    and back to 0 (a restart of the server)

What stands in for what:
- Each exporter is an HTTP path under OUT_DIR/serve, served by a plain HTTP server on loopback,
  with the fixture's lines verbatim. A DCGM fixture quoting several exporter pods (one Hostname/
  hostname value each, as issue #68's three scrapes) becomes one target per exporter.
- Kubernetes service discovery plus the usual ServiceMonitor relabelling (kube-prometheus, GPU
  Operator) is stood in for by static_configs whose labels are the target labels those would
  produce: job, namespace, pod, container, service, endpoint of the exporter's own pod. The
  honor_labels setting is Prometheus's own: with true the exporter's pod/namespace/container
  win, with false they become exported_* and the target's (the exporter pod's) take their place;
  an empty pod="" counts as absent, so an idle GPU then carries the exporter's pod. Prometheus
  does this, not this script.
- DaemonSet exporters' Hostname is their pod's name in some fixtures (dcgm-exporter-8cqdc): then
  that is the exporter pod's name here too; otherwise the exporter pod gets a name derived from
  the fixture.
- The stored-series fixture (*.series.txt) is not exposition but labels as Prometheus stored them
  after a scrape (instance, job, node included). It is written to stored.om for backfilling with
  exactly those labels; it has no sample values, so each series gets 1 + its gpu label (the test
  computes expectations from the same rule, documented here).
- Inference servers are scraped directly: their pod is the server's own (vllm-qwen-0, ...).
  gen_dcgm.py --exposition's synthetic vLLM pods (synthetic_vllm-qwen-N.prom) are vllm-qwen-N,
  next to the real fixture's vllm-qwen-0, all app=vllm-qwen.
- A Hostname naming an exporter pod (dcgm-exporter-..., ACK's ...gpu-exporter-...) names the
  target's pod.
- Triton's counters start at 0 (a server that has just started, same series) and become the
  fixture's values with `started`: a rate over the window then covers the fixture's totals
  exactly, so queue time per request = nv_inference_queue_duration_us / nv_inference_request_success.
  `zero` puts the counters back to 0 (a restart: rate() takes the drop as a counter reset), so a
  test can repeat the step inside the rate window however long ago the last one was; every
  counter then grows by the same multiple of its total, and the ratio stays the fixture's.

targets.json: [{"path", "fixture", "labels", "kind", "host"}]; pods.json: EXTRA_PODS_JSON for
tests/lib/fake_kube_apiserver.py (every workload pod named in a DCGM fixture, every exporter pod,
every inference pod), all Running, labelled app=<...>.
"""

import hashlib
import json
import os
import re
import sys
import time

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

INFERENCE = {  # fixture name prefix -> (job, pod, app)
    "vllm-v0_": ("vllm", "vllm-qwen-0", "vllm-qwen"),
    "vllm_docs": ("vllm", "vllm-llama-0", "vllm-llama"),
    "ibm-vllm-tgis": ("tgis", "tgis-bloom-0", "tgis-bloom"),
    "triton_": ("triton", "triton-0", "triton"),
    "synthetic_vllm-qwen-1": ("vllm", "vllm-qwen-1", "vllm-qwen"),
    "synthetic_vllm-qwen-2": ("vllm", "vllm-qwen-2", "vllm-qwen"),
}


def parse_labels(text):
    return dict(LABEL.findall(text or ""))


def short(text):
    return hashlib.sha256(text.encode()).hexdigest()[:5]


def host_of(labels):
    return labels.get("hostname", labels.get("Hostname", ""))


def is_exporter_pod(host):
    return "dcgm-exporter" in host or "gpu-exporter" in host


def split_dcgm(lines):
    """{host: [lines]} keeping every # line in every group (HELP/TYPE without samples are fine)."""
    groups, order = {}, []
    for line in lines:
        m = SAMPLE.match(line)
        if line.startswith("#") or not m:
            continue
        host = host_of(parse_labels(m.group(3)))
        if host not in groups:
            groups[host] = []
            order.append(host)
    for host in order:
        for line in lines:
            m = SAMPLE.match(line)
            if line.startswith("#") or (m and host_of(parse_labels(m.group(3))) == host):
                groups[host].append(line)
    return [(host, groups[host]) for host in order] or [("", lines)]


def write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line if line.endswith("\n") else line + "\n" for line in lines)


def zeroed(lines):
    out = []
    for line in lines:
        m = SAMPLE.match(line)
        out.append(line if line.startswith("#") or not m else
                   "%s%s 0\n" % (m.group(1), m.group(2) or ""))
    return out


def prepare(out, fixture_dirs):
    targets, pods = [], []
    paths = sorted((name, os.path.join(d, name)) for d in fixture_dirs for name in os.listdir(d))
    for name, path in paths:
        stem = name.rsplit(".", 1)[0]
        if name.endswith(".series.txt"):
            stored(out, path)
            continue
        if not name.endswith(".prom"):
            continue
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        inference = [v for k, v in INFERENCE.items() if name.startswith(k)]
        if inference:
            job, pod, app = inference[0]
            rel = "%s/metrics" % stem
            if job == "triton":
                write(os.path.join(out, "serve", rel), zeroed(lines))
                write(os.path.join(out, "triton-zero.prom"), zeroed(lines))
                write(os.path.join(out, "triton-started.prom"), lines)
            else:
                write(os.path.join(out, "serve", rel), lines)
            targets.append({"path": "/" + rel, "fixture": name, "kind": "inference", "host": "",
                            "labels": {"job": job, "namespace": "llm", "pod": pod,
                                       "container": job, "service": app, "endpoint": "metrics"}})
            pods.append({"namespace": "llm", "name": pod, "labels": {"app": app},
                         "phase": "Running", "nodeName": "gpu-node-llm"})
            continue
        for host, group in split_dcgm(lines):
            exporter = host if is_exporter_pod(host) else "nvidia-dcgm-exporter-" + short(name + host)
            rel = "%s/%s/metrics" % (stem, exporter)
            write(os.path.join(out, "serve", rel), group)
            targets.append({"path": "/" + rel, "fixture": name, "kind": "dcgm", "host": host,
                            "labels": {"job": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
                                       "pod": exporter, "container": "nvidia-dcgm-exporter",
                                       "service": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics"}})
            pods.append({"namespace": "gpu-operator", "name": exporter,
                         "labels": {"app": "nvidia-dcgm-exporter"}, "phase": "Running",
                         "nodeName": host if host and not is_exporter_pod(host) else "gpu-node-x"})
            for line in group:
                m = SAMPLE.match(line)
                if line.startswith("#") or not m:
                    continue
                labels = parse_labels(m.group(3))
                for pod_key, ns_key in (("pod", "namespace"), ("pod_name", "pod_namespace"),
                                        ("PodName", "NamespaceName")):
                    if labels.get(pod_key) and labels.get(ns_key):
                        spec = {"namespace": labels[ns_key], "name": labels[pod_key],
                                "labels": {"app": "gpu-workload"}, "phase": "Running",
                                "nodeName": "gpu-node-x"}
                        if spec not in pods:
                            pods.append(spec)
    with open(os.path.join(out, "targets.json"), "w", encoding="utf-8") as f:
        json.dump(targets, f, indent=1)
    with open(os.path.join(out, "pods.json"), "w", encoding="utf-8") as f:
        json.dump(pods, f, indent=1)


def stored(out, path):
    """The *.series.txt label sets as OpenMetrics with samples around now (value 1 + gpu)."""
    now = int(time.time())
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s*$', line.strip())
            if not m:
                continue
            labels = parse_labels(m.group(2))
            value = 1 + int(labels.get("gpu", "0"))
            text = ",".join('%s="%s"' % (k, v) for k, v in sorted(labels.items()))
            rows.append((m.group(1), text, value))
    with open(os.path.join(out, "stored.om"), "w", encoding="utf-8") as f:
        for name in sorted({r[0] for r in rows}):
            f.write("# TYPE %s gauge\n" % name)
            for t in range(now - 240, now + 3600, 60):
                for metric, text, value in rows:
                    if metric == name:
                        f.write("%s{%s} %d %d\n" % (metric, text, value, t))
        f.write("# EOF\n")
    with open(os.path.join(out, "stored.json"), "w", encoding="utf-8") as f:
        json.dump([{"name": r[0], "labels": parse_labels(r[1]), "value": r[2]} for r in rows], f)


def config(out, port, honor):
    with open(os.path.join(out, "targets.json"), encoding="utf-8") as f:
        targets = json.load(f)
    print("# fixture_scrape.py: every fixture target, honor_labels: %s" % honor)
    print("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s")
    print("storage:\n  tsdb:\n    out_of_order_time_window: 1d")
    print("scrape_configs:")
    for job in sorted({t["labels"]["job"] for t in targets}):
        print("- job_name: %s\n  honor_labels: %s\n  static_configs:" % (job, honor))
        for t in targets:
            if t["labels"]["job"] != job:
                continue
            labels = {k: v for k, v in t["labels"].items() if k != "job"}
            labels["__metrics_path__"] = t["path"]
            print("  - targets: ['127.0.0.1:%s']" % port)
            print("    labels: %s" % json.dumps(labels))


def started(out, name="triton-started.prom"):
    with open(os.path.join(out, "targets.json"), encoding="utf-8") as f:
        targets = json.load(f)
    for t in targets:
        if t["labels"]["job"] == "triton":
            dst = os.path.join(out, "serve", t["path"].lstrip("/"))
            with open(os.path.join(out, name), encoding="utf-8") as f:
                text = f.read()
            with open(dst + ".new", "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(dst + ".new", dst)  # whole files only: a scrape never reads half of one


def main(argv):
    if len(argv) >= 4 and argv[1] == "prepare":
        prepare(argv[2], argv[3:])
    elif len(argv) == 5 and argv[1] == "config":
        config(argv[2], argv[3], argv[4])
    elif len(argv) == 3 and argv[1] == "started":
        started(argv[2])
    elif len(argv) == 3 and argv[1] == "zero":
        started(argv[2], "triton-zero.prom")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
