#!/usr/bin/env python3
"""promql_corpus.py: the query corpus of the PromQL differential test (tests/e2e/test_promql_oracle.sh,
tests/lib/promql_oracle.py), written as JSON Lines: {"q": QUERY, "src": WHERE_FROM}.

  promql_corpus.py [--seed N] [--gen N] [--fuzz N] OUT.jsonl

Four parts, in this order (src says which):
  rules:FILE#K      every seriesQuery/metricsQuery/containerQuery/nodeQuery of the rule corpus
                    (../shared/fixtures/prometheus-adapter-configs/, config/*.yaml, config/packs/,
                    tests/fixtures/rule-corpus/), rendered the way prometheus-adapter renders its
                    Go templates (delimiters << >>): once as a custom-metrics request for two pods of
                    namespace team-a (LabelMatchers `namespace="team-a",pod=~"api-0|api-1"`, GroupBy
                    `pod`), once as an external-metrics request (a metric selector, GroupBy "").
  grammar:NAME      hand-written cases over the whole grammar of Prometheus 2.42: every function,
                    every aggregation with by/without before and after and its parameters, binary
                    operators with precedence, bool, on/ignoring, group_left/right, offset, @,
                    subqueries, durations, number forms, string escapes, comments, keyword-named
                    metrics; and a few that 2.42 rejects (wrong arity, types, syntax).
  gen:K             a seeded random generator of type-correct expressions printed with random
                    whitespace, comments and redundant parentheses (deterministic for a seed).
  fuzz:K            mutations of the other parts (characters and tokens deleted, inserted, swapped,
                    text cut): may or may not parse; the oracle checks that we agree with Prometheus.

Metric and label names of the generator are those of the real-data test (promql_oracle.py gen-data),
so that its queries return series there. Nothing here depends on our parser.
"""

import json
import os
import random
import re
import sys

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared"))

# --- the grammar of Prometheus 2.42 ---------------------------------------------------------------
# Function name -> argument types (v instant vector, m range vector, s scalar, S string; a trailing
# '?' marks an optional argument, '*' a variadic tail) and the result type.
FUNCTIONS = {
    "abs": ("v", "v"), "absent": ("v", "v"), "absent_over_time": ("m", "v"),
    "acos": ("v", "v"), "acosh": ("v", "v"), "asin": ("v", "v"), "asinh": ("v", "v"),
    "atan": ("v", "v"), "atanh": ("v", "v"), "avg_over_time": ("m", "v"), "ceil": ("v", "v"),
    "changes": ("m", "v"), "clamp": ("vss", "v"), "clamp_max": ("vs", "v"),
    "clamp_min": ("vs", "v"), "cos": ("v", "v"), "cosh": ("v", "v"),
    "count_over_time": ("m", "v"), "days_in_month": ("v?", "v"), "day_of_month": ("v?", "v"),
    "day_of_week": ("v?", "v"), "day_of_year": ("v?", "v"), "deg": ("v", "v"),
    "delta": ("m", "v"), "deriv": ("m", "v"), "exp": ("v", "v"), "floor": ("v", "v"),
    "histogram_count": ("v", "v"), "histogram_sum": ("v", "v"),
    "histogram_fraction": ("ssv", "v"), "histogram_quantile": ("sv", "v"),
    "holt_winters": ("mss", "v"), "hour": ("v?", "v"), "idelta": ("m", "v"),
    "increase": ("m", "v"), "irate": ("m", "v"), "label_replace": ("vSSSS", "v"),
    "label_join": ("vSSS*", "v"), "last_over_time": ("m", "v"), "ln": ("v", "v"),
    "log10": ("v", "v"), "log2": ("v", "v"), "max_over_time": ("m", "v"),
    "min_over_time": ("m", "v"), "minute": ("v?", "v"), "month": ("v?", "v"), "pi": ("", "s"),
    "predict_linear": ("ms", "v"), "present_over_time": ("m", "v"),
    "quantile_over_time": ("sm", "v"), "rad": ("v", "v"), "rate": ("m", "v"),
    "resets": ("m", "v"), "round": ("vs?", "v"), "scalar": ("v", "s"), "sgn": ("v", "v"),
    "sin": ("v", "v"), "sinh": ("v", "v"), "sort": ("v", "v"), "sort_desc": ("v", "v"),
    "sqrt": ("v", "v"), "stddev_over_time": ("m", "v"), "stdvar_over_time": ("m", "v"),
    "sum_over_time": ("m", "v"), "tan": ("v", "v"), "tanh": ("v", "v"), "time": ("", "s"),
    "timestamp": ("v", "v"), "vector": ("s", "v"), "year": ("v?", "v"),
}
AGGREGATIONS = ["sum", "avg", "count", "min", "max", "group", "stddev", "stdvar"]
PARAM_AGGREGATIONS = {"topk": "s", "bottomk": "s", "quantile": "s", "count_values": "S"}
ARITH = ["+", "-", "*", "/", "%", "^"]
COMPARE = ["==", "!=", ">", "<", ">=", "<="]
SETOPS = ["and", "or", "unless"]
# Precedence (higher binds tighter); ^ is right-associative.
PREC = {"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, ">": 3, "<": 3, ">=": 3, "<=": 3,
        "+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "atan2": 5, "^": 6}
KEYWORD_METRICS = ["sum", "by", "offset", "on", "bool", "without", "ignoring", "group_left",
                   "group_right", "and", "or", "unless", "avg", "count", "topk", "atan2", "start",
                   "end", "rate"]

# The real-data test's series (promql_oracle.py gen-data holds the same names).
METRICS = ["http_requests_total", "container_cpu_usage_seconds_total",
           "container_memory_working_set_bytes", "kube_pod_info", "secret_tokens",
           "queue_length", "node_load1", "http_request_duration_seconds_bucket", "sum", "by",
           "offset"]
LABELS = ["namespace", "pod", "code", "job", "container", "node", "exported_namespace", "le",
          "queue", "instance"]
VALUES = ["team-a", "team-b", "team-c", "api-0", "api-1", "worker-0", "200", "500", "main",
          "node-1", "monitoring", "team-a-old", ""]
DURATIONS = ["1m", "5m", "10m", "30m", "1h", "90s", "1h30m", "2m30s", "500ms", "15s"]


# --- (a) the rule corpus ----------------------------------------------------------------------------
def rule_files():
    dirs = [os.path.join(SHARED, "fixtures", "prometheus-adapter-configs"),
            os.path.join(ROOT, "config"), os.path.join(ROOT, "config", "packs"),
            os.path.join(ROOT, "tests", "fixtures", "rule-corpus")]
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".yaml", ".yml")):
                yield os.path.join(d, name)


