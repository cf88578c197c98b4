/* A device's memory budget, one helper for every backend: bytes in use,
 * their peak, and an optional limit that a reservation may not pass (so
 * tests and the planner can emulate a full device). Thread-safe: alloc and
 * free may come from any thread. */
#ifndef CLEAVE_BE_BUDGET_H
#define CLEAVE_BE_BUDGET_H

#include <pthread.h>
#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct be_budget {
    pthread_mutex_t mu;       /* a leaf lock: nothing else is taken under it */
    size_t used, peak, limit; /* limit 0 = unlimited */
} be_budget;

/* CLEAVE_ERR_DEVICE (message naming device_name) if the mutex cannot be made. */
cleave_status be_budget_init(be_budget *b, size_t limit, const char *device_name);
void be_budget_destroy(be_budget *b);

/* Counts bytes as in use, or, when they would pass the limit, changes
 * nothing and returns CLEAVE_ERR_OOM naming `what` and the device. The
 * peak is not raised: be_budget_held does that once the memory is really
 * held, so a request that then fails never shows in it. */
cleave_status be_budget_reserve(be_budget *b, size_t bytes, const char *what,
                                const char *device_name);
/* Raises the peak to the bytes in use. */
void be_budget_held(be_budget *b);
/* Counts bytes already held whatever the limit (scratch that the plan
 * budgets for elsewhere) and raises the peak. */
void be_budget_take(be_budget *b, size_t bytes);
/* Gives back bytes counted by reserve or take (never below 0). */
void be_budget_release(be_budget *b, size_t bytes);
/* used, peak and budget (the limit); device_used 0, for the caller to set. */
void be_budget_stats(be_budget *b, be_mem_stats *out);

#ifdef __cplusplus
}
#endif
#endif
