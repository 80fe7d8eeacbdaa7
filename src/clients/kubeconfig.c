/* kubeconfig.c: where the Kubernetes API is and how to authenticate, from a kubeconfig file
 * (read with the project's YAML tree, yamldoc) or from the in-cluster environment, as plain
 * data (struct cma_kube_conn) for kube.c.
 *
 * DESIGN: follows client-go's clientcmd for the subset we support: current-context → context
 * (cluster, user) → cluster (server, certificate-authority[-data], insecure-skip-tls-verify,
 * tls-server-name) and user (client-certificate[-data], client-key[-data], token, tokenFile,
 * username, password). *-data wins over the file form; tokenFile wins over token (and is re-read
 * when it changes, by credentials.c). Relative paths resolve against the kubeconfig's directory.
 * exec and auth-provider users are refused with a clear message rather than silently sent
 * anonymous. Errors carry the position of the offending node. Pure functions of their inputs; no
 * state. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cma/buf.h"
#include "cma/str.h"
#include "cma/yamldoc.h"
#include "internal.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define TOKEN_FILE_MAX ((size_t)64 << 10)

void cma_kube_conn_done(struct cma_kube_conn *c)
{
    if (!c)
        return;
    free(c->server);
    free(c->ca_file);
    free(c->ca_data);
    free(c->cert_file);
    free(c->cert_data);
    free(c->key_file);
    free(c->key_data);
    free(c->tls_server_name);
    free(c->token);
    free(c->token_file);
    free(c->username);
    free(c->password);
    free(c->source);
    memset(c, 0, sizeof(*c));
}

/* ---- base64 ------------------------------------------------------------------------------ */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

bool cma_clients_base64_decode(const char *s, size_t len, unsigned char **ret, size_t *ret_len,
                               bool *ret_nomem)
{
    if (ret_nomem)
        *ret_nomem = false;
    unsigned char *out = malloc(len / 4 * 3 + 3);
    if (!out) {
        if (ret_nomem)
            *ret_nomem = true;
        return false;
    }
    size_t o = 0, pad = 0;
    unsigned acc = 0, bits = 0, n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int v = b64_value(c);
        if (v < 0 || pad > 0)
            goto bad; /* bad character, or data after padding */
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        n++;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    /* n % 4 == 1 cannot encode a byte; padding, if any, must complete the last quantum; the
     * leftover bits must be zero (canonical encoding). */
    if (n % 4 == 1 || (pad > 0 && (n + pad) % 4 != 0) || pad > 2 || acc != 0)
        goto bad;
    *ret = out;
    *ret_len = o;
    return true;
bad:
    free(out);
    return false;
}

/* ---- YAML helpers ------------------------------------------------------------------------ */

static enum cma_errc at_node(struct cma_err *reterr, enum cma_errc code,
                             const struct cma_ynode *node, const char *fallback_file,
                             const char *msg)
{
    if (node)
        return cma_err_set_at(reterr, code, node->file, node->line, node->column, "%s", msg);
    return cma_err_set_at(reterr, code, fallback_file, 0, 0, "%s", msg);
}

/* A scalar string at map[key]; NULL when absent or null. Errors when it is not a scalar. */
static enum cma_errc get_string(const struct cma_ynode *map, const char *key, const char *file,
                                const char **ret, struct cma_err *reterr)
{
    *ret = NULL;
    const struct cma_ynode *n = cma_ynode_get(map, key);
    if (!n)
        return CMA_OK;
    if (n->kind != CMA_YNODE_SCALAR) {
        char msg[160];
        snprintf(msg, sizeof(msg), "kubeconfig key \"%s\" must be a string", key);
        return at_node(reterr, CMA_ERR_CONFIG_VALUE, n, file, msg);
    }
    if (n->is_null && n->style == CMA_YSTYLE_PLAIN)
        return CMA_OK;
    *ret = n->scalar;
    return CMA_OK;
}

