/* tls_route.c: how a client reaches a server whose kubeconfig names a tls-server-name, for
 * kube.c and prom.c alike (client-go's ServerName): the request URL names the TLS name, so curl
 * asks for it (SNI) and checks it in the certificate; a CURLOPT_CONNECT_TO entry sends the
 * connection to the URL's own host and port; and the Host header stays the URL's host (and port,
 * when the URL has one), as Go sends it. Plain data out: the clients put the entry on their
 * transport and the Host line in their header lists. IPv6 literals keep their brackets in the
 * entry and in Host; a URL without a port connects to its scheme's default port. */
#include <stdlib.h>
#include <string.h>

#include "cma/buf.h"
#include "cma/str.h"
#include "internal.h"

void cma_tls_route_done(struct cma_tls_route *r)
{
    free(r->url);
    free(r->connect_to);
    free(r->host_line);
    *r = (struct cma_tls_route){0};
}

/* A CURLUcode as one of the codes cma_clients_tls_route returns. */
static enum cma_errc curl_code(CURLUcode uc)
{
    return uc == CURLUE_OK              ? CMA_OK
           : uc == CURLUE_OUT_OF_MEMORY ? CMA_ERR_NOMEM
                                        : CMA_ERR_CONFIG_VALUE;
}

/* The URL's host and port as curl parses them (IPv6 in brackets); *explicit_port NULL when the
 * URL has none, *port the scheme's default then. */
static enum cma_errc host_and_ports(CURLU *u, char **host, char **port, char **explicit_port)
{
    enum cma_errc rc = cma_clients_url_part(u, CURLUPART_HOST, host);
    if (rc == CMA_OK)
        rc = cma_clients_url_part(u, CURLUPART_PORT, explicit_port);
    if (rc != CMA_OK)
        return rc;
    char *p = NULL;
    CURLUcode uc = curl_url_get(u, CURLUPART_PORT, &p, CURLU_DEFAULT_PORT);
    if (uc == CURLUE_OK && p) {
        *port = cma_strdup(p);
        curl_free(p);
        return *port ? CMA_OK : CMA_ERR_NOMEM;
    }
    curl_free(p);
    return uc == CURLUE_OK ? CMA_ERR_CONFIG_VALUE : curl_code(uc);
}

/* The whole URL of u, without trailing slashes. */
static enum cma_errc url_of(CURLU *u, char **ret)
{
    char *full = NULL;
    CURLUcode uc = curl_url_get(u, CURLUPART_URL, &full, 0);
    if (uc != CURLUE_OK || !full) {
        curl_free(full);
        return uc == CURLUE_OK ? CMA_ERR_CONFIG_VALUE : curl_code(uc);
    }
    size_t len = strlen(full);
    while (len > 0 && full[len - 1] == '/')
        len--;
    *ret = cma_strndup(full, len);
    curl_free(full);
    return *ret ? CMA_OK : CMA_ERR_NOMEM;
}

/* "tls_name:port:host:port" and "Host: host[:explicit_port]". */
static enum cma_errc route_lines(const char *tls_name, const char *host, const char *port,
                                 const char *explicit_port, struct cma_tls_route *r)
{
    struct cma_buf entry, line;
    cma_buf_init(&entry, 0);
    cma_buf_init(&line, 0);
    enum cma_errc rc = cma_buf_printf(&entry, "%s:%s:%s:%s", tls_name, port, host, port);
    if (rc == CMA_OK)
        rc = cma_buf_printf(&line, "Host: %s%s%s", host, explicit_port ? ":" : "",
                            explicit_port ? explicit_port : "");
    if (rc == CMA_OK) {
        r->connect_to = cma_buf_take(&entry);
        r->host_line = cma_buf_take(&line);
        rc = r->connect_to && r->host_line ? CMA_OK : CMA_ERR_NOMEM;
    }
    cma_buf_done(&entry);
    cma_buf_done(&line);
    return rc;
}

/* Fills r from the parsed u (its host not yet renamed). */
static enum cma_errc route_of(CURLU *u, const char *tls_name, struct cma_tls_route *r)
{
    char *host = NULL, *port = NULL, *explicit_port = NULL;
    enum cma_errc rc = host_and_ports(u, &host, &port, &explicit_port);
    if (rc == CMA_OK && !host)
        rc = CMA_ERR_CONFIG_VALUE;
    if (rc == CMA_OK)
        rc = route_lines(tls_name, host, port, explicit_port, r);
    if (rc == CMA_OK)
        rc = curl_code(curl_url_set(u, CURLUPART_HOST, tls_name, 0));
    if (rc == CMA_OK)
        rc = url_of(u, &r->url);
    free(host);
    free(port);
    free(explicit_port);
    return rc;
}

enum cma_errc cma_clients_tls_route(const char *url, const char *tls_name,
                                    struct cma_tls_route *ret)
{
    *ret = (struct cma_tls_route){0};
    if (!tls_name || !tls_name[0])
        return CMA_OK;
    CURLU *u = curl_url();
    if (!u)
        return CMA_ERR_NOMEM;
    enum cma_errc rc = curl_code(curl_url_set(u, CURLUPART_URL, url, 0));
    if (rc == CMA_OK)
        rc = route_of(u, tls_name, ret);
    curl_url_cleanup(u);
    if (rc != CMA_OK)
        cma_tls_route_done(ret);
    return rc;
}
