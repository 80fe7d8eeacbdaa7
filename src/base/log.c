/* log.c: one line per event on stderr, as text (UTC time with ms and a level letter) or as a
 * JSON object (--logging-format=json), with optional structured fields.
 * The only state is the verbosity and the format, atomic ints set once at start-up by main.
 *
 * DESIGN: a line is built in a 4 KiB buffer on the stack; a longer one moves to the heap and is
 * written whole. Every buffer keeps MARKER_RESERVE bytes free, so when the heap allocation
 * fails the line still ends with an explicit "[truncated: N of M bytes]" and its newline: no
 * line is ever cut silently. JSON strings are escaped per RFC 8259 (invalid UTF-8 becomes
 * U+FFFD, so every line is valid JSON); text field values get Go's %q escapes. */
#include "cma/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cma/str.h"
#include "cma/utf8.h"

static atomic_int log_verbosity;
static atomic_int log_format;

#define STACK_BYTES 4096
#define MARKER_RESERVE 64

void cma_log_set_verbosity(int v)
{
    atomic_store(&log_verbosity, v);
}

int cma_log_verbosity(void)
{
    return atomic_load(&log_verbosity);
}

bool cma_log_enabled(int v)
{
    return atomic_load(&log_verbosity) >= v;
}

void cma_log_set_format(enum cma_log_format f)
{
    atomic_store(&log_format, (int)f);
}

enum cma_log_format cma_log_get_format(void)
{
    return (enum cma_log_format)atomic_load(&log_format);
}

bool cma_log_parse_format(const char *name, enum cma_log_format *ret)
{
    if (name && strcmp(name, "text") == 0)
        *ret = CMA_LOG_FORMAT_TEXT;
    else if (name && strcmp(name, "json") == 0)
        *ret = CMA_LOG_FORMAT_JSON;
    else
        return false;
    return true;
}

/* ---- a line under construction ---- */

struct line {
    char *p;
    size_t len;    /* bytes kept */
    size_t cap;    /* bytes allocated, MARKER_RESERVE of them kept free for the marker */
    size_t wanted; /* bytes the line should have: len plus whatever could not be kept */
    char stack[STACK_BYTES];
};

static void line_init(struct line *l)
{
    l->p = l->stack;
    l->len = l->wanted = 0;
    l->cap = sizeof(l->stack);
}

static void line_done(struct line *l)
{
    if (l->p != l->stack)
        free(l->p);
}

/* Room for n more bytes (besides the reserve); false when memory ran out. */
static bool line_room(struct line *l, size_t n)
{
    if (l->len + n + MARKER_RESERVE <= l->cap)
        return true;
    size_t cap = l->cap;
    while (cap < l->len + n + MARKER_RESERVE)
        cap *= 2;
    char *p = l->p == l->stack ? malloc(cap) : realloc(l->p, cap);
    if (!p)
        return false;
    if (l->p == l->stack)
        memcpy(p, l->stack, l->len);
    l->p = p;
    l->cap = cap;
    return true;
}

static size_t line_free_bytes(const struct line *l)
{
    return l->cap - MARKER_RESERVE - l->len;
}

static void line_append(struct line *l, const char *s, size_t n)
{
    bool intact = l->wanted == l->len; /* nothing lost so far */
    l->wanted += n;
    if (!intact)
        return; /* after a loss nothing more is kept: the marker counts it */
    if (!line_room(l, n) && n > line_free_bytes(l))
        n = line_free_bytes(l); /* out of memory: keep what fits */
    memcpy(l->p + l->len, s, n);
    l->len += n;
}

static void line_appends(struct line *l, const char *s)
{
    line_append(l, s, strlen(s));
}