/* The `inner` mapping of the entry named `name` in the list root[list]. */
static enum cma_errc find_named(const struct cma_ynode *root, const char *list, const char *name,
                                const char *inner, const char *file, const struct cma_ynode *near,
                                const struct cma_ynode **ret, struct cma_err *reterr)
{
    const struct cma_ynode *seq = cma_ynode_get(root, list);
    char msg[300];
    if (seq && seq->kind == CMA_YNODE_SEQUENCE) {
        for (size_t i = 0; i < seq->n_items; i++) {
            const struct cma_ynode *item = seq->items[i];
            const char *item_name = NULL;
            if (item->kind != CMA_YNODE_MAPPING)
                continue;
            enum cma_errc rc = get_string(item, "name", file, &item_name, reterr);
            if (rc != CMA_OK)
                return rc;
            if (!cma_str_eq(item_name, name))
                continue;
            const struct cma_ynode *in = cma_ynode_get(item, inner);
            if (!in || in->kind != CMA_YNODE_MAPPING) {
                snprintf(msg, sizeof(msg), "kubeconfig %s \"%s\" has no %s mapping", list, name,
                         inner);
                return at_node(reterr, CMA_ERR_CONFIG_VALUE, in ? in : item, file, msg);
            }
            *ret = in;
            return CMA_OK;
        }
    }
    snprintf(msg, sizeof(msg), "kubeconfig has no entry \"%s\" in %s", name, list);
    return at_node(reterr, CMA_ERR_CONFIG_VALUE, near, file, msg);
}

/* Joins a relative path to the kubeconfig's directory. */
static enum cma_errc resolve_path(const char *kubeconfig, const char *p, char **ret)
{
    const char *slash = strrchr(kubeconfig, '/');
    struct cma_buf b;
    cma_buf_init(&b, 0);
    enum cma_errc rc =
        (p[0] == '/' || !slash)
            ? cma_buf_appends(&b, p)
            : cma_buf_printf(&b, "%.*s/%s", (int)(slash - kubeconfig), kubeconfig, p);
    if (rc != CMA_OK)
        return rc;
    *ret = cma_buf_take(&b);
    return *ret ? CMA_OK : CMA_ERR_NOMEM;
}

