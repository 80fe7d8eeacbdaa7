#!/usr/bin/env python3
"""promql_oracle.py: the differential test of our PromQL printer and namespace enforcer (the
promql_cli test driver, src/promql/) against a real Prometheus (Debian's 2.42), for
tests/e2e/test_promql_oracle.sh.

  promql_oracle.py syntax PROM_URL PROMQL_CLI CORPUS.jsonl MISMATCHES.txt
      For every query of the corpus (tests/lib/promql_corpus.py): Prometheus' canonical text
      (/api/v1/format_query) of the original; `promql_cli print`; the canonical text of what we
      printed: both must be equal. Where Prometheus refuses the query we must refuse it too (and
      where we refuse a query Prometheus accepts, or accept one it refuses, the case must be one of
      the documented differences below). Printing our own output again must give the same text.
      Then `promql_cli enforce namespace team-a` (and, on a part of the corpus, enforce
      exported_namespace with a value full of quotes and escapes): the enforced text must parse in
      Prometheus; every selector of Prometheus' canonical form of it must carry the matcher (an
      independent scan of the canonical text, below); and it must equal the canonical form of the
      original with the matcher inserted into every selector by that scan.
      Prints a JSON summary on stdout; writes every mismatch (both texts) to MISMATCHES.txt;
      exits 1 when something failed.

  promql_oracle.py selftest PROM_URL
      The scan of canonical text (below) on hand-written cases: it finds exactly the selectors
      listed, and after inserting the matcher into them none is left without it.

  promql_oracle.py broken-driver PROMQL_CLI print|enforce LABEL VALUE
      promql_cli, except that enforce leaves secret_tokens selectors without the matcher: the
      harness' own test (it must fail with this driver).

  promql_oracle.py gen-data OUT_DIR
      OpenMetrics for promtool: OUT_DIR/full.om (several namespaces: shared metric names,
      `namespace` and `exported_namespace` labels, values that look like the other namespaces, a
      series without a namespace label, keyword-named metrics), OUT_DIR/only-team-a.om (exactly the
      series whose label namespace is team-a, selected here in Python) and OUT_DIR/meta.json (the
      evaluation instant).

  promql_oracle.py data FULL_URL ONLY_URL PROMQL_CLI META.json CORPUS.jsonl MISMATCHES.txt
      The adversarial list below and a sample of the corpus, against real data: the original and
      the enforced query at the same instant. The enforced query over all namespaces must return
      exactly what the original returns over team-a's series alone (the second Prometheus, which
      holds only them): same label sets, same values. For the selector-like adversarial queries
      also: exactly the original's series whose namespace label is team-a. No series of another
      namespace in any enforced result.

A word on the scan of canonical text: Prometheus 2.42 prints every selector as NAME, NAME{...} or
{...}; the scan walks tokens with one bit of state (is an operand expected here?), which tells a
metric named like a keyword (`sum`, `by`, `offset`) from the keyword. It reads only canonical text
(double-quoted strings, no comments), so it stays small.
"""

import concurrent.futures
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.parse

NS = "team-a"
ODD_LABEL, ODD_VALUE = "exported_namespace", "we\"ird\\ns'\n\u00e9"

# --- documented differences -----------------------------------------------------------------------
# Prometheus 3 syntax that 2.42 refuses and our parser accepts (a superset: docs/architecture.md,
# "The PromQL parser"): quoted metric and label names, and functions/aggregations added after 2.42.
P3_FUNCTIONS = ["sort_by_label", "sort_by_label_desc", "limitk", "limit_ratio", "mad_over_time",
                "double_exponential_smoothing", "info", "histogram_stddev", "histogram_stdvar",
                "histogram_avg", "ts_of_max_over_time", "ts_of_min_over_time",
                "ts_of_last_over_time", "first_over_time"]
P3_RE = re.compile(r'[{,]\s*("|\'|`)|\b(%s)\s*\(' % "|".join(P3_FUNCTIONS))
# Inputs Prometheus 2.42 accepts and we refuse on purpose: (predicate, why).
STRICTER = [
    (lambda q: len(q.encode("utf-8")) > 65536, "longer than CMA_PROMQL_MAX_BYTES (64 KiB)"),
    (lambda q: nesting(q) > 200, "nested deeper than CMA_PROMQL_MAX_DEPTH (200 levels)"),
    (lambda q: re.search(r"\[[^\]:]*\d(?:ms|[smhdwy])\s+[a-zA-Z_]", q) is not None,
     "2.42's lexer reads a word after a range's duration as ':' (x[5m s] is x[5m:]), a bug"),
]


def strip_comments(q):
    """The query without its comments (# to the end of the line, outside strings), for the
    patterns above."""
    out, i, quote = [], 0, None
    while i < len(q):
        ch = q[i]
        if quote:
            if ch == "\\" and quote != "`":
                out.append(q[i:i + 2])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'`":
            quote = ch
        elif ch == "#":
            while i < len(q) and q[i] not in "\r\n":
                i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def nesting(q):
    """The deepest nesting of parentheses, or the longest run of signs, of comment-free text."""
    deepest = depth = signs = 0
    quote = None
    for i, ch in enumerate(q):
        if quote:
            if ch == quote and (quote == "`" or q[i - 1] != "\\"):
                quote = None
            continue
        if ch in "\"'`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch in "+-":
            signs += 1
        elif not ch.isspace():
            signs = 0
        deepest = max(deepest, depth, signs)
    return deepest


