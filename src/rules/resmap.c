/* resmap.c: Prometheus label ↔ Kubernetes group-resource for one rule, from
 * resources.overrides and resources.template (prometheus-adapter's ResourceConverter).
 *
 * DESIGN: overrides keep the group/resource as written and are normalised through the current
 * RESTMapper at each lookup, so a CRD installed after start-up resolves once discovery sees it
 * (upstream normalises once at start and dies on unknown resources). The template is kept both
 * compiled (query direction) and as a reverse regex (discovery direction): it is rendered with
 * Group=(?P<group>.+?) and Resource=(?P<resource>.+?) and anchored, literal parts unescaped, as
 * upstream does. Improvement: when the reverse regex does not resolve a label, the template is
 * rendered for each resource of the mapper (priority order) and an exact match wins, so labels
 * the regex cannot split — kube__pod (core group) and kube_networking_k8s_io_ingress (dotted
 * group) — map back too; upstream drops them. Discovery caches the answer per label per relist. */
#include <stdlib.h>
#include <string.h>

#include "cma/config.h"
#include "cma/apiresource.h"
#include "cma/regex.h"
#include "cma/restmapper.h"
#include "cma/rule.h"
#include "cma/template.h"
#include "rules_internal.h"

struct resmap_override {
    char *label;
    char *group;
    char *resource;
};

struct cma_resmap {
    struct resmap_override *overrides;
    size_t n_overrides;
    struct cma_template *tmpl; /* NULL when no template */
    struct cma_regex *reverse;
    int group_index, resource_index;
};

void cma_resmap_free(struct cma_resmap *rm)
{
    if (!rm)
        return;
    for (size_t i = 0; i < rm->n_overrides; i++) {
        free(rm->overrides[i].label);
        free(rm->overrides[i].group);
        free(rm->overrides[i].resource);
    }
    free(rm->overrides);
    cma_template_free(rm->tmpl);
    cma_regex_free(rm->reverse);
    free(rm);
}

bool cma_resmap_is_empty(const struct cma_resmap *rm)
{
    return rm->n_overrides == 0 && rm->tmpl == NULL;
}

static enum cma_errc render_group_resource(const struct cma_template *t, const char *group,
                                           const char *resource, struct cma_buf *out,
                                           struct cma_err *reterr)
{
    struct cma_tfield fields[2] = {
        {"Group", cma_tv_string(group, strlen(group))},
        {"Resource", cma_tv_string(resource, strlen(resource))},
    };
    struct cma_tvalue dot = cma_tv_list(CMA_TV_STRUCT, fields, 2);
    return cma_template_render(t, &dot, out, reterr);
}

static enum cma_errc compile_template(struct cma_resmap *rm, const struct cma_config_str *s,
                                      struct cma_err *reterr)
{
    struct cma_err inner;
    cma_err_clear(&inner);
    if (cma_template_parse(s->s, strlen(s->s), &rm->tmpl, &inner) != CMA_OK)
        return cma_rules_err_at(reterr, s, &inner, "resources.template: ");
    if (!cma_template_uses_field(rm->tmpl, "Resource"))
        return cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, s->pos.file, s->pos.line, s->pos.column,
                              "resources.template must include at least `<<.Resource>>` (got "
                              "\"%s\")",
                              s->s);
    struct cma_buf pattern;
    cma_buf_init(&pattern, 64 * 1024);
    enum cma_errc rc = cma_buf_appendc(&pattern, '^');
    if (rc == CMA_OK)
        rc = render_group_resource(rm->tmpl, "(?P<group>.+?)", "(?P<resource>.+?)", &pattern,
                                   &inner);
    if (rc == CMA_OK)
        rc = cma_buf_appendc(&pattern, '$');
    if (rc == CMA_OK && pattern.len == 2)
        rc = cma_err_set(&inner, CMA_ERR_CONFIG_VALUE, "the template renders to an empty label");
    if (rc == CMA_OK)
        rc = cma_regex_compile(cma_buf_str(&pattern), &rm->reverse, &inner);
    cma_buf_done(&pattern);
    if (rc != CMA_OK) {
        inner.column = 0;
        return cma_rules_err_at(reterr, s, &inner, "resources.template: ");
    }
    rm->group_index = cma_regex_group_index(rm->reverse, "group", 5);
    rm->resource_index = cma_regex_group_index(rm->reverse, "resource", 8);
    return CMA_OK;
}

