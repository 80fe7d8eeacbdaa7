/* authn.c: delegated authentication (reference §7.1) and the CA snapshot it uses.
 * DESIGN: the trusted CAs and requestheader settings form an immutable snapshot (X509_STOREs plus
 * names), swapped under a mutex with a reference count, so a ConfigMap re-read every 30 s takes
 * effect for the next request without disturbing those in flight. Requests are authenticated in
 * kube's order: requestheader (front-proxy cert verified against the requestheader CA, CN in the
 * allowed names, identity from the X-Remote-* headers), x509 (client CA: user CN, groups O),
 * bearer token (TokenReview, cached for success and failure alike). A presented credential that
 * fails is an error (401); no credential at all is system:anonymous. CA bundles become trust
 * stores through the one TLS-material module (clients/tlsmat.c). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <jansson.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "auth_internal.h"
#include "cma/clock.h"
#include "cma/hash.h"
#include "cma/kube.h"
#include "cma/metrics.h"
#include "cma/server.h"
#include "cma/str.h"
#include "cma/tlsmat.h"

#define CONFIGMAP_PATH                                                                             \
    "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
#define CA_FILE_MAX ((size_t)4 << 20)
#define CACHE_CAP 4096

struct auth_snapshot {
    unsigned refs;
    struct cma_verifier *rh_verifier;     /* NULL = requestheader off */
    struct cma_verifier *client_verifier; /* NULL = x509 off */
    char *rh_pem, *client_pem;
    char **allowed_names, **user_headers, **group_headers, **extra_prefixes;
    size_t n_allowed_names, n_user_headers, n_group_headers, n_extra_prefixes;
};

/* ---- cache ------------------------------------------------------------------------------- */

void cma_auth_cache_init(struct auth_cache *c, size_t cap)
{
    pthread_mutex_init(&c->lock, NULL);
    c->items = NULL;
    c->n = 0;
    c->cap = cap;
}

void cma_auth_cache_done(struct auth_cache *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->items[i].key);
        free(c->items[i].value);
    }
    free(c->items);
    c->items = NULL;
    c->n = 0;
    pthread_mutex_destroy(&c->lock);
}

char *cma_auth_cache_get(struct auth_cache *c, const char *key, int64_t now_ms)
{
    char *out = NULL;
    uint64_t h = cma_hash_str(key, strlen(key));
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n; i++) {
        if (c->items[i].hash == h && strcmp(c->items[i].key, key) == 0) {
            if (c->items[i].expires_ms > now_ms)
                out = cma_strdup(c->items[i].value);
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return out;
}

static void cache_drop(struct auth_cache *c, size_t i)
{
    free(c->items[i].key);
    free(c->items[i].value);
    c->items[i] = c->items[--c->n];
}

void cma_auth_cache_put(struct auth_cache *c, const char *key, const char *value,
                        int64_t expires_ms)
{
    char *k = cma_strdup(key), *v = cma_strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return;
    }
    int64_t now = cma_clock_mono_ms();
    uint64_t h = cma_hash_str(key, strlen(key));
    pthread_mutex_lock(&c->lock);
    for (size_t i = c->n; i-- > 0;)
        if (c->items[i].expires_ms <= now ||
            (c->items[i].hash == h && strcmp(c->items[i].key, key) == 0))
            cache_drop(c, i);
    if (c->n >= c->cap && c->n > 0) {
        size_t oldest = 0;
        for (size_t i = 1; i < c->n; i++)
            if (c->items[i].expires_ms < c->items[oldest].expires_ms)
                oldest = i;
        cache_drop(c, oldest);
    }
    if (c->n == 0 || c->n % 64 == 0) {
        struct auth_cache_entry *grown = realloc(c->items, (c->n + 64) * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&c->lock);
            free(k);
            free(v);
            return;
        }
        c->items = grown;
    }
    c->items[c->n++] =
        (struct auth_cache_entry){.key = k, .value = v, .expires_ms = expires_ms, .hash = h};
    pthread_mutex_unlock(&c->lock);
}

/* ---- users ------------------------------------------------------------------------------- */

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void cma_user_free(struct cma_user *u)
{
    if (!u)
        return;
    free(u->name);
    free(u->uid);
    free_strv(u->groups, u->n_groups);
    for (size_t i = 0; i < u->n_extra; i++) {
        free(u->extra[i].key);
        free_strv(u->extra[i].values, u->extra[i].n_values);
    }
    free(u->extra);
    free(u);
}

static bool strv_push(char ***v, size_t *n, const char *s)
{
    char *d = cma_strdup(s);
    char **grown = d ? realloc(*v, (*n + 1) * sizeof **v) : NULL;
    if (!grown) {
        free(d);
        return false;
    }
    grown[(*n)++] = d;
    *v = grown;
    return true;
}