def documented_p3(q):
    return bool(P3_RE.search(strip_comments(q)))


def documented_stricter(q):
    return any(pred(strip_comments(q)) for pred, _ in STRICTER)


# --- HTTP: keep-alive connections, one per worker thread ------------------------------------------
class Prom:
    def __init__(self, url, workers=4):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.local = threading.local()
        self.pool = concurrent.futures.ThreadPoolExecutor(workers)
        self.requests = 0
        self.cache = {}

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self.local.conn = c
        return c

    def post(self, path, fields):
        body = urllib.parse.urlencode(fields)
        hdrs = {"Content-Type": "application/x-www-form-urlencoded"}
        for attempt in range(3):
            c = self._conn()
            try:
                c.request("POST", path, body, hdrs)
                resp = c.getresponse()
                data = resp.read()
                self.requests += 1
                return json.loads(data)
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.conn = None
                if attempt == 2:
                    raise
        return None

    def fmt(self, q):
        """(True, canonical text) or (False, error)."""
        d = self.post("/api/v1/format_query", {"query": q})
        if d.get("status") == "success":
            return True, d["data"]
        return False, d.get("error", "?")

    def fmt_many(self, qs):
        """fmt() of each query (one request per distinct text, answers kept for later calls)."""
        uniq = [q for q in dict.fromkeys(qs) if q not in self.cache]
        self.cache.update(zip(uniq, self.pool.map(self.fmt, uniq)))
        return [self.cache[q] for q in qs]

    def query(self, q, t):
        return self.post("/api/v1/query", {"query": q, "time": "%.3f" % t})

    def query_many(self, qs, t):
        return list(self.pool.map(lambda q: self.query(q, t), qs))

    def query_range_many(self, qs, start, end, step):
        fields = {"start": "%.3f" % start, "end": "%.3f" % end, "step": str(step)}
        return list(self.pool.map(
            lambda q: self.post("/api/v1/query_range", dict(fields, query=q)), qs))


def run_cli(cli, args, queries):
    """promql_cli's answers, one {"ok":..,"text"|"error":..} per query."""
    data = "".join(json.dumps(q) + "\n" for q in queries).encode()
    p = subprocess.run([cli] + args, input=data, capture_output=True, timeout=300, check=False)
    lines = p.stdout.decode("utf-8", "replace").splitlines()
    # Exit 0, one answer a query and nothing on stderr (where ASan and UBSan report).
    if p.returncode != 0 or len(lines) != len(queries) or p.stderr:
        raise RuntimeError("%s %s: exit %d, %d answers for %d queries; stderr: %s" % (
            cli, " ".join(args), p.returncode, len(lines), len(queries),
            p.stderr.decode("utf-8", "replace")[-3000:]))
    out = []
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            d = {"ok": False, "error": "driver printed no JSON: %r" % line[:200], "bad": True}
        if not isinstance(d, dict) or not isinstance(d.get("ok"), bool) or \
                not isinstance(d.get("text" if d.get("ok") else "error"), str):
            d = {"ok": False, "error": "answer breaks the contract: %r" % line[:200], "bad": True}
        out.append(d)
    return out


# --- the scan of Prometheus' canonical text -------------------------------------------------------
class ScanError(Exception):
    pass


TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z0-9]*)
  | (?P<id>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=(){}\[\],:@])
