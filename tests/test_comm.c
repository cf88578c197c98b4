/* The collectives' contract on virtual CPU devices (the host communicator):
 * contributions summed in device order into every device with a buffer,
 * receive-only devices, no contributor (zeros), requests beyond the size
 * it was made for refused without touching anything; and the NCCL
 * loader's refusals, which need no GPU. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/nccl_loader.h"
#include "testutil.h"

#define N 3
#define FLOATS 37 /* not a multiple of 4 */

int main(void) {
    be_device *dev[N];
    float *buf[N];
    for (int d = 0; d < N; d++) {
        CHECK_OK(be_cpu_create("cpu", 1, 0, &dev[d]));
        buf[d] = be_alloc(dev[d], FLOATS * sizeof(float), "buffer");
        CHECK(buf[d] != NULL);
    }
    comm *c = NULL;
    CHECK_OK(comm_create(dev, N, FLOATS, &c));
    if (!c) return tu_finish("test_comm");
    CHECK(!strcmp(comm_kind(c), "host") && !comm_graph_safe(c, 4) && !comm_can_fuse(c, 1, 4));

    /* devices 0 and 2 contribute, 1 only receives */
    for (int d = 0; d < N; d++)
        for (int i = 0; i < FLOATS; i++) buf[d][i] = (float)(d * 100 + i) * 0.25f;
    bool has[N] = {true, false, true};
    CHECK_OK(comm_all_reduce_sum(c, buf, has, FLOATS));
    for (int d = 0; d < N; d++)
        for (int i = 0; i < FLOATS; i++)
            CHECK(buf[d][i] == (float)i * 0.25f + (float)(200 + i) * 0.25f);

    /* a device without a buffer takes no part and keeps its memory */
    float *part[N] = {buf[0], NULL, buf[2]};
    buf[1][0] = -7.0f;
    bool all[N] = {true, true, true};
    CHECK_OK(comm_all_reduce_sum(c, part, all, FLOATS));
    CHECK(buf[1][0] == -7.0f && buf[0][0] == 2 * 50.0f && buf[2][5] == buf[0][5]);

    /* no contributor: zeros */
    bool none[N] = {false, false, false};
    CHECK_OK(comm_all_reduce_sum(c, buf, none, FLOATS));
    for (int d = 0; d < N; d++) CHECK(buf[d][0] == 0.0f && buf[d][FLOATS - 1] == 0.0f);

    /* too large: refused, nothing written */
    buf[0][0] = 1.0f;
    CHECK(comm_all_reduce_sum(c, buf, all, FLOATS + 1) == CLEAVE_ERR_INVALID_ARG);
    CHECK(buf[0][0] == 1.0f && strstr(cleave_last_error(), "all-reduce"));
    /* no fused form on the host */
    float *x[N] = {0}, *h[N] = {0};
    const float *w[N] = {0};
    CHECK(comm_all_reduce_add_norm(c, buf, all, x, w, h, 1, 4, 1e-5f) == CLEAVE_ERR_UNSUPPORTED);
    comm_free(c);

    /* device counts the communicator refuses */
    CHECK(comm_create(dev, 0, FLOATS, &c) == CLEAVE_ERR_INVALID_ARG && c == NULL);

    /* NCCL: argument errors come before loading anything */
    nccl_lib *l = NULL;
    int one[1] = {0}, twice[2] = {1, 1};
    CHECK(nccl_open(one, 1, &l) == CLEAVE_ERR_INVALID_ARG && l == NULL);
    CHECK(nccl_open(twice, 2, &l) == CLEAVE_ERR_UNSUPPORTED && l == NULL);
    CHECK(strstr(cleave_last_error(), "cuda:1 appears twice") != NULL);

    for (int d = 0; d < N; d++) {
        be_free(dev[d], buf[d]);
        be_destroy(dev[d]);
    }
    return tu_finish("test_comm");
}
