/* objcache_mem.c: memory per pod of the watch cache (src/clients/objcache.c) at N pods.
 *
 * Feeds the cache N ADDED watch events built from the recorded pod of
 * ../shared/fixtures/kube-apiserver/pods-all-bert-before-watch.json (the real object shape, ~4 KB
 * of JSON, with name, namespace and labels changed per pod), exactly the lines the watch thread
 * hands to cma_objcache_apply_event, then prints what the cache holds: the packed bytes it
 * counts (cma_objcache_bytes) and the heap growth malloc reports (mallinfo2, so malloc's own
 * per-allocation overhead is in), each per pod and per pod beyond its label strings.
 *
 * Build (after building build-watch or any build dir):
 *   cc -std=c17 -O2 -Iinclude bench/objcache_mem.c -o build-watch/objcache_mem \
 *      build-watch/src/clients/libcma_clients.a build-watch/src/query/libcma_query.a \
 *      build-watch/src/rules/libcma_rules.a build-watch/src/clients/libcma_clients.a \
 *      build-watch/src/config/libcma_config.a build-watch/src/base/libcma_base.a \
 *      $(pkg-config --libs libcurl jansson yajl yaml-0.1 libpcre2-8) -lpthread -lm
 * Run: build-watch/objcache_mem 10000 100000
 * With the fake kube-apiserver: build-watch/objcache_mem --kubeconfig PATH runs the real cache
 * (LIST + WATCH thread) against it and reports the heap held once synced. */
#define _DEFAULT_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cma/kube.h"
#include "cma/objcache.h"

static json_t *template_pod(void)
{
    const char *src = getenv("CMA_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof(path),
             "%s/../shared/fixtures/kube-apiserver/pods-all-bert-before-watch.json",
             src ? src : ".");
    json_error_t jerr;
    json_t *list = json_load_file(path, 0, &jerr);
    if (!list) {
        fprintf(stderr, "objcache_mem: %s: %s\n", path, jerr.text);
        return NULL;
    }
    json_t *pod = json_deep_copy(json_array_get(json_object_get(list, "items"), 0));
    json_decref(list);
    return pod;
}

static int measure(json_t *pod, size_t n)
{
    struct cma_objcache *c = NULL;
    if (cma_objcache_new(NULL, "", "v1", "pods", &c, NULL) != CMA_OK)
        return 1;
    struct mallinfo2 before = mallinfo2();
    size_t label_bytes = 0;
    json_t *meta = json_object_get(pod, "metadata");
    for (size_t i = 0; i < n; i++) {
        char name[64], ns[32], app[32], hash[32], rv[32];
        snprintf(name, sizeof(name), "bert-%06zu-7d9f8c6b5-x%04zu", i, i % 9973);
        snprintf(ns, sizeof(ns), "team-%02zu", i % 40);
        snprintf(app, sizeof(app), "bert-%zu", i % 50);
        snprintf(hash, sizeof(hash), "7d9f8c6b%zu", i % 100);
        snprintf(rv, sizeof(rv), "%zu", 1000 + i);
        json_object_set_new(meta, "name", json_string(name));
        json_object_set_new(meta, "namespace", json_string(ns));
        json_object_set_new(meta, "resourceVersion", json_string(rv));
        json_t *labels = json_object();
        json_object_set_new(labels, "app", json_string(app));
        json_object_set_new(labels, "pod-template-hash", json_string(hash));
        json_object_set_new(labels, "tier", json_string("inference"));
        json_object_set_new(meta, "labels", labels);
        label_bytes += strlen("app") + strlen(app) + strlen("pod-template-hash") + strlen(hash) +
                       strlen("tier") + strlen("inference");
        json_t *event = json_pack("{s:s,s:O}", "type", "ADDED", "object", pod);
        char *line = json_dumps(event, JSON_COMPACT);
        json_decref(event);
        bool gone = false;
        struct cma_err err = {0};
        if (!line || cma_objcache_apply_event(c, line, strlen(line), &gone, &err) != CMA_OK) {
            fprintf(stderr, "objcache_mem: event %zu: %s\n", i, err.msg);
            free(line);
            cma_objcache_free(c);
            return 1;
        }
        free(line);
    }
    struct mallinfo2 after = mallinfo2();
    size_t heap = after.uordblks - before.uordblks;
    size_t packed = cma_objcache_bytes(c);
    printf("%zu pods: cache %zu bytes (%.1f/pod, %.1f/pod beyond label strings); heap growth %zu "
           "bytes (%.1f/pod, %.1f/pod beyond label strings); label strings %.1f/pod\n",
           cma_objcache_count(c), packed, (double)packed / (double)n,
           (double)(packed - label_bytes) / (double)n, heap, (double)heap / (double)n,
           (double)(heap - label_bytes) / (double)n, (double)label_bytes / (double)n);
    cma_objcache_free(c);
    return 0;
}

/* kB of a /proc/self/status field (VmRSS, RssAnon, VmHWM); 0 when missing. */
static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = 0;
    size_t fl = strlen(field);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':')
            v = strtol(line + fl + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* The real LIST+WATCH thread against a kube-apiserver: heap and resident memory held once synced,
 * as one line of key=value pairs (bench/objcache_mem.sh reads it). heap_used is malloc's bytes in
 * use (mallinfo2 uordblks, its per-allocation overhead in), heap_free what malloc holds freed
 * (fordblks: resident only where not trimmed), rss/anon/hwm the process's VmRSS, RssAnon and
 * VmHWM in kB; *_0 the same before the cache started. */
static int measure_live(const char *kubeconfig)
{
    struct cma_kube *k = NULL;
    struct cma_err err = {0};
    if (cma_kube_new(kubeconfig, 60000, &k, &err) != CMA_OK) {
        fprintf(stderr, "objcache_mem: %s\n", err.msg);
        return 1;
    }
    struct cma_objcache *c = NULL;
    struct mallinfo2 before = mallinfo2();
    long rss0 = status_kb("VmRSS"), anon0 = status_kb("RssAnon"), hwm0 = status_kb("VmHWM");
    if (cma_objcache_new(k, "", "v1", "pods", &c, &err) != CMA_OK ||
        cma_objcache_start(c, &err) != CMA_OK) {
        fprintf(stderr, "objcache_mem: %s\n", err.msg);
        cma_objcache_free(c);
        cma_kube_free(k);
        return 1;
    }
    for (int i = 0; i < 6000 && !cma_objcache_is_synced(c); i++)
        usleep(100000);
    usleep(500000);
    struct mallinfo2 after = mallinfo2();
    size_t n = cma_objcache_count(c);
    printf("live pods=%zu heap_used=%zu heap_free=%zu cache_bytes=%zu rss0=%ld anon0=%ld hwm0=%ld "
           "rss=%ld anon=%ld hwm=%ld\n",
           n, after.uordblks - before.uordblks, after.fordblks, cma_objcache_bytes(c), rss0, anon0,
           hwm0, status_kb("VmRSS"), status_kb("RssAnon"), status_kb("VmHWM"));
    cma_objcache_free(c);
    cma_kube_free(k);
    return n ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--kubeconfig") == 0)
        return measure_live(argv[2]);
    json_t *pod = template_pod();
    if (!pod)
        return 1;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++)
        rc = measure(pod, (size_t)strtoull(argv[i], NULL, 10));
    json_decref(pod);
    return rc;
}
