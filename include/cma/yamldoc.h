/* yamldoc.h: libyaml events → a read-only node tree where every node keeps its file, line and
 * column. The only libyaml user in the project. Only the first document is read (as yaml.v2's
 * Unmarshal does); anchors/aliases are resolved by
 * reference (an alias node points to the anchored node). Merge keys (`<<: *a`, `<<: [*a, *b]`)
 * are expanded as yaml.v2 decodes them: a mapping's own keys win over merged ones, an earlier
 * merged mapping over a later one; the "<<" pair itself is gone from the tree and the merged
 * pairs are the source nodes (positions point at the text that holds them). Duplicate mapping
 * keys are reported by yamldoc itself. Trees are immutable after load: thread-safe reads.
 */
#ifndef CMA_YAMLDOC_H
#define CMA_YAMLDOC_H

#include <stdbool.h>
#include <stddef.h>

#include "cma/err.h"

enum cma_ynode_kind { CMA_YNODE_SCALAR, CMA_YNODE_MAPPING, CMA_YNODE_SEQUENCE };

enum cma_yscalar_style { CMA_YSTYLE_PLAIN, CMA_YSTYLE_SINGLE, CMA_YSTYLE_DOUBLE, CMA_YSTYLE_BLOCK };

struct cma_ynode;

struct cma_ypair {
    struct cma_ynode *key; /* always a scalar */
    struct cma_ynode *value;
};

struct cma_ynode {
    enum cma_ynode_kind kind;
    const char *file;              /* borrowed from the document */
    unsigned line, column;         /* 1-based start of the node */
    unsigned end_line, end_column; /* 1-based position just past the node's end */
    /* scalar */
    char *scalar; /* NUL-terminated, decoded value */
    size_t scalar_len;
    enum cma_yscalar_style style;
    bool is_null; /* plain "", "~", "null", "Null", "NULL" */
    /* mapping */
    struct cma_ypair *pairs;
    size_t n_pairs;
    /* sequence */
    struct cma_ynode **items;
    size_t n_items;
};

struct cma_ydoc;

/* Parses a YAML (or JSON) text. `file` names it in positions. An empty document gives a NULL
 * root. Syntax errors: CMA_ERR_CONFIG_SYNTAX at libyaml's position; duplicate keys in one
 * mapping: CMA_ERR_CONFIG_KEY "mapping key \"x\" already defined at line N" (yaml.v2's words) at
 * the second key. A merge value that is not a mapping or a list of mappings: CMA_ERR_CONFIG_TYPE
 * "map merge requires map or sequence of maps as the value" (yaml.v2's words) at the "<<".
 * Limits: 16 MiB of text, 64 levels of nesting, 1 Mi nodes, aliases expanding to at most 64 MiB,
 * 1 Mi keys laid out by merge keys. Caller owns the result. */
enum cma_errc cma_ydoc_parse(const char *file, const char *text, size_t len, struct cma_ydoc **ret,
                             struct cma_err *reterr);
/* Reads and parses a file (CMA_ERR_CONFIG_IO if it cannot be read). */
enum cma_errc cma_ydoc_load_file(const char *path, struct cma_ydoc **ret, struct cma_err *reterr);
void cma_ydoc_free(struct cma_ydoc *doc);

const struct cma_ynode *cma_ydoc_root(const struct cma_ydoc *doc); /* NULL for an empty doc */
const char *cma_ydoc_file(const struct cma_ydoc *doc);

/* True when a second, non-empty document follows the first one: it was neither parsed nor
 * checked (yaml.v2 ignores it too); *line and *column say where it starts (its "---"). */
bool cma_ydoc_ignored_document(const struct cma_ydoc *doc, unsigned *line, unsigned *column);

/* Mapping lookup by key; NULL if absent or node is not a mapping. */
const struct cma_ynode *cma_ynode_get(const struct cma_ynode *map, const char *key);

/* Parses a YAML 1.1 bool as yaml.v2 does (true/false/yes/no/on/off/y/n in their case forms).
 * Only plain (unquoted) scalars are bools; returns false (and leaves *ret) otherwise. */
bool cma_ynode_as_bool(const struct cma_ynode *scalar, bool *ret);

/* Writes s[0..len) as a double-quoted string for error messages, Go %q style (\" \\ \n \r \t,
 * other control bytes as \xNN). Inputs longer than about 120 bytes are cut at a character
 * boundary and marked with "..." after the closing quote. out_len must be at least
 * CMA_YDOC_QUOTE_MAX (otherwise out is set to ""). */
#define CMA_YDOC_QUOTE_MAX 512
void cma_ydoc_quote(const char *s, size_t len, char *out, size_t out_len);

#endif
