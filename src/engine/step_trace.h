/* CLEAVE_STEP_TRACE (options: step_trace): where a forward pass's wall
 * time goes, per batch size, printed when the placement is freed. Each
 * phase ends with the devices synchronized, so the phases do not overlap
 * (a traced run is a little slower): the caller's time between passes
 * (bookkeeping, sampling), the inputs' upload, the body (launches and
 * the devices' work; for a recorded step, the replay) and the logits'
 * read-back. */
#ifndef CLEAVE_ENGINE_STEP_TRACE_H
#define CLEAVE_ENGINE_STEP_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STEP_TRACE_MAX_N 64 /* batch sizes traced one by one; larger ones share the last row */

typedef enum { STEP_INPUTS, STEP_BODY, STEP_LOGITS, STEP_PHASES } step_phase;

typedef struct step_trace_row {
    uint64_t passes, replayed;
    double caller, phase[STEP_PHASES];
} step_trace_row;

typedef struct step_trace {
    bool on;
    double mark, last_exit; /* last_exit 0: no pass yet */
    size_t n;
    step_trace_row rows[STEP_TRACE_MAX_N + 1];
} step_trace;

/* A pass of n tokens starts (t->on only). */
void step_trace_begin(step_trace *t, size_t n);
/* The phase that ended now. */
void step_trace_phase(step_trace *t, step_phase p);
/* The pass ended; replayed: it ran as a recorded step. */
void step_trace_end(step_trace *t, bool replayed);
/* The table on stderr (nothing where no pass ran). */
void step_trace_print(const step_trace *t, const char *device);

#endif
