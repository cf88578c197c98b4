/* Makes each allocation on the load / context / decode / sampler path fail
 * in turn (SQLite style): every failure must come back as a status with a
 * message, leak nothing (the sanitizer build checks) and leave the process
 * able to try again. */
#include <string.h>

#include "error.h"
#include "testutil.h"

static cleave_status attempt(const char *path) {
    cleave_model *m = NULL;
    cleave_context *ctx = NULL;
    cleave_sampler *s = NULL;
    cleave_status st = cleave_model_load(path, NULL, &m);
    if (!st) {
        cleave_context_params cp = cleave_context_default_params();
        cp.n_ctx = 32;
        cp.n_threads = 1;
        st = cleave_context_new(m, &cp, &ctx);
    }
    int32_t toks[4] = {1, 300, 301, 302};
    if (!st) st = cleave_decode(ctx, toks, 4, 0, 0, true);
    cleave_sampler_params sp = cleave_sampler_default_params();
    if (!st) st = cleave_sampler_new(&sp, 320, &s);
    int32_t next;
    if (!st) st = cleave_sampler_sample(s, cleave_get_logits(ctx, -1), &next);
    cleave_sampler_free(s);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return st;
}

int main(void) {
    const char *path = tu_tiny_model("qwen2", CLEAVE_TYPE_F16);
    if (!path) return tu_finish("test_alloc_failures");
    int failures_seen = 0;
    for (long k = 1; k < 100000; k++) {
        err_clear();
        err_fail_alloc_countdown = k;
        cleave_status st = attempt(path);
        bool injected = err_fail_alloc_countdown == 0;
        err_fail_alloc_countdown = 0;
        if (!injected) { /* every allocation passed: the path is done */
            CHECK_OK(st);
            fprintf(stderr, "%d allocation sites failed cleanly\n", failures_seen);
            break;
        }
        failures_seen++;
        CHECK_MSG(st == CLEAVE_ERR_OOM, "allocation %ld: got %s (%s)", k, cleave_status_name(st),
                  cleave_last_error());
        CHECK_MSG(strstr(cleave_last_error(), "out of memory") != NULL, "allocation %ld: '%s'", k,
                  cleave_last_error());
    }
    CHECK(failures_seen > 10);
    return tu_finish("test_alloc_failures");
}
