#!/usr/bin/env python3
"""crd_validate.py: checks a CustomResourceDefinition and validates objects against it offline, the
way kube-apiserver would, for tests/e2e/test_metric_rule_crd.sh (no kube-apiserver runs here).

  crd_validate.py structural CRD.yaml
      Prints one line per problem that would make kube-apiserver reject the schema as not
      structural (apiextensions-apiserver's structural schema rules), or "structural" when none:
      every node has a type (an object with properties, additionalProperties or no children, an
      array with items); no $ref, no additionalProperties beside properties; value validations
      only inside allOf/anyOf/oneOf/not (no type, description, default, nullable there);
      x-kubernetes-preserve-unknown-fields only at the paths given by --preserve-allowed; metadata
      at the root carries at most name/generateName; x-kubernetes-list-type map has list-map-keys
      that are required or defaulted scalar properties of the items.

  crd_validate.py validate CRD.yaml FILE...
      Every document of kind <the CRD's kind> in FILEs (YAML, several documents each; Markdown files
      contribute their ```yaml blocks) is checked as kube-apiserver checks a create with field
      validation Strict (kubectl's default since 1.27): apiVersion/kind, metadata.name (a DNS
      subdomain, required), the openAPIV3Schema of the served version (python3-jsonschema, draft
      4 keywords, the OpenAPI extensions ignored), unknown fields refused (what Strict adds to
      pruning), list-type map keys unique. One line per object:
        ok FILE#N NAME
        invalid FILE#N NAME: FIELD: MESSAGE; FIELD: MESSAGE...
      with FIELD written as kube-apiserver writes field paths (spec.rules[0].metricsQuery).

The status subresource is not validated on create (kube-apiserver resets status on create when the
subresource is enabled), as the real server does: status is checked only with --with-status.
"""

import argparse
import copy
import json
import re
import sys

import jsonschema
import yaml

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
FORBIDDEN_IN_JUNCTORS = ("type", "description", "default", "nullable", "additionalProperties",
                         "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
                         "x-kubernetes-int-or-string")


def load_crd(path):
    docs = [d for d in yaml.safe_load_all(open(path, encoding="utf-8")) if d]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    if len(crds) != 1:
        raise SystemExit("%s: expected one CustomResourceDefinition, found %d" % (path, len(crds)))
    return crds[0]


def served_version(crd):
    versions = [v for v in crd["spec"]["versions"] if v.get("served")]
    storage = [v for v in versions if v.get("storage")]
    return (storage or versions)[0]


# ---------------------------------------------------------------------------------------------
# structural


def structural_problems(schema, path, preserve_allowed, out, in_junctor=False):
    if not isinstance(schema, dict):
        out.append("%s: not a schema object" % path)
        return
    if "$ref" in schema:
        out.append("%s: $ref is not allowed in a CRD schema" % path)
    if in_junctor:
        for key in FORBIDDEN_IN_JUNCTORS:
            if key in schema:
                out.append("%s: %s is not allowed inside a logical junctor" % (path, key))
    elif "type" not in schema and not schema.get("x-kubernetes-int-or-string") \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out.append("%s: type is missing" % path)
    if schema.get("x-kubernetes-preserve-unknown-fields") and path not in preserve_allowed:
        out.append("%s: x-kubernetes-preserve-unknown-fields where it was not intended" % path)
    if "properties" in schema and "additionalProperties" in schema:
        out.append("%s: properties and additionalProperties are mutually exclusive" % path)
    kind = schema.get("type")
    if kind == "array" and "items" not in schema and not in_junctor:
        out.append("%s: an array needs items" % path)
    for name, sub in (schema.get("properties") or {}).items():
        structural_problems(sub, "%s.%s" % (path, name), preserve_allowed, out, in_junctor)
    if isinstance(schema.get("additionalProperties"), dict):
        structural_problems(schema["additionalProperties"], path + "[*]", preserve_allowed, out, in_junctor)
    if isinstance(schema.get("items"), dict):
        structural_problems(schema["items"], path + "[*]", preserve_allowed, out, in_junctor)
    for junctor in JUNCTORS:
        subs = schema.get(junctor)
        if subs is None:
            continue
        for i, sub in enumerate(subs if isinstance(subs, list) else [subs]):
            structural_problems(sub, "%s.%s[%d]" % (path, junctor, i), preserve_allowed, out, True)
    if schema.get("x-kubernetes-list-type") == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        items = schema.get("items") or {}
        if not keys:
            out.append("%s: x-kubernetes-list-type map without x-kubernetes-list-map-keys" % path)
        for key in keys:
            prop = (items.get("properties") or {}).get(key)
            if prop is None or prop.get("type") not in ("string", "integer", "boolean"):
                out.append("%s: list-map key %s is not a scalar property of the items" % (path, key))
            elif key not in (items.get("required") or []) and "default" not in prop:
                out.append("%s: list-map key %s must be required or defaulted" % (path, key))


