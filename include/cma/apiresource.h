/* apiresource.h: what the cluster serves, as kube-apiserver's discovery describes it: one
 * struct cma_api_resource per resource (group, preferred version, plural, singular, kind, scope,
 * short names). Filled by the kube client's discovery (clients/kube_decode.c), owned by the
 * RESTMapper (restmapper.h), read by every stage that maps labels or paths to resources. */
#ifndef CMA_APIRESOURCE_H
#define CMA_APIRESOURCE_H

#include <stdbool.h>
#include <stddef.h>

struct cma_api_resource {
    char *group;    /* "" for core */
    char *version;  /* preferred version of the group */
    char *resource; /* plural, lower case: "pods", "deployments" */
    char *singular; /* "pod" (derived from kind in lower case when the server sends "") */
    char *kind;     /* "Pod" */
    bool namespaced;
    char **short_names;
    size_t n_short_names;
};

struct cma_api_resources {
    struct cma_api_resource *items;
    size_t n;
};

/* Frees one resource's strings (not the struct itself). */
void cma_api_resource_done(struct cma_api_resource *r);
/* Frees the list, its items and their strings; NULL is fine. */
void cma_api_resources_free(struct cma_api_resources *r);

#endif