static void line_vprintf(struct line *l, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void line_vprintf(struct line *l, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    size_t avail = l->wanted == l->len ? line_free_bytes(l) : 0;
    int n = vsnprintf(l->p + l->len, avail + 1, fmt, ap); /* +1: the NUL may use the reserve */
    if (n > 0 && (size_t)n <= avail) {
        l->len += (size_t)n;
        l->wanted += (size_t)n;
    } else if (n > 0 && l->wanted == l->len && line_room(l, (size_t)n + 1)) {
        vsnprintf(l->p + l->len, (size_t)n + 1, fmt, again);
        l->len += (size_t)n;
        l->wanted += (size_t)n;
    } else if (n > 0) {
        l->len += avail; /* the prefix vsnprintf wrote */
        l->wanted += (size_t)n;
    }
    va_end(again);
}

/* v in decimal, zero-padded to at least width digits: the access log line is written on every
 * request, and printf was most of its cost. */
static void line_uint(struct line *l, uint64_t v, unsigned width)
{
    char digits[CMA_U64_DIGITS];
    line_append(l, digits, cma_u64_format(digits, v, width));
}

static void line_int(struct line *l, long long v)
{
    if (v < 0) {
        line_append(l, "-", 1);
        line_uint(l, 0ULL - (unsigned long long)v, 1);
    } else {
        line_uint(l, (uint64_t)v, 1);
    }
}

/* ns nanoseconds as milliseconds with three decimals ("%.3f" of ns / 1e6, rounded to the
 * microsecond), without printf. */
static void line_ms(struct line *l, int64_t ns)
{
    uint64_t mag = ns < 0 ? 0ULL - (uint64_t)ns : (uint64_t)ns;
    uint64_t us = mag / 1000 + (mag % 1000 >= 500);
    if (ns < 0 && us > 0)
        line_append(l, "-", 1);
    line_uint(l, us / 1000, 1);
    line_append(l, ".", 1);
    line_uint(l, us % 1000, 3);
}

/* Appends the marker when something was lost, then the newline, and writes the line. */
static void line_write(struct line *l)
{
    if (l->wanted > l->len) {
        char marker[MARKER_RESERVE];
        int n =
            snprintf(marker, sizeof marker, " [truncated: %zu of %zu bytes]", l->len, l->wanted);
        size_t m = n > 0 && (size_t)n < sizeof marker - 1 ? (size_t)n : 0;
        memcpy(l->p + l->len, marker, m);
        l->len += m;
    }
    l->p[l->len++] = '\n';
    for (size_t off = 0; off < l->len;) {
        ssize_t w = write(STDERR_FILENO, l->p + off, l->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

/* ---- escaping ---- */

static void append_json_string(struct line *l, const char *s, size_t n)
{
    line_appends(l, "\"");
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t width = 1;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            line_append(l, esc, 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            line_append(l, esc, 6);
        } else if (c < 0x80) {
            line_append(l, s + i, 1);
        } else if (cma_utf8_decode(s + i, n - i, &width) == CMA_UTF8_RUNE_ERROR && width == 1) {
            line_appends(l, "\\ufffd");
        } else {
            line_append(l, s + i, width);
        }
        i += width;
    }
    line_appends(l, "\"");
}

/* Go's strconv.Quote for the bytes that matter in a log line. */
static void append_quoted(struct line *l, const char *s)
{
    line_appends(l, "\"");
    const char *run = s; /* bytes that need no escape are appended a run at a time */
    for (const char *p = s;; p++) {
        unsigned char c = (unsigned char)*p;
        bool plain = c >= 0x20 && c != 0x7f && c != '"' && c != '\\';
        if (plain)
            continue;
        line_append(l, run, (size_t)(p - run));
        run = p + 1;
        if (c == '\0')
            break;
        char esc[4] = {'\\', (char)c, 0, 0};
        size_t n = 2;
        if (c == '\n' || c == '\t' || c == '\r') {
            esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        } else if (c < 0x20 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            esc[1] = 'x';
            esc[2] = hex[c >> 4];
            esc[3] = hex[c & 15];
            n = 4;
        }
        line_append(l, esc, n);
    }
    line_appends(l, "\"");
}

/* ---- the two formats ---- */

static const char LETTERS[CMA_LOG__COUNT] = {'E', 'W', 'I'};
static const char *const LEVEL_NAMES[CMA_LOG__COUNT] = {"error", "warning", "info"};

static void line_start(struct line *l, enum cma_log_level level, int v)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (cma_log_get_format() == CMA_LOG_FORMAT_JSON) {
        line_appends(l, "{\"ts\":");
        line_int(l, (long long)ts.tv_sec);
        line_append(l, ".", 1);
        line_uint(l, (uint64_t)(ts.tv_nsec / 1000000), 3);
        line_appends(l, ",\"level\":\"");
        line_appends(l, LEVEL_NAMES[level]);
        line_appends(l, "\",\"v\":");
        line_int(l, v);
        line_appends(l, ",\"msg\":");
        return;
    }
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    /* 2026-11-29T03:04:05.678Z I (gmtime_r of the real-time clock: no field is negative) */
    const struct {
        int value;
        unsigned width;
        char after;
    } parts[] = {{tm.tm_year + 1900, 4, '-'},
                 {tm.tm_mon + 1, 2, '-'},
                 {tm.tm_mday, 2, 'T'},
                 {tm.tm_hour, 2, ':'},
                 {tm.tm_min, 2, ':'},
                 {tm.tm_sec, 2, '.'},
                 {(int)(ts.tv_nsec / 1000000), 3, 'Z'}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        line_uint(l, (uint64_t)(parts[i].value > 0 ? parts[i].value : 0), parts[i].width);
        line_append(l, &parts[i].after, 1);
    }
    const char tail[3] = {' ', LETTERS[level], ' '};
    line_append(l, tail, sizeof tail);
}

/* The message: in text with newlines turned into spaces, in JSON as a string. */
static void append_message(struct line *l, const char *msg, size_t n)
{
    if (cma_log_get_format() == CMA_LOG_FORMAT_JSON) {
        append_json_string(l, msg, n);
        return;
    }
    size_t from = l->len;
    line_append(l, msg, n);
    for (size_t i = from; i < l->len; i++)
        if (l->p[i] == '\n' || l->p[i] == '\r')
            l->p[i] = ' ';
}

static void append_field(struct line *l, const struct cma_log_field *f, bool json)
{
    if (json) {
        line_appends(l, ",");
        append_json_string(l, f->key, strlen(f->key));
        line_appends(l, ":");
    } else {
        line_append(l, " ", 1);
        line_appends(l, f->key);
        line_append(l, "=", 1);
    }
    if (f->type == CMA_LOG_FIELD_INT)
        line_int(l, (long long)f->i);
    else if (f->type == CMA_LOG_FIELD_MS)
        line_ms(l, f->i);
    else if (json)
        append_json_string(l, f->s ? f->s : "", f->s ? strlen(f->s) : 0);
    else
        append_quoted(l, f->s ? f->s : "");
}

static void emit(enum cma_log_level level, int v, const char *msg, size_t msg_len,
                 const struct cma_log_field *fields, size_t n_fields)
{
    struct line l;
    line_init(&l);
    bool json = cma_log_get_format() == CMA_LOG_FORMAT_JSON;
    line_start(&l, level, v);
    append_message(&l, msg, msg_len);
    for (size_t i = 0; i < n_fields; i++)
        append_field(&l, &fields[i], json);
    if (json)
        line_appends(&l, "}");
    line_write(&l);
    line_done(&l);
}

static void vlog(enum cma_log_level level, int v, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void vlog(enum cma_log_level level, int v, const char *fmt, va_list ap)
{
    struct line msg;
    line_init(&msg);
    line_vprintf(&msg, fmt, ap);
    if (msg.wanted > msg.len) { /* out of memory while formatting: say so in the message */
        char marker[MARKER_RESERVE];
        int n =
            snprintf(marker, sizeof marker, " [truncated: %zu of %zu bytes]", msg.len, msg.wanted);
        if (n > 0 && (size_t)n < sizeof marker) {
            memcpy(msg.p + msg.len, marker, (size_t)n);
            msg.len += (size_t)n;
        }
    }
    emit(level, v, msg.p, msg.len, NULL, 0);
    line_done(&msg);
}

void cma_log(enum cma_log_level level, const char *fmt, ...)
{
    if (level >= CMA_LOG__COUNT)
        level = CMA_LOG_INFO;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, 0, fmt, ap);
    va_end(ap);
}

void cma_log_v(int v, const char *fmt, ...)
{
    if (!cma_log_enabled(v))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(CMA_LOG_INFO, v, fmt, ap);
    va_end(ap);
}

void cma_log_fields(int v, const char *msg, const struct cma_log_field *fields, size_t n)
{
    if (!cma_log_enabled(v))
        return;
    emit(CMA_LOG_INFO, v, msg ? msg : "", msg ? strlen(msg) : 0, fields, fields ? n : 0);
}