static bool user_add_extra(struct cma_user *u, const char *key, const char *value)
{
    for (size_t i = 0; i < u->n_extra; i++)
        if (strcmp(u->extra[i].key, key) == 0)
            return strv_push(&u->extra[i].values, &u->extra[i].n_values, value);
    struct cma_user_extra *grown = realloc(u->extra, (u->n_extra + 1) * sizeof *grown);
    if (!grown)
        return false;
    u->extra = grown;
    struct cma_user_extra *e = &u->extra[u->n_extra];
    *e = (struct cma_user_extra){.key = cma_strdup(key)};
    if (!e->key)
        return false;
    u->n_extra++;
    return strv_push(&e->values, &e->n_values, value);
}

static struct cma_user *user_new(const char *name)
{
    struct cma_user *u = calloc(1, sizeof *u);
    if (u && !(u->name = cma_strdup(name))) {
        free(u);
        return NULL;
    }
    return u;
}

enum cma_errc cma_user_add_authenticated(struct cma_user *u)
{
    if (strcmp(u->name, "system:anonymous") == 0)
        return CMA_OK;
    for (size_t i = 0; i < u->n_groups; i++)
        if (strcmp(u->groups[i], "system:authenticated") == 0 ||
            strcmp(u->groups[i], "system:unauthenticated") == 0)
            return CMA_OK;
    return strv_push(&u->groups, &u->n_groups, "system:authenticated") ? CMA_OK : CMA_ERR_NOMEM;
}

/* ---- snapshots --------------------------------------------------------------------------- */

static void snapshot_free(struct auth_snapshot *s)
{
    if (!s)
        return;
    cma_verifier_free(s->rh_verifier);
    cma_verifier_free(s->client_verifier);
    free(s->rh_pem);
    free(s->client_pem);
    free_strv(s->allowed_names, s->n_allowed_names);
    free_strv(s->user_headers, s->n_user_headers);
    free_strv(s->group_headers, s->n_group_headers);
    free_strv(s->extra_prefixes, s->n_extra_prefixes);
    free(s);
}

static struct auth_snapshot *snapshot_get(struct cma_auth *a)
{
    pthread_mutex_lock(&a->lock);
    struct auth_snapshot *s = a->snap;
    if (s)
        s->refs++;
    pthread_mutex_unlock(&a->lock);
    return s;
}

static void snapshot_put(struct cma_auth *a, struct auth_snapshot *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&a->lock);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&a->lock);
    if (last)
        snapshot_free(s);
}

static void snapshot_swap(struct cma_auth *a, struct auth_snapshot *s)
{
    if (!s)
        return;
    s->refs = 1;
    pthread_mutex_lock(&a->lock);
    struct auth_snapshot *old = a->snap;
    a->snap = s;
    pthread_mutex_unlock(&a->lock);
    snapshot_put(a, old);
}

/* PEM bundle → a new X509_STORE (clients/tlsmat.c); NULL with an error when no certificate is
 * in it. */
static X509_STORE *store_from_pem(const char *pem, const char *what, struct cma_err *reterr)
{
    struct cma_err e;
    cma_err_clear(&e);
    X509_STORE *store = cma_tlsmat_ca_store(pem, strlen(pem), NULL, &e);
    if (!store && e.code == CMA_ERR_TLS)
        cma_err_prefix(&e, "%s: ", what);
    if (!store)
        cma_err_copy(reterr, &e);
    return store;
}

/* PEM bundle → a new verifier (verify.c). */
static enum cma_errc verifier_from_pem(const char *pem, const char *what, struct cma_verifier **ret,
                                       struct cma_err *reterr)
{
    X509_STORE *store = store_from_pem(pem, what, reterr);
    if (!store)
        return CMA_ERR_TLS;
    *ret = cma_verifier_new(store);
    return *ret ? CMA_OK : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
}

static bool copy_strv(char **src, size_t n, const char *def, char ***dst, size_t *dn)
{
    if (n == 0)
        return def ? strv_push(dst, dn, def) : true;
    for (size_t i = 0; i < n; i++)
        if (!strv_push(dst, dn, src[i]))
            return false;
    return true;
}

/* JSON array of strings in a ConfigMap value → strings. */
static bool json_strv(const char *text, char ***dst, size_t *dn)
{
    json_t *root = text ? json_loads(text, 0, NULL) : NULL;
    bool ok = json_is_array(root);
    size_t i;
    json_t *v;
    json_array_foreach(root, i, v)
    {
        if (ok && json_is_string(v) && json_string_length(v) > 0)
            ok = strv_push(dst, dn, json_string_value(v));
    }
    json_decref(root);
    return ok;
}

/* Reads a whole PEM file (at most CA_FILE_MAX bytes) into a new string. */
static enum cma_errc read_pem_file(const char *path, size_t max, char **ret, struct cma_err *reterr)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cma_err_set(reterr, CMA_ERR_IO, "%s: %s", path, strerror(errno));
    struct cma_buf b;
    cma_buf_init(&b, max);
    char chunk[4096];
    size_t n;
    enum cma_errc rc = CMA_OK;
    while (rc == CMA_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc = cma_buf_append(&b, chunk, n);
    bool failed = ferror(f);
    fclose(f);
    if (rc == CMA_OK && failed)
        rc = CMA_ERR_IO;
    char *out = rc == CMA_OK ? cma_strdup(cma_buf_str(&b)) : NULL;
    cma_buf_done(&b);
    if (!out)
        return cma_err_set(reterr, rc == CMA_OK ? CMA_ERR_NOMEM : rc, "%s: cannot read it", path);
    *ret = out;
    return CMA_OK;
}

