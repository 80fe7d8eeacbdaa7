#!/usr/bin/env python3
"""fake_kube_apiserver.py: stands in for kube-apiserver in the end-to-end tests and the demo, because
no real kube-apiserver (nor etcd) can run here. Every body it serves is a real recorded response from
../shared/fixtures/kube-apiserver/ (see its README.md), or a pod object cloned from a recorded pod
with only name/namespace/labels/uid changed (plus nodeName/phase when EXTRA_PODS_JSON asks for them).
Three things are synthesised and say so where they are built: Node objects (no node was recorded),
namespaces other than `ml` (cloned from the recorded `ml` Namespace), and empty lists of resource
types that the recorded discovery lists but that hold no objects here.

Test front for `kubectl top` (--proxy-metrics ADAPTER_URL): the fake then also plays kube-aggregator
for metrics.k8s.io, as if the APIService v1beta1.metrics.k8s.io pointed at the adapter with
insecureSkipTLSVerify: /apis lists metrics.k8s.io/v1beta1 (synthesised entry, after the recorded
groups, as groupPriorityMinimum 100 sorts it), /apis/metrics.k8s.io is answered from that entry (the
aggregator answers APIGroup documents itself), every /apis/metrics.k8s.io/v1beta1[/...] request is
proxied to the adapter over TLS the way the aggregator proxies (query re-encoded with sorted keys,
the client's Authorization dropped, X-Remote-User/X-Remote-Group added, 503 "service unavailable"
text/plain when the adapter cannot be reached), and Node objects carry status.capacity and
status.allocatable (synthesised, so that `kubectl top node` can compute its percentages).

Usage:
  fake_kube_apiserver.py --cert CRT --key KEY [--port 0] [--port-file F] [--request-log LOG.jsonl]
                         [--extra-pods PODS.json] [--fixtures DIR] [--token fake-admin]
                         [--with-v1beta2] [--expire-continue] [--proxy-metrics ADAPTER_URL]

Fixtures: --fixtures, else $CMA_FIXTURES, else <repo>/../shared/fixtures/kube-apiserver.

Serves (GET only; anything else is 405, unknown paths a recorded-style 404 Status):
  /version /api /api/v1 /apis /apis/<group> /apis/<group>/<version> (recorded groups; other groups
  listed in /apis answer 404), pods (cluster-wide, per namespace, by name) with labelSelector
  (=, ==, !=, in, notin, exists, !exists, gt, lt; parse errors give the recorded 400 body when the
  selector is one of the recorded ones, else a Status built the same way), fieldSelector
  (metadata.name, metadata.namespace, status.phase, spec.nodeName), limit/continue (opaque base64
  token shaped like the real one), and Accept `as=PartialObjectMetadataList` / `as=PartialObjectMetadata`;
  nodes and namespaces the same way; configmap kube-system/extension-apiserver-authentication.

Authentication: `Authorization: Bearer <token>` must carry --token (default fake-admin; "" turns the
check off). A wrong token gets the recorded 401 body; no credentials at all are system:anonymous and get
a 403 Status shaped like the recorded one (only /version is public).

Delegated auth (stands in for kube-apiserver's TokenReview and SubjectAccessReview APIs, which the
adapter calls with its own credentials): POST /apis/authentication.k8s.io/v1/tokenreviews answers
with the recorded TokenReview response for the recorded tokens (tokenreview-valid.http → the recorded
service account; tokenreview-bad-signature.http and tokenreview-garbage.http → their recorded
authenticated:false answers); any other token gets the recorded garbage answer. POST
/apis/authorization.k8s.io/v1/subjectaccessreviews echoes the spec with the recorded `status` of
subjectaccessreview-hpa-get-custom-metric.http (allowed) when the user (or "group:<g>" of one of its
groups, or "<user>@<namespace>" for a resource request in that namespace) is in --sar-allow, else that
of subjectaccessreview-alice-denied.http. With no --sar-allow
everyone is allowed: the older e2e tests use an anonymous kubectl and test metrics, not
authorization; kube itself does not allow system:anonymous, and test_auth.sh sets an allow list.
Test controls: GET /__fake/sar-allow?users=a,b (replace the list), GET /__fake/sar-log (every SAR
body received, oldest first), POST /__fake/auth-configmap (JSON object: replaces the data of
ConfigMap kube-system/extension-apiserver-authentication, to rotate CAs), GET
/__fake/tokens?accept=t1,t2 (replace the accepted bearer tokens, to rotate the adapter's own
credential; like every request it must carry an accepted token).

APIServices (--apiservice NAME=available|unavailable, repeatable; stands in for kube-apiserver's
apiregistration.k8s.io API as `custom-metrics-adapter check` reads it): GET
/apis/apiregistration.k8s.io/v1/apiservices/NAME answers the recorded APIService of
v1beta1/v1beta2.custom.metrics.k8s.io in that state (apiservice-<version>-<state>.json); other names
are the recorded v1beta1 object with metadata.name, spec.group and spec.version changed
(SYNTHESISED); names not given answer the recorded-style 404. Test control: GET
/__fake/apiservice?name=N&state=available|unavailable|absent. With --proxy-custom-metrics (needs
--proxy-metrics ADAPTER_URL), /apis/custom.metrics.k8s.io/v1beta1 and v1beta2 (and below) are proxied
to the adapter as well, as the aggregator does for an APIService pointing at it.

EXTRA_PODS_JSON (--extra-pods): a JSON array of {namespace, name, labels, phase, nodeName} and
optionally generateName, annotations, ownerReferences (copied into metadata as given) and
"shape": "small". An entry naming a recorded pod (ml/bert-0 ...) changes that pod's labels/phase/nodeName
in place; any other entry becomes a clone of the recorded bert-0 (the Running object, or the recorded
Pending one for phase Pending); with "shape": "small" the clone is cut down (SYNTHESISED) to metadata
name/namespace/uid/resourceVersion/creationTimestamp/labels, spec.nodeName and status.phase.

Test control (stands in for `kubectl apply -f crd.yaml`; no such endpoint exists in kube-apiserver):
GET /__fake/add-api-resource?group=G&version=V&resource=R&kind=K&namespaced=true adds an API group
(SYNTHESISED, shaped like the recorded discovery documents) to /apis, /apis/G and /apis/G/V at run
time, as installing a CustomResourceDefinition does; its objects list empty.

MetricRules (--metric-rules CRD.yaml): the custom resource metricrules.metrics.custom-metrics-adapter.dev
(deploy/components/metric-rules/crd.yaml) as kube-apiserver serves it once that CRD is installed:
discovery, LIST, WATCH (bookmarks, a dropped watch, 410 Gone), GET, create, and status subresource
writes checked against the CRD's schema, with test controls under /__fake/metricrules/. Nothing of
it was recorded; tests/lib/fake_metric_rules.py says what each answer stands in for.

Every request is appended to the request log as one JSON line: time, method, path, raw query, decoded
query parameters, selected headers, status and body size.
"""

import argparse
import base64
import copy
import email.utils
import json
import os
import re
import signal
import socketserver
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

PF_HEADERS = [
    ("X-Kubernetes-Pf-Flowschema-Uid", "fdf98aa4-cb78-4e56-bc03-e976e4621360"),
    ("X-Kubernetes-Pf-Prioritylevel-Uid", "a8af2ebd-72b8-4bbb-98a3-2bef6fbc1e9c"),
]
# Go's net/http sends a body with Content-Length when the handler's output fits its 2048-byte
# buffer, and chunked otherwise; the recorded exchanges follow that rule.
CHUNKING_THRESHOLD = 2048
CHUNK_SIZE = 4096
LOGGED_HEADERS = ["Accept", "Accept-Encoding", "User-Agent", "Authorization", "Content-Type",
                  "Impersonate-User", "Kubectl-Command"]