/* Fills *file / *data from `key` and `key-data`; data wins, as in client-go. */
static enum cma_errc get_file_or_data(const struct cma_ynode *map, const char *key,
                                      const char *path, char **file, unsigned char **data,
                                      size_t *data_len, struct cma_err *reterr)
{
    char data_key[64];
    snprintf(data_key, sizeof(data_key), "%s-data", key);
    const char *f = NULL, *d = NULL;
    enum cma_errc rc = get_string(map, key, path, &f, reterr);
    if (rc == CMA_OK)
        rc = get_string(map, data_key, path, &d, reterr);
    if (rc != CMA_OK)
        return rc;
    if (d && d[0]) {
        bool nomem = false;
        if (!cma_clients_base64_decode(d, strlen(d), data, data_len, &nomem)) {
            if (nomem)
                return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
            char msg[128];
            snprintf(msg, sizeof(msg), "kubeconfig %s is not valid base64", data_key);
            return at_node(reterr, CMA_ERR_CONFIG_VALUE, cma_ynode_get(map, data_key), path, msg);
        }
        return CMA_OK;
    }
    if (f && f[0] && resolve_path(path, f, file) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    return CMA_OK;
}

static enum cma_errc dup_into(const char *s, char **dst, struct cma_err *reterr)
{
    if (!s || !s[0])
        return CMA_OK;
    *dst = cma_strdup(s);
    return *dst ? CMA_OK : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
}

static enum cma_errc read_cluster(const struct cma_ynode *cluster, const char *path,
                                  struct cma_kube_conn *c, struct cma_err *reterr)
{
    const char *server = NULL, *tls_name = NULL;
    enum cma_errc rc = get_string(cluster, "server", path, &server, reterr);
    if (rc != CMA_OK)
        return rc;
    if (!server || !server[0])
        return at_node(reterr, CMA_ERR_CONFIG_VALUE, cluster, path,
                       "kubeconfig cluster has no server");
    rc = dup_into(server, &c->server, reterr);
    if (rc == CMA_OK)
        rc = get_file_or_data(cluster, "certificate-authority", path, &c->ca_file, &c->ca_data,
                              &c->ca_data_len, reterr);
    if (rc == CMA_OK)
        rc = get_string(cluster, "tls-server-name", path, &tls_name, reterr);
    if (rc == CMA_OK)
        rc = dup_into(tls_name, &c->tls_server_name, reterr);
    if (rc != CMA_OK)
        return rc;
    const struct cma_ynode *insecure = cma_ynode_get(cluster, "insecure-skip-tls-verify");
    if (insecure && !(insecure->kind == CMA_YNODE_SCALAR &&
                      cma_ynode_as_bool(insecure, &c->insecure_skip_verify)))
        return at_node(reterr, CMA_ERR_CONFIG_VALUE, insecure, path,
                       "kubeconfig insecure-skip-tls-verify must be true or false");
    return CMA_OK;
}

static enum cma_errc read_user(const struct cma_ynode *user, const char *path,
                               struct cma_kube_conn *c, struct cma_err *reterr)
{
    static const char *const unsupported[] = {"exec", "auth-provider"};
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        const struct cma_ynode *n = cma_ynode_get(user, unsupported[i]);
        if (n && !(n->kind == CMA_YNODE_SCALAR && n->is_null)) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "kubeconfig user uses %s credentials, which are not supported; use a "
                     "token, tokenFile or client certificate",
                     unsupported[i]);
            return at_node(reterr, CMA_ERR_CONFIG_VALUE, n, path, msg);
        }
    }
    const char *token = NULL, *token_file = NULL, *username = NULL, *password = NULL;
    enum cma_errc rc = get_file_or_data(user, "client-certificate", path, &c->cert_file,
                                        &c->cert_data, &c->cert_data_len, reterr);
    if (rc == CMA_OK)
        rc = get_file_or_data(user, "client-key", path, &c->key_file, &c->key_data,
                              &c->key_data_len, reterr);
    if (rc == CMA_OK)
        rc = get_string(user, "token", path, &token, reterr);
    if (rc == CMA_OK)
        rc = get_string(user, "tokenFile", path, &token_file, reterr);
    if (rc == CMA_OK)
        rc = get_string(user, "username", path, &username, reterr);
    if (rc == CMA_OK)
        rc = get_string(user, "password", path, &password, reterr);
    if (rc != CMA_OK)
        return rc;
    if (token_file && token_file[0]) {
        if (resolve_path(path, token_file, &c->token_file) != CMA_OK)
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    } else {
        rc = dup_into(token, &c->token, reterr);
    }
    if (rc == CMA_OK)
        rc = dup_into(username, &c->username, reterr);
    if (rc == CMA_OK && username && username[0])
        rc = (c->password = cma_strdup(password ? password : ""))
                 ? CMA_OK
                 : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    bool has_cert = c->cert_file || c->cert_data, has_key = c->key_file || c->key_data;
    if (rc == CMA_OK && has_cert != has_key)
        return at_node(reterr, CMA_ERR_CONFIG_VALUE, user, path,
                       "kubeconfig user has a client certificate without a key or the reverse");
    return rc;
}

static enum cma_errc from_tree(const char *path, const struct cma_ynode *root,
                               struct cma_kube_conn *c, struct cma_err *reterr)
{
    if (!root || root->kind != CMA_YNODE_MAPPING)
        return at_node(reterr, CMA_ERR_CONFIG_VALUE, root, path, "kubeconfig is not a mapping");
    const char *current = NULL, *cluster_name = NULL, *user_name = NULL;
    enum cma_errc rc = get_string(root, "current-context", path, &current, reterr);
    if (rc != CMA_OK)
        return rc;
    if (!current || !current[0])
        return at_node(reterr, CMA_ERR_CONFIG_VALUE, root, path,
                       "kubeconfig has no current-context");
    const struct cma_ynode *ctx = NULL, *cluster = NULL, *user = NULL;
    rc = find_named(root, "contexts", current, "context", path,
                    cma_ynode_get(root, "current-context"), &ctx, reterr);
    if (rc == CMA_OK)
        rc = get_string(ctx, "cluster", path, &cluster_name, reterr);
    if (rc == CMA_OK)
        rc = get_string(ctx, "user", path, &user_name, reterr);
    if (rc != CMA_OK)
        return rc;
    if (!cluster_name || !cluster_name[0])
        return at_node(reterr, CMA_ERR_CONFIG_VALUE, ctx, path,
                       "kubeconfig context has no cluster");
    rc = find_named(root, "clusters", cluster_name, "cluster", path, cma_ynode_get(ctx, "cluster"),
                    &cluster, reterr);
    if (rc == CMA_OK)
        rc = read_cluster(cluster, path, c, reterr);
    if (rc != CMA_OK || !user_name || !user_name[0])
        return rc;
    rc = find_named(root, "users", user_name, "user", path, cma_ynode_get(ctx, "user"), &user,
                    reterr);
    if (rc == CMA_OK)
        rc = read_user(user, path, c, reterr);
    return rc;
}

