"""fake_metric_rules.py: the MetricRule custom resource of tests/lib/fake_kube_apiserver.py
(--metric-rules CRD.yaml). It stands in for what kube-apiserver's apiextensions-apiserver serves for
the CustomResourceDefinition deploy/components/metric-rules/crd.yaml (metricrules.
metrics.custom-metrics-adapter.dev, v1alpha1, namespaced, status subresource), because no real
kube-apiserver (nor etcd) runs here. Nothing of this was recorded (the recorded cluster had no such
CRD): the shapes follow apiextensions-apiserver and apimachinery, and where a recorded exchange of
the same kind exists its body is reused:

- Custom resources are unstructured: every object, list and event object is JSON with map keys
  sorted at every level (encoding/json of map[string]interface{}), a trailing LF. Objects carry
  apiVersion, kind, metadata (creationTimestamp, generation, name, namespace, resourceVersion, uid,
  labels/annotations when given; managedFields are left out), spec and, once written, status.
- LIST: {"apiVersion":G/V,"items":[...],"kind":"MetricRuleList","metadata":{"continue":"",
  "resourceVersion":"N"}} ("continue" is always present for custom resources, "" on the last
  page; remainingItemCount with limit and no selector). limit/continue: the opaque token of
  fake_kube_apiserver.continue_token; later pages are served from the state at the token's
  resourceVersion, as etcd serves them. labelSelector, fieldSelector metadata.name/namespace.
  resourceVersionMatch=Exact serves the state at that resourceVersion. A continue token or an Exact
  resourceVersion older than the compaction point gets 410 with the recorded bodies of
  error-410-list-continue-expired.http (message as recorded, a fresh token with rv -1 in
  metadata.continue) and error-410-list-exact-rv-compacted.http.
- WATCH (?watch=true): chunked, one {"type":...,"object":...} line per event. resourceVersion
  unset or "0": synthetic ADDED events for every object that exists, then changes; N: every change
  after N. allowWatchBookmarks=true: BOOKMARK events {"apiVersion","kind","metadata":
  {"resourceVersion"}} (the cacher's bookmark of an unstructured kind: apiVersion and kind set by
  the CRD handler's NewFunc, nothing else) on /__fake/metricrules/bookmark and when timeoutSeconds
  ends the watch. A resourceVersion older than the compaction point, or a compaction while the
  watch is open, gets the recorded ERROR 410 line (watch-pods-too-old-rv.jsonl, message
  restamped "too old resource version: N (C)") and the watch ends.
- /openapi/v3 and /openapi/v3/apis/metrics.custom-metrics-adapter.dev/v1alpha1: the CRD's schema
  as kube-apiserver publishes it (the resource's paths with their x-kubernetes-action and
  x-kubernetes-group-version-kind, the schema under components.schemas), so that kubectl explain
  works; the index lists this group only.
- LIST and GET with Accept as=Table;g=meta.k8s.io;v=v1 (kubectl get): the Table kube-apiserver builds from
  the CRD's additionalPrinterColumns (Name, Accepted, Metrics, Age).
- GET of one object; 404 NotFound `metricrules.metrics.custom-metrics-adapter.dev "x" not found`
  with details {name, group, kind: metricrules}, shaped like the recorded pod 404.
- POST to a namespace's collection: create (201, the object; 409 AlreadyExists shaped like the
  recorded pod one; 422 Invalid when the schema refuses it; status is dropped, as the status
  subresource makes the main resource ignore it). Unknown fields: 400 "strict decoding error"
  with ?fieldValidation=Strict (what kubectl sends), else pruned. ?dryRun=All: checked and
  answered, not stored.
- The status subresource: PUT .../status (the whole object; metadata.resourceVersion, when given,
  must be the current one, else 409 Conflict "the object has been modified; please apply your
  changes to the latest version and try again") and PATCH .../status with
  application/merge-patch+json or application/json-patch+json (other patch types: 415, as for
  every custom resource, strategic merge patch included). Only status changes; spec, labels and
  generation stay. The result is checked against the CRD's schema (422 Invalid naming the field,
  as the recorded 422 is shaped); an update that changes nothing keeps the resourceVersion and
  makes no event (kube-apiserver skips no-op writes). The answer is 200 with the object.

Test controls (no such endpoints exist in kube-apiserver; like every request they need the token):
  POST /__fake/metricrules/apply   body: a MetricRule (JSON or YAML). Create, or update spec,
                                   labels and annotations (generation +1 when spec changes);
                                   status is kept. Checked as kubectl apply is: 400 for unknown
                                   fields (Strict), 422 for what the schema refuses.
  GET  /__fake/metricrules/delete?namespace=N&name=X   → DELETED
  GET  /__fake/metricrules/bookmark      a BOOKMARK now on every open watch that allows them
  GET  /__fake/metricrules/drop-watches[?mode=close|abort]   ends every open MetricRule watch:
                                   close = the chunked stream ends cleanly (as at timeoutSeconds,
                                   no event); abort = the connection is cut mid-stream
  GET  /__fake/metricrules/gone    compaction: open watches get ERROR 410, older resourceVersions
                                   get 410 on WATCH, Exact LIST and continue (a real open
                                   watch sees 410 when the watch cache restarts or it falls
                                   behind; here a compaction stands for both)
  GET  /__fake/metricrules/status-log    every status write received, oldest first: method, path,
                                   contentType, body (parsed), code
Each answers a JSON object with the current resourceVersion.
"""

