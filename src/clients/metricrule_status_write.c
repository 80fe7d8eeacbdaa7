/* metricrule_status_write.c: one merge patch of a MetricRule's status subresource and what its
 * answer means for the caller (metricrule_status_write.h). */
#include "cma/metricrule_status_write.h"

#include <stdbool.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/kube.h"
#include "cma/metricrule_watch.h"
#include "internal.h"

/* Namespaces are DNS labels and MetricRule names DNS subdomains: nothing to escape in a path. */
static bool is_dns_name(const char *s)
{
    if (!s || !s[0] || strlen(s) > 253)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            return false;
    return true;
}

static enum cma_errc answer(long status, const char *path, const struct cma_buf *body,
                            enum cma_metricrule_write *ret, struct cma_err *reterr)
{
    if (status >= 200 && status < 300)
        *ret = CMA_METRICRULE_WRITE_DONE;
    else if (status == 404)
        *ret = CMA_METRICRULE_WRITE_GONE;
    else if (status == 409)
        *ret = CMA_METRICRULE_WRITE_STALE;
    else {
        char msg[256];
        cma_kube_status_message(body->ptr, body->len, msg, sizeof(msg));
        enum cma_errc code =
            status == 429 || status >= 500 ? CMA_ERR_KUBE_UNAVAILABLE : CMA_ERR_KUBE_ERROR;
        return cma_err_set(reterr, code, "PATCH %s: the Kubernetes API answered %ld: %s", path,
                           status, msg[0] ? msg : "(no message)");
    }
    return CMA_OK;
}

enum cma_errc cma_metricrule_status_write(struct cma_kube *k, const char *namespace_,
                                          const char *name, const char *status_json,
                                          enum cma_metricrule_write *ret, struct cma_err *reterr)
{
    if (!is_dns_name(namespace_) || !is_dns_name(name) || !status_json || !status_json[0])
        return cma_err_set(reterr, CMA_ERR_INTERNAL,
                           "MetricRule status write: a bad namespace or name, or no status");
    struct cma_buf path, patch;
    cma_buf_init(&path, 0);
    cma_buf_init(&patch, 0);
    enum cma_errc rc =
        cma_buf_printf(&path, "/apis/%s/%s/namespaces/%s/%s/%s/status", CMA_METRICRULE_GROUP,
                       CMA_METRICRULE_VERSION, namespace_, CMA_METRICRULE_RESOURCE, name);
    if (rc == CMA_OK)
        rc = cma_buf_printf(&patch, "{\"status\":%s}", status_json);
    if (rc != CMA_OK) {
        cma_buf_done(&path);
        cma_buf_done(&patch);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    struct cma_buf body;
    long status = 0;
    rc = cma_kube_request(k, "PATCH", cma_buf_str(&path), patch.ptr, patch.len, &body, &status,
                          reterr);
    if (rc == CMA_OK) {
        rc = answer(status, cma_buf_str(&path), &body, ret, reterr);
        cma_buf_done(&body);
    }
    cma_buf_done(&path);
    cma_buf_done(&patch);
    return rc;
}