def find_queries(node, out):
    """Appends the query strings of a parsed YAML document (ConfigMaps and Helm values hold the
    adapter config as a string: those strings are parsed in turn)."""
    if isinstance(node, dict):
        for key, val in node.items():
            if key in ("seriesQuery", "metricsQuery", "containerQuery", "nodeQuery") and \
                    isinstance(val, str):
                out.append((key, val))
            else:
                find_queries(val, out)
    elif isinstance(node, list):
        for val in node:
            find_queries(val, out)
    elif isinstance(node, str) and ("seriesQuery" in node or "containerQuery" in node):
        try:
            for doc in yaml.load_all(node, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
                find_queries(doc, out)
        except yaml.YAMLError:
            pass


WITH_RE = re.compile(r'<<\s*with\s+index\s+\.LabelValuesByName\s+"([^"]*)"\s*>>(.*?)<<\s*end\s*>>',
                     re.S)
INDEX_RE = re.compile(r'<<\s*index\s+\.LabelValuesByName\s+"([^"]*)"\s*>>')


def render(template, series, matchers, group_by, values):
    """prometheus-adapter's rendering of a metricsQuery (Go text/template, << >>) for the fields
    the corpus uses; None when the template uses anything else."""
    def with_block(m):
        val = values.get(m.group(1), "")
        return m.group(2).replace("<<.>>", val) if val else ""
    text = WITH_RE.sub(with_block, template)
    text = INDEX_RE.sub(lambda m: values.get(m.group(1), ""), text)
    text = text.replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers)
    text = text.replace("<<.GroupBy>>", group_by).replace("<<.Resource>>", "pod")
    text = text.replace("<<.GroupBySlice>>", "[" + group_by.replace(",", " ") + "]")
    return None if "<<" in text else text


def series_name(series_query):
    m = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", series_query)
    if m:
        return m.group(1)
    m = re.search(r'__name__\s*=~?\s*"\^?([a-zA-Z_:][a-zA-Z0-9_:]*)', series_query)
    return m.group(1) if m else "http_requests_total"