import copy
import datetime
import json
import os
import re
import sys
import threading
import time
import uuid

GROUP = "metrics.custom-metrics-adapter.dev"
VERSION = "v1alpha1"
GV = GROUP + "/" + VERSION
RESOURCE = "metricrules"
KIND = "MetricRule"
GR = RESOURCE + "." + GROUP
UUID_NAMESPACE = uuid.UUID("5d0b6c1e-8f0c-4a53-9e55-6a4f3f0b2c11")
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")


def sorted_json(obj):
    """Unstructured encoding: map keys sorted at every level."""
    return json.loads(json.dumps(obj, sort_keys=True))


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class PatchError(Exception):
    pass


def json_patch(doc, ops):
    """RFC 6902 JSON patch: add, remove, replace, test (what status writers use)."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op.get("path", "").split("/")[1:]]
        if not parts:
            raise PatchError("invalid path")
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.get(p)
            if parent is None:
                raise PatchError("doc is missing path: \"%s\": missing value" % op.get("path"))
        last = parts[-1]
        kind = op.get("op")
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, op.get("value"))
            elif kind == "remove":
                del parent[index]
            elif kind == "replace":
                parent[index] = op.get("value")
            elif kind == "test" and parent[index] != op.get("value"):
                raise PatchError("testing value %s failed: test failed" % op.get("path"))
        else:
            if kind in ("remove", "replace", "test") and last not in parent:
                raise PatchError("doc is missing key: %s: missing value" % op.get("path"))
            if kind in ("add", "replace"):
                parent[last] = op.get("value")
            elif kind == "remove":
                del parent[last]
            elif kind == "test" and parent[last] != op.get("value"):
                raise PatchError("testing value %s failed: test failed" % op.get("path"))
    return doc


def json_path(obj, path):
    """The CRD printer columns' simple JSONPath: .a.b, .a[?(@.k=="v")].b. A list of results."""
    values = [obj]
    for step in re.findall(r'\.([A-Za-z0-9_]+)|\[\?\(@\.([A-Za-z0-9_]+)=="([^"]*)"\)\]', path):
        name, key, want = step
        out = []
        for v in values:
            if name and isinstance(v, dict) and name in v:
                out.append(v[name])
            elif key and isinstance(v, list):
                out.extend(x for x in v if isinstance(x, dict) and x.get(key) == want)
        values = out
    return values