def cmd_structural(args):
    crd = load_crd(args.crd)
    out = []
    for version in crd["spec"]["versions"]:
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            out.append("%s: no openAPIV3Schema" % version["name"])
            continue
        structural_problems(schema, "%s:" % version["name"], set(args.preserve_allowed), out)
        if schema.get("type") != "object":
            out.append("%s: the root is not of type object" % version["name"])
        meta = (schema.get("properties") or {}).get("metadata")
        if meta is not None:
            extra = set((meta.get("properties") or {})) - {"name", "generateName"}
            if extra:
                out.append("%s: metadata may only constrain name and generateName, not %s"
                           % (version["name"], sorted(extra)))
    print("\n".join(out) if out else "structural")
    return 1 if out else 0


# ---------------------------------------------------------------------------------------------
# validate


def strict(schema):
    """The schema with additionalProperties: false wherever kube-apiserver would call a field
    unknown (an object with properties and no additionalProperties / preserve-unknown-fields)."""
    schema = copy.deepcopy(schema)

    def walk(node, is_root_metadata=False):
        if not isinstance(node, dict):
            return
        if node.get("type") == "object" and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields") and not is_root_metadata:
            node["additionalProperties"] = False
        for name, sub in (node.get("properties") or {}).items():
            walk(sub)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"])
        if isinstance(node.get("items"), dict):
            walk(node["items"])

    walk(schema)
    props = schema.get("properties") or {}
    if "metadata" in props:  # ObjectMeta is validated on its own, never as an unknown field
        props["metadata"] = {"type": "object"}
    return schema


def field_path(parts):
    out = ""
    for p in parts:
        out += "[%d]" % p if isinstance(p, int) else ("." + p if out else p)
    return out or "<root>"


def describe(error):
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = re.search(r"'([^']+)' is a required property", error.message)
        return "%s: Required value" % field_path(path + [missing.group(1) if missing else "?"])
    if error.validator == "additionalProperties":
        names = re.findall(r"'([^']+)'", error.message)
        return "; ".join('unknown field "%s"' % field_path(path + [n]) for n in names)
    if error.validator == "maxLength":
        return "%s: Too long: may not be more than %d bytes" % (field_path(path), error.validator_value)
    if error.validator == "minLength":
        return "%s: Invalid value: \"\": should be at least %d chars long" % (field_path(path), error.validator_value)
    if error.validator == "maxItems":
        return "%s: Too many: %d: must have at most %d items" % (
            field_path(path), len(error.instance), error.validator_value)
    if error.validator in ("minProperties", "maxProperties"):
        return "%s: Invalid value: %d: %s %d properties" % (
            field_path(path), len(error.instance),
            "should have at least" if error.validator == "minProperties" else "should have at most",
            error.validator_value)
    if error.validator == "enum":
        return "%s: Unsupported value: %s: supported values: %s" % (
            field_path(path), json.dumps(error.instance),
            ", ".join(json.dumps(str(v).lower() if isinstance(v, bool) else v) for v in error.validator_value))
    if error.validator == "pattern":
        return "%s: Invalid value: %s: %s in body should match '%s'" % (
            field_path(path), json.dumps(error.instance), field_path(path), error.validator_value)
    if error.validator == "type":
        return "%s: Invalid value: %s: %s in body must be of type %s" % (
            field_path(path), json.dumps(error.instance), field_path(path), error.validator_value)
    return "%s: %s" % (field_path(path), error.message)


