/* persist.c: the catalog cache file: encoding a snapshot, writing it atomically, reading it back
 * and decoding it into a snapshot against the current ruleset (persist.h).
 *
 * FORMAT (version 1): UTF-8 text, one record per line, fields separated by a tab; in a field, the
 * bytes 0x00-0x20, 0x7f and '%' are written as %XX, so a field holds any name Prometheus allows.
 *
 *   cma-catalog-cache  1
 *   fingerprint        <64 hex: cma_persist_fingerprint>
 *   built-ms           <wall ms of the relist that produced the content>
 *   R  group version resource singular kind 0|1 [shortname...]   (the RESTMapper, priority order)
 *   C  resource-index rule-index metric series                   (custom entries)
 *   E  rule-index metric series                                   (external entries)
 *   end <64 hex: SHA-256 of every byte before this line>
 *
 * DESIGN: the snapshot is rebuilt through the ordinary builder (so discovery documents come out
 * byte-identical), against a RESTMapper rebuilt from the R records; the RESTMapper lists the core
 * group first, so the file does too and an R record's position is its priority. The decoder is
 * strict (unknown records, stray bytes, bad escapes, out-of-range indexes and entries the rule
 * would not produce are errors) and only ever reads inside [data, data + len). */
#include "cma/persist.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cma/catalog.h"
#include "cma/file.h"
#include "cma/kube.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "cma/str.h"

#define MAGIC "cma-catalog-cache"
#define FORMAT_VERSION 1
#define MAX_FIELDS 72 /* R: 7 fixed + up to 65 short names */
#define HEX_LEN (2 * CMA_PERSIST_FINGERPRINT_LEN)

/* ---- SHA-256 ---- */

struct sha {
    EVP_MD_CTX *ctx;
};

static enum cma_errc sha_begin(struct sha *h, struct cma_err *reterr)
{
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        h->ctx = NULL;
        return cma_err_set(reterr, CMA_ERR_INTERNAL, "cannot initialise SHA-256");
    }
    return CMA_OK;
}

static void sha_add(struct sha *h, const void *data, size_t len)
{
    if (h->ctx && len && EVP_DigestUpdate(h->ctx, data, len) != 1) {
        EVP_MD_CTX_free(h->ctx);
        h->ctx = NULL;
    }
}

/* Length-prefixed, so that ("ab", "c") and ("a", "bc") differ. */
static void sha_add_part(struct sha *h, const void *data, size_t len)
{
    uint8_t n[8];
    for (int i = 0; i < 8; i++)
        n[i] = (uint8_t)((uint64_t)len >> (8 * i));
    sha_add(h, n, sizeof(n));
    sha_add(h, data, len);
}

static enum cma_errc sha_end(struct sha *h, uint8_t out[CMA_PERSIST_FINGERPRINT_LEN],
                             struct cma_err *reterr)
{
    unsigned n = 0;
    bool ok =
        h->ctx && EVP_DigestFinal_ex(h->ctx, out, &n) == 1 && n == CMA_PERSIST_FINGERPRINT_LEN;
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
    return ok ? CMA_OK : cma_err_set(reterr, CMA_ERR_INTERNAL, "SHA-256 failed");
}

static enum cma_errc sha_once(const void *data, size_t len,
                              uint8_t out[CMA_PERSIST_FINGERPRINT_LEN], struct cma_err *reterr)
{
    struct sha h;
    enum cma_errc rc = sha_begin(&h, reterr);
    if (rc != CMA_OK)
        return rc;
    sha_add(&h, data, len);
    return sha_end(&h, out, reterr);
}

static void hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* ---- files ---- */

/* Checks that fd is a regular file of at most max bytes; its size in *ret_size. */
static enum cma_errc check_size(int fd, const char *path, size_t max, size_t *ret_size,
                                struct cma_err *reterr)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return cma_err_set(reterr, CMA_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cma_err_set(reterr, CMA_ERR_IO, "%s is not a regular file", path);
    if ((uint64_t)st.st_size > max)
        return cma_err_set(reterr, CMA_ERR_TOO_LARGE, "%s is larger than %zu bytes", path, max);
    *ret_size = (size_t)st.st_size;
    return CMA_OK;
}

