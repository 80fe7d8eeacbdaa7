/* config.h: prometheus-adapter's metrics discovery config (rules, externalRules, resourceRules)
 * as plain data with the source position of every value. Loading is strict like yaml.v2
 * UnmarshalStrict: unknown keys, duplicate keys and wrong shapes stop the load with
 * "file:line:column: message". Semantic checks that need compiling (regexes, templates,
 * name.as) happen in rules/rule.c, which reports through the positions kept here.
 * Several files (and directories of them) merge into one config: see cma_config_load_paths().
 * A loaded config is immutable; main owns it; thread-safe reads. */
#ifndef CMA_CONFIG_H
#define CMA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "cma/err.h"

struct cma_pos {
    const char *file; /* borrowed from struct cma_config.files (the file the value is in) */
    unsigned line, column;
};

/* A string value; `set` is false when the key is absent or null. pos is the value's position
 * (the key's position when null, the enclosing mapping's when absent). `plain` is true for a
 * plain (unquoted, one-line) scalar, where a byte offset inside the string maps to column
 * pos.column + offset. */
struct cma_config_str {
    char *s; /* NULL when not set */
    bool set;
    bool plain;
    struct cma_pos pos;
};

/* An empty `is`/`isNot` counts as not set (upstream tests `!= ""`); exactly one is set. */
struct cma_config_filter {
    struct cma_config_str is;
    struct cma_config_str is_not;
    struct cma_pos pos;
};

struct cma_config_override {
    char *label; /* the Prometheus label (mapping key) */
    struct cma_pos pos;
    struct cma_config_str group;
    struct cma_config_str resource;
};

struct cma_config_resources {
    struct cma_config_override *overrides;
    size_t n_overrides;
    struct cma_config_str template_; /* resources.template */
    bool namespaced;                 /* default true */
    bool namespaced_set;
    struct cma_pos pos;
};

/* A rule's `backend: NAME` (this project's extension): index 0 is the flags' backend
 * (--prometheus-url), i > 0 is backends[i - 1]. */
struct cma_config_backend_ref {
    struct cma_config_str name; /* not set: the flags' backend */
    size_t index;               /* resolved once every file is loaded */
};

struct cma_config_rule {
    struct cma_pos pos; /* the list item */
    struct cma_config_backend_ref backend;
    struct cma_config_str series_query;
    struct cma_config_filter *series_filters;
    size_t n_series_filters;
    struct cma_config_resources resources;
    struct cma_config_str name_matches; /* name.matches */
    struct cma_config_str name_as;      /* name.as */
    struct cma_config_str metrics_query;
    /* maxSampleAge (this project's extension, docs/configuration.md): a Go duration; a sample
     * whose data is older is served as missing. Text as written (its position for messages) and
     * the value; 0 when absent. */
    struct cma_config_str max_sample_age;
    long long max_sample_age_ms;
};

struct cma_config_resource_rule {
    struct cma_pos pos;
    struct cma_config_str container_query;
    struct cma_config_str node_query;
    struct cma_config_resources resources;
    struct cma_config_str container_label;
};

struct cma_config_resource_rules {
    struct cma_pos pos;
    struct cma_config_backend_ref backend; /* one for the block: cpu and memory alike */
    struct cma_config_resource_rule cpu;
    struct cma_config_resource_rule memory;
    struct cma_config_str window; /* Prometheus duration text as written */
    long long window_ms;          /* parsed; 0 when absent */
};

/* A "Key: value" pair of a backend's headers or queryParameters, in config order. */
struct cma_config_kv {
    char *key;
    char *value;
    struct cma_pos pos; /* the key */
};

/* One entry of the top-level `backends:` list (this project's extension; docs/configuration.md):
 * a named Prometheus-compatible backend that rules select with `backend: NAME`. Every secret is
 * a file (read when the backend is created and again whenever it changes, credentials.h); every
 * file named here was readable when the config loaded, and a relative path is resolved against
 * the directory of the config file that names it (`s` holds the resolved path). */