static enum cma_errc set_source(struct cma_kube_conn *c, const char *path, struct cma_err *reterr)
{
    struct cma_buf b;
    cma_buf_init(&b, 0);
    if (cma_buf_printf(&b, "kubeconfig %s", path) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    c->source = cma_buf_take(&b);
    return c->source ? CMA_OK : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
}

enum cma_errc cma_kubeconfig_parse(const char *path, const char *text, size_t len,
                                   struct cma_kube_conn *ret, struct cma_err *reterr)
{
    memset(ret, 0, sizeof(*ret));
    struct cma_ydoc *doc = NULL;
    enum cma_errc rc = cma_ydoc_parse(path, text, len, &doc, reterr);
    if (rc != CMA_OK)
        return rc;
    rc = from_tree(path, cma_ydoc_root(doc), ret, reterr);
    cma_ydoc_free(doc);
    if (rc == CMA_OK)
        rc = set_source(ret, path, reterr);
    if (rc != CMA_OK)
        cma_kube_conn_done(ret);
    return rc;
}

enum cma_errc cma_kubeconfig_load(const char *path, struct cma_kube_conn *ret,
                                  struct cma_err *reterr)
{
    memset(ret, 0, sizeof(*ret));
    struct cma_ydoc *doc = NULL;
    enum cma_errc rc = cma_ydoc_load_file(path, &doc, reterr);
    if (rc != CMA_OK)
        return rc;
    rc = from_tree(path, cma_ydoc_root(doc), ret, reterr);
    cma_ydoc_free(doc);
    if (rc == CMA_OK)
        rc = set_source(ret, path, reterr);
    if (rc != CMA_OK)
        cma_kube_conn_done(ret);
    return rc;
}

/* Takes the token path and, when something exists at it, the ca.crt path (a directory or a
 * garbage file there is then refused by credentials.c, not silently skipped). */
static enum cma_errc sa_files(struct cma_kube_conn *c, struct cma_buf *token_file,
                              struct cma_buf *ca_file, struct cma_err *reterr)
{
    struct stat st;
    c->in_cluster = true;
    c->source = cma_strdup("in-cluster service account");
    c->token_file = cma_buf_take(token_file);
    bool want_ca = stat(cma_buf_str(ca_file), &st) == 0 || errno != ENOENT;
    if (want_ca)
        c->ca_file = cma_buf_take(ca_file);
    if (!c->source || !c->token_file || (want_ca && !c->ca_file)) {
        cma_kube_conn_done(c);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    return CMA_OK;
}

enum cma_errc cma_kubeconfig_service_account(const char *sa_dir, struct cma_kube_conn *ret,
                                             struct cma_err *reterr)
{
    memset(ret, 0, sizeof(*ret));
    if (!sa_dir)
        sa_dir = SA_DIR;
    struct cma_buf token_file, ca_file;
    cma_buf_init(&token_file, 0);
    cma_buf_init(&ca_file, 0);
    enum cma_errc rc = cma_buf_printf(&token_file, "%s/token", sa_dir);
    if (rc == CMA_OK)
        rc = cma_buf_printf(&ca_file, "%s/ca.crt", sa_dir);
    if (rc == CMA_OK)
        rc = sa_files(ret, &token_file, &ca_file, reterr);
    else
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    cma_buf_done(&token_file);
    cma_buf_done(&ca_file);
    return rc;
}

enum cma_errc cma_kubeconfig_in_cluster(const char *sa_dir, struct cma_kube_conn *ret,
                                        struct cma_err *reterr)
{
    memset(ret, 0, sizeof(*ret));
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !host[0] || !port || !port[0])
        return cma_err_set(reterr, CMA_ERR_FLAG,
                           "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and "
                           "KUBERNETES_SERVICE_PORT must be defined (or pass "
                           "--lister-kubeconfig)");
    if (!sa_dir)
        sa_dir = SA_DIR;
    struct cma_buf server, token_file, ca_file;
    cma_buf_init(&server, 0);
    cma_buf_init(&token_file, 0);
    cma_buf_init(&ca_file, 0);
    bool v6 = strchr(host, ':') != NULL;
    enum cma_errc rc =
        cma_buf_printf(&server, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
    if (rc == CMA_OK)
        rc = cma_buf_printf(&token_file, "%s/token", sa_dir);
    if (rc == CMA_OK)
        rc = cma_buf_printf(&ca_file, "%s/ca.crt", sa_dir);
    if (rc != CMA_OK) {
        rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        goto out;
    }
    /* The token must be readable now (as client-go's InClusterConfig checks). */
    char *token = NULL;
    struct cma_err read_err;
    cma_err_clear(&read_err);
    rc = cma_clients_read_file(cma_buf_str(&token_file), TOKEN_FILE_MAX, &token, NULL, &read_err);
    free(token);
    if (rc != CMA_OK) {
        rc = cma_err_set(reterr, rc == CMA_ERR_NOMEM ? rc : CMA_ERR_FLAG,
                         "in-cluster service-account token: %s", read_err.msg);
        goto out;
    }
    ret->server = cma_buf_take(&server);
    rc = ret->server ? sa_files(ret, &token_file, &ca_file, reterr)
                     : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
out:
    cma_buf_done(&server);
    cma_buf_done(&token_file);
    cma_buf_done(&ca_file);
    return rc;
}

/* ---- credentials ------------------------------------------------------------------------- */

static void label_item(char *out, size_t out_len, const struct cma_kube_conn *c, const char *field)
{
    snprintf(out, out_len, "%s %s", c->source ? c->source : "kubeconfig", field);
}

void cma_kube_conn_cred_spec(const struct cma_kube_conn *c, struct cma_kube_conn_labels *l,
                             struct cma_cred_spec *ret)
{
    memset(ret, 0, sizeof(*ret));
    bool sa = c->in_cluster;
    label_item(l->ca, sizeof(l->ca), c,
               sa           ? "ca.crt"
               : c->ca_data ? "certificate-authority-data"
                            : "certificate-authority");
    label_item(l->cert, sizeof(l->cert), c,
               c->cert_data ? "client-certificate-data" : "client-certificate");
    label_item(l->key, sizeof(l->key), c, c->key_data ? "client-key-data" : "client-key");
    label_item(l->token, sizeof(l->token), c, sa ? "token" : c->token_file ? "tokenFile" : "token");
    label_item(l->password, sizeof(l->password), c, "password");
    ret->ca =
        (struct cma_cred_item){l->ca, c->ca_data ? NULL : c->ca_file, c->ca_data, c->ca_data_len};
    ret->cert = (struct cma_cred_item){l->cert, c->cert_data ? NULL : c->cert_file, c->cert_data,
                                       c->cert_data_len};
    ret->key = (struct cma_cred_item){l->key, c->key_data ? NULL : c->key_file, c->key_data,
                                      c->key_data_len};
    ret->token = (struct cma_cred_item){l->token, c->token_file,
                                        c->token_file ? NULL : (const unsigned char *)c->token,
                                        c->token && !c->token_file ? strlen(c->token) : 0};
    ret->username = c->username;
    if (c->username && c->password)
        ret->password = (struct cma_cred_item){
            l->password, NULL, (const unsigned char *)c->password, strlen(c->password)};
    ret->insecure_skip_verify = c->insecure_skip_verify;
}