static enum cma_errc read_all(int fd, char *data, size_t size, const char *path,
                              struct cma_err *reterr)
{
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, data + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cma_err_set(reterr, CMA_ERR_IO, "cannot read %s: %s", path,
                               n < 0 ? strerror(errno) : "shorter than its size");
        got += (size_t)n;
    }
    return CMA_OK;
}

/* Reads a whole regular file of at most max bytes (NUL-terminated). CMA_ERR_NOT_FOUND when it
 * does not exist. */
static enum cma_errc read_file(const char *path, size_t max, char **ret, size_t *ret_len,
                               struct cma_err *reterr)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cma_err_set(reterr, errno == ENOENT ? CMA_ERR_NOT_FOUND : CMA_ERR_IO,
                           "cannot open %s: %s", path, strerror(errno));
    size_t size = 0;
    enum cma_errc rc = check_size(fd, path, max, &size, reterr);
    char *data = NULL;
    if (rc == CMA_OK) {
        data = malloc(size + 1);
        rc = data ? read_all(fd, data, size, path, reterr)
                  : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    close(fd);
    if (rc != CMA_OK || !data) {
        free(data);
        return rc;
    }
    data[size] = '\0';
    *ret = data;
    *ret_len = size;
    return CMA_OK;
}

/* ---- fingerprint ---- */

enum cma_errc cma_persist_fingerprint(const char *config_path, const char *const *parts,
                                      size_t n_parts, uint8_t ret[CMA_PERSIST_FINGERPRINT_LEN],
                                      struct cma_err *reterr)
{
    char *config = NULL;
    size_t config_len = 0;
    enum cma_errc rc = read_file(config_path, CMA_PERSIST_MAX_BYTES, &config, &config_len, reterr);
    if (rc != CMA_OK)
        return rc == CMA_ERR_NOT_FOUND ? CMA_ERR_IO : rc;
    struct sha h;
    rc = sha_begin(&h, reterr);
    if (rc == CMA_OK) {
        static const char tag[] = MAGIC " fingerprint 1";
        sha_add_part(&h, tag, sizeof(tag) - 1);
        sha_add_part(&h, config, config_len);
        for (size_t i = 0; i < n_parts; i++)
            sha_add_part(&h, parts[i] ? parts[i] : "", parts[i] ? strlen(parts[i]) : 0);
        rc = sha_end(&h, ret, reterr);
    }
    free(config);
    return rc;
}

/* ---- encoding ---- */

static bool needs_escape(unsigned char c)
{
    return c <= 0x20 || c == 0x7f || c == '%';
}

static enum cma_errc put_field(struct cma_buf *out, const char *s)
{
    static const char digits[] = "0123456789ABCDEF";
    enum cma_errc rc = cma_buf_appendc(out, '\t');
    for (const char *p = s ? s : ""; rc == CMA_OK && *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!needs_escape(c)) {
            rc = cma_buf_appendc(out, (char)c);
            continue;
        }
        char esc[3] = {'%', digits[c >> 4], digits[c & 15]};
        rc = cma_buf_append(out, esc, sizeof(esc));
    }
    return rc;
}

static enum cma_errc put_resource(struct cma_buf *out, const struct cma_api_resource *r)
{
    enum cma_errc rc = cma_buf_appendc(out, 'R');
    const char *fixed[] = {r->group,    r->version, r->resource,
                           r->singular, r->kind,    r->namespaced ? "1" : "0"};
    for (size_t i = 0; rc == CMA_OK && i < sizeof(fixed) / sizeof(fixed[0]); i++)
        rc = put_field(out, fixed[i]);
    size_t n_short = r->n_short_names < MAX_FIELDS - 7 ? r->n_short_names : MAX_FIELDS - 7;
    for (size_t i = 0; rc == CMA_OK && i < n_short; i++)
        if (r->short_names[i] && r->short_names[i][0])
            rc = put_field(out, r->short_names[i]);
    return rc == CMA_OK ? cma_buf_appendc(out, '\n') : rc;
}

struct res_index {
    const struct cma_api_resource *ptr;
    size_t index;
};

static int cmp_res_index(const void *a, const void *b)
{
    const struct res_index *x = a, *y = b;
    return x->ptr < y->ptr ? -1 : x->ptr > y->ptr;
}

