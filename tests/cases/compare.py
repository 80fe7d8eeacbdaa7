#!/usr/bin/env python3
"""compare.py: compares one case's answer with its expected.json (tests/cases/README.md).

Usage: compare.py EXPECTED_JSON STATUS_FILE CTYPE_FILE BODY_FILE

expected.json: {"status": 404, "content_type": "application/json", "match": "exact" | "subset",
                "ignore_keys": ["timestamp"], "body": <JSON> | "body_text": "<text>",
                "moved_from": [...]}
The answer is compared semantically (parsed JSON, key order and whitespace ignored, as `jq -S`).
"subset": every key of an expected object must be in the answer with a matching value, arrays
match element by element and must have the same length; keys the expectation does not name are
ignored. "ignore_keys": object keys dropped from the answer at any depth before comparing (the
timestamps a recording fixes, say). content_type, body and body_text are compared only when
present; anything else in expected.json (moved_from, what) is documentation.
Exit 0 when it matches; else 1, printing a unified diff of the expected and the actual answer
(the actual one reduced to what the expectation names, in subset mode), both sorted like jq -S.
"""

import difflib
import json
import sys


def project(actual, expected):
    """actual reduced to the keys expected names (recursively); arrays keep their length."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {k: project(actual[k], v) for k, v in expected.items() if k in actual}
    if isinstance(expected, list) and isinstance(actual, list):
        head = [project(a, e) for a, e in zip(actual, expected)]
        return head + actual[len(expected):]
    return actual


def drop_keys(value, keys):
    """value without the object keys in keys, at any depth."""
    if isinstance(value, dict):
        return {k: drop_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [drop_keys(v, keys) for v in value]
    return value


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def actual_answer(expected, status, ctype, body_text):
    got = {"status": int(status) if status.strip().isdigit() else status.strip()}
    if "content_type" in expected:
        got["content_type"] = ctype.strip()
    if "body_text" in expected:
        got["body_text"] = body_text
    if "body" in expected:
        try:
            got["body"] = json.loads(body_text)
        except ValueError:
            got["body"] = "(not JSON) " + body_text[:2000]
        got["body"] = drop_keys(got["body"], set(expected.get("ignore_keys", [])))
        if expected.get("match", "exact") == "subset":
            got["body"] = project(got["body"], expected["body"])
    return got


def main(argv):
    spec = json.loads(read(argv[0]))
    want = {k: spec[k] for k in ("status", "content_type", "body_text", "body") if k in spec}
    got = actual_answer(spec, read(argv[1]), read(argv[2]), read(argv[3]))
    if got == want:
        return 0
    a = json.dumps(want, indent=1, sort_keys=True).splitlines()
    b = json.dumps(got, indent=1, sort_keys=True).splitlines()
    for line in difflib.unified_diff(a, b, "expected", "actual", lineterm="", n=3):
        print(line)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