/* Builds a snapshot from the flags and, unless skip_lookup or the flags fix everything, the
 * ConfigMap body cm (may be NULL). */
static enum cma_errc snapshot_build(const struct cma_auth_options *o, json_t *cm,
                                    struct auth_snapshot **ret, struct cma_err *reterr)
{
    struct auth_snapshot *s = calloc(1, sizeof *s);
    if (!s)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    json_t *data = cm ? json_object_get(cm, "data") : NULL;
    enum cma_errc rc = CMA_OK;
    bool ok = true;
    if (o->client_ca_file) {
        rc = read_pem_file(o->client_ca_file, CA_FILE_MAX, &s->client_pem, reterr);
    } else if (json_is_string(json_object_get(data, "client-ca-file"))) {
        ok = (s->client_pem =
                  cma_strdup(json_string_value(json_object_get(data, "client-ca-file"))));
    }
    if (rc == CMA_OK && ok && o->requestheader_client_ca_file) {
        rc = read_pem_file(o->requestheader_client_ca_file, CA_FILE_MAX, &s->rh_pem, reterr);
        ok = ok && copy_strv(o->requestheader_allowed_names, o->n_requestheader_allowed_names, NULL,
                             &s->allowed_names, &s->n_allowed_names);
        ok = ok && copy_strv(o->requestheader_username_headers, o->n_requestheader_username_headers,
                             "X-Remote-User", &s->user_headers, &s->n_user_headers);
        ok = ok && copy_strv(o->requestheader_group_headers, o->n_requestheader_group_headers,
                             "X-Remote-Group", &s->group_headers, &s->n_group_headers);
        ok = ok && copy_strv(o->requestheader_extra_headers_prefix,
                             o->n_requestheader_extra_headers_prefix, "X-Remote-Extra-",
                             &s->extra_prefixes, &s->n_extra_prefixes);
    } else if (rc == CMA_OK && ok &&
               json_is_string(json_object_get(data, "requestheader-client-ca-file"))) {
        ok = (s->rh_pem = cma_strdup(
                  json_string_value(json_object_get(data, "requestheader-client-ca-file"))));
#define CM_STRV(key, field, nfield)                                                                \
    ok = ok && json_strv(json_string_value(json_object_get(data, key)), &s->field, &s->nfield)
        if (json_object_get(data, "requestheader-allowed-names"))
            CM_STRV("requestheader-allowed-names", allowed_names, n_allowed_names);
        if (json_object_get(data, "requestheader-username-headers"))
            CM_STRV("requestheader-username-headers", user_headers, n_user_headers);
        if (json_object_get(data, "requestheader-group-headers"))
            CM_STRV("requestheader-group-headers", group_headers, n_group_headers);
        if (json_object_get(data, "requestheader-extra-headers-prefix"))
            CM_STRV("requestheader-extra-headers-prefix", extra_prefixes, n_extra_prefixes);
#undef CM_STRV
    }
    if (rc == CMA_OK && !ok)
        rc = cma_err_set(reterr, CMA_ERR_CONFIG_VALUE,
                         "ConfigMap kube-system/extension-apiserver-authentication: a "
                         "requestheader-* value is not a JSON array of strings");
    if (rc == CMA_OK && s->client_pem && s->client_pem[0])
        rc = verifier_from_pem(s->client_pem, "client CA", &s->client_verifier, reterr);
    if (rc == CMA_OK && s->rh_pem && s->rh_pem[0])
        rc = verifier_from_pem(s->rh_pem, "requestheader client CA", &s->rh_verifier, reterr);
    if (rc != CMA_OK) {
        snapshot_free(s);
        return rc;
    }
    *ret = s;
    return CMA_OK;
}

static bool needs_lookup(const struct cma_auth_options *o)
{
    return !o->skip_lookup && (!o->client_ca_file || !o->requestheader_client_ca_file);
}