static enum cma_errc put_entry(struct cma_buf *out, const struct cma_catalog_entry *e,
                               const struct res_index *idx, size_t n_res)
{
    char num[48];
    enum cma_errc rc;
    if (e->resource) {
        struct res_index key = {e->resource, 0};
        const struct res_index *hit = bsearch(&key, idx, n_res, sizeof(*idx), cmp_res_index);
        if (!hit)
            return CMA_ERR_INTERNAL;
        snprintf(num, sizeof(num), "%zu", hit->index);
        rc = cma_buf_appendc(out, 'C');
        if (rc == CMA_OK)
            rc = put_field(out, num);
    } else {
        rc = cma_buf_appendc(out, 'E');
    }
    snprintf(num, sizeof(num), "%zu", e->rule->index);
    if (rc == CMA_OK)
        rc = put_field(out, num);
    if (rc == CMA_OK)
        rc = put_field(out, e->metric);
    if (rc == CMA_OK)
        rc = put_field(out, e->series);
    return rc == CMA_OK ? cma_buf_appendc(out, '\n') : rc;
}

/* The R, C and E records: everything that decides what the snapshot serves. */
static enum cma_errc encode_records(const struct cma_catalog *c, struct cma_buf *out)
{
    const struct cma_restmapper *m = cma_catalog_mapper(c);
    size_t n_res = cma_restmapper_count(m);
    struct res_index *idx = calloc(n_res + 1, sizeof(*idx));
    if (!idx)
        return CMA_ERR_NOMEM;
    enum cma_errc rc = CMA_OK;
    for (size_t i = 0; rc == CMA_OK && i < n_res; i++) {
        idx[i] = (struct res_index){cma_restmapper_at(m, i), i};
        rc = put_resource(out, idx[i].ptr);
    }
    qsort(idx, n_res, sizeof(*idx), cmp_res_index);
    /* only the config files' entries: a MetricRule's (rule->owner) come back once the
     * MetricRule watch has synced and discovery relisted (the merged ruleset's config rules keep
     * the config ruleset's indexes, metricrule_ctl.h) */
    for (size_t i = 0; rc == CMA_OK && i < cma_catalog_count(c); i++)
        if (!cma_catalog_entry_at(c, i)->rule->owner)
            rc = put_entry(out, cma_catalog_entry_at(c, i), idx, n_res);
    for (size_t i = 0; rc == CMA_OK && i < cma_catalog_count_external(c); i++)
        if (!cma_catalog_external_at(c, i)->rule->owner)
            rc = put_entry(out, cma_catalog_external_at(c, i), idx, n_res);
    free(idx);
    return rc;
}

static enum cma_errc encode_file(const struct cma_catalog *c,
                                 const uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN],
                                 const struct cma_buf *records, struct cma_buf *out,
                                 struct cma_err *reterr)
{
    char fp_hex[HEX_LEN + 1], sum_hex[HEX_LEN + 1];
    hex_encode(fingerprint, CMA_PERSIST_FINGERPRINT_LEN, fp_hex);
    size_t start = out->len;
    enum cma_errc rc = cma_buf_printf(out, MAGIC "\t%d\nfingerprint\t%s\nbuilt-ms\t%lld\n",
                                      FORMAT_VERSION, fp_hex, (long long)cma_catalog_built_ms(c));
    if (rc == CMA_OK)
        rc = cma_buf_append(out, records->ptr ? records->ptr : "", records->len);
    uint8_t sum[CMA_PERSIST_FINGERPRINT_LEN];
    if (rc == CMA_OK)
        rc = sha_once(out->ptr + start, out->len - start, sum, reterr);
    if (rc == CMA_OK) {
        hex_encode(sum, sizeof(sum), sum_hex);
        rc = cma_buf_printf(out, "end\t%s\n", sum_hex);
    }
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "cannot encode the catalog cache");
    return CMA_OK;
}

enum cma_errc cma_persist_encode(const struct cma_catalog *c,
                                 const uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN],
                                 struct cma_buf *out, struct cma_err *reterr)
{
    struct cma_buf records;
    cma_buf_init(&records, CMA_PERSIST_MAX_BYTES);
    enum cma_errc rc = encode_records(c, &records);
    if (rc != CMA_OK)
        rc = cma_err_set(reterr, rc, "cannot encode the catalog cache");
    else
        rc = encode_file(c, fingerprint, &records, out, reterr);
    cma_buf_done(&records);
    return rc;
}