UUID_NAMESPACE = uuid.UUID("0f7a4c43-2f5e-4a8e-b0a1-6f1d3c2b9e77")

# Recorded groups whose /apis/<group>/<version> document exists in the fixtures.
RECORDED_GROUP_VERSIONS = {
    "apps/v1": "discovery-apis-apps-v1.json",
    "batch/v1": "discovery-apis-batch-v1.json",
    "autoscaling/v2": "discovery-apis-autoscaling-v2.json",
    "networking.k8s.io/v1": "discovery-apis-networking.k8s.io-v1.json",
    "apiregistration.k8s.io/v1": "discovery-apis-apiregistration.k8s.io-v1.json",
    "custom.metrics.k8s.io/v1beta1": "discovery-apis-custom.metrics.k8s.io-v1beta1.json",
}


# --proxy-metrics: the group kube-aggregator lists for APIService v1beta1.metrics.k8s.io, and the
# identity it forwards for the fake's one user (the token user of a kubeadm admin kubeconfig).
METRICS_GROUP = {"name": "metrics.k8s.io",
                 "versions": [{"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
                 "preferredVersion": {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}}
PROXY_USER = "kubernetes-admin"
PROXY_GROUPS = ["kubeadm:cluster-admins", "system:authenticated"]
# SYNTHESISED node resources (--proxy-metrics): a 4-core, 16 GiB machine with the kubelet's usual
# reservations taken off for allocatable.
NODE_CAPACITY = {"cpu": "4", "ephemeral-storage": "104845292Ki", "hugepages-2Mi": "0",
                 "memory": "16Gi", "pods": "110"}
NODE_ALLOCATABLE = {"cpu": "3800m", "ephemeral-storage": "96625420948", "hugepages-2Mi": "0",
                    "memory": "15Gi", "pods": "110"}


# ---------------------------------------------------------------------------------------------
# JSON as Go's encoding/json writes it: compact, map keys in the given order (callers sort maps
# that Go would sort), and <, >, & escaped inside strings.

def go_json(obj):
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def status_body(code, reason, message, details=None, metadata=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": metadata or {}, "status": "Failure",
            "message": message, "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return (go_json(body) + "\n").encode()


# ---------------------------------------------------------------------------------------------
# Fixtures

class Fixtures:
    def __init__(self, directory):
        self.dir = directory
        if not os.path.isfile(os.path.join(directory, "pods-ml-all-running.json")):
            raise SystemExit("fake_kube_apiserver: no fixtures in %s (set CMA_FIXTURES)" % directory)

    def raw(self, name):
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()

    def json(self, name):
        return json.loads(self.raw(name))

    def http(self, name):
        """Parses a recorded .http exchange: (request line, request headers, status, response
        headers, response body bytes)."""
        data = self.raw(name)
        head, _, rest = data.partition(b"\n\n")
        request_lines = head.decode().split("\n")
        # A request body (if any) comes next, then an empty line, then the response.
        idx = rest.find(b"HTTP/1.1 ")
        response = rest[idx:]
        response_head, _, body = response.partition(b"\n\n")
        lines = response_head.decode().split("\n")
        status = int(lines[0].split()[1])
        headers = [tuple(line.split(": ", 1)) for line in lines[1:]]
        return request_lines[0], request_lines[1:], status, headers, body

    def list_names(self, prefix):
        return sorted(n for n in os.listdir(self.dir) if n.startswith(prefix))


# ---------------------------------------------------------------------------------------------
# Label selectors (k8s.io/apimachinery/pkg/labels grammar, re-implemented; same error texts)

IDENT, DNE, NE, OPEN, CLOSE, COMMA, EQ, DEQ, GT, LT, IN, NOTIN, EOS, ERR = range(14)
SPECIAL_TOKENS = {"!": DNE, "!=": NE, "(": OPEN, ")": CLOSE, ",": COMMA, "=": EQ, "==": DEQ,
                  ">": GT, "<": LT}
KEYWORDS = {"in": IN, "notin": NOTIN}
SPECIAL_CHARS = set("=!(),><")
WHITESPACE = set(" \t\r\n")
BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SelectorError(Exception):
    pass


def lex_selector(text):
    items, pos = [], 0
    while True:
        while pos < len(text) and text[pos] in WHITESPACE:
            pos += 1
        if pos >= len(text):
            items.append((EOS, ""))
            return items
        if text[pos] in SPECIAL_CHARS:
            buf, last = "", None
            while pos < len(text) and text[pos] in SPECIAL_CHARS:
                if buf + text[pos] in SPECIAL_TOKENS:
                    buf += text[pos]
                    last = (SPECIAL_TOKENS[buf], buf)
                    pos += 1
                elif last is not None:
                    break
                else:
                    buf += text[pos]
                    pos += 1
            items.append(last if last else (ERR, "error expected: keyword found '%s'" % buf))
        else:
            start = pos
            while pos < len(text) and text[pos] not in SPECIAL_CHARS and text[pos] not in WHITESPACE:
                pos += 1
            word = text[start:pos]
            items.append((KEYWORDS.get(word, IDENT), word))


def validate_label_key(key):
    name, prefix = key, None
    if "/" in key:
        prefix, _, name = key.rpartition("/")
    problems = []
    if prefix is not None and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN_RE.match(prefix)):
        problems.append("prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                        "alphanumeric characters, '-' or '.', and must start and end with an "
                        "alphanumeric character")
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    elif not LABEL_NAME_RE.match(name):
        problems.append("name part must consist of alphanumeric characters, '-', '_' or '.', and "
                        "must start and end with an alphanumeric character")
    if problems:
        raise SelectorError('Invalid value: "%s": %s' % (key, "; ".join(problems)))


def validate_label_value(key, value):
    if len(value) > 63 or not LABEL_VALUE_RE.match(value):
        raise SelectorError(
            'values[0][%s]: Invalid value: "%s": a valid label must be an empty string or consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
            "character" % (key, value))


class SelectorParser:
    def __init__(self, text):
        self.items = lex_selector(text)
        self.pos = 0

    def _token(self, index, values_context):
        tok, lit = self.items[index]
        if values_context and tok in (IN, NOTIN):
            tok = IDENT
        return tok, lit

    def peek(self, values_context=True):
        return self._token(self.pos, values_context)

    def take(self, values_context=True):
        self.pos += 1
        return self._token(self.pos - 1, values_context)

    def parse(self):
        requirements = []
        while True:
            tok, lit = self.peek()
            if tok in (IDENT, DNE):
                try:
                    requirements.append(self.requirement())
                except SelectorError as e:
                    raise SelectorError("unable to parse requirement: %s" % e) from None
                tok, lit = self.take()
                if tok == EOS:
                    return requirements
                if tok == COMMA:
                    tok2, lit2 = self.peek()
                    if tok2 not in (IDENT, DNE):
                        raise SelectorError("found '%s', expected: identifier after ','" % lit2)
                else:
                    raise SelectorError("found '%s', expected: ',' or 'end of string'" % lit)
            elif tok == EOS:
                return requirements
            else:
                raise SelectorError("found '%s', expected: !, identifier, or 'end of string'" % lit)

    def requirement(self):
        operator = None
        tok, lit = self.take()
        if tok == DNE:
            operator = "!"
            tok, lit = self.take()
        if tok != IDENT:
            raise SelectorError("found '%s', expected: identifier" % lit)
        key = lit
        validate_label_key(key)
        if self.peek()[0] in (EOS, COMMA) and operator is None:
            operator = "exists"
        if operator in ("exists", "!"):
            return (key, operator, [])
        tok, lit = self.take(values_context=False)
        operator = {IN: "in", NOTIN: "notin", EQ: "=", DEQ: "==", NE: "!=", GT: "gt", LT: "lt"}.get(tok)
        if operator is None:
            raise SelectorError("found '%s', expected: %s" % (lit, BINARY_OPERATORS))
        values = self.set_values() if operator in ("in", "notin") else self.exact_value()
        if operator in ("gt", "lt"):
            if len(values) != 1:
                raise SelectorError("for 'Gt', 'Lt' operators, exactly one value is required")
            if not re.match(r"^-?[0-9]+$", values[0]):
                raise SelectorError("for 'Gt', 'Lt' operators, the value must be an integer")
        else:
            for value in values:
                validate_label_value(key, value)
        return (key, operator, sorted(set(values)))

    def set_values(self):
        tok, lit = self.take()
        if tok != OPEN:
            raise SelectorError("found '%s' expected: '('" % lit)
        tok, lit = self.peek()
        if tok in (IDENT, COMMA):
            values = self.identifiers()
            if self.take()[0] != CLOSE:
                raise SelectorError("found '%s', expected: ')'" % lit)
            return values
        if tok == CLOSE:
            self.take()
            return [""]
        raise SelectorError("found '%s', expected: ',', ')' or identifier" % lit)

    def identifiers(self):
        values = []
        while True:
            tok, lit = self.take()
            if tok == IDENT:
                values.append(lit)
                tok2, lit2 = self.peek()
                if tok2 == COMMA:
                    continue
                if tok2 == CLOSE:
                    return values
                raise SelectorError("found '%s', expected: ',' or ')'" % lit2)
            if tok == COMMA:
                if not values:
                    values.append("")
                tok2 = self.peek()[0]
                if tok2 == CLOSE:
                    values.append("")
                    return values
                if tok2 == COMMA:
                    self.take()
                    values.append("")
                continue
            raise SelectorError("found '%s', expected: ',', or identifier" % lit)

    def exact_value(self):
        tok = self.peek()[0]
        if tok in (EOS, COMMA):
            return [""]
        tok, lit = self.take()
        if tok == IDENT:
            return [lit]
        raise SelectorError("found '%s', expected: identifier" % lit)


def parse_label_selector(text):
    return SelectorParser(text).parse()


def label_selector_matches(requirements, labels):
    for key, operator, values in requirements:
        present = key in labels
        value = labels.get(key)
        if operator == "exists":
            ok = present
        elif operator == "!":
            ok = not present
        elif operator in ("=", "=="):
            ok = present and value == values[0]
        elif operator == "!=":
            ok = not present or value != values[0]
        elif operator == "in":
            ok = present and value in values
        elif operator == "notin":
            ok = not present or value not in values
        else:  # gt / lt compare integers; a non-integer label never matches
            try:
                number, bound = int(value), int(values[0])
            except (TypeError, ValueError):
                return False
            ok = number > bound if operator == "gt" else number < bound
        if not ok:
            return False
    return True


FIELD_GETTERS = {
    "pods": {
        "metadata.name": lambda o: o["metadata"]["name"],
        "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
        "status.phase": lambda o: o.get("status", {}).get("phase", ""),
        "spec.nodeName": lambda o: o.get("spec", {}).get("nodeName", ""),
    },
    "nodes": {"metadata.name": lambda o: o["metadata"]["name"]},
    "namespaces": {
        "metadata.name": lambda o: o["metadata"]["name"],
        "status.phase": lambda o: o.get("status", {}).get("phase", ""),
    },
}
DEFAULT_FIELDS = {"metadata.name": lambda o: o["metadata"]["name"],
                  "metadata.namespace": lambda o: o["metadata"].get("namespace", "")}


def parse_field_selector(text, resource):
    getters = FIELD_GETTERS.get(resource, DEFAULT_FIELDS)
    terms = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        for op in ("!=", "==", "="):
            if op in term:
                field, _, value = term.partition(op)
                break
        else:
            raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (text, term))
        field = field.strip()
        if field not in getters:
            raise SelectorError('field label not supported: %s' % field)
        terms.append((getters[field], op != "!=", value.strip()))
    return terms


def field_selector_matches(terms, obj):
    return all((getter(obj) == value) == equal for getter, equal, value in terms)


# ---------------------------------------------------------------------------------------------
# The cluster state: recorded objects plus clones

class Cluster:
    def __init__(self, fixtures, extra_pods, node_resources=False):
        self.node_resources = node_resources
        recorded = fixtures.json("pods-ml-all-running.json")
        self.pods = [copy.deepcopy(p) for p in recorded["items"]]
        self.rv = max(int(p["metadata"]["resourceVersion"]) for p in self.pods)
        running_template = next(p for p in self.pods if p["metadata"]["name"] == "bert-0")
        pending = fixtures.json("pods-ml-bert-pending.json")
        pending_template = next(p for p in pending["items"] if p["metadata"]["name"] == "bert-0")
        by_key = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in self.pods}
        for spec in extra_pods:
            self._apply_extra_pod(spec, running_template, pending_template, by_key)
        self.pods.sort(key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
        self.nodes = self._synthesise_nodes()
        self.namespaces = self._namespaces(fixtures)
        configmap = fixtures.json("configmap-kube-system-extension-apiserver-authentication.json")
        self.configmaps = [{k: v for k, v in configmap.items() if k not in ("kind", "apiVersion")}]

    def next_rv(self):
        self.rv += 1
        return str(self.rv)

    def _apply_extra_pod(self, spec, running_template, pending_template, by_key):
        try:
            namespace, name = spec["namespace"], spec["name"]
        except (KeyError, TypeError):
            raise SystemExit("fake_kube_apiserver: extra pod needs namespace and name: %r" % (spec,))
        labels = dict(sorted((spec.get("labels") or {}).items()))
        phase = spec.get("phase", "Running")
        existing = by_key.get((namespace, name))
        if existing is not None:
            pod = existing
        else:
            template = pending_template if phase == "Pending" else running_template
            pod = copy.deepcopy(template)
            pod["metadata"]["name"] = name
            pod["metadata"]["namespace"] = namespace
            pod["metadata"]["uid"] = str(uuid.uuid5(UUID_NAMESPACE, "%s/%s" % (namespace, name)))
            pod["metadata"]["resourceVersion"] = self.next_rv()
            self.pods.append(pod)
            by_key[(namespace, name)] = pod
        if "labels" in spec:
            pod["metadata"]["labels"] = labels
        for key in ("generateName", "annotations", "ownerReferences"):
            if key in spec:
                pod["metadata"][key] = spec[key]
        pod["status"]["phase"] = phase
        if spec.get("nodeName"):
            pod["spec"]["nodeName"] = spec["nodeName"]
        if spec.get("shape") == "small" and existing is None:
            # SYNTHESISED: the clone cut down to what the adapter reads (no spec, no managedFields,
            # status.phase only), for the benchmark that compares small objects with real ones.
            meta = pod["metadata"]
            small = {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                       "creationTimestamp", "labels") if k in meta},
                     "spec": {"nodeName": pod["spec"].get("nodeName", "")},
                     "status": {"phase": phase}}
            self.pods[-1] = small  # the clone appended above
            by_key[(namespace, name)] = small

    def _synthesise_nodes(self):
        # SYNTHESISED: no Node object was recorded. These are minimal Node objects (kind, apiVersion,
        # metadata with name/uid/resourceVersion/labels) for every nodeName the pods use, enough for
        # LIST by name/selector (node-level custom metrics, later metrics.k8s.io).
        # Their resourceVersions stay below the recorded objects' so that, without extra pods, list
        # resourceVersions and continue tokens equal the recorded ones byte for byte.
        names = sorted({p["spec"].get("nodeName") for p in self.pods if p["spec"].get("nodeName")})
        nodes = []
        for index, name in enumerate(names):
            nodes.append({"metadata": {
                "name": name,
                "uid": str(uuid.uuid5(UUID_NAMESPACE, "node/" + name)),
                "resourceVersion": str(100 + index),
                "creationTimestamp": "2026-11-21T21:38:00Z",
                "labels": dict(sorted({
                    "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux", "nvidia.com/gpu.present": "true"}.items())),
            }, "spec": {}, "status": {}})
            if self.node_resources:
                # SYNTHESISED (--proxy-metrics): capacity and allocatable for `kubectl top node`.
                nodes[-1]["status"] = {"capacity": dict(NODE_CAPACITY),
                                       "allocatable": dict(NODE_ALLOCATABLE)}
        return nodes

    def _namespaces(self, fixtures):
        # The recorded `ml` Namespace (the 201 body of namespace-ml-create.http); the other
        # namespaces are clones of it with name/uid/label changed.
        body = fixtures.http("namespace-ml-create.http")[4]
        template = json.loads(body)
        template.pop("kind", None)
        template.pop("apiVersion", None)
        names = {"default", "kube-system", "kube-public", "kube-node-lease"}
        names.update(p["metadata"]["namespace"] for p in self.pods)
        namespaces = []
        for index, name in enumerate(sorted(names)):
            ns = copy.deepcopy(template)
            if name != "ml":
                ns["metadata"]["name"] = name
                ns["metadata"]["uid"] = str(uuid.uuid5(UUID_NAMESPACE, "namespace/" + name))
                ns["metadata"]["resourceVersion"] = str(10 + index)
                ns["metadata"]["labels"] = {"kubernetes.io/metadata.name": name}
            namespaces.append(ns)
        return namespaces


