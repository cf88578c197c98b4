/* The backend interface's shared pieces: capability bits and the refusal
 * of an optional op a device lacks (a CPU device has no fused ops and no
 * graphs), the memory budget every backend counts against, and the
 * pointer-to-size table the CUDA device frees by (run here, on the host,
 * since CI has no GPU). */
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/budget.h"
#include "backend/size_table.h"
#include "testutil.h"

static void test_caps(void) {
    be_device *d = NULL;
    CHECK_OK(be_cpu_create("cpu-caps", 1, 0, &d));
    if (!d) return;
    unsigned caps = be_caps(d);
    CHECK(be_has(d, BE_CAP_MAP_HOST) && be_has(d, BE_CAP_PEER) && be_has(d, BE_CAP_COPY2D));
    CHECK(be_has(d, BE_CAP_TIER));
    CHECK(!be_has(d, BE_CAP_UPLOAD_MAT) && !be_has(d, BE_CAP_GRAPH) && !be_has(d, BE_CAP_FFN));
    CHECK(!(caps & (BE_CAP_ADD_RMS_NORM | BE_CAP_ROPE_STORE | BE_CAP_MATMUL_SWIGLU |
                    BE_CAP_MATMUL_MULTI)));
    CHECK(be_caps(NULL) == 0);
    /* optional ops it lacks: refused by name, never a crash */
    CHECK(be_graph_begin(d) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(strstr(cleave_last_error(), "cpu-caps") != NULL);
    void *g = NULL;
    CHECK(be_graph_end(d, &g) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(be_graph_launch(d, NULL) == CLEAVE_ERR_UNSUPPORTED);
    be_graph_free(d, NULL);
    CHECK(be_ffn(d, NULL, NULL, NULL, NULL, 0, NULL, NULL) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(be_add_rms_norm(d, NULL, NULL, NULL, NULL, 0, 0, 0.0f) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(be_matmul_swiglu(d, NULL, NULL, NULL, 0, NULL) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(be_matmul_multi(d, NULL, NULL, NULL, 0, NULL, 0) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(be_rope_store(d, NULL, NULL, NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, CLEAVE_TYPE_F32,
                        NULL) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(!be_has_router_route(d) && !be_has_combine_add_norm(d));
    CHECK(be_router_route(d, NULL, NULL, NULL, 0, 0, BE_GATING_SOFTMAX, false, 1.0f, NULL, NULL, NULL) ==
          CLEAVE_ERR_UNSUPPORTED);
    CHECK(be_combine_add_norm(d, NULL, NULL, 0, 0, 0, NULL, NULL, NULL, 0.0f) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(be_upload_mat(d, NULL, NULL, "x") == CLEAVE_ERR_UNSUPPORTED);
    be_device *e = NULL;
    CHECK_OK(be_cpu_create("cpu-other", 1, 0, &e));
    CHECK(be_same_backend(d, e) && !be_same_backend(d, NULL));
    be_destroy(e);
    be_destroy(d);
    be_destroy(NULL);
}

static void test_budget(void) {
    be_budget b;
    CHECK_OK(be_budget_init(&b, 1000, "dev"));
    be_mem_stats ms;
    CHECK_OK(be_budget_reserve(&b, 600, "a", "dev"));
    be_budget_held(&b);
    /* over the limit: refused, nothing changed */
    CHECK(be_budget_reserve(&b, 401, "b", "dev") == CLEAVE_ERR_OOM);
    CHECK(strstr(cleave_last_error(), "'dev'") && strstr(cleave_last_error(), " b:"));
    CHECK(be_budget_reserve(&b, SIZE_MAX, "huge", "dev") == CLEAVE_ERR_OOM);
    be_budget_stats(&b, &ms);
    CHECK(ms.used == 600 && ms.peak == 600 && ms.budget == 1000 && ms.device_used == 0);
    /* exactly up to the limit fits; the peak waits for held */
    CHECK_OK(be_budget_reserve(&b, 400, "c", "dev"));
    be_budget_stats(&b, &ms);
    CHECK(ms.used == 1000 && ms.peak == 600);
    be_budget_held(&b);
    be_budget_release(&b, 1000);
    be_budget_take(&b, 1500); /* counted whatever the limit */
    be_budget_stats(&b, &ms);
    CHECK(ms.used == 1500 && ms.peak == 1500);
    be_budget_release(&b, 2000); /* never below 0 */
    be_budget_stats(&b, &ms);
    CHECK(ms.used == 0 && ms.peak == 1500);
    be_budget_destroy(&b);
}

static void test_size_table(void) {
    enum { N = 5000 };
    be_size_table t = {0};
    size_t bytes = 0;
    CHECK(!be_size_table_take(&t, (void *)(uintptr_t)256, &bytes));
    /* pointers 256 bytes apart, as cudaMalloc hands them out, plus some far
     * apart; every size comes back once, in any order of removal */
    for (uintptr_t i = 1; i <= N; i++)
        CHECK_OK(be_size_table_put(&t, (void *)(i * 256 + (i % 7) * (1u << 30)), i));
    CHECK(t.n == N && t.cap >= 2 * N);
    for (uintptr_t i = 1; i <= N; i += 2) {
        CHECK(be_size_table_take(&t, (void *)(i * 256 + (i % 7) * (1u << 30)), &bytes) &&
              bytes == i);
        CHECK(!be_size_table_take(&t, (void *)(i * 256 + (i % 7) * (1u << 30)), &bytes));
    }
    for (uintptr_t i = 2; i <= N; i += 2) {
        bytes = 0;
        CHECK(be_size_table_take(&t, (void *)(i * 256 + (i % 7) * (1u << 30)), &bytes) &&
              bytes == i);
    }
    CHECK(t.n == 0);
    CHECK(!be_size_table_take(&t, NULL, &bytes));
    be_size_table_free(&t);
    be_size_table_free(&t);
}

int main(void) {
    test_caps();
    test_budget();
    test_size_table();
    return tu_finish("test_backend_tables");
}