enum cma_errc cma_resmap_compile(const struct cma_config_resources *cfg, struct cma_resmap **ret,
                                 struct cma_err *reterr)
{
    struct cma_resmap *rm = calloc(1, sizeof(*rm));
    if (!rm)
        return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    enum cma_errc rc = CMA_OK;
    if (cfg->n_overrides) {
        rm->overrides = calloc(cfg->n_overrides, sizeof(*rm->overrides));
        if (!rm->overrides) {
            cma_resmap_free(rm);
            return cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
        }
    }
    for (size_t i = 0; rc == CMA_OK && i < cfg->n_overrides; i++) {
        const struct cma_config_override *o = &cfg->overrides[i];
        if (!o->resource.set || !o->resource.s[0]) {
            rc = cma_err_set_at(reterr, CMA_ERR_CONFIG_VALUE, o->pos.file, o->pos.line,
                                o->pos.column, "resources.overrides.%s: `resource` is required",
                                o->label);
            break;
        }
        struct resmap_override *d = &rm->overrides[rm->n_overrides++];
        d->label = strdup(o->label);
        d->group = strdup(o->group.set ? o->group.s : "");
        d->resource = strdup(o->resource.s);
        if (!d->label || !d->group || !d->resource)
            rc = cma_err_set(reterr, CMA_ERR_NOMEM, "out of memory");
    }
    if (rc == CMA_OK && cfg->template_.set && cfg->template_.s[0])
        rc = compile_template(rm, &cfg->template_, reterr);
    if (rc != CMA_OK) {
        cma_resmap_free(rm);
        return rc;
    }
    *ret = rm;
    return CMA_OK;
}

static const struct cma_api_resource *resolve(const struct cma_restmapper *m, const char *group,
                                              const char *resource)
{
    return cma_restmapper_resource_for(m, group, resource);
}

/* Renders the template for one resource (query direction) into out. */
static enum cma_errc render_for(const struct cma_resmap *rm, const struct cma_api_resource *res,
                                struct cma_buf *out, struct cma_err *reterr)
{
    char group[256];
    size_t len = strlen(res->group);
    if (len >= sizeof(group))
        return cma_err_set(reterr, CMA_ERR_RULE, "group name too long");
    for (size_t i = 0; i <= len; i++)
        group[i] = (res->group[i] == '.' || res->group[i] == '-') ? '_' : res->group[i];
    const char *singular = res->singular && res->singular[0] ? res->singular : res->resource;
    return render_group_resource(rm->tmpl, group, singular, out, reterr);
}

/* The resource whose rendered label is exactly `label`, in priority order; NULL if none. */
static const struct cma_api_resource *render_match(const struct cma_resmap *rm,
                                                   const struct cma_restmapper *m,
                                                   const char *label, size_t len)
{
    struct cma_buf b;
    cma_buf_init(&b, 4096);
    const struct cma_api_resource *found = NULL;
    for (size_t i = 0; !found && i < cma_restmapper_count(m); i++) {
        const struct cma_api_resource *r = cma_restmapper_at(m, i);
        cma_buf_clear(&b);
        if (render_for(rm, r, &b, NULL) == CMA_OK && b.len == len &&
            memcmp(cma_buf_str(&b), label, len) == 0)
            found = r;
    }
    cma_buf_done(&b);
    return found;
}

const struct cma_api_resource *cma_resmap_resource_for_label(const struct cma_resmap *rm,
                                                             const struct cma_restmapper *m,
                                                             const char *label, size_t len)
{
    for (size_t i = 0; i < rm->n_overrides; i++)
        if (strlen(rm->overrides[i].label) == len &&
            memcmp(rm->overrides[i].label, label, len) == 0)
            return resolve(m, rm->overrides[i].group, rm->overrides[i].resource);
    if (!rm->reverse || rm->resource_index < 0)
        return NULL;
    size_t ov[2 * 8];
    size_t n_ov = 2 * (cma_regex_n_groups(rm->reverse) + 1);
    if (n_ov > sizeof(ov) / sizeof(ov[0]))
        return NULL;
    if (!cma_regex_find(rm->reverse, label, len, ov, n_ov))
        return render_match(rm, m, label, len);
    char group[256] = "", resource[256];
    size_t rs = ov[2 * rm->resource_index], re = ov[2 * rm->resource_index + 1];
    if (rs == (size_t)-1 || re - rs >= sizeof(resource))
        return NULL;
    memcpy(resource, label + rs, re - rs);
    resource[re - rs] = '\0';
    if (rm->group_index >= 0) {
        size_t gs = ov[2 * rm->group_index], ge = ov[2 * rm->group_index + 1];
        if (gs != (size_t)-1 && ge - gs < sizeof(group)) {
            memcpy(group, label + gs, ge - gs);
            group[ge - gs] = '\0';
        }
    }
    const struct cma_api_resource *r = resolve(m, group, resource);
    return r ? r : render_match(rm, m, label, len);
}

enum cma_errc cma_resmap_label_for_resource(const struct cma_resmap *rm,
                                            const struct cma_restmapper *m,
                                            const struct cma_api_resource *res, struct cma_buf *out,
                                            struct cma_err *reterr)
{
    for (size_t i = 0; i < rm->n_overrides; i++)
        if (resolve(m, rm->overrides[i].group, rm->overrides[i].resource) == res)
            return cma_buf_appends(out, rm->overrides[i].label);
    if (!rm->tmpl) {
        char gr[300];
        cma_restmapper_group_resource(res, gr, sizeof(gr));
        return cma_err_set(reterr, CMA_ERR_RULE,
                           "unable to convert resource %s into label: no override or "
                           "resources.template names it",
                           gr);
    }
    return render_for(rm, res, out, reterr);
}