enum cma_errc cma_auth_refresh(struct cma_auth *a, struct cma_err *reterr)
{
    json_t *cm = NULL;
    if (needs_lookup(&a->opts)) {
        if (!a->opts.authn_kube)
            return cma_err_set(reterr, CMA_ERR_INTERNAL, "no Kubernetes client for the lookup");
        struct cma_buf body;
        long status = 0;
        enum cma_errc rc = cma_kube_request(a->opts.authn_kube, "GET", CONFIGMAP_PATH, NULL, 0,
                                            &body, &status, reterr);
        if (rc != CMA_OK)
            return rc;
        if (status == 200)
            cm = json_loadb(body.ptr ? body.ptr : "", body.len, 0, NULL);
        cma_buf_done(&body);
        if (status != 200 || !json_is_object(cm)) {
            json_decref(cm);
            return cma_err_set(reterr, CMA_ERR_KUBE_ERROR,
                               "cannot read ConfigMap kube-system/extension-apiserver-"
                               "authentication: HTTP %ld",
                               status);
        }
    }
    struct auth_snapshot *s = NULL;
    enum cma_errc rc = snapshot_build(&a->opts, cm, &s, reterr);
    json_decref(cm);
    if (rc == CMA_OK)
        snapshot_swap(a, s);
    return rc;
}

static void *refresher_main(void *arg)
{
    struct cma_auth *a = arg;
    int64_t every = a->opts.configmap_refresh_ms > 0 ? a->opts.configmap_refresh_ms : 30000;
    pthread_mutex_lock(&a->stop_lock);
    while (!a->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += every / 1000;
        ts.tv_nsec += (long)(every % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&a->stop_cond, &a->stop_lock, &ts);
        if (a->stopping)
            break;
        pthread_mutex_unlock(&a->stop_lock);
        struct cma_err err;
        cma_err_clear(&err);
        if (cma_auth_refresh(a, &err) != CMA_OK && a->opts.on_event)
            a->opts.on_event(a->opts.on_event_ctx, "authentication config: keeping the current one",
                             &err);
        pthread_mutex_lock(&a->stop_lock);
    }
    pthread_mutex_unlock(&a->stop_lock);
    return NULL;
}

/* ---- self-metrics ---- */

static void register_metrics(struct cma_auth *a, struct cma_metrics *m)
{
    static const char *const authn[] = {"method", "result"},
                             *const authz[] = {"decision", "source"},
                             *const cache[] = {"cache", "result"};
    a->m_authn = cma_metrics_counter(
        m, "custom_metrics_adapter_authentication_attempts_total",
        "Requests authenticated, by the method that decided (requestheader, x509, token, "
        "anonymous) and result (success, failure, error).",
        authn, 2);
    a->m_authz = cma_metrics_counter(
        m, "custom_metrics_adapter_authorization_decisions_total",
        "Authorization decisions by decision (allowed, denied, error) and source "
        "(system_masters, always_allow_paths, subjectaccessreview).",
        authz, 2);
    a->m_cache = cma_metrics_counter(
        m, "custom_metrics_adapter_auth_cache_requests_total",
        "Lookups in the TokenReview and SubjectAccessReview answer caches by result (hit, miss).",
        cache, 2);
}

static void count_authn(struct cma_auth *a, const char *method, const char *result)
{
    cma_metric_inc(a->m_authn, (const char *const[]){method, result});
}

void cma_auth_count_authz(struct cma_auth *a, const char *decision, const char *source)
{
    cma_metric_inc(a->m_authz, (const char *const[]){decision, source});
}

void cma_auth_count_cache(struct cma_auth *a, const char *cache, bool hit)
{
    cma_metric_inc(a->m_cache, (const char *const[]){cache, hit ? "hit" : "miss"});
}

enum cma_errc cma_auth_new(const struct cma_auth_options *o, struct cma_auth **ret,
                           struct cma_err *reterr)
{
    struct cma_auth *a = calloc(1, sizeof *a);
    if (!a)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    a->opts = *o;
    register_metrics(a, o->metrics);
    pthread_mutex_init(&a->lock, NULL);
    pthread_mutex_init(&a->stop_lock, NULL);
    pthread_cond_init(&a->stop_cond, NULL);
    cma_auth_cache_init(&a->token_cache, CACHE_CAP);
    cma_auth_cache_init(&a->sar_cache, CACHE_CAP);
    struct cma_err err;
    cma_err_clear(&err);
    enum cma_errc rc = cma_auth_refresh(a, &err);
    if (rc != CMA_OK && needs_lookup(o) && o->tolerate_lookup_failure) {
        if (o->on_event)
            o->on_event(o->on_event_ctx,
                        "authentication config lookup failed, continuing without it "
                        "(--authentication-tolerate-lookup-failure)",
                        &err);
        struct auth_snapshot *s = NULL;
        rc = snapshot_build(o, NULL, &s, &err);
        if (rc == CMA_OK)
            snapshot_swap(a, s);
    }
    if (rc != CMA_OK) {
        if (reterr)
            *reterr = err;
        cma_auth_free(a);
        return rc;
    }
    if (needs_lookup(o)) {
        if (pthread_create(&a->refresher, NULL, refresher_main, a) != 0) {
            cma_auth_free(a);
            return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot start the auth refresh thread");
        }
        a->refresher_started = true;
    }
    *ret = a;
    return CMA_OK;
}