struct cma_config_backend {
    struct cma_pos pos; /* the list item */
    struct cma_config_str name;
    struct cma_config_str url;
    bool use_post;                 /* verb: POST (default GET) */
    long long timeout_ms;          /* timeout: a Prometheus duration; 0 = --prometheus-timeout */
    struct cma_config_kv *headers; /* headers: mapping */
    size_t n_headers;
    struct cma_config_kv *query_params; /* queryParameters: mapping (Thanos dedup, ...) */
    size_t n_query_params;
    long long max_query_length; /* maxQueryLength: bytes of PromQL; 0 = no limit */
    struct cma_config_str bearer_token_file;
    struct cma_config_str basic_username; /* basicAuth.username */
    struct cma_config_str basic_password_file;
    struct cma_config_str ca_file; /* tls.caFile */
    struct cma_config_str cert_file;
    struct cma_config_str key_file;
    bool insecure_skip_verify;
    struct cma_config_str kubeconfig; /* CA, client certificate, token or basic auth from it */
    bool in_cluster;                  /* the pod's service-account token and CA */
    /* metricRules: whether MetricRules (--enable-metric-rules) may name this backend:
     * metricRules.allowed (default false) and metricRules.namespaces (none: every namespace);
     * metricRules.tenantFromNamespace (default false): a MetricRule's calls to this backend go
     * with X-Scope-OrgID set to its namespace, in place of the backend's own. */
    bool mr_allowed;
    char **mr_namespaces;
    size_t n_mr_namespaces;
    bool mr_tenant_from_namespace;
};

struct cma_config {
    char *file;   /* the first file loaded (path as given, or directory/name) */
    char **files; /* every file loaded, in merge order; files[0] == file */
    size_t n_files;
    /* Things prometheus-adapter accepts that are probably not what the author meant, as
     * "file:line:column: message" lines (rules/rule.c adds them to the ruleset's warnings). */
    char **warnings;
    size_t n_warnings;
    struct cma_config_rule *rules;
    size_t n_rules;
    struct cma_config_rule *external_rules;
    size_t n_external_rules;
    struct cma_config_resource_rules *resource_rules; /* NULL when the key is absent */
    struct cma_config_backend *backends;              /* this project's extension; see above */
    size_t n_backends;
};

/* Loads and validates the shape of a config file. `backends:` entries are checked in full
 * (name, URL, verb, durations, header names, files readable, settings that exclude each other),
 * and every `backend: NAME` must name one of them (an unknown name is an error at the name's
 * position). On failure *ret is untouched and reterr holds
 * the first problem with its position. Checks here: YAML syntax, unknown/duplicate keys, types
 * (scalar/list/mapping), seriesFilters items having exactly one of is/isNot, overrides entries
 * being mappings with only group/resource, namespaced being a bool, window matching
 * Prometheus's duration syntax. As yaml.v2: only the first YAML document is read (a later one is
 * a warning), and a null item of rules/externalRules is an empty rule. Caller owns the result:
 * cma_config_free(). */
enum cma_errc cma_config_load_file(const char *path, struct cma_config **ret,
                                   struct cma_err *reterr);
enum cma_errc cma_config_load_string(const char *name, const char *text, size_t len,
                                     struct cma_config **ret, struct cma_err *reterr);
/* Loads several paths into one config. A path naming a directory stands for its *.yaml and
 * *.yml entries (regular files or links to them; names starting with '.' are skipped, as are
 * ConfigMap mounts' ..data links) in byte order of their names; an empty directory is an error.
 * Files merge in the order given: rules, externalRules and warnings are concatenated (so rule
 * indexes run on across files) and every position names its own file. Errors, each with the
 * position(s) involved: the same file loaded twice; resourceRules in two files; a metric served
 * by rules of two different files for the same resource (custom rules: per override resource;
 * external rules: by name, case-insensitively), when the name is known from the config alone
 * (a constant name.as, or a seriesQuery selecting one metric name with no name regex and no
 * seriesFilters). Duplicates within one file load as before (prometheus-adapter semantics).
 * backends: lists are concatenated too (a rule may name a backend of another file); the same
 * backend name in two entries is an error naming both positions.
 * One path that is a file gives exactly what cma_config_load_file() gives. */
enum cma_errc cma_config_load_paths(const char *const *paths, size_t n_paths,
                                    struct cma_config **ret, struct cma_err *reterr);
void cma_config_free(struct cma_config *cfg);

#endif