def rule_corpus():
    out = []
    for path in rule_files():
        rel = os.path.relpath(path, ROOT)
        found = []
        try:
            with open(path, encoding="utf-8") as f:
                for doc in yaml.load_all(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
                    find_queries(doc, found)
        except yaml.YAMLError:
            continue
        series = "http_requests_total"
        for k, (key, text) in enumerate(found):
            if key == "seriesQuery":
                series = series_name(text)
                out.append((text, "rules:%s#%d" % (rel, k)))
                continue
            variants = [
                ('namespace="team-a",pod=~"api-0|api-1"', "pod",
                 {"namespace": "team-a", "pod": "api-0|api-1"}),
                ('queue="q1"', "", {"namespace": "team-a"}),
            ]
            if key == "nodeQuery":
                variants = [('node=~"node-1|node-2"', "node", {"node": "node-1|node-2"})]
            elif key == "containerQuery":
                variants[0] = (variants[0][0], "pod,container", variants[0][2])
            for v, (matchers, group_by, values) in enumerate(variants):
                q = render(text, series, matchers, group_by, values)
                if q is not None:
                    out.append((q, "rules:%s#%d.%d" % (rel, k, v)))
    return out


# --- (b) hand-written cases -------------------------------------------------------------------------
def arg_example(t, i):
    return {"v": "http_requests_total", "m": "http_requests_total[5m]", "s": "0.5",
            "S": '"l%d"' % i}[t]


def grammar_cases():
    cases = []

    def add(name, q):
        cases.append((q, "grammar:" + name))

    for fn, (args, _) in sorted(FUNCTIONS.items()):
        plain = args.replace("?", "").replace("*", "")
        full = [arg_example(t, i) for i, t in enumerate(plain)]
        if fn == "label_replace":
            full = ["http_requests_total", '"dst"', '"$1"', '"pod"', '"(.*)-.*"']
        add("fn-" + fn, "%s(%s)" % (fn, ", ".join(full)))
        if "?" in args:
            add("fn-" + fn + "-noarg", "%s()" % fn)
        if "*" in args:
            add("fn-" + fn + "-variadic", "%s(%s, \"a\", \"b\", \"c\")" % (fn, ", ".join(full)))
        add("fn-" + fn + "-arity+1", "%s(%s)" % (fn, ", ".join(full + ["1"])))
        if plain:
            wrong = {"v": "http_requests_total[5m]", "m": "http_requests_total", "s": '"x"',
                     "S": "1"}[plain[0]]
            add("fn-" + fn + "-type", "%s(%s)" % (fn, ", ".join([wrong] + full[1:])))
    for agg in AGGREGATIONS + list(PARAM_AGGREGATIONS):
        param = {"topk": "3, ", "bottomk": "2, ", "quantile": "0.9, ",
                 "count_values": '"value", '}.get(agg, "")
        body = "(%shttp_requests_total)" % param
        add("agg-" + agg, agg + body)
        for mod in ("by", "without"):
            add("agg-%s-%s-before" % (agg, mod), "%s %s (pod, code) %s" % (agg, mod, body))
            add("agg-%s-%s-after" % (agg, mod), "%s%s %s (pod,code,)" % (agg, body, mod))
            add("agg-%s-%s-empty" % (agg, mod), "%s %s () %s" % (agg, mod, body))
        add("agg-%s-keyword-label" % agg, "%s by (by, offset, on, bool) %s" % (agg, body))
    for op in ARITH + COMPARE + SETOPS + ["atan2"]:
        add("op-%s" % op, "http_requests_total %s kube_pod_info" % op)
        add("op-%s-scalar" % op, "1 %s 2" % op)
        add("op-%s-on" % op, "http_requests_total %s on(namespace, pod) kube_pod_info" % op)
        add("op-%s-ignoring" % op, "http_requests_total %s ignoring(code) kube_pod_info" % op)
        add("op-%s-left" % op,
            "http_requests_total %s on(namespace, pod) group_left(node) kube_pod_info" % op)
        add("op-%s-right" % op,
            "kube_pod_info %s ignoring(code) group_right() http_requests_total" % op)
        add("op-%s-right-bare" % op, "kube_pod_info %s on(pod) group_right http_requests_total" % op)
    for op in COMPARE:
        add("bool-%s" % op, "http_requests_total %s bool 3" % op)
        add("bool-%s-scalars" % op, "1 %s bool 2" % op)
        add("bool-%s-on" % op, "http_requests_total %s bool on(pod) kube_pod_info" % op)
    precedence = [
        "1 + 2 * 3", "(1 + 2) * 3", "2 ^ 3 ^ 2", "(2 ^ 3) ^ 2", "-2 ^ 2", "(-2) ^ 2",
        "1 - 2 - 3", "1 - (2 - 3)", "1 / 2 % 3 * 4", "a or b and c unless d", "(a or b) and c",
        "a > b == c", "a + b > bool c * d", "- -1", "-(-1)", "+-+1", "1 atan2 2 ^ 3",
        "a * b + c / d - e % f ^ g", "-a ^ b", "a ^ -b", "a == bool b != bool c",
        "2 * -x", "sum(x) + sum(y) * 2", "a unless b or c and d",
    ]
    for i, q in enumerate(precedence):
        add("prec-%d" % i, q)
    numbers = ["1", "1.5", ".5", "5.", "1e3", "1E-3", "1.5e+10", "0x1F", "0XfF", "Inf", "+Inf",
               "-Inf", "inf", "NaN", "nan", "nAn", "0", "00", "007", "1e308", "4.9e-324",
               "123456789012345678901234567890", "0x", "1e", "1.2.3", "0b101", "1_000", ".",
               "0.0000001", "100000000000000000000"]
    for i, q in enumerate(numbers):
        add("number-%d" % i, q)
    strings = ['"plain"', "'single'", "`raw\\n\\t`", '"esc \\n \\t \\\\ \\" \\a \\b \\f \\r \\v"',
               '"hex \\x41 unicode \\u00e9 \\U0001F600 octal \\101"', "'it\\'s'",
               '"\\q"', '"unterminated', '"new\nline"', "'\"'", '"utf-8 é ✓"', '""',
               '"\\xZZ"', '"\\u12"', '"\\400"', "`a\"b'c`"]
    for i, q in enumerate(strings):
        add("string-%d" % i, q)
        add("string-matcher-%d" % i, "x{a=%s}" % q)
    durations = ["5m", "1h30m", "90s", "500ms", "1d", "1w", "1y", "2h15m30s10ms", "0s", "1m1m",
                 "5", "5M", "1h5", "30m1h"]
    for i, d in enumerate(durations):
        add("duration-range-%d" % i, "rate(x[%s])" % d)
        add("duration-offset-%d" % i, "x offset %s" % d)
    selectors = [
        'x', 'x{}', '{a="b"}', 'x{a="b",c!="d",e=~"f.*",g!~"h"}', 'x{a="b",}', '{__name__="x"}',
        '{__name__=~".+"}', '{__name__!=""}', 'x{__name__="x"}', '{a=""}', '{a=~""}', '{}',
        'x{a="b" , c = "d"}', "x{a='b'}", 'x{a=`b`}', 'x:y:z', ':x', '_x', 'x{a="b"}[5m]',
        'x[5m] offset 1m', 'x offset -1m', 'x @ 100', 'x @ -100', 'x @ 1.5e3', 'x @ start()',
        'x @ end()', 'x offset 5m @ 100', 'x @ 100 offset 5m', 'x[5m] @ 100 offset 1m',
        'x offset 1m offset 2m', 'x @ 1 @ 2', 'x[5m:1m]', 'x[5m:]', 'rate(x[5m])[30m:1m]',
        'x[5m:1m] offset 1m', 'x[5m:1m] @ end()', 'max_over_time(rate(x[5m])[30m:5m] offset 1h)',
        'x[5m][5m]', 'x[5m:1m][5m:1m]', '(x)[5m]', '(x)[5m:1m]', 'sum(x)[5m:]', '1[5m:]',
        'x{a="b"}{c="d"}', 'x{a}', 'x{a=b}', 'x{"a"="b"}', '{"x"}', 'x{a="b"', '{a="b",,}',
        'x{a=~"("}', 'x{a!~"["}', '{a=~".*"}', '{a!=""}', '{a=~".+"}', 'x @ foo()',
    ]
    for i, q in enumerate(selectors):
        add("selector-%d" % i, q)
    for i, name in enumerate(KEYWORD_METRICS):
        add("kwmetric-%d" % i, name)
        add("kwmetric-%d-braces" % i, '%s{a="b"}' % name)
        add("kwmetric-%d-offset" % i, "%s offset 5m" % name)
        add("kwmetric-%d-range" % i, "rate(%s[5m])" % name)
        add("kwmetric-%d-arg" % i, "sum(%s)" % name)
        add("kwmetric-%d-binop" % i, "x + %s" % name)
    misc = [
        'offset offset 5m', 'sum(sum)', 'sum by (by) (by)', 'by{a="b"} offset 1m',
        'x # comment', '# only a comment', 'x # c1\n+ # c2\ny', 'sum(\n  rate(\n    x[5m]\n  )\n)',
        'sum(rate(x[5m])) by (pod)', '  x  ', '\tx\n', 'x\r\n+\r\ny', '((((x))))',
        'sum(x,)', 'topk(x)', 'topk(1, 2, x)', 'sum by (a) (x) by (b)', 'sum() ', 'x +', '+',
        '(x', 'x)', 'x + on() group_left y', 'x and on() group_left y', 'x and on(a) y',
        'x or ignoring(a) y', '1 and 2', 'x == 1', '1 == 1', '1 == bool 1', 'x + bool y',
        'x + on(a) ignoring(b) y', 'x group_left y', 'vector(1) or on() x',
        'label_replace(x, "namespace", "other", "", "")', 'absent(x{namespace="a"})',
        '"a" + 1', 'count_values(1, x)', 'quantile("a", x)', 'topk("a", x)', 'rate(1)',
        'x[5m] + 1', 'scalar(x) + x', 'time()', 'time', 'pi()', 'vector(time())',
        'x{a="\\u00e9"}', 'x{a=~"\\\\d+"}', 'x{a="\\.\\d"}', 'sum without(a)(x)',
        'count(x) by ()', 'group(x) without ()', 'x unless on(a,b,) y', 'x * on(a) group_left(b,) y',
        'sort_by_label(x, "a")', 'limitk(1, x)', 'limit_ratio(0.5, x)', 'mad_over_time(x[5m])',
        'double_exponential_smoothing(x[5m], 0.5, 0.5)', 'info(x)', 'histogram_stddev(x)',
        '{"my.metric"}', '{"my.metric", "a.b"="x"}', 'x{"a.b"="x"}', 'x[5m:1m:1m]', 'x[-5m]',
        'x offset', 'x @', '@ 100', 'x offset 5m 5m', 'x[5m] offset -1h', 'x[5m:] @ start() offset 1m',
        'sum(x) offset 5m', 'rate(x[5m]) offset 5m', '(x) offset 5m', 'x offset 5m[5m]',
        '-x[5m]', 'abs(-x)', '-sum(x)', '- sum by (a) (x)', 'x-1', 'x- -1', 'x--1', '1--1',
        'x*-1', 'x ^ - 1', 'x==bool-1', 'bool', 'on', 'ignoring', 'group_left', 'without',
        'x + without', 'sum by', 'sum by (a)', 'sum(x) by', 'sum(x) by (a', 'rate(x[5m]',
        'x{a="b"} {c="d"}', 'x y', '1 2', 'x )', '( )', 'x[5m]]', 'x[5m', 'x[]', 'x[:]',
        'x[5m:1m', 'x{', 'x}', '}', '{', 'sum(x)(y)', 'abs', 'abs()', 'abs(x, y)', 'nope(x)',
        'label_join(x, "a", ",")', 'label_join(x, "a", ",", "b", "c", "d")', 'round(x, 0.1)',
        'round(x)', 'clamp(x, 0, 1)', 'histogram_quantile(0.9, rate(b[5m]))', 'x > bool on(a) y',
        'x * on() group_left() y', 'x atan2 y', 'x atan2 bool y', 'atan2(x, y)', 'x atan2 on(a) y',
        'sum(x) / on() group_left sum(y)', 'x ^ y ^ z', 'x % y % z', 'x / y * z',
        'sum by (a, b) (x) / on (a) group_left (b) sum by (a) (y)', '123abc', 'x.y', 'x-y', '$x',
        'x{a="b"}[5m:1m]', 'x{a="b"}[5m] offset 1m @ 1', 'absent_over_time(nonexistent[1h])',
        'count_values without (a) ("b", x)', 'stddev(x)', 'stdvar by (a) (x)',
    ]
    for i, q in enumerate(misc):
        add("misc-%d" % i, q)
    # Sizes around our limits (include/cma/promql.h: 64 KiB of text, nesting depth); Prometheus
    # has none of them (and its pretty printer is slow on deep trees: no deeper cases than these).
    for n in (90, 150):
        add("deep-parens-%d" % n, "(" * n + "x" + ")" * n)
        add("deep-calls-%d" % n, "abs(" * n + "x" + ")" * n)
        add("deep-signs-%d" % n, "-" * n + "x")
        add("deep-subqueries-%d" % n, "max_over_time(" * (n // 3) + "x" + "[5m:])" * (n // 3))
    add("deep-parens-250", "(" * 250 + "x" + ")" * 250)
    add("deep-signs-250", "-" * 250 + "x")
    add("long-60k", 'x{a="%s"}' % ("a" * 60000))
    add("long-70k", 'x{a="%s"}' % ("a" * 70000))
    add("many-terms", " + ".join(["x%d" % i for i in range(150)]))
    return cases


# --- (c) the random generator -----------------------------------------------------------------------
class Gen:
    """A seeded generator of type-correct PromQL trees; render() prints one with random layout."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def metric(self):
        r = self.r
        if r.random() < 0.08:
            return r.choice(KEYWORD_METRICS)
        return r.choice(METRICS)

    def string_lit(self, s):
        r = self.r
        style = r.random()
        if style < 0.6 or ("'" in s and '"' in s):
            return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if style < 0.85 and "'" not in s:
            return "'" + s.replace("\\", "\\\\") + "'"
        if "`" not in s and "\\" not in s:
            return "`" + s + "`"
        return json.dumps(s)

    def matchers(self):
        r = self.r
        out = []
        for _ in range(r.choice([0, 0, 1, 1, 2, 3])):
            name = r.choice(LABELS + ["__name__"] if r.random() < 0.1 else LABELS)
            op = r.choice(["=", "=", "!=", "=~", "!~"])
            val = r.choice(VALUES)
            if op in ("=~", "!~") and r.random() < 0.5:
                val = r.choice(["team-.*", ".+", "api-[0-9]", "(200|500)", "", ".*"])
            out.append((name, op, val))
        return out

    def selector(self):
        r = self.r
        ms = self.matchers()
        if r.random() < 0.15 or (not ms and r.random() < 0.05):
            ms.insert(0, ("__name__", r.choice(["=", "=~"]), r.choice(
                [r.choice(METRICS), ".+", "http_.*|secret_.*", "secret_tokens"])))
            name = None
        else:
            name = self.metric()
        if name is None and all(op in ("=~", "!~") and val in (".*", "") for _, op, val in ms):
            ms.append(("job", "!=", ""))  # Prometheus refuses selectors matching the empty set
        return ("sel", name, ms, self.modifiers())

    def modifiers(self):
        r = self.r
        mods = []
        if r.random() < 0.15:
            mods.append(("offset", r.choice(["-", ""]) + r.choice(DURATIONS)))
        if r.random() < 0.08:
            mods.append(("@", r.choice(["start()", "end()", "100", "1.7e9", "-5"])))
        r.shuffle(mods)
        return mods

    def expr(self, typ, depth):
        r = self.r
        if typ == "s":
            if depth <= 0 or r.random() < 0.6:
                return ("num", r.choice(["1", "0.5", "2", "1e3", "0x10", "Inf", "NaN", ".25",
                                         "3", "100", "1.5e-3"]))
            choice = r.random()
            if choice < 0.3:
                return ("call", r.choice(["time", "pi"]), [])
            if choice < 0.5:
                return ("call", "scalar", [self.expr("v", depth - 1)])
            if choice < 0.7:
                return ("unary", r.choice("-+"), self.expr("s", depth - 1))
            op = r.choice(ARITH + COMPARE)
            return ("bin", op, self.expr("s", depth - 1), self.expr("s", depth - 1),
                    {"bool": op in COMPARE})
        if typ == "m":
            if depth <= 0 or r.random() < 0.7:
                return ("range", self.selector_plain(), r.choice(DURATIONS), self.modifiers())
            step = r.choice(["", "1m", "30s", "5m"])
            return ("subq", self.expr("v", depth - 1), r.choice(["10m", "30m", "1h"]), step,
                    self.modifiers())
        if depth <= 0:
            return self.selector()
        choice = r.random()
        if choice < 0.25:
            return self.selector()
        if choice < 0.5:
            return self.call(depth)
        if choice < 0.7:
            return self.aggregation(depth)
        if choice < 0.9:
            return self.binary(depth)
        if choice < 0.95:
            return ("unary", r.choice("-+"), self.expr("v", depth - 1))
        return ("paren", self.expr("v", depth - 1))

    def selector_plain(self):
        sel = self.selector()
        return ("sel", sel[1], sel[2], [])

    def call(self, depth):
        r = self.r
        names = [n for n, (_, res) in FUNCTIONS.items() if res == "v"]
        fn = r.choice(names)
        args_spec = FUNCTIONS[fn][0]
        args = []
        for i, t in enumerate(args_spec):
            if t == "?":
                if r.random() < 0.5 and args:
                    args.pop()
                continue
            if t == "*":
                for _ in range(r.randint(0, 2)):
                    args.append(("str", r.choice(LABELS)))
                continue
            if t == "S":
                if fn == "label_replace" and i == 1:
                    args.append(("str", r.choice(["namespace", "dst", "pod"])))
                elif fn == "label_replace" and i == 4:
                    args.append(("str", r.choice(["(.*)", "", ".*-(.*)", "team-(.)"])))
                else:
                    args.append(("str", r.choice(LABELS + ["$1", "-", ""])))
            elif t == "s" and fn in ("histogram_quantile", "quantile_over_time"):
                args.append(("num", r.choice(["0.5", "0.9", "0.99"])))
            else:
                args.append(self.expr(t, depth - 1))
        return ("call", fn, args)

    def aggregation(self, depth):
        r = self.r
        if r.random() < 0.3:
            op = r.choice(list(PARAM_AGGREGATIONS))
            if PARAM_AGGREGATIONS[op] == "S":
                param = ("str", r.choice(["value", "namespace", "v"]))
            elif op == "quantile":
                param = ("num", r.choice(["0.5", "0.9"]))
            else:
                param = ("num", r.choice(["1", "2", "3"]))
        else:
            op, param = r.choice(AGGREGATIONS), None
        grouping = None
        if r.random() < 0.7:
            labels = r.sample(LABELS, r.randint(0, 3))
            grouping = (r.choice(["by", "by", "without"]), labels, r.random() < 0.3)
        return ("agg", op, param, self.expr("v", depth - 1), grouping)

    def binary(self, depth):
        r = self.r
        op = r.choice(ARITH + COMPARE + SETOPS + ["atan2"])
        lt = "v" if op in SETOPS or r.random() < 0.7 else "s"
        rt = "v" if op in SETOPS or lt == "s" or r.random() < 0.6 else "s"
        mods = {"bool": op in COMPARE and (lt == rt == "s" or r.random() < 0.4)}
        if lt == rt == "v" and r.random() < 0.5:
            mods["match"] = (r.choice(["on", "ignoring"]), r.sample(LABELS, r.randint(0, 2)))
            if op not in SETOPS and r.random() < 0.4:
                mods["group"] = (r.choice(["group_left", "group_right"]),
                                 r.sample(LABELS, r.randint(0, 2)), r.random() < 0.3)
        return ("bin", op, self.expr(lt, depth - 1), self.expr(rt, depth - 1), mods)

    # --- printing -----------------------------------------------------------------------------------
    def tokens(self, node, parent_prec=0, right=False):
        """The node's tokens; parentheses where precedence needs them (and sometimes where it
        does not: Prometheus keeps them, as a ParenExpr)."""
        r = self.r
        kind = node[0]
        if kind == "num":
            return [node[1]]
        if kind == "str":
            return [self.string_lit(node[1])]
        if kind == "sel":
            _, name, ms, mods = node
            toks = [name] if name else []
            if ms or not name:
                toks.append("{")
                for i, (ln, op, val) in enumerate(ms):
                    if i:
                        toks.append(",")
                    toks += [ln, op, self.string_lit(val)]
                if ms and r.random() < 0.1:
                    toks.append(",")
                toks.append("}")
            return toks + self.mod_tokens(mods)
        if kind == "range":
            return self.tokens(node[1]) + ["[", node[2], "]"] + self.mod_tokens(node[3])
        if kind == "subq":
            inner = self.tokens(node[1], 100)
            return inner + ["[", node[2], ":", node[3], "]"] + self.mod_tokens(node[4])
        if kind == "call":
            toks = [node[1], "("]
            for i, a in enumerate(node[2]):
                if i:
                    toks.append(",")
                toks += self.tokens(a)
            return toks + [")"]
        if kind == "paren":
            return ["("] + self.tokens(node[1]) + [")"]
        if kind == "unary":
            inner = self.tokens(node[2], 100)
            return [node[1]] + inner
        if kind == "agg":
            _, op, param, body, grouping = node
            args = (self.tokens(param) + [","] if param else []) + self.tokens(body)
            gtoks = []
            if grouping:
                gtoks = [grouping[0], "("]
                for i, lbl in enumerate(grouping[1]):
                    if i:
                        gtoks.append(",")
                    gtoks.append(lbl)
                gtoks.append(")")
            if grouping and grouping[2]:
                return [op, "("] + args + [")"] + gtoks
            return [op] + gtoks + ["("] + args + [")"]
        _, op, lhs, rhs, mods = node
        prec = PREC[op]
        toks = self.tokens(lhs, prec + (1 if op == "^" else 0))
        toks.append(op)
        if mods.get("bool"):
            toks.append("bool")
        if "match" in mods:
            toks += [mods["match"][0], "("] + self.join(mods["match"][1]) + [")"]
        if "group" in mods:
            g = mods["group"]
            toks.append(g[0])
            if not (g[2] and not g[1]):
                toks += ["("] + self.join(g[1]) + [")"]
        toks += self.tokens(rhs, prec + (0 if op == "^" else 1))
        if prec < parent_prec or r.random() < 0.05:
            return ["("] + toks + [")"]
        return toks

    def mod_tokens(self, mods):
        toks = []
        for kind, val in mods:
            toks += [kind, val]
        return toks

    @staticmethod
    def join(labels):
        toks = []
        for i, lbl in enumerate(labels):
            if i:
                toks.append(",")
            toks.append(lbl)
        return toks

    def layout(self, toks):
        """Joins tokens with random whitespace and comments (never gluing two words together)."""
        r = self.r
        out = []
        for i, t in enumerate(t for t in toks if t):
            if i:
                x = r.random()
                if x < 0.55:
                    sep = ""
                elif x < 0.85:
                    sep = " "
                elif x < 0.93:
                    sep = r.choice(["\n", "\n  ", "\t", "  "])
                else:
                    sep = " # " + r.choice(["x{namespace=\"b\"}", "sum(", ")", "", "#"]) + "\n"
                prev = out[-1][-1]
                if sep == "" and (prev.isalnum() or prev in "_:.") and \
                        (t[0].isalnum() or t[0] in "_:."):
                    sep = " "
                if sep == "" and prev in "+-" and t[0] in "+-.0123456789":
                    sep = " "
                out.append(sep)
            out.append(t)
        return "".join(out)

    def query(self):
        depth = self.r.choice([1, 2, 2, 3, 3, 4])
        return self.layout(self.tokens(self.expr("v" if self.r.random() < 0.9 else "s", depth)))


# --- (d) mutations ----------------------------------------------------------------------------------
FUZZ_TOKENS = ["(", ")", "{", "}", "[", "]", ",", ":", "by", "without", "offset", "5m", "@", "#",
               "\n", '"', "'", "`", "=~", "!", "=", "-", "+", "1e", "0x", ".", "bool", "on()",
               "group_left", "sum", "start()", "\\", "inf", "nan", "1", "x", " ", "and", "^", "/",
               # whitespace Prometheus does and does not skip, bytes that end strings early
               "\r", "\t", "\f", "\v", "\u00a0", "\u2028", "\x00", "\u00e9", "\\x", "\\u00",
               # pieces that hide or add a selector
               '{__name__=~".+"}', "[5m:]", "offset -", "@ end()", "== bool", " or on() vector(1)",
               "# x{a=\"b\"}\n", "#", "\n#\n", ")[1m:]", "{}", ",}", "__name__", "0x1p3", "1e+"]


def mutate(r, q):
    s = q
    for _ in range(r.randint(1, 3)):
        op = r.random()
        pos = r.randint(0, len(s))
        if op < 0.3 and s:
            pos = min(pos, len(s) - 1)
            s = s[:pos] + s[pos + 1:]
        elif op < 0.6:
            s = s[:pos] + r.choice(FUZZ_TOKENS) + s[pos:]
        elif op < 0.75 and len(s) > 1:
            pos = min(pos, len(s) - 2)
            s = s[:pos] + s[pos + 1] + s[pos] + s[pos + 2:]
        elif op < 0.8:
            s = s[:pos]
        elif op < 0.88:  # a comment from here to the end of the line
            s = s[:pos] + "#" + s[pos:]
        else:
            end = r.randint(pos, len(s))
            s = s[:end] + s[pos:end] + s[end:]
    return s


def main(argv):
    seed, n_gen, n_fuzz, out = 23, 2500, 1500, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--seed":
            seed = int(args.pop(0))
        elif a == "--gen":
            n_gen = int(args.pop(0))
        elif a == "--fuzz":
            n_fuzz = int(args.pop(0))
        elif out is None:
            out = a
        else:
            sys.exit("usage: promql_corpus.py [--seed N] [--gen N] [--fuzz N] OUT.jsonl")
    if out is None:
        sys.exit("usage: promql_corpus.py [--seed N] [--gen N] [--fuzz N] OUT.jsonl")
    rows = rule_corpus() + grammar_cases()
    gen = Gen(seed)
    rows += [(gen.query(), "gen:%d" % k) for k in range(n_gen)]
    r = random.Random(seed + 1)
    base = [q for q, _ in rows]
    rows += [(mutate(r, r.choice(base)), "fuzz:%d" % k) for k in range(n_fuzz)]
    with open(out, "w", encoding="utf-8") as f:
        for q, src in rows:
            f.write(json.dumps({"q": q, "src": src}, ensure_ascii=False) + "\n")
    counts = {}
    for _, src in rows:
        counts[src.split(":")[0]] = counts.get(src.split(":")[0], 0) + 1
    print(json.dumps(counts, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