/* ---- decoding ---- */

struct field {
    const char *p;
    size_t len;
};

struct reader {
    const char *name;
    const char *p, *end; /* end: the start of the end line */
    unsigned line;
    struct field f[MAX_FIELDS];
    size_t n_fields;
};

/* Splits the next line into fields. False at the end (or on an over-long record, which the
 * caller reports through n_fields == MAX_FIELDS + 1). */
static bool next_record(struct reader *r)
{
    r->line++; /* at the end: the number of the missing line, for errors */
    if (r->p >= r->end)
        return false;
    const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
    const char *eol = nl ? nl : r->end;
    r->n_fields = 0;
    const char *s = r->p;
    for (;;) {
        const char *tab = memchr(s, '\t', (size_t)(eol - s));
        const char *fe = tab ? tab : eol;
        if (r->n_fields == MAX_FIELDS) {
            r->n_fields = MAX_FIELDS + 1;
            break;
        }
        r->f[r->n_fields++] = (struct field){s, (size_t)(fe - s)};
        if (!tab)
            break;
        s = tab + 1;
    }
    r->p = nl ? nl + 1 : r->end;
    return true;
}

static enum cma_errc bad(struct reader *r, struct cma_err *reterr, const char *what)
{
    return cma_err_set_at(reterr, CMA_ERR_IO, r->name, r->line, 0, "%s", what);
}

static bool field_is(const struct field *f, const char *s)
{
    return f->len == strlen(s) && memcmp(f->p, s, f->len) == 0;
}

/* A field's text, unescaped, as a new string; NULL with *bad_escape set when the field holds a
 * raw control byte, a bad %XX or an escaped NUL, and NULL alone when out of memory. */
static char *unescape(const struct field *f, bool *bad_escape)
{
    char *out = malloc(f->len + 1);
    if (!out)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < f->len; i++) {
        unsigned char c = (unsigned char)f->p[i];
        if (c != '%' && needs_escape(c))
            goto bad;
        if (c == '%') {
            int b = cma_percent_escape(f->p, f->len, i);
            if (b <= 0) /* a bad escape, or an escaped NUL */
                goto bad;
            c = (unsigned char)b;
            i += 2;
        }
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return out;
bad:
    free(out);
    *bad_escape = true;
    return NULL;
}

/* A decimal number of at most 18 digits (no sign). */
static bool parse_num(const struct field *f, long long *ret)
{
    if (f->len == 0 || f->len > 18)
        return false;
    long long v = 0;
    for (size_t i = 0; i < f->len; i++) {
        if (f->p[i] < '0' || f->p[i] > '9')
            return false;
        v = v * 10 + (f->p[i] - '0');
    }
    *ret = v;
    return true;
}

/* Checks the first line, the fingerprint line and the end line's checksum; leaves r at the
 * built-ms line. */
static enum cma_errc check_frame(struct reader *r, const char *data, size_t len,
                                 const uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN],
                                 struct cma_err *reterr)
{
    char want[HEX_LEN + 1];
    if (!next_record(r) || r->n_fields != 2 || !field_is(&r->f[0], MAGIC))
        return bad(r, reterr, "not a catalog cache file");
    char version[8];
    snprintf(version, sizeof(version), "%d", FORMAT_VERSION);
    if (!field_is(&r->f[1], version))
        return bad(r, reterr, "unsupported catalog cache format version (this build reads 1)");
    /* the end line: "end\t<hex>\n", last in the file */
    if (len < HEX_LEN + 5 || data[len - 1] != '\n')
        return cma_err_set_at(reterr, CMA_ERR_IO, r->name, 0, 0, "truncated (no end line)");
    const char *last = data + len - (HEX_LEN + 5);
    if (last < r->p || memcmp(last, "end\t", 4) != 0 || (last > data && last[-1] != '\n'))
        return cma_err_set_at(reterr, CMA_ERR_IO, r->name, 0, 0, "truncated (no end line)");
    uint8_t sum[CMA_PERSIST_FINGERPRINT_LEN];
    enum cma_errc rc = sha_once(data, (size_t)(last - data), sum, reterr);
    if (rc != CMA_OK)
        return rc;
    hex_encode(sum, sizeof(sum), want);
    if (memcmp(last + 4, want, HEX_LEN) != 0)
        return cma_err_set_at(reterr, CMA_ERR_IO, r->name, 0, 0,
                              "checksum mismatch: the file is corrupt");
    r->end = last;
    hex_encode(fingerprint, CMA_PERSIST_FINGERPRINT_LEN, want);
    if (!next_record(r) || r->n_fields != 2 || !field_is(&r->f[0], "fingerprint"))
        return bad(r, reterr, "fingerprint line expected");
    if (!field_is(&r->f[1], want))
        return bad(r, reterr,
                   "built from another configuration (the config file or the backend flags "
                   "differ)");
    return CMA_OK;
}