def continue_token(rv, start_key):
    raw = go_json({"v": "meta.k8s.io/v1", "rv": rv, "start": start_key + "\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token):
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        start = data["start"]
        if data.get("v") != "meta.k8s.io/v1" or not start.endswith("\x00"):
            raise ValueError("bad continue token")
        return start[:-1]
    except Exception as e:  # noqa: BLE001 - any malformed token is a 400
        raise SelectorError("continue key is not valid: %s" % e) from None


# ---------------------------------------------------------------------------------------------
# HTTP

class Response:
    def __init__(self, status, body, headers=None, pf_headers=True):
        self.status = status
        self.body = body
        self.headers = headers
        self.pf_headers = pf_headers


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    timeout = 300  # idle keep-alive connections are closed after this many seconds

    def setup(self):
        self.request.settimeout(30)
        self.request = self.server.ssl_context.wrap_socket(self.request, server_side=True)
        super().setup()

    def log_message(self, fmt, *args):  # access log goes to the JSONL request log instead
        pass

    # -- plumbing ------------------------------------------------------------------------------

    def _stream(self, response):
        """Chunked, one event line per chunk, written as it happens (a watch)."""
        self.send_response_only(200)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", "application/json")
        self.send_header("Date", email.utils.formatdate(usegmt=True))
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for line in response.lines:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send(self, response):
        if isinstance(response, StreamResponse):
            return self._stream(response)
        body = response.body
        self.send_response_only(response.status)
        if response.headers is not None:
            headers = [(k, v) for k, v in response.headers
                       if k.lower() not in ("date", "audit-id", "content-length", "transfer-encoding")]
            self.send_header("Audit-Id", str(uuid.uuid4()))
            for key, value in headers:
                self.send_header(key, value)
        else:
            self.send_header("Audit-Id", str(uuid.uuid4()))
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Content-Type", "application/json")
            if response.pf_headers:
                for key, value in PF_HEADERS:
                    self.send_header(key, value)
        self.send_header("Date", email.utils.formatdate(usegmt=True))
        chunked = len(body) > CHUNKING_THRESHOLD
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            if chunked:
                for i in range(0, len(body), CHUNK_SIZE):
                    chunk = body[i:i + CHUNK_SIZE]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.wfile.write(body)
        self.wfile.flush()

    def _log(self, url, status, size):
        entry = {
            "time": round(time.time(), 3),
            "method": self.command,
            "path": url.path,
            "query": url.query,
            "params": {k: v for k, v in parse_qs(url.query, keep_blank_values=True).items()},
            "headers": {h: self.headers[h] for h in LOGGED_HEADERS if self.headers.get(h) is not None},
            "status": status,
            "bytes": size,
        }
        self.server.write_log(entry)

    def _handle(self):
        url = urlsplit(self.path)
        body = b""
        if self.command in ("POST", "PUT", "PATCH", "DELETE"):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                body = self.rfile.read(length)
        try:
            response = self.server.app.dispatch(self.command, url, self.headers, body)
        except Exception as e:  # noqa: BLE001 - a bug in the fake must not kill the connection
            sys.stderr.write("fake_kube_apiserver: internal error on %s: %r\n" % (self.path, e))
            response = Response(500, status_body(500, "InternalError", "Internal error occurred: %s" % e))
        if isinstance(response, StreamResponse):
            self._log(url, response.status, 0)
            self._send(response)
            return
        self._send(response)
        self._log(url, response.status, len(response.body))

    do_GET = _handle
    do_HEAD = _handle
    do_POST = _handle
    do_PUT = _handle
    do_PATCH = _handle
    do_DELETE = _handle


class App:
    def __init__(self, fixtures, cluster, token, with_v1beta2, expire_continue, proxy_metrics=None):
        self.proxy_metrics = proxy_metrics.rstrip("/") if proxy_metrics else None
        self.fx = fixtures
        self.cluster = cluster
        self.token = token
        self.tokens = {token}  # accepted bearer tokens (/__fake/tokens replaces them)
        self.with_v1beta2 = with_v1beta2
        self.expire_continue = expire_continue
        self.apis = fixtures.json("discovery-apis-with-v1beta2.json" if with_v1beta2 else "discovery-apis.json")
        if self.proxy_metrics:
            # SYNTHESISED (--proxy-metrics): the APIService's group, listed after the recorded ones.
            self.apis["groups"].append(copy.deepcopy(METRICS_GROUP))
        self.api_v1 = fixtures.json("discovery-api-v1.json")
        self.group_versions = dict(RECORDED_GROUP_VERSIONS)
        if with_v1beta2:
            self.group_versions["custom.metrics.k8s.io/v1beta2"] = "discovery-apis-custom.metrics.k8s.io-v1beta2.json"
        self.unauthorized = fixtures.http("error-401-bad-token.http")
        self.watch_hub = None  # WatchHub with --watch
        self.apiservices = {}  # APIService name -> "available" | "unavailable" (--apiservice)
        self.proxy_custom = False  # --proxy-custom-metrics
        self.metric_rules = None  # fake_metric_rules.MetricRuleStore with --metric-rules
        self.dynamic_groups = {}  # "G/V" -> APIResourceList added through /__fake/add-api-resource
        self.dynamic_lock = threading.Lock()
        self.recorded_selector_errors = {}
        for name in fixtures.list_names("error-400-label-selector-"):
            request_line, _, status, headers, body = fixtures.http(name)
            query = urlsplit(request_line.split()[1]).query
            selector = parse_qs(query, keep_blank_values=True).get("labelSelector", [""])[0]
            self.recorded_selector_errors[selector] = Response(status, body, headers)

    # -- helpers -------------------------------------------------------------------------------

    def json_response(self, obj, status=200):
        return Response(status, (go_json(obj) + "\n").encode())

    def not_found(self, message="the server could not find the requested resource", details=None):
        return Response(404, status_body(404, "NotFound", message, details if details is not None else {}))

    def bad_request(self, message):
        return Response(400, status_body(400, "BadRequest", message))

    def resource_info(self, group_version, resource):
        """(kind, namespaced) of a resource in a recorded discovery document, or None."""
        with self.dynamic_lock:
            dynamic = copy.deepcopy(self.dynamic_groups.get(group_version))
        if dynamic is not None:
            for entry in dynamic["resources"]:
                if entry["name"] == resource:
                    return entry["kind"], entry["namespaced"]
            return None
        if group_version == "v1":
            doc = self.api_v1
        elif group_version in self.group_versions:
            doc = self.fx.json(self.group_versions[group_version])
        else:
            return None
        for entry in doc.get("resources", []):
            if entry.get("name") == resource:
                return entry.get("kind"), entry.get("namespaced", False)
        return None

    def check_auth(self, path, headers):
        if not self.token:
            return None
        auth = headers.get("Authorization")
        if auth is None:
            if path == "/version":
                return None
            return Response(403, status_body(
                403, "Forbidden", 'forbidden: User "system:anonymous" cannot get path "%s"' % path,
                {}))
        with self.auth_lock:
            accepted = auth in ("Bearer " + t for t in self.tokens)
        if not accepted:
            _, _, status, resp_headers, body = self.unauthorized
            return Response(status, body, resp_headers)
        return None

    # -- delegated auth (TokenReview, SubjectAccessReview, the auth ConfigMap) -----------------

    def init_auth(self, sar_allow):
        """Recorded TokenReview answers by token, recorded SAR answers as templates, the allow list."""
        self.auth_lock = threading.Lock()
        self.sar_allow = set(sar_allow) if sar_allow else {"*"}
        self.sar_log = []
        self.token_reviews = {}
        for name in ("tokenreview-valid.http", "tokenreview-garbage.http", "tokenreview-bad-signature.http"):
            raw = self.fx.raw(name)
            _, _, rest = raw.partition(b"\n\n")
            request_body = rest[:rest.find(b"HTTP/1.1 ")].strip()
            token = json.loads(request_body)["spec"]["token"]
            _, _, status, resp_headers, body = self.fx.http(name)
            self.token_reviews[token] = Response(status, body, resp_headers)
        self.token_review_unknown = self.token_reviews["garbage.not-a-token"]
        self.sar_allowed = json.loads(self.fx.http("subjectaccessreview-hpa-get-custom-metric.http")[4])["status"]
        self.sar_denied = json.loads(self.fx.http("subjectaccessreview-alice-denied.http")[4])["status"]

    def auth_dispatch(self, method, path, url, body):
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        if method == "POST" and path == "/apis/authentication.k8s.io/v1/tokenreviews":
            token = json.loads(body or b"{}").get("spec", {}).get("token", "")
            return self.token_reviews.get(token, self.token_review_unknown)
        if method == "POST" and path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
            review = json.loads(body or b"{}")
            spec = review.get("spec", {})
            with self.auth_lock:
                self.sar_log.append(review)
                # "user@ns": that user, for resource requests in namespace ns only (a
                # RoleBinding's reach, e.g. the `view` role in one namespace)
                in_ns = "%s@%s" % (spec.get("user"), spec.get("resourceAttributes", {}).get("namespace", ""))
                allowed = "*" in self.sar_allow or spec.get("user") in self.sar_allow or any(
                    ("group:" + g) in self.sar_allow for g in spec.get("groups", [])) or (
                    "resourceAttributes" in spec and in_ns in self.sar_allow)
            out = {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                   "metadata": {"creationTimestamp": None}, "spec": spec,
                   "status": copy.deepcopy(self.sar_allowed if allowed else self.sar_denied)}
            return self.json_response(out, 201)
        if path == "/__fake/sar-allow":  # test control: ?users=a,b,group:g,u@ns ("*" = everyone)
            with self.auth_lock:
                self.sar_allow = {u for u in params.get("users", "").split(",") if u}
            return self.json_response({"allow": sorted(self.sar_allow)})
        if path == "/__fake/tokens":  # test control: ?accept=t1,t2 (the accepted bearer tokens)
            with self.auth_lock:
                self.tokens = {t for t in params.get("accept", "").split(",") if t}
                return self.json_response({"accept": sorted(self.tokens)})
        if path == "/__fake/sar-log":  # test control: every SAR received so far, oldest first
            with self.auth_lock:
                return self.json_response(list(self.sar_log))
        if method == "POST" and path == "/__fake/auth-configmap":  # test control: replace its data
            data = json.loads(body or b"{}")
            with self.auth_lock:
                self.cluster.configmaps[0]["data"] = data
            return self.json_response({"data": sorted(data)})
        return None

    # -- routing -------------------------------------------------------------------------------

    def dispatch(self, method, url, headers, body=b""):
        path = url.path.rstrip("/") or "/"
        denied = self.check_auth(path, headers)
        if denied:
            return denied
        auth_response = self.auth_dispatch(method, path, url, body)
        if auth_response is not None:
            return auth_response
        if self.metric_rules is not None:  # --metric-rules: its paths and controls, any method
            answer = self.metric_rules.dispatch(
                method, [unquote(p) for p in path.split("/")[1:]] if path != "/" else [],
                {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}, headers, body)
            if answer is not None:
                return answer
        if method not in ("GET", "HEAD"):
            return Response(405, status_body(405, "MethodNotAllowed",
                                             "the server does not allow this method on the requested resource",
                                             {}))
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        parts = [unquote(p) for p in path.split("/")[1:]] if path != "/" else []
        if self.watch_hub is not None and parts[:1] == ["__fake"] and parts[1:2] in (["pods"], ["watch"]):
            answer, status = self.watch_hub.control(parts, params)
            if answer is None:
                return self.not_found()
            return self.json_response(answer, status)
        dynamic = self.dynamic_dispatch(path, parts, params, headers)
        if dynamic is not None:
            return dynamic
        if path == "/__fake/apiservice" or parts[:4] == ["apis", "apiregistration.k8s.io", "v1", "apiservices"]:
            return self.apiservice(path, parts, params)
        if (self.proxy_metrics and self.proxy_custom and len(parts) >= 3
                and parts[:2] == ["apis", "custom.metrics.k8s.io"] and parts[2] in ("v1beta1", "v1beta2")):
            return self.proxy(url, headers)

        if path == "/version":
            return Response(200, self.fx.raw("version.json"))
        if path == "/api":
            return Response(200, self.fx.raw("discovery-api.json"))
        if path == "/api/v1":
            return Response(200, self.fx.raw("discovery-api-v1.json"))
        if path == "/apis":
            if self.proxy_metrics:
                return self.json_response(self.apis)
            name = "discovery-apis-with-v1beta2.json" if self.with_v1beta2 else "discovery-apis.json"
            return Response(200, self.fx.raw(name))
        if self.proxy_metrics and len(parts) >= 3 and parts[:2] == ["apis", "metrics.k8s.io"]:
            if parts[2] != "v1beta1":
                return self.not_found()
            return self.proxy(url, headers)
        if len(parts) == 2 and parts[0] == "apis":
            return self.api_group(parts[1])
        if len(parts) == 3 and parts[0] == "apis":
            gv = parts[1] + "/" + parts[2]
            if gv in self.group_versions:
                return Response(200, self.fx.raw(self.group_versions[gv]))
            return self.not_found()
        if parts[:2] == ["api", "v1"]:
            return self.resource_request("", "v1", parts[2:], params, headers)
        if len(parts) > 3 and parts[0] == "apis" and (parts[1] + "/" + parts[2]) in self.group_versions:
            return self.resource_request(parts[1], parts[2], parts[3:], params, headers)
        return self.not_found()

    def apiservice(self, path, parts, params):
        """GET of one APIService, and its test control (see the module docstring)."""
        if path == "/__fake/apiservice":
            name, state = params.get("name", ""), params.get("state", "")
            if not name or state not in ("available", "unavailable", "absent"):
                return self.bad_request("name and state=available|unavailable|absent are required")
            if state == "absent":
                self.apiservices.pop(name, None)
            else:
                self.apiservices[name] = state
            return self.json_response({"name": name, "state": state})
        if len(parts) != 5:
            return self.not_found()
        name = parts[4]
        state = self.apiservices.get(name)
        if state is None:
            return self.not_found('apiservices.apiregistration.k8s.io "%s" not found' % name,
                                  {"name": name, "group": "apiregistration.k8s.io", "kind": "apiservices"})
        version, _, group = name.partition(".")
        if name in ("v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"):
            return Response(200, self.fx.raw("apiservice-%s-%s.json" % (version, state)))
        obj = self.fx.json("apiservice-v1beta1-%s.json" % state)  # SYNTHESISED from the recording
        obj["metadata"]["name"] = name
        obj["spec"]["group"], obj["spec"]["version"] = group, version
        obj["metadata"].pop("annotations", None)
        return self.json_response(obj)

    def add_api_resource(self, params):
        """Test control: adds a CRD-like resource (see the module docstring). SYNTHESISED."""
        group, version = params.get("group", ""), params.get("version", "v1")
        resource, kind = params.get("resource", ""), params.get("kind", "")
        if not group or not resource or not kind:
            return self.bad_request("group, resource and kind are required")
        gv = group + "/" + version
        with self.dynamic_lock:
            doc = self.dynamic_groups.setdefault(
                gv, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": []})
            doc["resources"] = [r for r in doc["resources"] if r["name"] != resource]
            doc["resources"].append({
                "name": resource, "singularName": kind.lower(),
                "namespaced": params.get("namespaced", "true") == "true", "kind": kind,
                "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update",
                          "watch"],
                "storageVersionHash": "fake0000000="})
        return self.json_response({"added": gv + "/" + resource})

    def dynamic_dispatch(self, path, parts, params, headers):
        """Answers the control endpoint and the discovery documents of added groups; None for
        anything else (the recorded behaviour applies)."""
        if path == "/__fake/add-api-resource":
            return self.add_api_resource(params)
        with self.dynamic_lock:
            dynamic = copy.deepcopy(self.dynamic_groups)
        if not dynamic:
            return None
        entries = {}
        for gv in dynamic:
            group, version = gv.split("/", 1)
            entry = entries.setdefault(group, {"name": group, "versions": [],
                                               "preferredVersion": {"groupVersion": gv, "version": version}})
            entry["versions"].append({"groupVersion": gv, "version": version})
        if path == "/apis":
            doc = copy.deepcopy(self.apis)
            doc["groups"].extend(entries.values())
            return self.json_response(doc)
        if len(parts) == 2 and parts[0] == "apis" and parts[1] in entries:
            body = {"kind": "APIGroup", "apiVersion": "v1"}
            body.update(entries[parts[1]])
            return self.json_response(body)
        if len(parts) == 3 and parts[0] == "apis" and parts[1] + "/" + parts[2] in dynamic:
            return self.json_response(dynamic[parts[1] + "/" + parts[2]])
        if len(parts) > 3 and parts[0] == "apis" and parts[1] + "/" + parts[2] in dynamic:
            return self.resource_request(parts[1], parts[2], parts[3:], params, headers)
        return None

    def proxy(self, url, headers):
        """Forwards a metrics.k8s.io request to the adapter as kube-aggregator does (reference
        kubernetes-metrics-api.md 6.2): same path, query re-encoded (sorted keys, QueryEscape), the
        client's Authorization dropped, identity headers added, TLS not verified
        (insecureSkipTLSVerify). Discovery (/apis/<g>/<v>) gets 5 s, other requests 60 s."""
        params = parse_qs(url.query, keep_blank_values=True)
        query = urlencode(sorted((k, v) for k, values in params.items() for v in values))
        target = self.proxy_metrics + url.path + ("?" + query if query else "")
        request = urllib.request.Request(target, method="GET")
        for name in ("Accept", "User-Agent", "Audit-Id"):
            if headers.get(name) is not None:
                request.add_header(name, headers[name])
        request.add_header("X-Remote-User", PROXY_USER)
        # urllib keeps one value per header name; the aggregator sends one line per group, which
        # receivers join like this.
        request.add_header("X-Remote-Group", ",".join(PROXY_GROUPS))
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        timeout = 5 if url.path.rstrip("/").count("/") == 3 else 60
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
                status, body, ctype = answer.status, answer.read(), answer.headers.get("Content-Type")
        except urllib.error.HTTPError as e:
            status, body, ctype = e.code, e.read(), e.headers.get("Content-Type")
        except (urllib.error.URLError, OSError) as e:
            sys.stderr.write("fake_kube_apiserver: proxy to %s failed: %r\n" % (target, e))
            return Response(503, b"service unavailable\n",
                            [("Cache-Control", "no-cache, private"),
                             ("Content-Type", "text/plain; charset=utf-8"),
                             ("X-Content-Type-Options", "nosniff")])
        return Response(status, body, [("Cache-Control", "no-cache, private"),
                                       ("Content-Type", ctype or "application/json")])

    def api_group(self, group):
        if group == "custom.metrics.k8s.io":
            name = ("discovery-apis-custom.metrics.k8s.io-with-v1beta2.json" if self.with_v1beta2
                    else "discovery-apis-custom.metrics.k8s.io.json")
            return Response(200, self.fx.raw(name))
        # The APIGroup document is the group's entry of the recorded /apis list plus kind/apiVersion.
        for entry in self.apis["groups"]:
            if entry["name"] == group:
                body = {"kind": "APIGroup", "apiVersion": "v1"}
                body.update(entry)
                return self.json_response(body)
        return self.not_found()

    def resource_request(self, group, version, rest, params, headers):
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 2:
            return self.not_found()
        resource, name = rest[0], (rest[1] if len(rest) == 2 else None)
        gv = version if not group else group + "/" + version
        info = self.resource_info(gv, resource)
        if info is None:
            return self.not_found()
        kind, namespaced = info
        if namespace is not None and not namespaced:
            return self.not_found()
        if name is not None and namespaced and namespace is None:
            return self.not_found()
        if params.get("watch") in ("1", "true"):
            if self.watch_hub is not None and resource == "pods" and name is None:
                try:
                    return StreamResponse(self.watch_hub.watch(namespace, params))
                except SelectorError as e:
                    return self.bad_request(str(e))
            return self.bad_request("watch is not supported by the fake kube-apiserver")
        objects = self.objects(resource, namespace)
        if name is not None:
            for obj in objects:
                if obj["metadata"]["name"] == name:
                    return self.single(kind, gv, obj, headers)
            gr = resource if not group else resource + "." + group
            details = {"name": name, "kind": resource}
            if group:
                details = {"name": name, "group": group, "kind": resource}
            return self.not_found('%s "%s" not found' % (gr, name), details)
        return self.list(kind, gv, resource, namespace, objects, params, headers)

    def objects(self, resource, namespace):
        if resource == "pods":
            objs = self.cluster.pods
        elif resource == "nodes":
            objs = self.cluster.nodes
        elif resource == "namespaces":
            objs = self.cluster.namespaces
        elif resource == "configmaps":
            objs = self.cluster.configmaps
        else:
            # SYNTHESISED: resource types listed in recorded discovery that hold no objects here
            # answer an empty list, as a cluster without such objects would.
            objs = []
        if namespace is not None:
            objs = [o for o in objs if o["metadata"].get("namespace") == namespace]
        return objs

    @staticmethod
    def wants(headers, as_kind):
        accept = headers.get("Accept") or ""
        for media in accept.split(","):
            fields = [f.strip() for f in media.split(";")]
            if fields[0] in ("application/json", "*/*", "application/*") and "as=" + as_kind in fields:
                return True
        return False

    @staticmethod
    def acceptable(headers):
        accept = headers.get("Accept")
        if not accept:
            return True
        return any(m.split(";")[0].strip() in ("application/json", "*/*", "application/*")
                   for m in accept.split(","))

    def not_acceptable(self):
        return Response(406, status_body(406, "NotAcceptable",
                                         "only the following media types are accepted: application/json",
                                         {}))

    def single(self, kind, gv, obj, headers):
        if not self.acceptable(headers):
            return self.not_acceptable()
        if self.wants(headers, "PartialObjectMetadata"):
            return self.json_response({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                       "metadata": obj["metadata"]})
        body = {"kind": kind, "apiVersion": gv}
        body.update((k, v) for k, v in obj.items() if k not in ("kind", "apiVersion"))
        return self.json_response(body)

    def list(self, kind, gv, resource, namespace, objects, params, headers):
        if not self.acceptable(headers):
            return self.not_acceptable()
        selector_text = params.get("labelSelector", "")
        try:
            requirements = parse_label_selector(selector_text)
        except SelectorError as e:
            recorded = self.recorded_selector_errors.get(selector_text)
            return recorded if recorded else self.bad_request(str(e))
        try:
            fields = parse_field_selector(params.get("fieldSelector", ""), resource)
        except SelectorError as e:
            return self.bad_request(str(e))
        selected = [o for o in objects
                    if label_selector_matches(requirements, o["metadata"].get("labels") or {})
                    and field_selector_matches(fields, o)]

        def key(obj):
            ns = obj["metadata"].get("namespace")
            if namespace is None and ns:
                return ns + "/" + obj["metadata"]["name"]
            return obj["metadata"]["name"]

        if params.get("continue"):
            if self.expire_continue:
                return Response(410, status_body(
                    410, "Expired",
                    "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter, or use the continue token "
                    "in this response to retrieve the remainder of the results. Continuing with the "
                    "provided token results in an inconsistent list - objects that were created, "
                    "modified, or deleted between the time the first chunk was returned and now may "
                    "show up in the list.", metadata={"continue": params["continue"]}))
            try:
                start = decode_continue(params["continue"])
            except SelectorError as e:
                return self.bad_request(str(e))
            selected = [o for o in selected if key(o) > start]
        metadata = {"resourceVersion": str(self.cluster.rv)}
        try:
            limit = int(params.get("limit") or 0)
        except ValueError:
            return self.bad_request('strconv.ParseInt: parsing "%s": invalid syntax' % params.get("limit"))
        if limit > 0 and len(selected) > limit:
            metadata["continue"] = continue_token(self.cluster.rv, key(selected[limit - 1]))
            if not requirements and not fields:
                metadata["remainingItemCount"] = len(selected) - limit
            selected = selected[:limit]
        if self.wants(headers, "PartialObjectMetadataList"):
            items = [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                      "metadata": o["metadata"]} for o in selected]
            return self.json_response({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                                       "metadata": metadata, "items": items})
        return self.json_response({"kind": kind + "List", "apiVersion": gv, "metadata": metadata,
                                   "items": selected})


class StreamResponse:
    """A watch answer: `lines()` yields event lines (bytes, newline included) as they happen."""

    def __init__(self, lines):
        self.status = 200
        self.lines = lines
        self.body = b""


class WatchHub:
    """--watch: WATCH of pods (all namespaces or one) and test control of the pods.

    Stands in for kube-apiserver's watch cache: every change made through the control endpoints
    (or replayed from a recorded .jsonl stream) becomes an event with the next resourceVersion;
    a watch from RV gets every later event, then waits for more until timeoutSeconds, and ends
    with a BOOKMARK (as the recorded streams do, watch-pods-all.timeline.txt). Event lines are the
    recorded shape: {"type":...,"object":<Pod with kind/apiVersion>}. A watch from a
    resourceVersion older than the compaction point gets the recorded ERROR 410 line
    (watch-pods-too-old-rv.jsonl, message restamped) and ends, as the real server does.

    Control (GET, auth as any request; no such endpoints exist in kube-apiserver):
      /__fake/pods/add?namespace=&name=&labels=k=v,k2=v2[&phase=Running]   → ADDED
      /__fake/pods/relabel?namespace=&name=&labels=k=v,...                → MODIFIED
      /__fake/pods/delete?namespace=&name=                                → DELETED
      /__fake/watch/replay?name=watch-pods-all.jsonl  → the recorded events, restamped with new RVs
      /__fake/watch/gone   → compacts: open watches get ERROR 410 and end; older RVs get 410
    """

    def __init__(self, fixtures, cluster):
        self.fx = fixtures
        self.cluster = cluster
        self.cond = threading.Condition()
        self.events = []  # (rv int, type, pod dict)
        self.compacted = 0
        self.generation = 0  # bumped by /__fake/watch/gone
        self.too_old = json.loads(fixtures.raw("watch-pods-too-old-rv.jsonl").decode().splitlines()[0])

    @staticmethod
    def parse_labels(text):
        labels = {}
        for item in (text or "").split(","):
            if item:
                key, _, value = item.partition("=")
                labels[key] = value
        return dict(sorted(labels.items()))

    def _event(self, kind, pod):
        # Lock held. The cluster's pod list is replaced, never changed in place, so LISTs running
        # on other threads keep iterating a consistent list.
        rv = int(self.cluster.next_rv())
        pod = copy.deepcopy(pod)
        pod["metadata"]["resourceVersion"] = str(rv)
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        pods = [p for p in self.cluster.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) != key]
        if kind != "DELETED":
            pods.append(pod)
            pods.sort(key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
        self.cluster.pods = pods
        self.events.append((rv, kind, pod))
        self.cond.notify_all()
        return rv

    def _find(self, namespace, name):
        return next((p for p in self.cluster.pods if p["metadata"]["namespace"] == namespace
                     and p["metadata"]["name"] == name), None)

    def control(self, parts, params):
        with self.cond:
            what = "/".join(parts[1:])
            ns, name = params.get("namespace", ""), params.get("name", "")
            if what == "pods/add":
                template = self._find("ml", "bert-0") or self.cluster.pods[0]
                pod = copy.deepcopy(template)
                pod["metadata"].update({"name": name, "namespace": ns,
                                        "uid": str(uuid.uuid5(UUID_NAMESPACE, "%s/%s" % (ns, name))),
                                        "labels": self.parse_labels(params.get("labels"))})
                pod["status"]["phase"] = params.get("phase", "Running")
                rv = self._event("ADDED", pod)
            elif what in ("pods/relabel", "pods/delete"):
                pod = self._find(ns, name)
                if pod is None:
                    return None, 404
                pod = copy.deepcopy(pod)
                if what == "pods/relabel":
                    pod["metadata"]["labels"] = self.parse_labels(params.get("labels"))
                rv = self._event("MODIFIED" if what == "pods/relabel" else "DELETED", pod)
            elif what == "watch/replay":
                rv = None
                for line in self.fx.raw(params.get("name", "watch-pods-all.jsonl")).decode().splitlines():
                    event = json.loads(line)
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        obj = {k: v for k, v in event["object"].items() if k not in ("kind", "apiVersion")}
                        rv = self._event(event["type"], obj)
            elif what == "watch/gone":
                rv = int(self.cluster.next_rv())
                self.compacted = rv
                self.generation += 1
                self.cond.notify_all()
            else:
                return None, 404
            return {"resourceVersion": str(rv) if rv is not None else "", "pods": len(self.cluster.pods)}, 200

    def _line(self, kind, obj):
        body = {"kind": "Pod", "apiVersion": "v1"}
        body.update(obj)
        return (json.dumps({"type": kind, "object": body}, separators=(",", ":")) + "\n").encode()

    def _gone_line(self, rv):
        event = copy.deepcopy(self.too_old)
        event["object"]["message"] = "too old resource version: %s (%d)" % (rv, self.compacted)
        return (json.dumps(event, separators=(",", ":")) + "\n").encode()

    def watch(self, namespace, params):
        try:
            since = int(params.get("resourceVersion") or 0)
        except ValueError:
            since = 0
        try:
            timeout = min(float(params.get("timeoutSeconds") or 300), 1800)
        except ValueError:
            timeout = 300
        requirements = parse_label_selector(params.get("labelSelector", ""))

        def lines():
            nonlocal since
            deadline = time.monotonic() + timeout
            with self.cond:
                generation = self.generation
                if since and since < self.compacted:
                    yield self._gone_line(since)
                    return
                index = 0
                while index < len(self.events) and self.events[index][0] <= since:
                    index += 1
            while True:
                with self.cond:
                    if self.generation != generation:
                        yield self._gone_line(since)
                        return
                    pending = self.events[index:]
                    index = len(self.events)
                    if not pending:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            bookmark = {"metadata": {"resourceVersion": str(self.cluster.rv),
                                                     "creationTimestamp": None},
                                        "spec": {"containers": None}, "status": {}}
                            yield self._line("BOOKMARK", bookmark)
                            return
                        self.cond.wait(min(left, 0.5))
                        continue
                for rv, kind, pod in pending:
                    since = rv
                    if namespace is not None and pod["metadata"]["namespace"] != namespace:
                        continue
                    if not label_selector_matches(requirements, pod["metadata"].get("labels") or {}):
                        continue
                    yield self._line(kind, pod)

        return lines()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, app, ssl_context, log_path):
        super().__init__(address, Handler)
        self.app = app
        self.ssl_context = ssl_context
        self.log_lock = threading.Lock()
        self.log_file = open(log_path, "a", encoding="utf-8") if log_path else None

    def write_log(self, entry):
        if self.log_file is None:
            return
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self.log_lock:
            self.log_file.write(line)
            self.log_file.flush()

    def handle_error(self, request, client_address):
        err = sys.exc_info()[1]
        if isinstance(err, (ssl.SSLError, ConnectionError, TimeoutError, OSError)):
            return  # client went away or failed the handshake; nothing to report
        socketserver.BaseServer.handle_error(self, request, client_address)