void cma_auth_free(struct cma_auth *a)
{
    if (!a)
        return;
    if (a->refresher_started) {
        pthread_mutex_lock(&a->stop_lock);
        a->stopping = true;
        pthread_cond_broadcast(&a->stop_cond);
        pthread_mutex_unlock(&a->stop_lock);
        pthread_join(a->refresher, NULL);
    }
    snapshot_put(a, a->snap);
    cma_auth_cache_done(&a->token_cache);
    cma_auth_cache_done(&a->sar_cache);
    pthread_mutex_destroy(&a->lock);
    pthread_mutex_destroy(&a->stop_lock);
    pthread_cond_destroy(&a->stop_cond);
    free(a);
}

char *cma_auth_client_ca_pem(struct cma_auth *a)
{
    struct auth_snapshot *s = snapshot_get(a);
    struct cma_buf b;
    cma_buf_init(&b, 0);
    enum cma_errc rc = cma_buf_appends(&b, "");
    if (s && s->rh_pem && rc == CMA_OK)
        rc = cma_buf_printf(&b, "%s\n", s->rh_pem);
    if (s && s->client_pem && rc == CMA_OK)
        rc = cma_buf_printf(&b, "%s\n", s->client_pem);
    snapshot_put(a, s);
    char *out = rc == CMA_OK ? cma_strdup(cma_buf_str(&b)) : NULL;
    cma_buf_done(&b);
    return out;
}

/* ---- certificates ------------------------------------------------------------------------ */

/* The request's client chain (at most CMA_VERIFY_MAX_CHAIN certificates, as before). */
static struct cma_chain request_chain(const struct cma_request *req)
{
    struct cma_chain c = {.n = 0};
    size_t n = cma_request_peer_chain_len(req);
    for (size_t i = 0; i < n && c.n < CMA_VERIFY_MAX_CHAIN; i++)
        if (cma_request_peer_chain_der(req, i, &c.der[c.n], &c.len[c.n]) == CMA_OK)
            c.n++;
        else
            break;
    return c;
}

/* Subject entries with nid, as UTF-8; calls back for each. */
static bool subject_each(X509 *c, int nid, bool (*fn)(void *ctx, const char *v), void *ctx)
{
    X509_NAME *name = X509_get_subject_name(c);
    int idx = -1;
    while ((idx = X509_NAME_get_index_by_NID(name, nid, idx)) >= 0) {
        ASN1_STRING *data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
        unsigned char *utf8 = NULL;
        int len = ASN1_STRING_to_UTF8(&utf8, data);
        if (len < 0)
            continue;
        char *s = strndup((const char *)utf8, (size_t)len);
        OPENSSL_free(utf8);
        if (!s)
            return false;
        bool ok = fn(ctx, s);
        free(s);
        if (!ok)
            return false;
    }
    return true;
}

static bool take_first(void *ctx, const char *v)
{
    char **dst = ctx;
    if (!*dst)
        *dst = cma_strdup(v);
    return *dst != NULL;
}

static bool add_group(void *ctx, const char *v)
{
    struct cma_user *u = ctx;
    return strv_push(&u->groups, &u->n_groups, v);
}

/* ---- requestheader ----------------------------------------------------------------------- */

/* DESIGN: identity headers are read exactly as k8s.io/apiserver's requestheader authenticator
 * reads them from Go's net/http, whatever the server library left in the values:
 * - values lose leading and trailing spaces and tabs (net/textproto does that to every header);
 * - the user is the first username header (in the configured order) whose first line is not
 *   empty (http.Header.Get: only the first line of a header counts);
 * - groups are every non-empty line of every group header, by header order then arrival;
 * - extras: for each prefix, every header that starts with it (ASCII case-insensitive): key =
 *   the rest of the name lower-cased, then percent-decoded (url.PathUnescape; kept as is when
 *   malformed), values = every line, empty ones included; a header matching two prefixes counts
 *   under both. */

/* A header value as Go sees it: [*start, *start + *len) without leading/trailing SP and HTAB. */
static void ows_trim(const char *v, const char **start, size_t *len)
{
    size_t n = strlen(v);
    while (n > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    *start = v;
    *len = n;
}

static char *trimmed_dup(const char *v)
{
    const char *start;
    size_t len;
    ows_trim(v, &start, &len);
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, start, len);
        d[len] = '\0';
    }
    return d;
}

static bool has_prefix_ci(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

/* url.PathUnescape(strings.ToLower(raw)), or the lower-cased raw key when an escape is bad. */
static char *extra_key(const char *raw)
{
    size_t n = strlen(raw);
    char *lower = malloc(n + 1), *key = malloc(n + 1);
    if (!lower || !key) {
        free(lower);
        free(key);
        return NULL;
    }
    for (size_t i = 0; i <= n; i++)
        lower[i] = (char)tolower((unsigned char)raw[i]);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (lower[i] != '%') {
            key[k++] = lower[i];
            continue;
        }
        int c = cma_percent_escape(lower, n, i);
        if (c < 0) {
            free(key);
            return lower;
        }
        key[k++] = (char)c;
        i += 2;
    }
    key[k] = '\0';
    free(lower);
    return key;
}

