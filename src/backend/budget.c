/* The memory budget every backend counts its allocations against (see
 * budget.h): a reservation either fits under the limit or changes
 * nothing. */
#include "budget.h"

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

cleave_status be_budget_init(be_budget *b, size_t limit, const char *device_name) {
    b->used = b->peak = 0;
    b->limit = limit;
    if (pthread_mutex_init(&b->mu, NULL) != 0)
        return err_set(CLEAVE_ERR_DEVICE, "device '%s': cannot create a mutex", device_name);
    return CLEAVE_OK;
}

void be_budget_destroy(be_budget *b) { pthread_mutex_destroy(&b->mu); }

cleave_status be_budget_reserve(be_budget *b, size_t bytes, const char *what,
                                const char *device_name) {
    pthread_mutex_lock(&b->mu);
    /* written so that no sum can wrap */
    bool over = b->limit && (bytes > b->limit || b->used > b->limit - bytes);
    size_t used = b->used, limit = b->limit;
    if (!over) b->used += bytes;
    pthread_mutex_unlock(&b->mu);
    if (over)
        return err_set(
            CLEAVE_ERR_OOM,
            "device '%s': cannot allocate %zu bytes for %s: %zu of %zu budget bytes in use",
            device_name, bytes, what ? what : "?", used, limit);
    return CLEAVE_OK;
}

void be_budget_held(be_budget *b) {
    pthread_mutex_lock(&b->mu);
    if (b->used > b->peak) b->peak = b->used;
    pthread_mutex_unlock(&b->mu);
}

void be_budget_take(be_budget *b, size_t bytes) {
    pthread_mutex_lock(&b->mu);
    b->used = bytes > SIZE_MAX - b->used ? SIZE_MAX : b->used + bytes;
    if (b->used > b->peak) b->peak = b->used;
    pthread_mutex_unlock(&b->mu);
}

void be_budget_release(be_budget *b, size_t bytes) {
    pthread_mutex_lock(&b->mu);
    b->used -= bytes <= b->used ? bytes : b->used;
    pthread_mutex_unlock(&b->mu);
}

void be_budget_stats(be_budget *b, be_mem_stats *out) {
    pthread_mutex_lock(&b->mu);
    out->used = b->used;
    out->peak = b->peak;
    out->budget = b->limit;
    pthread_mutex_unlock(&b->mu);
    out->device_used = 0;
}
