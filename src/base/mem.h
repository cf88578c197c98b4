/* Checked allocation: every heap allocation in the library goes through
 * these so failures (real, or injected by tests) become CLEAVE_ERR_OOM
 * with a message instead of a crash. */
#ifndef CLEAVE_MEM_H
#define CLEAVE_MEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return NULL on failure (and set the error message naming `what`). */
void *mem_alloc(size_t n, const char *what);
void *mem_calloc(size_t count, size_t size, const char *what);
void *mem_realloc(void *p, size_t n, const char *what);
/* 64-byte aligned, for SIMD; free with mem_free_aligned. */
void *mem_alloc_aligned(size_t n, const char *what);
void mem_free_aligned(void *p);
char *mem_strdup(const char *s, const char *what);
/* s[0, n) and a terminating NUL (s need not be terminated). */
char *mem_strndup(const char *s, size_t n, const char *what);
/* Allocations that have failed on this thread so far: work that tries
 * many plans and takes a failed one for "does not fit" compares it before
 * and after, so that running out of memory is never taken for that. */
unsigned long mem_failures(void);

#ifdef __cplusplus
}
#endif
#endif