struct rh_scan {
    const char *name;   /* header name (user, group) or prefix (extra) */
    struct cma_user *u; /* where groups and extras go */
    char *first;        /* user: the header's first line, trimmed */
    bool found, nomem;
};

static bool rh_first_line(void *opaque, const char *name, const char *value)
{
    struct rh_scan *c = opaque;
    if (strcasecmp(name, c->name) != 0)
        return true;
    c->found = true;
    c->first = trimmed_dup(value);
    c->nomem = !c->first;
    return false;
}

static bool rh_group_lines(void *opaque, const char *name, const char *value)
{
    struct rh_scan *c = opaque;
    if (strcasecmp(name, c->name) != 0)
        return true;
    char *v = trimmed_dup(value);
    if (v && v[0] && !strv_push(&c->u->groups, &c->u->n_groups, v))
        c->nomem = true;
    c->nomem |= !v;
    free(v);
    return !c->nomem;
}

static bool rh_extra_lines(void *opaque, const char *name, const char *value)
{
    struct rh_scan *c = opaque;
    if (!has_prefix_ci(name, c->name))
        return true;
    char *key = extra_key(name + strlen(c->name));
    char *v = key ? trimmed_dup(value) : NULL;
    if (!v || !user_add_extra(c->u, key, v))
        c->nomem = true;
    free(key);
    free(v);
    return !c->nomem;
}

enum cma_errc cma_auth_rh_identity(const struct cma_rh_headers *h, cma_auth_headers_each_fn each,
                                   void *src, struct cma_user **ret)
{
    *ret = NULL;
    char *user = NULL;
    for (size_t i = 0; i < h->n_user && !user; i++) {
        struct rh_scan c = {.name = h->user[i]};
        each(src, rh_first_line, &c);
        if (c.nomem)
            return CMA_ERR_NOMEM;
        if (c.first && c.first[0])
            user = c.first;
        else
            free(c.first);
    }
    if (!user)
        return CMA_OK;
    struct cma_user *u = calloc(1, sizeof(*u));
    bool nomem = !u;
    for (size_t i = 0; i < h->n_group && !nomem; i++) {
        struct rh_scan c = {.name = h->group[i], .u = u};
        each(src, rh_group_lines, &c);
        nomem = c.nomem;
    }
    for (size_t i = 0; i < h->n_extra && !nomem; i++) {
        struct rh_scan c = {.name = h->extra[i], .u = u};
        each(src, rh_extra_lines, &c);
        nomem = c.nomem;
    }
    if (nomem) {
        free(user);
        cma_user_free(u);
        return CMA_ERR_NOMEM;
    }
    u->name = user;
    *ret = u;
    return CMA_OK;
}

static void request_headers_each(void *src, bool (*fn)(void *, const char *, const char *),
                                 void *ctx)
{
    cma_request_headers_each(src, fn, ctx);
}

static bool name_allowed(const struct auth_snapshot *s, X509 *leaf)
{
    if (s->n_allowed_names == 0)
        return true;
    char *cn = NULL;
    subject_each(leaf, NID_commonName, take_first, &cn);
    bool ok = false;
    for (size_t i = 0; cn && i < s->n_allowed_names && !ok; i++)
        ok = strcmp(cn, s->allowed_names[i]) == 0;
    free(cn);
    return ok;
}

/* 1 = authenticated (*ret), 0 = not handled, -1 = error (reterr set). */
static int auth_requestheader(const struct auth_snapshot *s, const struct cma_request *req,
                              struct cma_user **ret, struct cma_err *reterr)
{
    if (!s->rh_verifier || cma_request_peer_chain_len(req) == 0)
        return 0;
    struct cma_chain chain = request_chain(req);
    X509 *leaf = cma_verifier_check(s->rh_verifier, &chain, cma_clock_wall_ms());
    if (!leaf) {
        /* kube: a cert that does not verify against the requestheader CA is an error for this
         * authenticator; the x509 authenticator may still accept it (union). */
        cma_err_set(reterr, CMA_ERR_UNAUTHORIZED,
                    "requestheader: the client certificate does not verify against the "
                    "requestheader client CA");
        return -1;
    }
    bool allowed = name_allowed(s, leaf);
    X509_free(leaf);
    if (!allowed) {
        cma_err_set(reterr, CMA_ERR_UNAUTHORIZED,
                    "requestheader: the client certificate's CN is not in the allowed names");
        return -1;
    }
    struct cma_rh_headers h = {
        .user = (const char *const *)s->user_headers,
        .n_user = s->n_user_headers,
        .group = (const char *const *)s->group_headers,
        .n_group = s->n_group_headers,
        .extra = (const char *const *)s->extra_prefixes,
        .n_extra = s->n_extra_prefixes,
    };
    struct cma_user *u = NULL;
    if (cma_auth_rh_identity(&h, request_headers_each, (void *)req, &u) != CMA_OK) {
        cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        return -1;
    }
    if (!u)
        return 0;
    *ret = u;
    return 1;
}

