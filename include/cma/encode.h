/* encode.h: every JSON body the adapter sends (jansson is used here and in clients only):
 * MetricValueList v1beta1/v1beta2, ExternalMetricValueList, PodMetrics/NodeMetrics (lists and
 * single objects), APIResourceList, APIGroup, APIGroupList, Status, version.Info. Output is compact
 * JSON followed by "\n", appended to a caller-owned cma_buf. Field order and null/omitempty rules
 * follow the Go types exactly (docs: ../shared/reference/kubernetes-metrics-api.md sections 1-3).
 * Pure; thread-safe. */
#ifndef CMA_ENCODE_H
#define CMA_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cma/buf.h"
#include "cma/err.h"

struct cma_selector;

enum cma_custom_version { CMA_CUSTOM_V1BETA1 = 1, CMA_CUSTOM_V1BETA2 = 2 };

struct cma_described_object {
    const char *kind;       /* "Pod" */
    const char *namespace_; /* NULL or "" → omitted */
    const char *name;
    const char *api_version; /* "v1", "apps/v1" */
};

struct cma_metric_value {
    struct cma_described_object object;
    const char *metric_name;
    int64_t timestamp_ms; /* the sample's time; printed RFC 3339, seconds, UTC */
    int64_t value_milli;  /* printed as a DecimalSI canonical Quantity string */
    bool has_window;
    int64_t window_seconds; /* v1beta1 "window", v1beta2 "windowSeconds" */
};

/* {"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/<v>","metadata":{},"items":[..]}
 * v1beta1 items: describedObject, metricName, timestamp, [window], value, selector.
 * v1beta2 items: describedObject, metric{name, selector}, timestamp, [windowSeconds], value.
 * `selector` is null when metric_selector is NULL or empty, else metav1.LabelSelector JSON
 * (= → matchLabels; != → NotIn [v]; in/notin/exists/!exists → matchExpressions, as
 * metav1.ParseToLabelSelector does). items is [] when n == 0. */
enum cma_errc cma_encode_metric_value_list(enum cma_custom_version version,
                                           const struct cma_metric_value *items, size_t n,
                                           const struct cma_selector *metric_selector,
                                           struct cma_buf *out, struct cma_err *reterr);

struct cma_external_metric_value {
    const char *metric_name;
    const char *const *label_names; /* metricLabels; {} when n_labels == 0 */
    const char *const *label_values;
    size_t n_labels;
    int64_t timestamp_ms;
    int64_t value_milli;
};

/* {"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1",
 *  "metadata":{},"items":[{"metricName","metricLabels","timestamp","value"}]} */
enum cma_errc cma_encode_external_metric_value_list(const struct cma_external_metric_value *items,
                                                    size_t n, struct cma_buf *out,
                                                    struct cma_err *reterr);

struct cma_resource_entry {
    const char *name; /* "pods/DCGM_FI_DEV_GPU_UTIL" */
    bool namespaced;
    const char *kind; /* "MetricValueList" */
    const char *const *verbs;
    size_t n_verbs;
};

/* {"kind":"APIResourceList","apiVersion":"v1","groupVersion":..,"resources":[{"name",
 *  "singularName":"","namespaced","kind","verbs"}]} */
enum cma_errc cma_encode_api_resource_list(const char *group_version,
                                           const struct cma_resource_entry *entries, size_t n,
                                           struct cma_buf *out, struct cma_err *reterr);

struct cma_api_group_desc {
    const char *name;            /* "custom.metrics.k8s.io" */
    const char *const *versions; /* preferred first: {"v1beta1", "v1beta2"} */
    size_t n_versions;
};

/* {"kind":"APIGroup","apiVersion":"v1","name":..,"versions":[{"groupVersion","version"}],
 *  "preferredVersion":{..}} */
enum cma_errc cma_encode_api_group(const struct cma_api_group_desc *group, struct cma_buf *out,
                                   struct cma_err *reterr);
/* {"kind":"APIGroupList","apiVersion":"v1","groups":[APIGroup without kind/apiVersion...]} */
enum cma_errc cma_encode_api_group_list(const struct cma_api_group_desc *groups, size_t n,
                                        struct cma_buf *out, struct cma_err *reterr);

/* ---- metrics.k8s.io v1beta1 (kubernetes-metrics-api.md section 3) ---- */

/* The ObjectMeta of a PodMetrics/NodeMetrics: name, namespace (omitted when NULL or ""),
 * creationTimestamp, labels (omitted when n_labels == 0; written sorted by key as a Go map). */
struct cma_metrics_object_meta {
    const char *name;
    const char *namespace_;
    int64_t creation_ms;
    const char *const *label_names;
    const char *const *label_values;
    size_t n_labels;
};

/* Usage in milli-units: cpu as a DecimalSI quantity, memory (bytes) as a BinarySI quantity. */
struct cma_resource_usage {
    int64_t cpu_milli;
    int64_t memory_milli;
};

struct cma_container_metrics {
    const char *name;
    struct cma_resource_usage usage;
};

struct cma_pod_metrics {
    struct cma_metrics_object_meta meta;
    int64_t timestamp_ms;
    int64_t window_ms;                              /* written as a Go duration string ("5m0s") */
    const struct cma_container_metrics *containers; /* written in the given order */
    size_t n_containers;
};

struct cma_node_metrics {
    struct cma_metrics_object_meta meta;
    int64_t timestamp_ms;
    int64_t window_ms;
    struct cma_resource_usage usage;
};

/* {"kind":"PodMetricsList","apiVersion":"metrics.k8s.io/v1beta1","metadata":{},"items":[
 *  {"metadata":{"name","namespace","creationTimestamp","labels"},"timestamp","window",
 *   "containers":[{"name","usage":{"cpu","memory"}}]}]}; items in the given order, [] when n == 0.
 * CMA_ERR_BACKEND_RESPONSE for a timestamp outside the years 1000-9999. */
enum cma_errc cma_encode_pod_metrics_list(const struct cma_pod_metrics *items, size_t n,
                                          struct cma_buf *out, struct cma_err *reterr);
/* One PodMetrics: {"kind":"PodMetrics","apiVersion":"metrics.k8s.io/v1beta1","metadata",...}. */
enum cma_errc cma_encode_pod_metrics(const struct cma_pod_metrics *item, struct cma_buf *out,
                                     struct cma_err *reterr);
/* {"kind":"NodeMetricsList",...,"items":[{"metadata","timestamp","window","usage":{"cpu",
 * "memory"}}]}. */
enum cma_errc cma_encode_node_metrics_list(const struct cma_node_metrics *items, size_t n,
                                           struct cma_buf *out, struct cma_err *reterr);
/* One NodeMetrics with kind/apiVersion. */
enum cma_errc cma_encode_node_metrics(const struct cma_node_metrics *item, struct cma_buf *out,
                                      struct cma_err *reterr);

/* metav1.Status: {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
 * "message":..,"reason":..,"code":N}. reason "" is omitted. */
enum cma_errc cma_encode_status(int code, const char *reason, const char *message,
                                struct cma_buf *out);
/* The same from an error: code = cma_errc_http_status, reason = cma_errc_reason, message = msg. */
enum cma_errc cma_encode_status_from_err(const struct cma_err *err, struct cma_buf *out);

/* version.Info: {"major","minor","gitVersion","gitCommit","gitTreeState","buildDate",
 * "goVersion","compiler","platform"}. */
enum cma_errc cma_encode_version(const char *git_version, const char *git_commit,
                                 const char *build_date, struct cma_buf *out);

#endif
