#!/usr/bin/env python3
"""monitoring_check.py: offline checks of the monitoring objects for tests/e2e/test_monitoring.sh.

  monitoring_check.py validate CRD.yaml FILE...
      Every document of the CRD's kind in FILEs (YAML streams) is validated against the served
      version's openAPIV3Schema the way kube-apiserver validates a create with field validation
      Strict (kubectl's default): python3-jsonschema (draft 4 keywords; the x-kubernetes-*
      extensions other than preserve-unknown-fields and int-or-string have no effect here) and
      unknown fields refused wherever the schema lists properties and does not preserve unknown
      fields. One line per object: "ok FILE#N NAMESPACE/NAME" or "invalid FILE#N NAMESPACE/NAME:
      PATH: MESSAGE; ...". Exit 1 when an object is invalid or none of that kind was found.

  monitoring_check.py groups FILE
      Prints the rule groups of a Prometheus rule file, a PrometheusRule (spec.groups) or a YAML
      stream holding one, as canonical JSON (for comparing copies).

  monitoring_check.py alerts RULES.yaml OPERATIONS.md TEST.yaml
      Every alert has labels.severity, annotations summary, description and runbook_url; the
      runbook_url's fragment is the GitHub anchor of a heading of OPERATIONS.md; the promtool test
      file checks every alert at least once firing and once silent. One line per problem.

  monitoring_check.py scrape-config MONITOR.yaml TARGET TOKEN_FILE JOB_OUT
      Writes a Prometheus scrape config (one job) that scrapes TARGET (host:port) the way the first
      ServiceMonitor or PodMonitor endpoint in MONITOR.yaml says: scheme, path, TLS
      (insecureSkipVerify, serverName), the bearer token (bearerTokenFile, or the Secret an
      `authorization` names: both stand for the Prometheus service account's token, which is
      TOKEN_FILE here), relabelings and metricRelabelings. The target gets the label
      monitor=<kind>, so that one Prometheus can scrape it through both monitors at once. Fails on a field it does not translate, so nothing is left out
      silently.
"""
import json
import re
import sys