static int auth_x509(const struct auth_snapshot *s, const struct cma_request *req,
                     struct cma_user **ret, struct cma_err *reterr)
{
    if (!s->client_verifier || cma_request_peer_chain_len(req) == 0)
        return 0;
    struct cma_chain chain = request_chain(req);
    X509 *leaf = cma_verifier_check(s->client_verifier, &chain, cma_clock_wall_ms());
    if (!leaf) {
        cma_err_set(reterr, CMA_ERR_UNAUTHORIZED,
                    "x509: the client certificate does not verify against the client CA");
        return -1;
    }
    char *cn = NULL;
    subject_each(leaf, NID_commonName, take_first, &cn);
    struct cma_user *u = cn ? user_new(cn) : NULL;
    free(cn);
    bool ok = u && subject_each(leaf, NID_organizationName, add_group, u);
    X509_free(leaf);
    if (!ok) {
        cma_user_free(u);
        cma_err_set(reterr, CMA_ERR_UNAUTHORIZED, "x509: the client certificate has no CN");
        return -1;
    }
    *ret = u;
    return 1;
}

/* ---- bearer tokens ----------------------------------------------------------------------- */

enum cma_errc cma_auth_parse_token_review(const char *body, size_t len, struct cma_user **ret,
                                          struct cma_err *reterr)
{
    json_t *root = json_loadb(body ? body : "", body ? len : 0, 0, NULL);
    json_t *status = json_object_get(root, "status");
    json_t *user = json_object_get(status, "user");
    const char *name = json_string_value(json_object_get(user, "username"));
    if (!json_is_true(json_object_get(status, "authenticated")) || !name || !*name) {
        const char *why = json_string_value(json_object_get(status, "error"));
        cma_err_set(reterr, CMA_ERR_UNAUTHORIZED, "invalid bearer token%s%s", why ? ": " : "",
                    why ? why : "");
        json_decref(root);
        return CMA_ERR_UNAUTHORIZED;
    }
    struct cma_user *u = user_new(name);
    bool ok = u != NULL;
    const char *uid = json_string_value(json_object_get(user, "uid"));
    if (ok && uid && *uid)
        ok = (u->uid = cma_strdup(uid)) != NULL;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(user, "groups"), i, v)
    {
        if (ok && json_is_string(v))
            ok = strv_push(&u->groups, &u->n_groups, json_string_value(v));
    }
    const char *key;
    json_t *vals;
    json_object_foreach(json_object_get(user, "extra"), key, vals)
    {
        json_array_foreach(vals, i, v)
        {
            if (ok && json_is_string(v))
                ok = user_add_extra(u, key, json_string_value(v));
        }
    }
    json_decref(root);
    if (!ok) {
        cma_user_free(u);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    *ret = u;
    return CMA_OK;
}

static const char *bearer_token(const struct cma_request *req)
{
    const char *h = cma_request_header(req, "Authorization");
    if (!h)
        return NULL;
    while (*h == ' ')
        h++;
    if (strncasecmp(h, "bearer ", 7) != 0)
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return *h ? h : NULL;
}

/* The TokenReview answer for token (a webhook call), cached; NULL with reterr set on failure. */
static char *token_review(struct cma_auth *a, const char *token, struct cma_err *reterr)
{
    json_t *tr = json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", "authentication.k8s.io/v1", "kind",
                           "TokenReview", "spec", "token", token);
    char *body = tr ? json_dumps(tr, JSON_COMPACT) : NULL;
    json_decref(tr);
    if (!body) {
        cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        return NULL;
    }
    struct cma_buf resp;
    cma_buf_init(&resp, 0);
    long status = 0;
    enum cma_errc rc =
        cma_kube_request(a->opts.authn_kube, "POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                         body, strlen(body), &resp, &status, reterr);
    free(body);
    if (rc != CMA_OK)
        return NULL;
    if (status != 200 && status != 201) {
        cma_buf_done(&resp);
        cma_err_set(reterr, CMA_ERR_UNAUTHORIZED, "TokenReview answered HTTP %ld", status);
        return NULL;
    }
    char *answer = cma_strdup(cma_buf_str(&resp));
    cma_buf_done(&resp);
    if (!answer) {
        cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        return NULL;
    }
    cma_auth_cache_put(&a->token_cache, token, answer,
                       cma_clock_mono_ms() + a->opts.token_cache_ttl_ms);
    return answer;
}

/* auth_token's answer when only the cache may be asked and it has no answer. */
#define AUTH_WOULD_BLOCK (-2)

/* 1 = authenticated (*ret), 0 = no bearer token, -1 = error (reterr set), AUTH_WOULD_BLOCK =
 * the TokenReview answer is not cached and wait is CMA_AUTH_MEMORY_ONLY (nothing counted).
 * *cache_hit gets the cache lookup's result for the metrics. */