""", re.X)
BINOPS = {"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless",
          "atan2"}
AGGREGATORS = {"sum", "avg", "count", "min", "max", "group", "stddev", "stdvar", "topk",
               "bottomk", "quantile", "count_values", "limitk", "limit_ratio"}
GO_ESC = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
          "\\": "\\", '"': '"', "'": "'"}


def go_unquote(s):
    """The value of a Go double-quoted string literal (what Prometheus' printer writes)."""
    body, out, i = s[1:-1], [], 0
    raw = bytearray()

    def flush():
        if raw:
            out.append(raw.decode("utf-8", "replace"))
            raw.clear()
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            flush()
            out.append(ch)
            i += 1
            continue
        e = body[i + 1]
        if e in GO_ESC:
            flush()
            out.append(GO_ESC[e])
            i += 2
        elif e == "x":
            raw.append(int(body[i + 2:i + 4], 16))
            i += 4
        elif e in "uU":
            n = 4 if e == "u" else 8
            flush()
            out.append(chr(int(body[i + 2:i + 2 + n], 16)))
            i += 2 + n
        elif e in "01234567":
            raw.append(int(body[i + 1:i + 4], 8))
            i += 4
        else:
            raise ScanError("unknown escape in %s" % s)
    flush()
    return "".join(out)


def lex(text):
    toks, pos = [], 0
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if not m:
            raise ScanError("cannot read %r at %d" % (text[pos:pos + 10], pos))
        if m.lastgroup != "ws":
            toks.append((m.lastgroup, m.group(), m.start(), m.end()))
        pos = m.end()
    return toks


def _skip_group(toks, i, open_, close):
    """Index after the bracketed group starting at toks[i] (which is open_)."""
    depth = 0
    while i < len(toks):
        if toks[i][1] == open_:
            depth += 1
        elif toks[i][1] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ScanError("unbalanced %s" % open_)


def _matchers(toks, i):
    """(matchers, index of the closing brace) for the '{' at toks[i]."""
    ms, i = [], i + 1
    while toks[i][1] != "}":
        if toks[i][1] == ",":
            i += 1
            continue
        name, op, val = toks[i], toks[i + 1], toks[i + 2]
        if name[0] not in ("id", "str") or op[0] != "op" or val[0] != "str":
            raise ScanError("odd matcher at %d" % name[2])
        lname = go_unquote(name[1]) if name[0] == "str" else name[1]
        ms.append((lname, op[1], go_unquote(val[1])))
        i += 3
    return ms, i


def selectors(text):
    """Every selector of canonical PromQL text: dicts with name, matchers and where a matcher goes
    (insert: text offset, braces: whether the selector has a matcher list)."""
    toks = lex(text) + [("end", "", len(text), len(text))]
    sels, i, expect, after_binop = [], 0, True, False
    while toks[i][0] != "end":
        kind, val, start, end = toks[i]
        nxt = toks[i + 1][1]
        if kind == "id" and expect and after_binop and val in (
                "bool", "on", "ignoring", "group_left", "group_right"):
            i += 1
            if nxt == "(" and val != "bool":
                i = _skip_group(toks, i, "(", ")")
            continue
        after_binop = False
        if kind == "id" and expect:
            if val.lower() in ("inf", "nan"):
                expect, i = False, i + 1
            elif nxt == "(":
                i += 1  # a function call: its '(' is read next
            elif val in AGGREGATORS and nxt in ("by", "without") and toks[i + 2][1] == "(":
                i = _skip_group(toks, i + 2, "(", ")")
                if toks[i][1] != "(":
                    raise ScanError("aggregation without body at %d" % start)
            else:
                sel = {"name": val, "matchers": [("__name__", "=", val)], "insert": end,
                       "braces": False}
                i += 1
                if toks[i][1] == "{":
                    ms, close = _matchers(toks, i)
                    sel.update(matchers=sel["matchers"] + ms, insert=toks[close][2],
                               braces=True, empty=not ms)
                    i = close + 1
                sels.append(sel)
                expect = False
        elif kind == "id":
            if val in BINOPS:
                expect, after_binop, i = True, True, i + 1
            elif val == "offset":
                i += 2 if nxt != "-" else 3
            elif val in ("by", "without") and nxt == "(":
                i = _skip_group(toks, i + 1, "(", ")")
            else:
                raise ScanError("unexpected word %r at %d" % (val, start))
        elif val == "{" and expect:
            ms, close = _matchers(toks, i)
            sels.append({"name": None, "matchers": ms, "insert": toks[close][2], "braces": True,
                         "empty": not ms})
            i, expect = close + 1, False
        elif val == "@":
            i += 1
            if toks[i][1] in ("-", "+"):
                i += 1
            i += 3 if toks[i][1] in ("start", "end") else 1
        elif val == "[":
            i = _skip_group(toks, i, "[", "]")
        elif val in ("(", ","):
            expect, i = True, i + 1
        elif val == ")":
            expect, i = False, i + 1
        elif kind in ("num", "str"):
            expect, i = False, i + 1
        elif val in BINOPS:
            if not expect:
                after_binop = True
            expect, i = True, i + 1
        else:
            raise ScanError("unexpected %r at %d" % (val, start))
    return sels


def go_quote(s):
    return json.dumps(s, ensure_ascii=False)


def insert_matcher(text, label, value):
    """The canonical text with label="value" added to every selector (None: no selector)."""
    sels = selectors(text)
    out, last = [], 0
    m = "%s=%s" % (label, go_quote(value))
    for sel in sels:
        out.append(text[last:sel["insert"]])
        if not sel["braces"]:
            out.append("{%s}" % m)
        elif sel.get("empty"):
            out.append(m)
        else:
            out.append("," + m)
        last = sel["insert"]
    out.append(text[last:])
    return "".join(out)


def unenforced(text, label, value):
    """Descriptions of the selectors of canonical text that lack label="value"."""
    return [str(s["matchers"]) for s in selectors(text) if (label, "=", value) not in s["matchers"]]


# --- syntax: print and enforce against format_query -----------------------------------------------
class Report:
    def __init__(self, path):
        self.f = open(path, "w", encoding="utf-8")
        self.counts = {}
        self.failures = 0

    def count(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, key, src, **texts):
        """Counts a mismatch and writes it out; keys starting with "info:" are listed only."""
        self.count(key)
        if not key.startswith("info:"):
            self.failures += 1
        self.f.write("== %s (%s)\n" % (key, src))
        for k, v in texts.items():
            self.f.write("  %-10s %s\n" % (k + ":", json.dumps(v, ensure_ascii=False)))


def load_corpus(path):
    rows, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d["q"] not in seen:
                seen.add(d["q"])
                rows.append(d)
    return rows


def check_print(prom, cli, rows, rep):
    qs = [r["q"] for r in rows]
    canon = prom.fmt_many(qs)
    ours = run_cli(cli, ["print"], qs)
    ours_canon = prom.fmt_many([o["text"] if o["ok"] else "" for o in ours])
    again = run_cli(cli, ["print"], [o["text"] if o["ok"] else "1" for o in ours])
    for r, (pok, ptext), o, (ook, otext), a in zip(rows, canon, ours, ours_canon, again):
        q, src = r["q"], r["src"]
        part = src.split(":")[0]
        rep.count("queries")
        rep.count("queries." + part)
        if o.get("bad"):
            rep.fail("print: answer breaks the driver's contract", src, query=q, ours=o["error"])
        elif pok and o["ok"]:
            rep.count("both parse")
            if not ook:
                rep.fail("print: our text does not parse in Prometheus", src, query=q,
                         ours=o["text"], prometheus=otext)
            elif otext != ptext:
                rep.fail("print: canonical texts differ", src, query=q, ours=o["text"],
                         canon_orig=ptext, canon_ours=otext)
            else:
                rep.count("print: same canonical text")
                if part == "gen" and ptext == o["text"]:
                    rep.count("print: ours equals the canonical text itself (gen)")
        elif pok:
            if documented_stricter(q):
                rep.count("documented: we refuse, Prometheus accepts")
            else:
                rep.fail("parse: we refuse what Prometheus accepts", src, query=q,
                         ours=o["error"], canon_orig=ptext)
        elif o["ok"]:
            if documented_p3(q):
                rep.count("documented: Prometheus 3 syntax we accept, 2.42 refuses")
            else:
                rep.fail("parse: we accept what Prometheus refuses", src, query=q,
                         ours=o["text"], prometheus=ptext)
        else:
            rep.count("both refuse")
            pos = re.match(r"^(\d+:\d+): \S", o["error"])
            if not pos:
                rep.fail("parse: our error has no line:col position", src, query=q,
                         ours=o["error"])
            elif re.search(r"\b%s: parse error" % pos.group(1), ptext):
                rep.count("info: both refuse, at the same line:col")
            else:  # not a failure: positions are ours to choose; listed for whoever cares
                rep.fail("info: both refuse, at another line:col", src, query=q,
                         ours=o["error"], prometheus=ptext)
        if o["ok"] and not o.get("bad") and (not a["ok"] or a["text"] != o["text"]):
            rep.fail("print: printing our output again changes it", src, query=q,
                     ours=o["text"], again=a.get("text", a.get("error")))
    return canon, ours


def check_enforce(prom, cli, rows, canon, label, value, rep, tag):
    idx = [k for k, (ok, _) in enumerate(canon) if ok]
    qs = [rows[k]["q"] for k in idx]
    enf = run_cli(cli, ["enforce", label, value], qs)
    enf_canon = prom.fmt_many([e["text"] if e["ok"] else "" for e in enf])
    # The expectation is built on Prometheus' canonical text of the original, which is only sound
    # where that text reads back as itself: 2.42 prints Inf ^ x as "+Inf ^ x", which is +(Inf ^ x).
    stable = [c == canon[k] for k, c in zip(idx, prom.fmt_many([canon[k][1] for k in idx]))]
    expected = []
    for k, st in zip(idx, stable):
        if not st:
            expected.append(None)
            rep.count(tag + ": no expectation: 2.42's canonical text reads back otherwise")
            continue
        try:
            expected.append(insert_matcher(canon[k][1], label, value))
        except (ScanError, IndexError) as e:
            expected.append(None)
            rep.fail("harness: cannot scan Prometheus' canonical text", rows[k]["src"],
                     canon_orig=canon[k][1], error=str(e))
    exp_canon = prom.fmt_many([e if e is not None else "" for e in expected])
    for k, e, (eok, etext), exp, (xok, xtext) in zip(idx, enf, enf_canon, expected, exp_canon):
        q, src = rows[k]["q"], rows[k]["src"]
        rep.count(tag + ": queries")
        if not e["ok"]:
            if not documented_stricter(q):
                rep.fail(tag + ": we refuse to enforce what Prometheus parses", src, query=q,
                         ours=e["error"])
            continue
        if not eok:
            rep.fail(tag + ": the enforced text does not parse in Prometheus", src, query=q,
                     ours=e["text"], prometheus=etext)
            continue
        try:
            missing = unenforced(etext, label, value)
        except (ScanError, IndexError) as err:
            rep.fail("harness: cannot scan Prometheus' canonical text", src, canon_ours=etext,
                     error=str(err))
            continue
        if missing:
            rep.fail(tag + ": a selector without the matcher", src, query=q, ours=e["text"],
                     canon_ours=etext, selectors=missing)
        if exp is None:
            continue
        if not xok:
            rep.fail("harness: the inserted matcher does not parse", src, expected=exp,
                     prometheus=xtext)
        elif xtext != etext:
            rep.fail(tag + ": differs from the original with the matcher in every selector", src,
                     query=q, ours=e["text"], canon_ours=etext, canon_expected=xtext)
        else:
            rep.count(tag + ": as expected")


def cmd_syntax(argv):
    prom_url, cli, corpus, out = argv
    t0 = time.time()
    rows = load_corpus(corpus)
    rep = Report(out)
    prom = Prom(prom_url)
    canon, _ = check_print(prom, cli, rows, rep)
    check_enforce(prom, cli, rows, canon, "namespace", NS, rep, "enforce")
    odd = [k for k, r in enumerate(rows) if not r["src"].startswith("gen:") or k % 5 == 0]
    check_enforce(prom, cli, [rows[k] for k in odd], [canon[k] for k in odd], ODD_LABEL,
                  ODD_VALUE, rep, "enforce-odd-value")
    rep.counts["seconds"] = round(time.time() - t0, 1)
    rep.counts["http requests"] = prom.requests
    print(json.dumps(rep.counts, sort_keys=True, indent=1))
    failed = rep.failures
    return 1 if failed else 0


# --- real data ------------------------------------------------------------------------------------
NAMESPACES = ["team-a", "team-b", "team-c"]


def series_list():
    """(metric, labels, kind) of every generated series; kind counter or gauge."""
    out = []
    for ns in NAMESPACES:
        for pod, node in (("api-0", "node-1"), ("api-1", "node-2"), ("worker-0", "node-1")):
            base = {"namespace": ns, "pod": pod}
            for code in ("200", "500"):
                out.append(("http_requests_total", dict(base, code=code, job="app"), "counter"))
            out.append(("container_cpu_usage_seconds_total", dict(base, container="main"),
                        "counter"))
            out.append(("container_memory_working_set_bytes", dict(base, container="main"),
                        "gauge"))
            out.append(("kube_pod_info", dict(base, node=node), "one"))
            for le in ("0.1", "0.5", "1", "+Inf"):
                out.append(("http_request_duration_seconds_bucket", dict(base, le=le),
                            "counter"))
        for kw in ("sum", "by", "offset"):
            out.append((kw, {"namespace": ns, "pod": "api-0"}, "gauge"))
    # Label values that look like other namespaces; exported_namespace naming a namespace the
    # series does not belong to; namespaces that merely resemble team-a.
    out += [
        ("http_requests_total", {"namespace": "team-a", "pod": "team-b", "code": "200",
                                 "job": "team-c"}, "counter"),
        ("http_requests_total", {"namespace": "team-b", "exported_namespace": "team-a",
                                 "pod": "team-a", "code": "200", "job": "app"}, "counter"),
        ("secret_tokens", {"namespace": "team-b", "pod": "vault-0"}, "gauge"),
        ("secret_tokens", {"namespace": "team-a-old", "pod": "vault-0"}, "gauge"),
        ("secret_tokens", {"namespace": "TEAM-A", "pod": "vault-1"}, "gauge"),
        ("queue_length", {"namespace": "monitoring", "exported_namespace": "team-a",
                          "queue": "q1"}, "gauge"),
        ("queue_length", {"namespace": "monitoring", "exported_namespace": "team-b",
                          "queue": "q2"}, "gauge"),
        ("queue_length", {"namespace": "team-a", "queue": "q3"}, "gauge"),
        ("node_load1", {"instance": "node-1", "job": "node"}, "gauge"),
        ("http_requests_total", {"instance": "node-1", "job": "node-exporter", "code": "200"},
         "counter"),
        ("kube_pod_info", {"pod": "orphan", "node": "node-1"}, "one"),
    ]
    return out


def om_value(kind, k, t):
    if kind == "one":
        return 1
    if kind == "counter":
        v = (k % 7 + 1) * t + (k * 13) % 100
        return v if t != 120 or k % 5 else 3  # some counters reset once
    return ((k * 37 + t * 11) % 200) / 4.0


def cmd_gen_data(argv):
    (out_dir,) = argv
    os.makedirs(out_dir, exist_ok=True)
    step, samples = 15, 241
    t_end = (int(time.time()) // 3600) * 3600 - 3600
    t0 = t_end - step * (samples - 1)
    full = open(os.path.join(out_dir, "full.om"), "w", encoding="utf-8")
    only = open(os.path.join(out_dir, "only-%s.om" % NS), "w", encoding="utf-8")
    by_metric = {}
    for k, (metric, labels, kind) in enumerate(series_list()):
        by_metric.setdefault(metric, []).append((k, labels, kind))
    n_full = n_only = 0
    for metric, series in by_metric.items():
        for f in (full, only):
            f.write("# TYPE %s gauge\n" % metric)
        for k, labels, kind in series:
            lab = ",".join('%s="%s"' % (n, v) for n, v in sorted(labels.items()))
            mine = labels.get("namespace") == NS
            n_full += 1
            n_only += mine
            for t in range(samples):
                line = "%s{%s} %s %d\n" % (metric, lab, om_value(kind, k, t), t0 + step * t)
                full.write(line)
                if mine:
                    only.write(line)
    for f in (full, only):
        f.write("# EOF\n")
        f.close()
    meta = {"t_eval": t_end - 60, "namespace": NS, "series_full": n_full, "series_only": n_only}
    with open(os.path.join(out_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    print(json.dumps(meta))
    return 0


# The adversarial list: (query, tags). Tags: "filter" = the result keeps the selected series'
# labels, so the enforced result is also the original's filtered to namespace team-a; "relabels" =
# the query writes a namespace label itself (the leak check by label does not apply); "nonempty" =
# team-a has data for it (checked, so that the test cannot pass on empty answers alone).
ADVERSARIAL = [
    ('{__name__=~".+"}', "filter nonempty"),
    ('{__name__=~".+",namespace=~".*"}', "filter nonempty"),
    ('{__name__!=""}', "filter nonempty"),
    ('count({__name__=~".+"})', "nonempty"),
    ("http_requests_total", "filter nonempty"),
    ("http_requests_total or on() vector(1)", "nonempty"),
    ("vector(1) or on() secret_tokens", "nonempty"),
    ("secret_tokens or on() vector(1)", "nonempty"),
    ('label_replace(secret_tokens, "namespace", "team-a", "", "")', "relabels"),
    ('label_replace(http_requests_total, "namespace", "team-b", "", "")', "relabels nonempty"),
    ('label_replace(secret_tokens, "namespace", "$1", "namespace", "team-(.*)")', "relabels"),
    ('label_join(secret_tokens, "namespace", "", "pod")', "relabels"),
    ('count_values("namespace", secret_tokens)', "relabels"),
    ("absent(secret_tokens)", "nonempty"),
    ("absent(nonexistent_metric)", "nonempty"),
    ('absent(secret_tokens{namespace="team-b"})', "nonempty"),
    ("absent_over_time(secret_tokens[10m])", "nonempty"),
    ("sum by (namespace) (http_requests_total)", "nonempty"),
    ("sum(http_requests_total)", "nonempty"),
    ("sum by (namespace) (secret_tokens)", ""),
    ("http_requests_total * on(namespace, pod) group_left(node) kube_pod_info", "nonempty"),
    ("kube_pod_info * on(pod) group_right(node) secret_tokens", ""),
    ("max_over_time(secret_tokens[10m:1m])", "filter"),
    ('max_over_time(secret_tokens{namespace="team-b"}[10m:1m])', "filter"),
    ("sum(rate(secret_tokens[5m:30s] offset 1m))", ""),
    ('secret_tokens{namespace="team-b"}', "filter"),
    ('http_requests_total{namespace="team-b"}', "filter"),
    ('http_requests_total{namespace="team-b"} or http_requests_total', "filter nonempty"),
    ('{namespace=~"team-.*"}', "filter nonempty"),
    ('{namespace!="team-a",__name__=~".+"}', "filter"),
    ('{namespace=~"(?i)TEAM-A.*"}', "filter nonempty"),
    ('queue_length{exported_namespace="team-a"}', "filter"),
    ("queue_length", "filter nonempty"),
    ("node_load1", "filter"),
    ('http_requests_total{job="node-exporter"}', "filter"),
    ("sum(http_requests_total # {namespace=\"team-a\"}\n)", "nonempty"),
    ("rate(\n# a comment\n  secret_tokens\n[5m])", "filter"),
    ("secret_tokens\n{\npod=\"vault-0\"\n}", "filter"),
    ("  \t secret_tokens # sum(http_requests_total{namespace=\"team-a\"})\n", "filter"),
    ("sum", "filter nonempty"),
    ('by{pod="api-0"}', "filter nonempty"),
    ("offset offset 5m", "filter nonempty"),
    ("sum(sum)", "nonempty"),
    ("sum by (pod) (by)", "nonempty"),
    ("sum without (namespace) (offset)", "nonempty"),
    ('{__name__="sum"} + by', "nonempty"),
    ("http_requests_total offset 5m @ end()", "filter nonempty"),
    ("secret_tokens @ start() offset -1m", "filter"),
    ("topk(1, http_requests_total)", "nonempty"),
    ("bottomk(2, secret_tokens) or on() vector(0)", "nonempty"),
    ("http_requests_total unless on() secret_tokens", "nonempty"),
    ("scalar(sum(secret_tokens)) + vector(0)", "nonempty"),
    ("sum_over_time(rate(http_requests_total[5m])[30m:5m])", "filter nonempty"),
    ('{__name__=~"secret.*|http.*",namespace=~".*"}', "filter nonempty"),
    ("histogram_quantile(0.9, sum by (le) (rate(http_request_duration_seconds_bucket[5m])))",
     "nonempty"),
    ("- - secret_tokens", "filter"),
    ("(((secret_tokens)))", "filter"),
    ("secret_tokens > bool 0", "filter"),
    ("timestamp(secret_tokens)", "filter"),
    ("changes(secret_tokens[1h])", "filter"),
    ("http_requests_total / ignoring(code) group_left sum without (code) (http_requests_total)",
     "nonempty"),
    ("count(secret_tokens) or count(http_requests_total)", "nonempty"),
    ('sum by (namespace) ({__name__=~"secret_tokens|queue_length"})', "nonempty"),
    ("max by (exported_namespace) (queue_length)", "nonempty"),
    ("group by (namespace) ({__name__=~\".+\"})", "nonempty"),
]


def vec_key(s, drop=()):
    return tuple(sorted((k, v) for k, v in s.get("metric", {}).items() if k not in drop))


def result_set(resp, drop=()):
    """Comparable form of a query answer: ('error', type) or (type, sorted items)."""
    if resp.get("status") != "success":
        return ("error", resp.get("errorType"))
    d = resp["data"]
    rt, res = d["resultType"], d["result"]
    if rt in ("scalar", "string"):
        return (rt, [res[1]])
    items = []
    for s in res:
        vals = [s["value"][1]] if rt == "vector" else [str(x) for v in s["values"] for x in v]
        items.append((vec_key(s, drop), tuple(vals)))
    return (rt, sorted(items))


def _num_eq(u, v):
    if u == v:
        return True
    try:
        fu, fv = float(u), float(v)
    except ValueError:
        return False
    return abs(fu - fv) <= 1e-9 * max(1.0, abs(fu), abs(fv))


def same(a, b):
    """Two result_set()s are equal (values within a relative 1e-9)."""
    if a[0] != b[0] or len(a[1]) != len(b[1]):
        return False
    if a[0] == "error":
        return a == b
    if a[0] in ("scalar", "string"):
        return _num_eq(a[1][0], b[1][0])
    for (ka, va), (kb, vb) in zip(a[1], b[1]):
        if ka != kb or len(va) != len(vb) or not all(map(_num_eq, va, vb)):
            return False
    return True


def namespaces_of(resp):
    if resp.get("status") != "success" or resp["data"]["resultType"] not in ("vector", "matrix"):
        return set()
    return {s["metric"].get("namespace") for s in resp["data"]["result"]}


def check_generated(cases, enf_full, rep):
    """The enforced {__name__=~".+"} against the generated series themselves (no PromQL, no
    second server): exactly the label sets of team-a's series."""
    want = sorted(tuple(sorted(dict(labels, __name__=metric).items()))
                  for metric, labels, _ in series_list() if labels.get("namespace") == NS)
    k = [c[0] for c in cases].index('{__name__=~".+"}')
    resp = enf_full[k]
    got = sorted(tuple(sorted(s["metric"].items())) for s in resp.get("data", {}).get("result", []))
    if got != want:
        rep.fail("data: enforced {__name__=~\".+\"} is not team-a's generated series", cases[k][2],
                 got=str(got)[:1500], want=str(want)[:1500])
    else:
        rep.count("data: generated series check ok")


def check_range(full, only, cases, enf, t, rep):
    """Range queries (30 minutes to the evaluation instant, a step of 45 s, so that start() and
    end() differ) of the adversarial list and every fourth other case: enforced over everything
    equals the original over team-a alone."""
    pick = [k for k, c in enumerate(cases)
            if enf[k]["ok"] and (c[2].startswith("adversarial:") or k % 4 == 0)]
    start, end, step = t - 1800, t, 45
    got = full.query_range_many([enf[k]["text"] for k in pick], start, end, step)
    want = only.query_range_many([cases[k][0] for k in pick], start, end, step)
    for k, g, w in zip(pick, got, want):
        q, _, src = cases[k]
        rep.count("data: range queries")
        drop = ("namespace",) if "absent" in q else ()
        if not same(result_set(g, drop), result_set(w, drop)):
            rep.fail("data: range query: enforced differs from the original over team-a alone",
                     src, query=q, enforced=enf[k]["text"], got=str(result_set(g, drop))[:1500],
                     want=str(result_set(w, drop))[:1500])
        else:
            rep.count("data: range query same as over team-a alone")


def cmd_data(argv):
    full_url, only_url, cli, meta_path, corpus, out = argv
    t_start = time.time()
    meta = json.load(open(meta_path, encoding="utf-8"))
    t = meta["t_eval"]
    full, only = Prom(full_url), Prom(only_url)
    rep = Report(out)
    cases = [(q, tags, "adversarial:%d" % k) for k, (q, tags) in enumerate(ADVERSARIAL)]
    rows = load_corpus(corpus)
    rnd = random.Random(23)
    sample = [r for r in rows if r["src"].startswith(("rules:", "grammar:"))]
    sample += rnd.sample([r for r in rows if r["src"].startswith("gen:")],
                         min(400, sum(1 for r in rows if r["src"].startswith("gen:"))))
    canon = full.fmt_many([r["q"] for r in sample])
    cases += [(r["q"], "", r["src"]) for r, (ok, _) in zip(sample, canon)
              if ok and not documented_stricter(r["q"])]
    qs = [c[0] for c in cases]
    enf = run_cli(cli, ["enforce", "namespace", NS], qs)
    orig_full = full.query_many(qs, t)
    enf_texts = [e["text"] if e["ok"] else "vector(0)" for e in enf]
    enf_full = full.query_many(enf_texts, t)
    orig_only = only.query_many(qs, t)
    for (q, tags, src), e, of, ef, oo in zip(cases, enf, orig_full, enf_full, orig_only):
        part = src.split(":")[0]
        rep.count("data: queries")
        rep.count("data: queries." + part)
        if not e["ok"]:
            rep.fail("data: we refuse to enforce a query Prometheus runs", src, query=q,
                     ours=e.get("error"))
            continue
        drop = ("namespace",) if "absent" in q else ()
        got, want = result_set(ef, drop), result_set(oo, drop)
        if not same(got, want):
            rep.fail("data: enforced result differs from the original over team-a's data alone",
                     src, query=q, enforced=e["text"], got=str(got)[:1500], want=str(want)[:1500])
        else:
            rep.count("data: same as over team-a alone")
            if got[0] != "error" and got[1]:
                rep.count("data: non-empty and same")
        if "relabels" not in tags and not re.search("[\"'`]namespace[\"'`]", q):
            # A series without a namespace label is fine where the query makes it (aggregations,
            # absent(), vector()), a leak where the result keeps the selected series' labels.
            leaked = namespaces_of(ef) - ({NS} if "filter" in tags else {NS, None})
            if leaked:
                rep.fail("data: another namespace's series in the enforced result", src, query=q,
                         enforced=e["text"], namespaces=sorted(str(x) for x in leaked))
        if "filter" in tags:
            want_f = result_set(of)
            if want_f[0] != "error":
                want_f = (want_f[0], [x for x in want_f[1] if dict(x[0]).get("namespace") == NS])
            if not same(result_set(ef), want_f):
                rep.fail("data: enforced result is not the original's series of team-a", src,
                         query=q, enforced=e["text"], got=str(result_set(ef))[:1500],
                         want=str(want_f)[:1500])
            else:
                rep.count("data: filter check ok")
        if "nonempty" in tags:
            r = result_set(ef)
            if r[0] == "error" or not r[1]:
                rep.fail("data: no data where team-a has some (the test would be vacuous)", src,
                         query=q, enforced=e["text"], got=str(r)[:500])
    check_range(full, only, cases, enf, t, rep)
    check_generated(cases, enf_full, rep)
    rep.counts["seconds"] = round(time.time() - t_start, 1)
    rep.counts["http requests"] = full.requests + only.requests
    print(json.dumps(rep.counts, sort_keys=True, indent=1))
    failed = rep.failures
    return 1 if failed else 0


# The scan's own test: Prometheus' canonical text of each query, and the selectors (metric names,
# None for {...} without one) the scan must find there, in order.
SCAN_CASES = [
    ("sum by (by) (by)", ["by"]),
    ("offset offset 5m", ["offset"]),
    ("a and and", ["a", "and"]),
    ("sum(sum)", ["sum"]),
    ("sum", ["sum"]),
    ("sum without (a) (without)", ["without"]),
    ("x > bool on (a) group_left (b) y", ["x", "y"]),
    ("1 > bool (x)", ["x"]),
    ("1 > bool x", ["x"]),
    ("x + ignoring (a) group_right () (y)", ["x", "y"]),
    ('topk by (a) (3, {__name__=~".+"})', [None]),
    (r'count_values without () ("v", x{a="b,c}\" ]"})', ["x"]),
    ("-x ^ -y", ["x", "y"]),
    ('label_replace(x, "namespace", "a", "", "")', ["x"]),
    ("vector(1) or on () start", ["start"]),
    ("x @ end() - end", ["x", "end"]),
    ("rate(y[5m] @ 100 offset -1m)", ["y"]),
    ("max_over_time(rate(x[5m])[30m:1m] offset 1h)", ["x"]),
    ("histogram_quantile(0.9, sum by (le) (rate(b[5m])))", ["b"]),
    ("nan + Inf - x", ["x"]),
    ('{__name__="sum"} + by', [None, "by"]),
    ("time() + scalar(x) + pi()", ["x"]),
    ("sum(x) by (a)", ["x"]),
    ("x unless on (a) y or z and w", ["x", "y", "z", "w"]),
    ("a atan2 b", ["a", "b"]),
    ('absent(x{namespace="a"}) * on () group_left () (count(y))', ["x", "y"]),
    ("(((x)))[5m:] @ start()", ["x"]),
    ('sum(\n  rate(x{a="b"}[5m]) # c\n) + y', ["x", "y"]),
]


def cmd_selftest(argv):
    (prom_url,) = argv
    prom, bad = Prom(prom_url), 0
    for (q, want), (ok, canon) in zip(SCAN_CASES, prom.fmt_many([q for q, _ in SCAN_CASES])):
        try:
            got = [s["name"] for s in selectors(canon)] if ok else "refused: " + canon
            ins = insert_matcher(canon, "namespace", NS) if ok else None
            ins_ok, ins_canon = prom.fmt(ins) if ok else (False, "")
            left = unenforced(ins_canon, "namespace", NS) if ins_ok else ["does not parse"]
        except (ScanError, IndexError) as e:
            got, left = "scan error: %s" % e, []
        if got != want or left:
            bad += 1
            print("FAIL %r: canonical %r, found %r, want %r, unenforced after insert %r" % (
                q, canon, got, want, left))
    print("scan self-test: %d cases, %d failed" % (len(SCAN_CASES), bad))
    return 1 if bad else 0


def cmd_broken_driver(argv):
    """A deliberately broken driver for the harness' own test: REAL_CLI's answers, except that
    the matcher of every secret_tokens selector is taken out again (an enforcer that misses one
    metric). The harness must fail with it."""
    real, args = argv[0], argv[1:]
    queries = [json.loads(line) for line in sys.stdin]
    for d in run_cli(real, args, queries):
        if args[0] == "enforce" and d["ok"] and "secret_tokens" in d["text"]:
            m = "%s=%s" % (args[1], go_quote(args[2]))
            d["text"] = re.sub(r"(secret_tokens\{[^}]*?),?%s" % re.escape(m), r"\1",
                               d["text"]).replace("secret_tokens{}", "secret_tokens")
        print(json.dumps(d))
    return 0


def main(argv):
    if argv[:1] == ["broken-driver"] and len(argv) >= 3:
        return cmd_broken_driver(argv[1:])
    cmds = {"selftest": (cmd_selftest, 1), "syntax": (cmd_syntax, 4), "gen-data": (cmd_gen_data, 1), "data": (cmd_data, 6)}
    if not argv or argv[0] not in cmds or len(argv) - 1 != cmds[argv[0]][1]:
        sys.stderr.write(__doc__)
        return 2
    return cmds[argv[0]][0](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