def default_fixtures_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "fixtures", "kube-apiserver"))


def main(argv):
    parser = argparse.ArgumentParser(description="fake kube-apiserver serving recorded fixtures")
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = let the OS choose")
    parser.add_argument("--port-file", help="write the port here once listening")
    parser.add_argument("--request-log", help="JSONL request log (appended)")
    parser.add_argument("--extra-pods", help="EXTRA_PODS_JSON file")
    parser.add_argument("--fixtures", default=os.environ.get("CMA_FIXTURES") or default_fixtures_dir())
    parser.add_argument("--token", default="fake-admin", help='accepted bearer token ("" = no auth)')
    parser.add_argument("--with-v1beta2", action="store_true",
                        help="serve discovery as recorded after v1beta2.custom.metrics.k8s.io was added")
    parser.add_argument("--expire-continue", action="store_true",
                        help="answer every continue token with the recorded-style 410 Expired")
    parser.add_argument("--proxy-metrics", metavar="ADAPTER_URL",
                        help="test front for kubectl top: serve metrics.k8s.io by proxying to the "
                             "adapter at this https URL, and give nodes capacity/allocatable")
    parser.add_argument("--proxy-custom-metrics", action="store_true",
                        help="with --proxy-metrics: proxy custom.metrics.k8s.io v1beta1/v1beta2 too")
    parser.add_argument("--apiservice", action="append", default=[], metavar="NAME=STATE",
                        help="serve APIService NAME, Available (available) or not (unavailable)")
    parser.add_argument("--sar-allow", action="append", default=[], metavar="USER",
                        help="user (or group:G) whose SubjectAccessReviews are allowed; repeatable; "
                             "none given = everyone is allowed")
    parser.add_argument("--watch", action="store_true",
                        help="serve WATCH of pods and the /__fake/pods/* and /__fake/watch/* test "
                             "controls (see WatchHub); without it a watch answers 400")
    parser.add_argument("--metric-rules", metavar="CRD_YAML",
                        help="serve the MetricRule custom resource of this CRD (see fake_metric_rules.py)")
    args = parser.parse_args(argv)

    extra = []
    if args.extra_pods:
        with open(args.extra_pods, encoding="utf-8") as f:
            extra = json.load(f)
        if not isinstance(extra, list):
            raise SystemExit("fake_kube_apiserver: %s must hold a JSON array" % args.extra_pods)
    fixtures = Fixtures(args.fixtures)
    cluster = Cluster(fixtures, extra, node_resources=bool(args.proxy_metrics))
    app = App(fixtures, cluster, args.token, args.with_v1beta2, args.expire_continue,
              args.proxy_metrics)
    app.proxy_custom = args.proxy_custom_metrics
    for item in args.apiservice:
        name, _, state = item.partition("=")
        if state not in ("available", "unavailable"):
            raise SystemExit("fake_kube_apiserver: --apiservice %s: STATE must be available or unavailable" % item)
        app.apiservices[name] = state
    if args.watch:
        app.watch_hub = WatchHub(fixtures, cluster)
    app.init_auth(args.sar_allow)
    if args.metric_rules:
        import fake_metric_rules  # tests/lib, next to this file
        app.metric_rules = fake_metric_rules.MetricRuleStore(sys.modules[__name__], fixtures, cluster,
                                                             args.metric_rules)
        with app.dynamic_lock:
            app.dynamic_groups[fake_metric_rules.GV] = app.metric_rules.discovery()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(args.cert, args.key)
    server = Server((args.bind, args.port), app, context, args.request_log)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    sys.stderr.write("fake_kube_apiserver: listening on https://%s:%d (fixtures %s)\n"
                     % (args.bind, port, args.fixtures))
    sys.stderr.flush()

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
