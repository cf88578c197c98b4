/* Device memory a placement owns: every allocation recorded with its
 * device, so freeing the placement (or one piece of it in a switch) gives
 * back exactly what it took, and never what it only maps or aliases. */
#include <stdlib.h>

#include "engine_internal.h"
#include "base/mem.h"

cleave_status engine_own(placement *pl, int d, void *p) {
    if (pl->n_owned == pl->cap_owned) {
        size_t cap = pl->cap_owned ? 2 * pl->cap_owned : 64;
        engine_alloc *n = mem_realloc(pl->owned, cap * sizeof *n, "device allocation list");
        if (!n) return CLEAVE_ERR_OOM;
        pl->owned = n;
        pl->cap_owned = cap;
    }
    pl->owned[pl->n_owned++] = (engine_alloc){p, d};
    return CLEAVE_OK;
}

void *engine_dev_alloc(placement *pl, int d, size_t bytes, const char *what) {
    be_device *dev = pl->devs[d].dev;
    void *p = be_alloc(dev, bytes, what);
    if (p && engine_own(pl, d, p)) {
        be_free(dev, p);
        return NULL;
    }
    return p;
}

/* Frees p on device d where pl owns it (mapped or aliased memory is not
 * pl's to free) and forgets it. */
void engine_release(placement *pl, int d, const void *p) {
    if (!p) return;
    for (size_t i = 0; i < pl->n_owned; i++)
        if (pl->owned[i].p == p && pl->owned[i].dev == d) {
            be_device *dev = pl->devs[d].dev;
            be_free(dev, (void *)p);
            pl->owned[i] = pl->owned[--pl->n_owned];
            return;
        }
}

void engine_free_owned(placement *pl) {
    for (size_t i = 0; i < pl->n_owned; i++) {
        be_device *d = pl->devs[pl->owned[i].dev].dev;
        be_free(d, pl->owned[i].p);
    }
    free(pl->owned);
    pl->owned = NULL;
    pl->n_owned = pl->cap_owned = 0;
}
