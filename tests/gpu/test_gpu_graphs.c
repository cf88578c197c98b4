/* Decode steps replayed from recorded graphs against the same steps run
 * op by op (CLEAVE_NO_GRAPH): 12 sequences with prompts of different
 * lengths, then 48 steps of one token for some of them (batch sizes
 * cycling through 1..12, so each shape is recorded, replayed, outgrown by
 * a larger one's scratch and recorded again), crossing buckets of cells;
 * every row of logits compared. For the weight types whose batches take
 * different kernels (f32; bf16: the GEMV, then cuBLAS past 8 tokens;
 * q8_0; Q4_K_M: the block GEMV, then the int8 GEMM past 6), with sequence
 * regions, with a tiered cache, and under a tensor split of two handles
 * of one GPU. The two runs differ only in how the attention splits the
 * cells (a recorded step sizes its splits for the bucket), so they agree
 * to rounding; a replay reading memory that moved would not.
 * Needs a CUDA device; run on the GPU machine (not part of CI). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/options.h"
#include "testutil.h"

#define N_SEQ 12
#define N_STEPS 48

typedef struct {
    const char *devices;
    cleave_split_mode mode;
    uint32_t regions;
    int64_t vram_cells;
} setup;

static cleave_context *ctx_on(cleave_model *m, const setup *s, bool graphs) {
    if (graphs)
        unsetenv("CLEAVE_NO_GRAPH");
    else
        setenv("CLEAVE_NO_GRAPH", "1", 1);
    options_reload(); /* read when the placement is made */
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = s->regions ? 2048 : 1024;
    cp.n_batch = 64;
    cp.devices = s->devices;
    cp.split_mode = s->mode;
    cp.seq_regions = s->regions;
    cp.kv_vram_cells = s->vram_cells;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    unsetenv("CLEAVE_NO_GRAPH");
    options_reload();
    return c;
}

static void compare(const char *label, const char *path, const setup *s, double tol) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    cleave_context *g = ctx_on(m, s, true), *o = ctx_on(m, s, false);
    if (!g || !o) {
        cleave_context_free(g), cleave_context_free(o), cleave_model_free(m);
        return;
    }
    int32_t len[N_SEQ];
    double worst = 0;
    for (int q = 0; q < N_SEQ; q++) {
        len[q] = 5 + 7 * q;
        int32_t toks[128];
        for (int i = 0; i < len[q]; i++) toks[i] = (int32_t)((q * 131 + i * 17 + 3) % nv);
        CHECK_OK(cleave_decode(g, toks, (size_t)len[q], 0, q, false));
        CHECK_OK(cleave_decode(o, toks, (size_t)len[q], 0, q, false));
    }
    int rows = 0;
    for (int k = 0; k < N_STEPS; k++) {
        int n = 1 + (k * 5) % N_SEQ; /* 1, 6, 11, 4, 9, 2, 7, 12, ... */
        int32_t tok[N_SEQ], pos[N_SEQ], seq[N_SEQ];
        for (int i = 0; i < n; i++) {
            int q = (k + i) % N_SEQ;
            seq[i] = q, pos[i] = len[q]++;
            tok[i] = (int32_t)((k * 31 + q * 17 + 1) % nv);
        }
        CHECK_OK(cleave_decode_batch(g, tok, pos, seq, (size_t)n));
        CHECK_OK(cleave_decode_batch(o, tok, pos, seq, (size_t)n));
        for (int i = 0; i < n; i++) {
            const float *a = cleave_get_logits(g, i), *b = cleave_get_logits(o, i);
            double e = a && b ? tu_rel_err(a, b, nv) : 1.0;
            if (e > worst) worst = e;
            rows++;
        }
    }
    fprintf(stderr, "%-34s %-14s %d rows: worst %.2e%s\n", label, s->devices, rows, worst,
            worst < tol ? "" : "   <-- FAIL");
    CHECK_MSG(worst < tol, "%s: recorded steps differ from op by op by %.2e (bound %g)", label, worst, tol);
    cleave_context_free(g);
    cleave_context_free(o);
    cleave_model_free(m);
}

int main(void) {
    be_device *probe = NULL;
    if (be_cuda_create(0, 0, &probe) != CLEAVE_OK) tu_skip("no CUDA device");
    be_destroy(probe);
    const setup one = {"cuda:0", CLEAVE_SPLIT_NONE, 0, CLEAVE_KV_VRAM_ALL};
    const setup regions = {"cuda:0", CLEAVE_SPLIT_NONE, N_SEQ, CLEAVE_KV_VRAM_ALL};
    const setup tiered = {"cuda:0", CLEAVE_SPLIT_NONE, 0, 0}; /* every cell in host memory */
    const setup tensor = {"cuda:0,cuda:0", CLEAVE_SPLIT_TENSOR, 0, CLEAVE_KV_VRAM_ALL};
    /* f32 weights and activations: only the attention's summation order
     * differs. The others round activations to bf16, f16 or int8, where
     * a last-bit difference can move a value to the next step. */
    const char *f32 = tu_gen_model("small", "llama", CLEAVE_TYPE_F32, 7);
    if (f32) compare("small llama f32", f32, &one, 1e-4);
    if (f32) compare("small llama f32 (regions)", f32, &regions, 1e-4);
    if (f32) compare("small llama f32 (tiered)", f32, &tiered, 1e-4);
    if (f32) compare("small llama f32 (tensor split)", f32, &tensor, 1e-4);
    const char *bf16 = tu_gen_model("small", "llama", CLEAVE_TYPE_BF16, 7);
    if (bf16) compare("small llama bf16", bf16, &one, 2e-2);
    const char *q8 = tu_gen_model("small", "llama", CLEAVE_TYPE_Q8_0, 7);
    if (q8) compare("small llama q8_0", q8, &one, 2e-2);
    const char *q4km = tu_gen_model_mix("small", "llama", "Q4_K_M", 7);
    if (q4km) compare("small llama Q4_K_M", q4km, &one, 2e-2);
    if (q4km) compare("small llama Q4_K_M (regions)", q4km, &regions, 2e-2);
    if (q4km) compare("small llama Q4_K_M (tensor split)", q4km, &tensor, 2e-2);
    return tu_finish("test_gpu_graphs");
}
