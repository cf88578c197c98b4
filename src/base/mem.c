/* Checked allocation with an injectable failure for tests. */
#include "mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

static int injected_failure(void) {
    if (err_fail_alloc_countdown > 0 && --err_fail_alloc_countdown == 0) return 1;
    return 0;
}

static _Thread_local unsigned long failures;

unsigned long mem_failures(void) { return failures; }

static void *fail(size_t n, const char *what) {
    failures++;
    err_set(CLEAVE_ERR_OOM, "out of memory allocating %zu bytes for %s", n, what ? what : "?");
    return NULL;
}

void *mem_alloc(size_t n, const char *what) {
    if (injected_failure()) return fail(n, what);
    void *p = malloc(n ? n : 1);
    return p ? p : fail(n, what);
}

void *mem_calloc(size_t count, size_t size, const char *what) {
    if (size && count > SIZE_MAX / size) return fail(SIZE_MAX, what);
    if (injected_failure()) return fail(count * size, what);
    void *p = calloc(count ? count : 1, size ? size : 1);
    return p ? p : fail(count * size, what);
}

void *mem_realloc(void *old, size_t n, const char *what) {
    if (injected_failure()) return fail(n, what);
    void *p = realloc(old, n ? n : 1);
    return p ? p : fail(n, what);
}

void *mem_alloc_aligned(size_t n, const char *what) {
    if (injected_failure()) return fail(n, what);
    size_t rounded = (n + 63) & ~(size_t)63;
    if (rounded < n) return fail(n, what);
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    return p ? p : fail(n, what);
}

void mem_free_aligned(void *p) { free(p); }

char *mem_strdup(const char *s, const char *what) { return mem_strndup(s, strlen(s), what); }

char *mem_strndup(const char *s, size_t n, const char *what) {
    char *p = mem_alloc(n + 1, what);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}