import jsonschema
import yaml


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def strict(schema):
    """A copy of an OpenAPI v3 schema in which objects refuse fields they do not list."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "nullable" in out and out.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def field_path(error):
    path = ""
    for p in error.absolute_path:
        path += f"[{p}]" if isinstance(p, int) else (("." if path else "") + str(p))
    return path or "<root>"


def cmd_validate(crd_path, files):
    crd = load_all(crd_path)[0]
    kind = crd["spec"]["names"]["kind"]
    group = crd["spec"]["group"]
    versions = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
    found = bad = 0
    for path in files:
        for n, obj in enumerate(load_all(path)):
            if obj.get("kind") != kind:
                continue
            found += 1
            meta = obj.get("metadata") or {}
            name = f'{meta.get("namespace", "")}/{meta.get("name", "")}'
            problems = []
            gv = obj.get("apiVersion", "")
            g, _, v = gv.rpartition("/")
            if g != group or v not in versions:
                problems.append(f"apiVersion: {gv!r} is not served by this CRD")
            elif not meta.get("name"):
                problems.append("metadata.name: Required value")
            else:
                schema = strict(versions[v]["schema"]["openAPIV3Schema"])
                body = {k: val for k, val in obj.items() if k != "status"}
                validator = jsonschema.Draft4Validator(schema)
                for e in sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path)):
                    problems.append(f"{field_path(e)}: {e.message}")
            if problems:
                bad += 1
                print(f"invalid {path}#{n} {name}: " + "; ".join(problems))
            else:
                print(f"ok {path}#{n} {name}")
    if not found:
        print(f"no {kind} in {' '.join(files)}")
    return 1 if bad or not found else 0


def groups_of(path):
    for d in load_all(path):
        if d.get("kind") == "PrometheusRule":
            return d["spec"]["groups"]
        if "groups" in d:
            return d["groups"]
    raise SystemExit(f"{path}: no rule groups")


def cmd_groups(path):
    print(json.dumps(groups_of(path), sort_keys=True, indent=1))
    return 0


def github_anchor(heading):
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def cmd_alerts(rules_path, doc_path, test_path):
    problems = []
    with open(doc_path) as f:
        anchors = {github_anchor(line.lstrip("#")) for line in f if line.startswith("#")}
    alerts = [r for g in groups_of(rules_path) for r in g["rules"] if "alert" in r]
    if not alerts:
        problems.append("no alert in the rule file")
    tests = yaml.safe_load(open(test_path))["tests"]
    fired, silent = set(), set()
    for t in tests:
        for c in t.get("alert_rule_test", []):
            (fired if c.get("exp_alerts") else silent).add(c["alertname"])
    for r in alerts:
        a = r["alert"]
        if not (r.get("labels") or {}).get("severity"):
            problems.append(f"{a}: no severity label")
        ann = r.get("annotations") or {}
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                problems.append(f"{a}: no {key} annotation")
        frag = ann.get("runbook_url", "").partition("#")[2]
        if frag != a.lower():
            problems.append(f"{a}: runbook_url fragment {frag!r} is not {a.lower()!r}")
        elif frag not in anchors:
            problems.append(f"{a}: {doc_path} has no heading with the anchor #{frag}")
        if a not in fired:
            problems.append(f"{a}: no promtool test where it fires")
        if a not in silent:
            problems.append(f"{a}: no promtool test where it stays silent")
    for p in problems:
        print(p)
    print(f"{len(alerts)} alerts, {len(problems)} problems")
    return 1 if problems else 0


RELABEL_KEYS = {"action": "action", "sourceLabels": "source_labels", "separator": "separator",
                "targetLabel": "target_label", "regex": "regex", "replacement": "replacement",
                "modulus": "modulus"}


def relabel_config(r):
    """The Operator's RelabelConfig (camelCase) as Prometheus' relabel_config; the Operator
    lower-cases the action, as Prometheus expects it."""
    unknown = set(r) - set(RELABEL_KEYS)
    if unknown:
        raise SystemExit(f"relabeling fields not translated: {sorted(unknown)}")
    out = {RELABEL_KEYS[k]: v for k, v in r.items()}
    if "action" in out:
        out["action"] = out["action"].lower()
    return out


def cmd_scrape_config(monitor_path, target, token_file, out_path):
    mon = next(d for d in load_all(monitor_path) if d.get("kind") in ("ServiceMonitor", "PodMonitor"))
    eps = mon["spec"].get("endpoints") or mon["spec"].get("podMetricsEndpoints")
    ep = dict(eps[0])
    job = {"job_name": f'{mon["kind"]}/{mon["metadata"]["namespace"]}/{mon["metadata"]["name"]}',
           # monitor=<kind>: the test scrapes the same target through both monitors at once
           "static_configs": [{"targets": [target], "labels": {"monitor": mon["kind"]}}]}
    job["scheme"] = ep.pop("scheme", "http")
    job["metrics_path"] = ep.pop("path", "/metrics")
    ep.pop("port")  # TARGET stands for the named port the Operator resolves
    for key, pkey in (("interval", "scrape_interval"), ("scrapeTimeout", "scrape_timeout")):
        if key in ep:
            ep.pop(key)  # the test scrapes faster; the values are checked against the CRD
    if "bearerTokenFile" in ep:
        ep.pop("bearerTokenFile")
        job["authorization"] = {"credentials_file": token_file}
    if "authorization" in ep:
        auth = ep.pop("authorization")
        if auth.get("type", "Bearer") != "Bearer" or "credentials" not in auth:
            raise SystemExit(f"authorization not translated: {auth}")
        job["authorization"] = {"credentials_file": token_file}
    tls = ep.pop("tlsConfig", {}) or {}
    tc = {}
    if tls.pop("insecureSkipVerify", False):
        tc["insecure_skip_verify"] = True
    if "serverName" in tls:
        tc["server_name"] = tls.pop("serverName")
    if tls:
        raise SystemExit(f"tlsConfig fields not translated: {sorted(tls)}")
    if tc:
        job["tls_config"] = tc
    for key, pkey in (("relabelings", "relabel_configs"), ("metricRelabelings", "metric_relabel_configs")):
        configs = [relabel_config(r) for r in ep.pop(key, [])]
        if configs:
            job[pkey] = configs
    if ep:
        raise SystemExit(f"endpoint fields not translated: {sorted(ep)}")
    with open(out_path, "w") as f:
        yaml.safe_dump(job, f, sort_keys=False)
    return 0


def main(argv):
    cmds = {"validate": lambda a: cmd_validate(a[0], a[1:]), "groups": lambda a: cmd_groups(a[0]),
            "alerts": lambda a: cmd_alerts(*a), "scrape-config": lambda a: cmd_scrape_config(*a)}
    if len(argv) < 3 or argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[argv[1]](argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
