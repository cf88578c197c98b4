/* Error reporting inside the library: a thread-local message plus the
 * status code, so every layer can fail with a precise reason and the
 * public API hands it out through cleave_last_error(). */
#ifndef CLEAVE_ERROR_H
#define CLEAVE_ERROR_H

#include "cleave.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ERR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ERR_PRINTF(a, b)
#endif

/* Records a message and returns st, so callers write `return err_set(...)`. */
cleave_status err_set(cleave_status st, const char *fmt, ...) ERR_PRINTF(2, 3);
/* Prefixes the current message with context ("loading x.gguf: ..."). */
cleave_status err_wrap(cleave_status st, const char *fmt, ...) ERR_PRINTF(2, 3);
void err_clear(void);

/* Test hook: when > 0, counts down on each checked allocation and makes the
 * allocation at zero fail, to prove every failure path is handled. */
#ifndef __cplusplus /* C only: the CUDA sources never inject failures */
extern _Thread_local long err_fail_alloc_countdown;
#endif

#ifdef __cplusplus
}
#endif
#endif