/* Resources collected from R records until the first entry. */
struct decode_state {
    struct cma_api_resources *res;
    size_t cap;
    bool seen_group; /* a non-core resource was read: core ones must come first */
    struct cma_restmapper *mapper;
    struct cma_catalog_builder *builder;
    const struct cma_ruleset *rules;
    struct cma_buf scratch;
};

static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
}

/* Unescapes fields [from, from + n) into out[]; 0 = ok, 1 = bad escape, 2 = out of memory. */
static int unescape_fields(const struct reader *r, size_t from, size_t n, char **out)
{
    for (size_t i = 0; i < n; i++) {
        bool bad_escape = false;
        out[i] = unescape(&r->f[from + i], &bad_escape);
        if (!out[i]) {
            free_strings(out, i);
            return bad_escape ? 1 : 2;
        }
    }
    return 0;
}

static enum cma_errc grow_resources(struct decode_state *st)
{
    if (!st->res && !(st->res = calloc(1, sizeof(*st->res))))
        return CMA_ERR_NOMEM;
    if (st->res->items && st->res->n < st->cap)
        return CMA_OK;
    size_t cap = st->cap ? st->cap * 2 : 64;
    struct cma_api_resource *items = realloc(st->res->items, cap * sizeof(*items));
    if (!items)
        return CMA_ERR_NOMEM;
    st->res->items = items;
    st->cap = cap;
    return CMA_OK;
}

static enum cma_errc fields_error(struct reader *r, int status, struct cma_err *reterr)
{
    return status == 1 ? bad(r, reterr, "bad escape or control byte in a field")
                       : cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
}

static enum cma_errc read_resource(struct decode_state *st, struct reader *r,
                                   struct cma_err *reterr)
{
    if (st->mapper)
        return bad(r, reterr, "resource record after the first entry");
    if (r->n_fields < 7 || r->n_fields > MAX_FIELDS)
        return bad(r, reterr, "resource record: wrong number of fields");
    if (!field_is(&r->f[6], "0") && !field_is(&r->f[6], "1"))
        return bad(r, reterr, "resource record: namespaced must be 0 or 1");
    if (r->f[2].len == 0 || r->f[3].len == 0)
        return bad(r, reterr, "resource record: empty version or resource");
    if (r->f[1].len == 0 && st->seen_group)
        return bad(r, reterr, "resource record: core resources must come first");
    if (grow_resources(st) != CMA_OK)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    char *s[5];
    int status = unescape_fields(r, 1, 5, s);
    if (status)
        return fields_error(r, status, reterr);
    size_t n_short = r->n_fields - 7;
    char **shorts = calloc(n_short + 1, sizeof(*shorts));
    status = shorts ? unescape_fields(r, 7, n_short, shorts) : 2;
    if (status) {
        free_strings(s, 5);
        free(shorts);
        return fields_error(r, status, reterr);
    }
    st->res->items[st->res->n++] = (struct cma_api_resource){
        s[0], s[1], s[2], s[3], s[4], field_is(&r->f[6], "1"), shorts, n_short};
    st->seen_group |= r->f[1].len > 0;
    return CMA_OK;
}

/* Turns the collected resources into the RESTMapper and opens the builder (first entry or end). */
static enum cma_errc freeze_resources(struct decode_state *st, struct cma_err *reterr)
{
    if (st->mapper)
        return CMA_OK;
    struct cma_api_resources *res = st->res;
    if (!res && !(res = calloc(1, sizeof(*res))))
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    st->res = NULL;
    enum cma_errc rc = cma_restmapper_new(res, &st->mapper, reterr);
    if (rc != CMA_OK)
        return rc;
    return cma_catalog_builder_new(st->mapper, &st->builder, reterr);
}

