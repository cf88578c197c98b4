/* The step trace's clock and table (step_trace.h). */
#include "step_trace.h"

#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static step_trace_row *row(step_trace *t) {
    return &t->rows[t->n < STEP_TRACE_MAX_N ? t->n : STEP_TRACE_MAX_N];
}

void step_trace_begin(step_trace *t, size_t n) {
    t->mark = now_s();
    t->n = n;
    step_trace_row *r = row(t);
    if (t->last_exit > 0) r->caller += t->mark - t->last_exit;
}

void step_trace_phase(step_trace *t, step_phase p) {
    double m = now_s();
    row(t)->phase[p] += m - t->mark;
    t->mark = m;
}

void step_trace_end(step_trace *t, bool replayed) {
    step_trace_row *r = row(t);
    r->passes++;
    r->replayed += replayed;
    t->last_exit = now_s();
}

void step_trace_print(const step_trace *t, const char *device) {
    bool any = false;
    for (size_t n = 0; n <= STEP_TRACE_MAX_N; n++) {
        const step_trace_row *r = &t->rows[n];
        if (!r->passes) continue;
        if (!any)
            fprintf(stderr, "cleave step trace (%s), ms a pass: tokens, passes (recorded), caller, inputs, body, logits\n",
                    device);
        any = true;
        double k = 1e3 / (double)r->passes;
        fprintf(stderr, "  %s%zu  %llu (%llu)  %.3f  %.3f  %.3f  %.3f\n", n == STEP_TRACE_MAX_N ? ">=" : "", n,
                (unsigned long long)r->passes, (unsigned long long)r->replayed, r->caller * k,
                r->phase[STEP_INPUTS] * k, r->phase[STEP_BODY] * k, r->phase[STEP_LOGITS] * k);
    }
}