static int auth_token(struct cma_auth *a, const struct cma_request *req, enum cma_auth_wait wait,
                      signed char *cache_hit, struct cma_user **ret, struct cma_err *reterr)
{
    const char *token = bearer_token(req);
    if (!token)
        return 0;
    if (!a->opts.authn_kube) {
        cma_err_set(reterr, CMA_ERR_UNAUTHORIZED, "bearer tokens are not accepted here");
        return -1;
    }
    char *cached = cma_auth_cache_get(&a->token_cache, token, cma_clock_mono_ms());
    if (!cached && wait == CMA_AUTH_MEMORY_ONLY) {
        cma_err_set(reterr, CMA_ERR_WOULD_BLOCK, "the bearer token's TokenReview is not cached");
        return AUTH_WOULD_BLOCK;
    }
    *cache_hit = cached != NULL;
    if (!cached && !(cached = token_review(a, token, reterr)))
        return -1;
    enum cma_errc rc = cma_auth_parse_token_review(cached, strlen(cached), ret, reterr);
    free(cached);
    return rc == CMA_OK ? 1 : -1;
}

/* One authenticator's verdict r (see auth_requestheader) into the running outcome: the method
 * that succeeded, or the first failure. */
struct authn_run {
    int r;
    bool errored;
    struct cma_err first;
    const char *method, *failed;
};

static void authn_note(struct authn_run *run, int r, const char *method, const struct cma_err *e)
{
    run->r = r;
    if (r > 0)
        run->method = method;
    if (r < 0 && !run->errored) {
        run->errored = true;
        run->first = *e;
        run->failed = method;
    }
}

/* The certificate authenticators (CPU only): requestheader, then x509. */
static void authn_certs(struct cma_auth *a, const struct cma_request *req, struct authn_run *run,
                        struct cma_user **u)
{
    struct auth_snapshot *s = snapshot_get(a);
    struct cma_err e;
    if (s) {
        cma_err_clear(&e);
        authn_note(run, auth_requestheader(s, req, u, &e), "requestheader", &e);
        if (run->r <= 0) {
            cma_err_clear(&e);
            authn_note(run, auth_x509(s, req, u, &e), "x509", &e);
        }
    }
    snapshot_put(a, s);
}

/* The authenticated (or anonymous) user's groups, as kube's filters add them. */
static enum cma_errc authn_finish(int r, struct cma_user **u, struct cma_err *reterr)
{
    if (r > 0 && !*u)
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "an authenticator accepted without a user");
    if (r <= 0) {
        *u = user_new("system:anonymous");
        if (!*u || !strv_push(&(*u)->groups, &(*u)->n_groups, "system:unauthenticated")) {
            cma_user_free(*u);
            *u = NULL;
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
    } else if (cma_user_add_authenticated(*u) != CMA_OK) {
        cma_user_free(*u);
        *u = NULL;
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    return CMA_OK;
}

enum cma_errc cma_auth_authenticate_wait(struct cma_auth *a, const struct cma_request *req,
                                         enum cma_auth_wait wait, struct cma_authn_tally *tally,
                                         struct cma_user **ret, struct cma_err *reterr)
{
    *tally = (struct cma_authn_tally){.token_cache = -1};
    struct authn_run run = {.method = "anonymous"};
    cma_err_clear(&run.first);
    struct cma_user *u = NULL;
    authn_certs(a, req, &run, &u);
    if (run.r <= 0) {
        struct cma_err e;
        cma_err_clear(&e);
        int r = auth_token(a, req, wait, &tally->token_cache, &u, &e);
        if (r == AUTH_WOULD_BLOCK) {
            if (reterr)
                *reterr = e;
            return CMA_ERR_WOULD_BLOCK;
        }
        authn_note(&run, r, "token", &e);
    }
    if (run.r <= 0 && run.errored) {
        if (reterr)
            *reterr = run.first;
        bool nomem = run.first.code == CMA_ERR_NOMEM;
        *tally =
            (struct cma_authn_tally){run.failed, nomem ? "error" : "failure", tally->token_cache};
        return nomem ? CMA_ERR_NOMEM : CMA_ERR_UNAUTHORIZED;
    }
    tally->method = run.method;
    tally->result = "success";
    enum cma_errc rc = authn_finish(run.r, &u, reterr);
    if (rc == CMA_OK)
        *ret = u;
    return rc;
}

void cma_auth_count_authn(struct cma_auth *a, const struct cma_authn_tally *tally)
{
    if (tally->token_cache >= 0)
        cma_auth_count_cache(a, "tokenreview", tally->token_cache > 0);
    if (tally->method)
        count_authn(a, tally->method, tally->result);
}

enum cma_errc cma_auth_authenticate(struct cma_auth *a, const struct cma_request *req,
                                    struct cma_user **ret, struct cma_err *reterr)
{
    struct cma_authn_tally tally;
    enum cma_errc rc = cma_auth_authenticate_wait(a, req, CMA_AUTH_MAY_BLOCK, &tally, ret, reterr);
    cma_auth_count_authn(a, &tally);
    return rc;
}