/* True when rule names series `series` as `metric` (the file holds nothing the rule would not
 * produce from that series). */
static bool rule_derives(struct decode_state *st, const struct cma_rule *rule, const char *metric,
                         const char *series)
{
    size_t len = strlen(series);
    if (!cma_naming_accepts(rule->naming, series, len))
        return false;
    cma_buf_clear(&st->scratch);
    return cma_naming_metric_name(rule->naming, series, len, &st->scratch, NULL) == CMA_OK &&
           strcmp(cma_buf_str(&st->scratch), metric) == 0;
}

static enum cma_errc read_entry(struct decode_state *st, struct reader *r, bool external,
                                struct cma_err *reterr)
{
    size_t want = external ? 4 : 5;
    if (r->n_fields != want)
        return bad(r, reterr, "entry record: wrong number of fields");
    enum cma_errc rc = freeze_resources(st, reterr);
    if (rc != CMA_OK)
        return rc;
    long long res_i = 0, rule_i = 0;
    size_t n_rules = external ? st->rules->n_external_rules : st->rules->n_rules;
    if ((!external && !parse_num(&r->f[1], &res_i)) || !parse_num(&r->f[want - 3], &rule_i))
        return bad(r, reterr, "entry record: index expected");
    if ((size_t)rule_i >= n_rules)
        return bad(r, reterr, "entry record: no such rule in the current config");
    const struct cma_api_resource *res =
        external ? NULL : cma_restmapper_at(st->mapper, (size_t)res_i);
    if (!external && !res)
        return bad(r, reterr, "entry record: no such resource");
    char *s[2];
    int status = unescape_fields(r, want - 2, 2, s);
    if (status)
        return fields_error(r, status, reterr);
    const struct cma_rule *rule =
        external ? &st->rules->external_rules[rule_i] : &st->rules->rules[rule_i];
    if (!s[0][0] || !s[1][0] || !rule_derives(st, rule, s[0], s[1]))
        rc = bad(r, reterr, "entry record: the rule does not name this series so");
    else if (external)
        rc = cma_catalog_builder_add_external(st->builder, s[0], strlen(s[0]), s[1], strlen(s[1]),
                                              rule);
    else
        rc =
            cma_catalog_builder_add(st->builder, res, s[0], strlen(s[0]), s[1], strlen(s[1]), rule);
    if (rc == CMA_ERR_NOMEM)
        rc = cma_err_set(reterr, rc, "out of memory");
    free_strings(s, 2);
    return rc;
}

static enum cma_errc read_records(struct decode_state *st, struct reader *r, struct cma_err *reterr)
{
    enum cma_errc rc = CMA_OK;
    while (rc == CMA_OK && next_record(r)) {
        if (field_is(&r->f[0], "R"))
            rc = read_resource(st, r, reterr);
        else if (field_is(&r->f[0], "C"))
            rc = read_entry(st, r, false, reterr);
        else if (field_is(&r->f[0], "E"))
            rc = read_entry(st, r, true, reterr);
        else
            rc = bad(r, reterr, "unknown record");
    }
    return rc == CMA_OK ? freeze_resources(st, reterr) : rc;
}

static void decode_state_done(struct decode_state *st)
{
    cma_catalog_builder_free(st->builder);
    cma_restmapper_unref(st->mapper);
    cma_api_resources_free(st->res);
    cma_buf_done(&st->scratch);
}

enum cma_errc cma_persist_decode(const char *name, const char *data, size_t len,
                                 const uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN],
                                 const struct cma_ruleset *rules, struct cma_catalog **ret,
                                 struct cma_err *reterr)
{
    if (len > CMA_PERSIST_MAX_BYTES)
        return cma_err_set(reterr, CMA_ERR_TOO_LARGE, "%s is larger than %zu bytes", name,
                           CMA_PERSIST_MAX_BYTES);
    struct reader r = {.name = name, .p = data, .end = data + len};
    enum cma_errc rc = check_frame(&r, data, len, fingerprint, reterr);
    long long built = 0;
    if (rc == CMA_OK && (!next_record(&r) || r.n_fields != 2 || !field_is(&r.f[0], "built-ms") ||
                         !parse_num(&r.f[1], &built)))
        rc = bad(&r, reterr, "built-ms line expected");
    if (rc != CMA_OK)
        return rc;
    struct decode_state st = {.rules = rules};
    cma_buf_init(&st.scratch, 64 * 1024);
    rc = read_records(&st, &r, reterr);
    if (rc == CMA_OK) {
        struct cma_catalog_builder *b = st.builder;
        st.builder = NULL;
        rc = cma_catalog_build(b, built, ret, reterr);
    }
    decode_state_done(&st);
    return rc;
}

