/* lib_floor.c: the resident memory a process has from its shared libraries alone, before it does
 * any work of its own (bench/lib_floor.sh builds it with several link lines).
 *
 * It prints one line per stage: "STAGE VmRSS RssAnon RssFile" in KiB, read from
 * /proc/self/status. Stages: "loaded" (main reached: the loader mapped and relocated every
 * library), then, when built with -DWITH_CURL, "curl_global_init" (what the adapter calls once at
 * start: libcurl initialises its TLS backend). The program calls nothing else, so the figures are
 * a floor for any program linked the same way, the adapter included. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef WITH_CURL
#include <curl/curl.h>
#endif

static int report(const char *stage)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long rss = -1, anon = -1, file = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            rss = strtol(line + 6, NULL, 10);
        else if (strncmp(line, "RssAnon:", 8) == 0)
            anon = strtol(line + 8, NULL, 10);
        else if (strncmp(line, "RssFile:", 8) == 0)
            file = strtol(line + 8, NULL, 10);
    }
    fclose(f);
    if (rss < 0 || anon < 0 || file < 0)
        return -1;
    printf("%s %ld %ld %ld\n", stage, rss, anon, file);
    return 0;
}

int main(void)
{
    if (report("loaded") != 0)
        return 1;
#ifdef WITH_CURL
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    if (report("curl_global_init") != 0)
        return 1;
    curl_global_cleanup();
#endif
    return 0;
}
