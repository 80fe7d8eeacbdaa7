/* groups.h: the API groups the adapter serves (stage: model). Shared by the router (paths), the
 * catalog (which group an entry belongs to) and the API layer (discovery documents). */
#ifndef CMA_GROUPS_H
#define CMA_GROUPS_H

#define CMA_GROUP_CUSTOM "custom.metrics.k8s.io"
#define CMA_GROUP_EXTERNAL "external.metrics.k8s.io"
#define CMA_GROUP_RESOURCE "metrics.k8s.io"

#endif
