/* Thread-local error messages behind cleave_last_error(). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_msg[1024];
_Thread_local long err_fail_alloc_countdown;

cleave_status err_set(cleave_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return st;
}

cleave_status err_wrap(cleave_status st, const char *fmt, ...) {
    char prefix[512], old[sizeof err_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof old);
    /* prefix + ": " + old, truncated to the buffer */
    size_t pl = strlen(prefix), ol = strlen(old), cap = sizeof err_msg - 1;
    if (pl > cap) pl = cap;
    memcpy(err_msg, prefix, pl);
    size_t at = pl;
    if (at + 2 <= cap) { memcpy(err_msg + at, ": ", 2); at += 2; }
    if (ol > cap - at) ol = cap - at;
    memcpy(err_msg + at, old, ol);
    err_msg[at + ol] = 0;
    return st;
}

void err_clear(void) { err_msg[0] = 0; }

const char *cleave_last_error(void) { return err_msg; }

const char *cleave_status_name(cleave_status st) {
    switch (st) {
    case CLEAVE_OK: return "ok";
    case CLEAVE_ERR_INVALID_ARG: return "invalid argument";
    case CLEAVE_ERR_IO: return "I/O error";
    case CLEAVE_ERR_FORMAT: return "format error";
    case CLEAVE_ERR_UNSUPPORTED: return "unsupported";
    case CLEAVE_ERR_OOM: return "out of memory";
    case CLEAVE_ERR_CONTEXT_FULL: return "context full";
    case CLEAVE_ERR_DEVICE: return "device error";
    case CLEAVE_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
