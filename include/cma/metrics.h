/* metrics.h: the self-metrics registry behind /metrics. One registry object, created by main
 * and handed to the components that record into it (config structs, constructors); there is no
 * process-global registry. Every recording function accepts a NULL registry or family and then
 * does nothing, so components work unmeasured (unit tests).
 *
 * A family is a counter, a gauge or a histogram with a fixed list of label names (and, for a
 * histogram, fixed bucket bounds), registered once by name: registering the same name again with
 * the same type and labels returns the same family, so two components may both register it.
 * A child per distinct tuple of label values is created on first use (under the family's lock,
 * at most CMA_METRICS_MAX_CHILDREN per family; further tuples are dropped and counted) and never
 * removed; increments after that are lock-free (C11 atomics). cma_metrics_write() renders the
 * Prometheus text exposition format 0.0.4 (HELP and TYPE lines, escaped label values), families
 * sorted by name and children by label values, so two scrapes differ only in values.
 * Thread-safe; families stay valid until cma_metrics_free(). */
#ifndef CMA_METRICS_H
#define CMA_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "cma/buf.h"
#include "cma/err.h"

#define CMA_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define CMA_METRICS_MAX_LABELS 10
#define CMA_METRICS_MAX_BUCKETS 40
#define CMA_METRICS_MAX_CHILDREN 4096 /* label-value tuples per family */

/* kube-apiserver's apiserver_request_duration_seconds buckets, in seconds (23 bounds). */
#define CMA_METRICS_KUBE_BUCKETS                                                                   \
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, \
        45, 60
#define CMA_METRICS_N_KUBE_BUCKETS 23

enum cma_metric_type { CMA_METRIC_COUNTER, CMA_METRIC_GAUGE, CMA_METRIC_HISTOGRAM };

struct cma_metrics;
struct cma_metric;

/* An empty registry. Caller owns: cma_metrics_free(). */
enum cma_errc cma_metrics_new(struct cma_metrics **ret, struct cma_err *reterr);
/* Frees the registry and every family; no recording may run any more. NULL is fine. */
void cma_metrics_free(struct cma_metrics *m);

/* Registers (or finds) a family. `name` and the label names follow Prometheus' rules
 * ([a-zA-Z_:][a-zA-Z0-9_:]*, labels without ':' and not starting with "__"; no "le" label on a
 * histogram); `help` is one line. Names, help and labels are copied. A histogram's bounds must
 * be finite and strictly increasing (+Inf is implied). Returns NULL when m is NULL, on a bad
 * name, a name already registered with another type, labels or buckets, or out of memory. A
 * family without labels shows 0 from the start; a labelled one shows its children once used. */
struct cma_metric *cma_metrics_counter(struct cma_metrics *m, const char *name, const char *help,
                                       const char *const *labels, size_t n_labels);
struct cma_metric *cma_metrics_gauge(struct cma_metrics *m, const char *name, const char *help,
                                     const char *const *labels, size_t n_labels);
struct cma_metric *cma_metrics_histogram(struct cma_metrics *m, const char *name, const char *help,
                                         const char *const *labels, size_t n_labels,
                                         const double *bounds, size_t n_bounds);

/* Recording. `values` holds one value per label name, in registration order (NULL when the
 * family has none; a NULL value is ""). Wrong use (observe on a counter, a negative counter
 * increment) does nothing. Lock-free once the child exists. */
void cma_metric_add(struct cma_metric *f, const char *const *values, double v);
void cma_metric_inc(struct cma_metric *f, const char *const *values);
/* Gauges; also counters mirroring a count kept elsewhere (which must never decrease). */
void cma_metric_set(struct cma_metric *f, const char *const *values, double v);
void cma_metric_observe(struct cma_metric *f, const char *const *values, double v);

/* A child's current value (counter, gauge) or observation count (histogram); 0 when it does not
 * exist. For tests and collectors. */
double cma_metric_value(struct cma_metric *f, const char *const *values);
/* Label-value tuples refused since start because a family was at CMA_METRICS_MAX_CHILDREN. */
uint64_t cma_metrics_dropped(const struct cma_metrics *m);

/* Appends every family in the text exposition format 0.0.4 to out. CMA_ERR_NOMEM or
 * CMA_ERR_TOO_LARGE (out's ceiling) leave out emptied (cma_buf's rule). */
enum cma_errc cma_metrics_write(struct cma_metrics *m, struct cma_buf *out);

/* The sample value as the exposition writes it: shortest round-trip decimal, "+Inf", "-Inf",
 * "NaN". `out` needs 32 bytes; returns out. */
char *cma_metrics_format_value(double v, char out[32]);

#endif