def list_map_problems(schema, value, path, out):
    if not isinstance(schema, dict):
        return
    if isinstance(value, list) and schema.get("x-kubernetes-list-type") == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen = {}
        for i, item in enumerate(value):
            if isinstance(item, dict):
                k = tuple(item.get(x) for x in keys)
                if k in seen:
                    out.append("%s: Duplicate value: %s" % (field_path(path + [i]), json.dumps(
                        {x: item.get(x) for x in keys})))
                seen[k] = i
    if isinstance(value, list):
        for i, item in enumerate(value):
            list_map_problems(schema.get("items"), item, path + [i], out)
    elif isinstance(value, dict):
        for name, sub in value.items():
            child = (schema.get("properties") or {}).get(name)
            if child is None and isinstance(schema.get("additionalProperties"), dict):
                child = schema["additionalProperties"]
            list_map_problems(child, sub, path + [name], out)


def documents(path):
    text = open(path, encoding="utf-8").read()
    if path.endswith(".md"):
        blocks = re.findall(r"^```ya?ml\n(.*?)^```", text, re.S | re.M)
    else:
        blocks = [text]
    docs = []
    for block in blocks:
        try:
            docs.extend(d for d in yaml.safe_load_all(block) if isinstance(d, dict))
        except yaml.YAMLError:
            if not path.endswith(".md"):
                raise
    return docs


def check_object(obj, crd, validator, with_status):
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    versions = {"%s/%s" % (group, v["name"]) for v in crd["spec"]["versions"] if v.get("served")}
    problems = []
    if obj.get("apiVersion") not in versions:
        problems.append("apiVersion: Unsupported value: %s: supported values: %s" % (
            json.dumps(obj.get("apiVersion")), ", ".join(sorted(versions))))
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        problems.append("metadata.name: Required value: name or generateName is required")
    elif name and (len(name) > 253 or not DNS1123_SUBDOMAIN.match(name)):
        problems.append("metadata.name: Invalid value: %s: a lowercase RFC 1123 subdomain" % json.dumps(name))
    body = dict(obj)
    if not with_status:
        body.pop("status", None)
    errors = sorted(validator.iter_errors(body), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    problems.extend(describe(e) for e in errors)
    list_map_problems(validator.schema, body, [], problems)
    return kind, name, problems


def cmd_validate(args):
    crd = load_crd(args.crd)
    schema = strict(served_version(crd)["schema"]["openAPIV3Schema"])
    validator = jsonschema.Draft4Validator(schema)
    kind = crd["spec"]["names"]["kind"]
    n = 0
    for path in args.files:
        for index, obj in enumerate(documents(path)):
            if obj.get("kind") != kind:
                continue
            n += 1
            _, name, problems = check_object(obj, crd, validator, args.with_status)
            where = "%s#%d %s" % (path, index, name)
            print(("ok %s" % where) if not problems else ("invalid %s: %s" % (where, "; ".join(problems))))
    if n == 0:
        print("no %s objects in %s" % (kind, " ".join(args.files)))
        return 1
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("structural")
    s.add_argument("crd")
    s.add_argument("--preserve-allowed", action="append", default=[],
                   help="a path (v1alpha1:.spec.x) where x-kubernetes-preserve-unknown-fields is intended")
    v = sub.add_parser("validate")
    v.add_argument("crd")
    v.add_argument("files", nargs="+")
    v.add_argument("--with-status", action="store_true", help="validate status too (a status write)")
    args = parser.parse_args(argv)
    return cmd_structural(args) if args.cmd == "structural" else cmd_validate(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