/* ---- the cache file ---- */

struct cma_persist {
    char *path;
    uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN];
    uint8_t last_records[CMA_PERSIST_FINGERPRINT_LEN]; /* SHA-256 of the records last written */
    bool have_last;
};

enum cma_errc cma_persist_new(const char *path,
                              const uint8_t fingerprint[CMA_PERSIST_FINGERPRINT_LEN],
                              struct cma_persist **ret, struct cma_err *reterr)
{
    struct cma_persist *p = calloc(1, sizeof(*p));
    if (p)
        p->path = strdup(path);
    if (!p || !p->path) {
        cma_persist_free(p);
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    memcpy(p->fingerprint, fingerprint, CMA_PERSIST_FINGERPRINT_LEN);
    *ret = p;
    return CMA_OK;
}

void cma_persist_free(struct cma_persist *p)
{
    if (!p)
        return;
    free(p->path);
    free(p);
}

const char *cma_persist_path(const struct cma_persist *p)
{
    return p->path;
}

/* SHA-256 of c's records (what the skip-unchanged test compares). */
static enum cma_errc records_digest(const struct cma_catalog *c, struct cma_buf *records,
                                    uint8_t out[CMA_PERSIST_FINGERPRINT_LEN],
                                    struct cma_err *reterr)
{
    enum cma_errc rc = encode_records(c, records);
    if (rc != CMA_OK)
        return cma_err_set(reterr, rc, "cannot encode the catalog cache");
    return sha_once(records->ptr ? records->ptr : "", records->len, out, reterr);
}

enum cma_errc cma_persist_load(struct cma_persist *p, const struct cma_ruleset *rules,
                               struct cma_catalog **ret, struct cma_err *reterr)
{
    char *data = NULL;
    size_t len = 0;
    enum cma_errc rc = read_file(p->path, CMA_PERSIST_MAX_BYTES, &data, &len, reterr);
    if (rc != CMA_OK)
        return rc;
    struct cma_catalog *c = NULL;
    rc = cma_persist_decode(p->path, data, len, p->fingerprint, rules, &c, reterr);
    free(data);
    if (rc != CMA_OK)
        return rc;
    struct cma_buf records;
    cma_buf_init(&records, CMA_PERSIST_MAX_BYTES);
    p->have_last = records_digest(c, &records, p->last_records, NULL) == CMA_OK;
    cma_buf_done(&records);
    *ret = c;
    return CMA_OK;
}

enum cma_errc cma_persist_save(struct cma_persist *p, const struct cma_catalog *c,
                               bool *ret_written, struct cma_err *reterr)
{
    if (ret_written)
        *ret_written = false;
    struct cma_buf records, file;
    cma_buf_init(&records, CMA_PERSIST_MAX_BYTES);
    cma_buf_init(&file, CMA_PERSIST_MAX_BYTES + 4096);
    uint8_t digest[CMA_PERSIST_FINGERPRINT_LEN];
    enum cma_errc rc = records_digest(c, &records, digest, reterr);
    bool unchanged = rc == CMA_OK && p->have_last &&
                     memcmp(digest, p->last_records, sizeof(digest)) == 0 &&
                     access(p->path, F_OK) == 0;
    if (rc == CMA_OK && !unchanged)
        rc = encode_file(c, p->fingerprint, &records, &file, reterr);
    if (rc == CMA_OK && !unchanged)
        rc = cma_file_replace(p->path, file.ptr, file.len, 0600, reterr);
    if (rc == CMA_OK && !unchanged) {
        memcpy(p->last_records, digest, sizeof(digest));
        p->have_last = true;
        if (ret_written)
            *ret_written = true;
    }
    cma_buf_done(&records);
    cma_buf_done(&file);
    return rc;
}
