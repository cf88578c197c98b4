/* What the rest of cleave asks of the CUDA backend, in builds without it. */
#include "backend/backend.h"

#ifndef CLEAVE_WITH_CUDA
bool be_is_cuda(const be_device *d) {
    (void)d;
    return false;
}
#endif