def human_age(timestamp):
    """apimachinery's duration.HumanDuration, to the minute's precision kubectl shows."""
    try:
        then = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return "<invalid>"
    seconds = max(0, int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds()))
    if seconds < 120:
        return "%ds" % seconds
    minutes = seconds // 60
    if minutes < 10:
        return "%dm%ds" % (minutes, seconds % 60) if seconds % 60 else "%dm" % minutes
    if minutes < 180:
        return "%dm" % minutes
    hours = minutes // 60
    return "%dh" % hours if hours < 48 else "%dd" % (hours // 24)


class DropWatch(ConnectionAbortedError):
    """Raised inside a watch stream to cut the connection (drop-watches?mode=abort)."""


class MetricRuleStore:
    def __init__(self, fake, fixtures, cluster, crd_path):
        # fake: the fake_kube_apiserver module (helpers: go_json, status_body, Response, ...).
        self.fake = fake
        self.fx = fixtures
        self.cluster = cluster
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import crd_validate  # noqa: E402 - needs python3-jsonschema only with --metric-rules
        import jsonschema
        self.crd_validate = crd_validate
        self.crd = crd_validate.load_crd(crd_path)
        schema = crd_validate.served_version(self.crd)["schema"]["openAPIV3Schema"]
        self.validator = jsonschema.Draft4Validator(crd_validate.strict(schema))
        self.cond = threading.Condition()
        self.events = []  # (rv int, type, object) in rv order; the state at rv replays them
        self.objects = {}  # "ns/name" -> object (current)
        self.compacted = 0
        self.gone_generation = 0
        self.drop_generation = 0
        self.drop_mode = "close"
        self.bookmark_generation = 0
        self.status_log = []
        self.too_old = json.loads(fixtures.raw("watch-pods-too-old-rv.jsonl").decode().splitlines()[0])
        self.expired_continue = fixtures.http("error-410-list-continue-expired.http")
        self.expired_exact = fixtures.http("error-410-list-exact-rv-compacted.http")

    # -- discovery -----------------------------------------------------------------------------

    def discovery(self):
        """The APIResourceList a CRD with a status subresource and short names gets."""
        verbs = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GV, "resources": [
            {"name": RESOURCE, "singularName": "metricrule", "namespaced": True, "kind": KIND,
             "verbs": verbs, "shortNames": ["mr"], "storageVersionHash": "fake0000001="},
            {"name": RESOURCE + "/status", "singularName": "", "namespaced": True, "kind": KIND,
             "verbs": ["get", "patch", "update"]}]}

    # -- answers -------------------------------------------------------------------------------

    def respond(self, obj, status=200):
        return self.fake.Response(status, (self.fake.go_json(sorted_json(obj)) + "\n").encode())

    def plain(self, obj):
        return self.fake.Response(200, (self.fake.go_json(obj) + "\n").encode())

    def not_found(self, name):
        return self.fake.Response(404, self.fake.status_body(
            404, "NotFound", '%s "%s" not found' % (GR, name),
            {"name": name, "group": GROUP, "kind": RESOURCE}))

    def invalid(self, name, problems):
        causes = []
        for p in problems:
            field, _, message = p.partition(": ")
            if p.startswith("unknown field"):
                field, message = p.split('"')[1], p
                reason = "FieldValueInvalid"
            elif message.startswith("Required"):
                reason = "FieldValueRequired"
            elif message.startswith("Unsupported value"):
                reason = "FieldValueNotSupported"
            else:
                reason = "FieldValueInvalid"
            causes.append({"reason": reason, "message": message, "field": field})
        message = '%s.%s "%s" is invalid: %s' % (KIND, GROUP, name, ", ".join(problems)) if len(problems) == 1 \
            else '%s.%s "%s" is invalid: [%s]' % (KIND, GROUP, name, ", ".join(problems))
        return self.fake.Response(422, self.fake.status_body(
            422, "Invalid", message, {"name": name, "group": GROUP, "kind": KIND, "causes": causes}))

    def problems(self, obj, with_status):
        _, _, problems = self.crd_validate.check_object(obj, self.crd, self.validator, with_status)
        return problems

    def decode(self, obj, strict):
        """What kube-apiserver's decoder does with unknown fields: with fieldValidation=Strict
        (kubectl's default) a 400 naming them; otherwise they are pruned. (object, None) or
        (None, Response)."""
        unknown = [p for p in self.problems(obj, with_status=True) if p.startswith("unknown field")]
        if not unknown:
            return obj, None
        if strict:
            return None, self.fake.Response(400, self.fake.status_body(
                400, "BadRequest", '%s in version "%s" cannot be handled as a %s: strict decoding error: %s'
                % (KIND, VERSION, KIND, ", ".join(unknown))))
        fields = [p.split('"')[1] for p in unknown]
        obj = copy.deepcopy(obj)
        for field in fields:  # spec.rules[0].name.metricsQuery -> remove that key
            parts = [int(x) if x.isdigit() else x for x in
                     field.replace("[", ".").replace("]", "").split(".")]
            node = obj
            for part in parts[:-1]:
                node = node[part]
            node.pop(parts[-1], None)
        return obj, None

    # -- state ---------------------------------------------------------------------------------

    @staticmethod
    def key(obj):
        return obj["metadata"]["namespace"] + "/" + obj["metadata"]["name"]

    def _event(self, kind, obj):
        # Lock held.
        rv = int(self.cluster.next_rv())
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(rv)
        if kind == "DELETED":
            self.objects.pop(self.key(obj), None)
        else:
            self.objects[self.key(obj)] = obj
        self.events.append((rv, kind, obj))
        self.cond.notify_all()
        return obj

    def state_at(self, rv):
        """Lock held. The objects as they were at resourceVersion rv, by key."""
        state = {}
        for event_rv, kind, obj in self.events:
            if event_rv > rv:
                break
            if kind == "DELETED":
                state.pop(self.key(obj), None)
            else:
                state[self.key(obj)] = obj
        return state

    def create(self, body, namespace=None, strict=True, dry_run=False):
        """Lock held. (object, None) or (None, error Response)."""
        obj, error = self.decode(sorted_json(body), strict)
        if error:
            return None, error
        meta = obj.setdefault("metadata", {})
        if namespace is not None:
            meta["namespace"] = meta.get("namespace") or namespace
        name = meta.get("name", "")
        meta.setdefault("namespace", "default")
        problems = self.problems(obj, with_status=False)
        if problems:
            return None, self.invalid(name, problems)
        if self.key(obj) in self.objects:
            return None, self.fake.Response(409, self.fake.status_body(
                409, "AlreadyExists", '%s "%s" already exists' % (GR, name),
                {"name": name, "group": GROUP, "kind": RESOURCE}))
        obj.pop("status", None)
        keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
        keep.update({"uid": str(uuid.uuid5(UUID_NAMESPACE, "%s/%s/%d" % (
            keep["namespace"], name, len(self.events)))), "generation": 1,
            "creationTimestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
        obj["metadata"] = keep
        if dry_run:  # ?dryRun=All: validated and answered, not stored (no resourceVersion)
            return obj, None
        return self._event("ADDED", obj), None

    def apply(self, body):
        with self.cond:
            meta = (body or {}).get("metadata") or {}
            current = self.objects.get("%s/%s" % (meta.get("namespace", "default"), meta.get("name")))
            if current is None:
                obj, error = self.create(body)
                return (obj, "ADDED") if obj else (error, None)
            body, error = self.decode(body, strict=True)
            if error:
                return error, None
            problems = self.problems(body, with_status=False)
            if problems:
                return self.invalid(meta.get("name", ""), problems), None
            obj = copy.deepcopy(current)
            if body.get("spec") != current.get("spec"):
                obj["spec"] = sorted_json(body.get("spec"))
                obj["metadata"]["generation"] += 1
            for k in ("labels", "annotations"):
                if meta.get(k):
                    obj["metadata"][k] = dict(sorted(meta[k].items()))
                else:
                    obj["metadata"].pop(k, None)
            if obj == current:
                return current, "UNCHANGED"
            return self._event("MODIFIED", obj), "MODIFIED"

    # -- routing -------------------------------------------------------------------------------

    def openapi(self, parts):
        """/openapi/v3 (the index, listing this group only) and /openapi/v3/apis/G/V: what
        kube-apiserver publishes for the CRD (the schema under components.schemas, named by the
        reversed group, with x-kubernetes-group-version-kind), enough for kubectl explain.
        ObjectMeta and ListMeta are SYNTHESISED stubs (type and description only)."""
        doc_path = "apis/%s/%s" % (GROUP, VERSION)
        if parts == ["openapi", "v3"]:
            return self.plain({"paths": {doc_path: {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (
                doc_path, "FAKE" + uuid.uuid5(UUID_NAMESPACE, "openapi").hex[:12].upper())}}})
        if parts != ["openapi", "v3", "apis", GROUP, VERSION]:
            return None
        prefix = ".".join(reversed(GROUP.split("."))) + "." + VERSION
        meta = "io.k8s.apimachinery.pkg.apis.meta.v1."
        schema = copy.deepcopy(self.crd_validate.served_version(self.crd)["schema"]["openAPIV3Schema"])
        schema["properties"]["metadata"] = {
            "description": "Standard object's metadata. More info: "
                           "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            "allOf": [{"$ref": "#/components/schemas/%sObjectMeta" % meta}]}
        schema["x-kubernetes-group-version-kind"] = [{"group": GROUP, "kind": KIND, "version": VERSION}]
        list_schema = {
            "description": "MetricRuleList is a list of MetricRule", "type": "object", "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/%s.%s" % (prefix, KIND)}},
                "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/%sListMeta" % meta}]}},
            "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": KIND + "List", "version": VERSION}]}
        gvk = {"group": GROUP, "kind": KIND, "version": VERSION}
        ref = {"$ref": "#/components/schemas/%s.%s" % (prefix, KIND)}
        list_ref = {"$ref": "#/components/schemas/%s.%sList" % (prefix, KIND)}

        def op(action, verb_id, answer):
            out = {"operationId": verb_id, "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
                   "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": answer}}}}}
            if action in ("post", "put", "patch"):  # kubectl looks for these to use server-side validation
                out["parameters"] = [{"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                                     for name in ("dryRun", "fieldManager", "fieldValidation")]
            return out
        base = "/apis/%s/%s" % (GROUP, VERSION)
        one = base + "/namespaces/{namespace}/metricrules/{name}"
        paths = {
            base + "/metricrules": {"get": op("list", "listMetricRuleForAllNamespaces", list_ref)},
            base + "/namespaces/{namespace}/metricrules": {
                "get": op("list", "listNamespacedMetricRule", list_ref),
                "post": op("post", "createNamespacedMetricRule", ref)},
            one: {"get": op("get", "readNamespacedMetricRule", ref), "put": op("put", "replaceNamespacedMetricRule", ref),
                  "patch": op("patch", "patchNamespacedMetricRule", ref),
                  "delete": op("delete", "deleteNamespacedMetricRule", ref)},
            one + "/status": {"get": op("get", "readNamespacedMetricRuleStatus", ref),
                              "put": op("put", "replaceNamespacedMetricRuleStatus", ref),
                              "patch": op("patch", "patchNamespacedMetricRuleStatus", ref)}}
        doc = {"openapi": "3.0.0", "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
               "paths": paths, "components": {"schemas": {
                   "%s.%s" % (prefix, KIND): schema, "%s.%sList" % (prefix, KIND): list_schema,
                   meta + "ObjectMeta": {"type": "object", "description": "ObjectMeta is metadata that all persisted resources must have."},
                   meta + "ListMeta": {"type": "object", "description": "ListMeta describes metadata that synthetic resources must have."}}}}
        return self.plain(doc)

    def dispatch(self, method, parts, params, headers, body):
        """A Response for MetricRule paths and the controls, None for anything else."""
        if parts[:2] == ["__fake", "metricrules"]:
            return self.control(method, parts[2:], params, body)
        if parts[:2] == ["openapi", "v3"] and method in ("GET", "HEAD"):
            return self.openapi(parts)
        if parts[:3] != ["apis", GROUP, VERSION] or len(parts) < 4:
            return None
        rest = parts[3:]
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if rest[0] != RESOURCE or len(rest) > 3:
            return None
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if sub not in (None, "status") or (name is not None and namespace is None):
            return self.fake.Response(404, self.fake.status_body(
                404, "NotFound", "the server could not find the requested resource", {}))
        if sub == "status":
            return self.status_write(method, namespace, name, headers, body) if method in ("PUT", "PATCH") \
                else (self.get(namespace, name) if method in ("GET", "HEAD") else None)
        if name is None and method == "POST" and namespace is not None:
            with self.cond:
                obj, error = self.create(json.loads(body or b"{}"), namespace,
                                         strict=params.get("fieldValidation") == "Strict",
                                         dry_run=params.get("dryRun") == "All")
            return error if error else self.respond(obj, 201)
        if method not in ("GET", "HEAD"):
            return None  # the fake's 405
        if name is not None:
            return self.get(namespace, name, headers)
        if params.get("watch") in ("1", "true"):
            return self.watch(namespace, params)
        return self.list(namespace, params, headers)

    def get(self, namespace, name, headers=None):
        with self.cond:
            obj = self.objects.get("%s/%s" % (namespace, name))
        if obj and headers is not None and self.wants_table(headers):
            return self.table([obj], {"resourceVersion": obj["metadata"]["resourceVersion"]})
        return self.respond(obj) if obj else self.not_found(name)

    def selected(self, objects, namespace, params):
        """(sorted [(key, obj)], label requirements, field terms) or raises SelectorError."""
        requirements = self.fake.parse_label_selector(params.get("labelSelector", ""))
        fields = self.fake.parse_field_selector(params.get("fieldSelector", ""), RESOURCE)
        out = []
        for key, obj in sorted(objects.items()):
            if namespace is not None and obj["metadata"]["namespace"] != namespace:
                continue
            if not self.fake.label_selector_matches(requirements, obj["metadata"].get("labels") or {}):
                continue
            if not self.fake.field_selector_matches(fields, obj):
                continue
            out.append((obj["metadata"]["name"] if namespace is not None else key, obj))
        return out, requirements, fields

    @staticmethod
    def wants_table(headers):
        accept = headers.get("Accept") or ""
        first = [f.strip() for f in accept.split(",")[0].split(";")]
        return "as=Table" in first and "g=meta.k8s.io" in first and "v=v1" in first

    def table(self, items, metadata):
        """The meta.k8s.io/v1 Table kube-apiserver builds from the CRD's additionalPrinterColumns
        (kubectl get asks for it): Name, then each column's JSONPath value; a string column of a
        non-string value is its JSON; no value is null."""
        columns = self.crd_validate.served_version(self.crd)["additionalPrinterColumns"]
        definitions = [{"name": "Name", "type": "string", "format": "name", "description":
                        "Name must be unique within a namespace.", "priority": 0}]
        definitions += [{"name": c["name"], "type": c["type"], "format": c.get("format", ""),
                         "description": c.get("description", ""), "priority": c.get("priority", 0)} for c in columns]
        rows = []
        for obj in items:
            cells = [obj["metadata"]["name"]]
            for c in columns:
                found = json_path(obj, c["jsonPath"])
                if not found:
                    cells.append(None)
                elif c["type"] == "date":
                    cells.append(human_age(found[0]))
                elif c["type"] == "string" and not isinstance(found[0], str):
                    cells.append(self.fake.go_json(found[0]))
                else:
                    cells.append(found[0])
            rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                    "metadata": obj["metadata"]}})
        meta = {"resourceVersion": metadata["resourceVersion"]}
        if metadata.get("continue"):
            meta["continue"] = metadata["continue"]
        return self.fake.Response(200, (self.fake.go_json({
            "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": definitions, "rows": rows}) + "\n").encode())

    def list(self, namespace, params, headers=None):
        fake = self.fake
        token = params.get("continue")
        with self.cond:
            current = self.cluster.rv
            rv, start = current, None
            if token:
                try:
                    padded = token + "=" * (-len(token) % 4)
                    data = json.loads(__import__("base64").urlsafe_b64decode(padded.encode()))
                    rv, start = int(data["rv"]), data["start"][:-1]
                except Exception as e:  # noqa: BLE001 - a malformed token is a 400
                    return fake.Response(400, fake.status_body(400, "BadRequest", "continue key is not valid: %s" % e))
                if rv < self.compacted:
                    _, _, status, headers, recorded = self.expired_continue
                    answer = json.loads(recorded)
                    answer["metadata"]["continue"] = fake.continue_token(-1, start)
                    return fake.Response(status, (fake.go_json(answer) + "\n").encode())
            elif params.get("resourceVersionMatch") == "Exact":
                try:
                    rv = int(params.get("resourceVersion") or "")
                except ValueError:
                    return fake.Response(400, fake.status_body(400, "BadRequest", "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"\""))
                if rv < self.compacted:
                    _, _, status, headers, recorded = self.expired_exact
                    return fake.Response(status, recorded, headers)
            objects = self.state_at(rv) if rv != current else dict(self.objects)
        try:
            items, requirements, fields = self.selected(objects, namespace, params)
        except fake.SelectorError as e:
            return fake.Response(400, fake.status_body(400, "BadRequest", str(e)))
        if start is not None:
            items = [(k, o) for k, o in items if k > start]
        metadata = {"continue": "", "resourceVersion": str(rv)}
        try:
            limit = int(params.get("limit") or 0)
        except ValueError:
            limit = 0
        if 0 < limit < len(items):
            metadata["continue"] = fake.continue_token(rv, items[limit - 1][0])
            if not requirements and not fields:
                metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if headers is not None and self.wants_table(headers):
            return self.table([o for _, o in items], metadata)
        return self.respond({"apiVersion": GV, "kind": KIND + "List", "metadata": metadata,
                             "items": [o for _, o in items]})

    # -- watch ---------------------------------------------------------------------------------

    def _line(self, kind, obj):
        return (self.fake.go_json({"type": kind, "object": sorted_json(obj)}) + "\n").encode()

    def _gone_line(self, rv):
        event = copy.deepcopy(self.too_old)
        event["object"]["message"] = "too old resource version: %s (%d)" % (rv, self.compacted)
        return (self.fake.go_json(event) + "\n").encode()

    def _bookmark(self):
        return self._line("BOOKMARK", {"apiVersion": GV, "kind": KIND,
                                       "metadata": {"resourceVersion": str(self.cluster.rv)}})

    def watch(self, namespace, params):
        fake = self.fake
        try:
            requirements = fake.parse_label_selector(params.get("labelSelector", ""))
            fields = fake.parse_field_selector(params.get("fieldSelector", ""), RESOURCE)
        except fake.SelectorError as e:
            return fake.Response(400, fake.status_body(400, "BadRequest", str(e)))
        rv_text = params.get("resourceVersion") or ""
        try:
            since = int(rv_text) if rv_text not in ("", "0") else None
        except ValueError:
            return fake.Response(400, fake.status_body(400, "BadRequest", "invalid resource version: %s" % rv_text))
        try:
            timeout = min(float(params.get("timeoutSeconds") or 1800), 1800)
        except ValueError:
            timeout = 1800
        bookmarks = params.get("allowWatchBookmarks") in ("1", "true")

        def wanted(obj):
            return (namespace is None or obj["metadata"]["namespace"] == namespace) and \
                fake.label_selector_matches(requirements, obj["metadata"].get("labels") or {}) and \
                fake.field_selector_matches(fields, obj)

        def lines():
            nonlocal since
            deadline = time.monotonic() + timeout
            with self.cond:
                gone, drop, mark = self.gone_generation, self.drop_generation, self.bookmark_generation
                if since is not None and since < self.compacted:
                    yield self._gone_line(since)
                    return
                if since is None:  # synthetic ADDED for what exists, then every later change
                    since = self.cluster.rv
                    initial = [o for _, o in sorted(self.objects.items()) if wanted(o)]
                else:
                    initial = []
                index = 0
                while index < len(self.events) and self.events[index][0] <= since:
                    index += 1
            for obj in initial:
                yield self._line("ADDED", obj)
            while True:
                with self.cond:
                    if self.gone_generation != gone:
                        yield self._gone_line(since)
                        return
                    if self.drop_generation != drop:
                        if self.drop_mode == "abort":
                            raise DropWatch("watch dropped by /__fake/metricrules/drop-watches")
                        return
                    if self.bookmark_generation != mark:
                        mark = self.bookmark_generation
                        if bookmarks:
                            yield self._bookmark()
                    pending = self.events[index:]
                    index = len(self.events)
                    if not pending:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            if bookmarks:
                                yield self._bookmark()
                            return
                        self.cond.wait(min(left, 0.5))
                        continue
                for rv, kind, obj in pending:
                    since = rv
                    if wanted(obj):
                        yield self._line(kind, obj)

        return fake.StreamResponse(lines())

    # -- status subresource --------------------------------------------------------------------

    def status_write(self, method, namespace, name, headers, body):
        fake = self.fake
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
        entry = {"method": method, "path": "/apis/%s/namespaces/%s/%s/%s/status" % (GV, namespace, RESOURCE, name),
                 "contentType": ctype}
        try:
            entry["body"] = json.loads(body or b"null")
        except ValueError:
            entry["body"] = (body or b"").decode("utf-8", "replace")
        answer = self._status_write(method, namespace, name, ctype, entry["body"])
        entry["code"] = answer.status
        with self.cond:
            self.status_log.append(entry)
        return answer

    def _status_write(self, method, namespace, name, ctype, body):
        fake = self.fake
        if method == "PATCH" and ctype not in PATCH_TYPES:
            return fake.Response(415, fake.status_body(
                415, "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml", {}))
        with self.cond:
            current = self.objects.get("%s/%s" % (namespace, name))
            if current is None:
                return self.not_found(name)
            if method == "PUT":
                if not isinstance(body, dict):
                    return fake.Response(400, fake.status_body(400, "BadRequest", "the body of the request is not a JSON object"))
                given_rv = (body.get("metadata") or {}).get("resourceVersion")
                if given_rv and given_rv != current["metadata"]["resourceVersion"]:
                    return fake.Response(409, fake.status_body(
                        409, "Conflict",
                        'Operation cannot be fulfilled on %s "%s": the object has been modified; please apply '
                        "your changes to the latest version and try again" % (GR, name),
                        {"name": name, "group": GROUP, "kind": RESOURCE}))
                wanted = body
            else:
                try:
                    wanted = merge_patch(current, body) if ctype == "application/merge-patch+json" \
                        else json_patch(current, body)
                except (PatchError, KeyError, IndexError, ValueError, TypeError, AttributeError) as e:
                    return fake.Response(422, fake.status_body(422, "Invalid", str(e), {}))
            updated = copy.deepcopy(current)
            if wanted.get("status") is None:
                updated.pop("status", None)
            else:
                updated["status"] = sorted_json(wanted["status"])
            updated, _ = self.decode(updated, strict=False)  # unknown status fields are pruned
            problems = self.problems(updated, with_status=True)
            if problems:
                return self.invalid(name, problems)
            if updated == current:
                return self.respond(current)
            return self.respond(self._event("MODIFIED", updated))

    # -- test controls -------------------------------------------------------------------------

    def control(self, method, what, params, body):
        fake = self.fake
        what = "/".join(what)
        if what == "apply" and method == "POST":
            text = (body or b"").decode("utf-8")
            try:
                obj = json.loads(text)
            except ValueError:
                import yaml  # python3-yaml: the test's fixtures are YAML
                obj = yaml.safe_load(text)
            answer, event = self.apply(obj)
            if event is None:
                return answer
            return self.plain({"event": event, "generation": answer["metadata"]["generation"],
                                                 "resourceVersion": answer["metadata"]["resourceVersion"]})
        with self.cond:
            if what == "delete":
                current = self.objects.get("%s/%s" % (params.get("namespace", ""), params.get("name", "")))
                if current is None:
                    return self.not_found(params.get("name", ""))
                self._event("DELETED", current)
            elif what == "bookmark":
                self.bookmark_generation += 1
            elif what == "drop-watches":
                self.drop_mode = params.get("mode", "close")
                self.drop_generation += 1
            elif what == "gone":
                self.compacted = int(self.cluster.next_rv())
                self.gone_generation += 1
            elif what == "status-log":
                return self.plain(list(self.status_log))
            else:
                return None
            self.cond.notify_all()
            return self.plain({"resourceVersion": str(self.cluster.rv),
                                                 "objects": len(self.objects)})
