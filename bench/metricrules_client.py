#!/usr/bin/env python3
"""metricrules_client.py: the client side of bench/metricrules.sh. Talks to the fake kube-apiserver
(tests/lib/fake_kube_apiserver.py --metric-rules: POST /__fake/metricrules/apply stands in for
`kubectl apply`) and to the adapter over TLS, and measures.

  metricrules_client.py apply FILE.jsonl
      Applies every MetricRule of FILE (one JSON object a line) over one keep-alive connection;
      prints "applied N in S s".
  metricrules_client.py first-value RULE.json PATH EXPECTED TIMEOUT_S
      Applies one MetricRule, then requests PATH from the adapter every 20 ms until it answers 200
      with an item whose value is EXPECTED (a Kubernetes quantity string); prints the seconds from
      the apply's answer to that first good value, or exits 1 after TIMEOUT_S.
  metricrules_client.py wait-value PATH EXPECTED TIMEOUT_S
      The same poll without an apply; prints the seconds it waited.
Environment: KUBE_URL, KUBE_CA (the fake kube-apiserver), ADAPTER_URL, ADAPTER_CA.
"""

import http.client
import json
import os
import ssl
import sys
import time
import urllib.parse


def conn(url_env, ca_env):
    url = urllib.parse.urlsplit(os.environ[url_env])
    ctx = ssl.create_default_context(cafile=os.environ[ca_env])
    ctx.check_hostname = False
    return http.client.HTTPSConnection(url.hostname, url.port, context=ctx, timeout=30)


def apply(kube, body):
    kube.request("POST", "/__fake/metricrules/apply", body=body,
                 headers={"Authorization": "Bearer fake-admin", "Content-Type": "application/json"})
    resp = kube.getresponse()
    data = resp.read()
    if resp.status >= 300:
        raise SystemExit("apply: %d %s" % (resp.status, data[:300]))


def poll(path, expected, timeout_s):
    adapter = conn("ADAPTER_URL", "ADAPTER_CA")
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            adapter.request("GET", path)
            resp = adapter.getresponse()
            data = resp.read()
            if resp.status == 200:
                items = json.loads(data).get("items") or []
                if any(it.get("value") == expected for it in items):
                    return time.monotonic() - start
        except (OSError, http.client.HTTPException):
            adapter.close()
            adapter = conn("ADAPTER_URL", "ADAPTER_CA")
        time.sleep(0.02)
    return None


def main(argv):
    if len(argv) == 3 and argv[1] == "apply":
        kube = conn("KUBE_URL", "KUBE_CA")
        start = time.monotonic()
        n = 0
        with open(argv[2]) as f:
            for line in f:
                if line.strip():
                    apply(kube, line.encode())
                    n += 1
        print("applied %d in %.2f s" % (n, time.monotonic() - start))
        return 0
    if len(argv) == 6 and argv[1] == "first-value":
        with open(argv[2], "rb") as f:
            body = f.read()
        apply(conn("KUBE_URL", "KUBE_CA"), body)
        took = poll(argv[3], argv[4], float(argv[5]))
    elif len(argv) == 5 and argv[1] == "wait-value":
        took = poll(argv[2], argv[3], float(argv[4]))
    else:
        sys.stderr.write(__doc__)
        return 2
    if took is None:
        print("no value %s at %s within %s s" % (argv[-2], argv[-3], argv[-1]))
        return 1
    print("%.3f" % took)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
