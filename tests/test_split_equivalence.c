/* Split modes give the results of one device: stories260K and tiny
 * generated models (llama, qwen2, qwen3, the mixtures of experts, and
 * tiny8: 8 layers and 8 kv heads) on 2, 3, 4 and 8 virtual CPU devices, layer and tensor splits with even, uneven and zero shares (with
 * 3 devices and 2 kv heads one device gets no attention heads), and `none`
 * on another main device; the layer split also as a micro-batch pipeline.
 * Every row of a 40-token prompt's logits within
 * 1e-4 relative of the single-device run (f32 weights and cache; the
 * tensor split sums partial products in another order), and 128 greedy
 * tokens identical. Bad shares and budgets that are too small are refused
 * naming the device. */
#include <string.h>

#include "base/options.h"
#include "testutil.h"

#define N_PROMPT 40
#define N_GEN 128

typedef struct {
    const char *devices;
    cleave_split_mode mode;
    const float *shares;
    size_t n_shares;
    int main_device;
    uint32_t n_ubatch;
    bool host_handoff; /* CLEAVE_HOST_HANDOFF=1: no copy_from between devices */
} placement;

static cleave_context *open_ctx(cleave_model *m, const placement *p) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = N_PROMPT + N_GEN + 8;
    cp.n_batch = 16; /* the prompt runs in several batches */
    cp.n_threads = 1;
    cp.kv_type = CLEAVE_TYPE_F32;
    if (p) {
        cp.devices = p->devices;
        cp.split_mode = p->mode;
        cp.shares = p->shares;
        cp.n_shares = p->n_shares;
        cp.main_device = p->main_device;
        cp.n_ubatch = p->n_ubatch;
    }
    cleave_context *c = NULL;
    if (p && p->host_handoff) setenv("CLEAVE_HOST_HANDOFF", "1", 1);
    options_reload(); /* the switch is read when the placement is made */
    CHECK_OK(cleave_context_new(m, &cp, &c));
    unsetenv("CLEAVE_HOST_HANDOFF");
    options_reload();
    return c;
}

/* Prompt logits (all rows) and then greedy tokens. */
static void run(cleave_context *c, cleave_model *m, float *logits, int32_t *gen) {
    cleave_model_desc desc;
    cleave_model_describe(m, &desc);
    size_t nv = desc.n_vocab;
    int32_t toks[N_PROMPT];
    toks[0] = cleave_token_bos(m) >= 0 ? cleave_token_bos(m) : 1;
    for (int i = 1; i < N_PROMPT; i++) toks[i] = (int32_t)((i * 7919 + 11) % nv);
    CHECK_OK(cleave_decode(c, toks, N_PROMPT, 0, 0, true));
    for (int i = 0; i < N_PROMPT; i++) {
        const float *l = cleave_get_logits(c, i);
        if (l) memcpy(logits + (size_t)i * nv, l, nv * sizeof(float));
    }
    int32_t t = tu_argmax(cleave_get_logits(c, -1), nv);
    for (int s = 0; s < N_GEN; s++) {
        gen[s] = t;
        CHECK_OK(cleave_decode(c, &t, 1, N_PROMPT + s, 0, false));
        t = tu_argmax(cleave_get_logits(c, -1), nv);
    }
}

static void compare_model(const char *label, const char *path) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    float *ref = calloc((size_t)N_PROMPT * nv, sizeof(float)), *got = calloc((size_t)N_PROMPT * nv, sizeof(float));
    int32_t ref_gen[N_GEN], got_gen[N_GEN];
    cleave_context *c = open_ctx(m, NULL);
    if (c && ref && got) run(c, m, ref, ref_gen);
    cleave_context_free(c);

    static const float uneven2[2] = {3, 1}, uneven3[3] = {1, 2, 3}, gap3[3] = {1, 0, 2},
                       four[4] = {1, 2, 3, 1}, only_first[2] = {1, 0}, only_second[2] = {0, 1},
                       eight[8] = {2, 1, 1, 3, 1, 1, 2, 1}, eight_gap[8] = {1, 1, 0, 1, 1, 1, 0, 2};
    const placement cases[] = {
        {"cpu:2", CLEAVE_SPLIT_LAYER, NULL, 0, 0, 0, false},
        {"cpu:2", CLEAVE_SPLIT_LAYER, uneven2, 2, 0, 0, false},
        {"cpu:3", CLEAVE_SPLIT_LAYER, NULL, 0, 0, 0, false},
        {"cpu:3", CLEAVE_SPLIT_LAYER, uneven3, 3, 0, 0, false},
        {"cpu:3", CLEAVE_SPLIT_LAYER, gap3, 3, 0, 0, false},
        {"cpu:3", CLEAVE_SPLIT_NONE, NULL, 0, 2, 0, false},
        /* the prompt's 16-token passes as pipelines of 4- and 3-token micro-batches */
        {"cpu:2", CLEAVE_SPLIT_LAYER, NULL, 0, 0, 4, false},
        {"cpu:3", CLEAVE_SPLIT_LAYER, uneven3, 3, 0, 3, false},
        {"cpu:2", CLEAVE_SPLIT_TENSOR, NULL, 0, 0, 0, false},
        {"cpu:2", CLEAVE_SPLIT_TENSOR, uneven2, 2, 0, 0, false},
        {"cpu:3", CLEAVE_SPLIT_TENSOR, NULL, 0, 0, 0, false},
        {"cpu:3", CLEAVE_SPLIT_TENSOR, gap3, 3, 0, 0, false},
        {"cpu:4", CLEAVE_SPLIT_TENSOR, four, 4, 0, 0, false},
        /* eight devices: an all-reduce of eight, a pipeline of eight stages
         * (models of fewer layers or kv heads leave some devices idle) */
        {"cpu:8", CLEAVE_SPLIT_LAYER, NULL, 0, 0, 0, false},
        {"cpu:8", CLEAVE_SPLIT_LAYER, eight, 8, 0, 4, false},
        {"cpu:8", CLEAVE_SPLIT_TENSOR, NULL, 0, 0, 0, false},
        {"cpu:8", CLEAVE_SPLIT_TENSOR, eight_gap, 8, 0, 0, false},
        {"cpu:8", CLEAVE_SPLIT_NONE, NULL, 0, 7, 0, false},
        /* splits that leave one device working */
        {"cpu", CLEAVE_SPLIT_TENSOR, NULL, 0, 0, 0, false},
        {"cpu:2", CLEAVE_SPLIT_TENSOR, only_first, 2, 0, 0, false},
        {"cpu:2", CLEAVE_SPLIT_LAYER, only_second, 2, 0, 4, false},
        /* hand-offs through host memory rather than copy_from */
        {"cpu:2", CLEAVE_SPLIT_LAYER, NULL, 0, 0, 0, true},
        {"cpu:3", CLEAVE_SPLIT_LAYER, uneven3, 3, 0, 3, true},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        c = open_ctx(m, &cases[k]);
        if (!c || !ref || !got) continue;
        run(c, m, got, got_gen);
        double worst = 0;
        for (int i = 0; i < N_PROMPT; i++) {
            double e = tu_rel_err(got + (size_t)i * nv, ref + (size_t)i * nv, nv);
            if (e > worst) worst = e;
        }
        int first_diff = -1;
        for (int s = 0; s < N_GEN && first_diff < 0; s++)
            if (got_gen[s] != ref_gen[s]) first_diff = s;
        printf("%-12s %-6s %-30s logits %.2e  greedy %s\n", label, cases[k].devices,
               cleave_context_device(c), worst, first_diff < 0 ? "identical" : "DIFFERS");
        CHECK_MSG(worst < 1e-4, "%s on %s: logits differ by %g", label, cleave_context_device(c), worst);
        CHECK_MSG(first_diff < 0, "%s on %s: greedy token %d differs", label,
                  cleave_context_device(c), first_diff);
        cleave_context_free(c);
    }
    free(ref);
    free(got);
    cleave_model_free(m);
}

/* What the split refuses, and how it says so. */
static void refusals(const char *path) {
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return;
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    cp.devices = "cpu:2";
    cleave_context *c = NULL;

    cp.split_mode = CLEAVE_SPLIT_LAYER;
    const float three[3] = {1, 1, 1}, zeros[2] = {0, 0};
    cp.shares = three, cp.n_shares = 3;
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_INVALID_ARG && !c);
    CHECK(strstr(cleave_last_error(), "3 split shares for 2 devices") != NULL);
    cp.shares = zeros, cp.n_shares = 2;
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_INVALID_ARG && !c);
    cp.shares = NULL, cp.n_shares = 0;

    /* a split mode outside the enum, a cell count below AUTO: refused by name */
    cp.split_mode = (cleave_split_mode)7;
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_INVALID_ARG && !c);
    CHECK(strstr(cleave_last_error(), "unknown split mode 7") != NULL);
    cp.split_mode = CLEAVE_SPLIT_LAYER;
    cp.kv_vram_cells = CLEAVE_KV_VRAM_AUTO - 1;
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_INVALID_ARG && !c);
    CHECK(strstr(cleave_last_error(), "is not a count") != NULL);
    cp.kv_vram_cells = CLEAVE_KV_VRAM_ALL;

    /* a budget too small for device 1's half: refused, naming device 1 only */
    const size_t budgets[2] = {0, 4096};
    cp.budgets = budgets, cp.n_budgets = 2;
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_OOM && !c);
    CHECK_MSG(strstr(cleave_last_error(), "device 1 needs") && !strstr(cleave_last_error(), "device 0 needs"),
              "%s", cleave_last_error());
    cp.budgets = NULL, cp.n_budgets = 0;

    /* fit: budgets with room for about half the asked context give a
     * smaller one; without fit the same budgets are refused */
    cp.n_ctx = 4096, cp.n_batch = 16; /* the KV cache dominates */
    c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    cleave_device_memory mem[2];
    size_t need[2];
    CHECK(cleave_context_memory(c, 2, &mem[0]) == CLEAVE_ERR_INVALID_ARG); /* no device 2 */
    for (int d = 0; d < 2 && c; d++) {
        CHECK_OK(cleave_context_memory(c, (size_t)d, &mem[d]));
        need[d] = mem[d].planned_weights + mem[d].planned_compute + mem[d].planned_kv / 2;
    }
    cleave_context_free(c);
    c = NULL;
    const size_t half[2] = {need[0], need[1]};
    cp.budgets = half, cp.n_budgets = 2;
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_OOM && !c);
    cp.fit = true;
    cp.fit_min_ctx = 64;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    if (c) {
        uint32_t got = cleave_context_n_ctx(c);
        CHECK_MSG(got >= 1024 && got < 2048, "fit chose %u cells", got);
        for (int d = 0; d < 2; d++) {
            CHECK_OK(cleave_context_memory(c, (size_t)d, &mem[d]));
            CHECK(mem[d].planned_weights + mem[d].planned_kv + mem[d].planned_compute <= half[d]);
            CHECK(mem[d].peak <= half[d]);
        }
        cleave_context_free(c);
        c = NULL;
    }
    cp.fit = false, cp.budgets = NULL, cp.n_budgets = 0, cp.n_ctx = 64, cp.n_batch = 0;

    cp.devices = "cpu:0";
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_INVALID_ARG && !c);
    cp.devices = "cpu:2";
    cp.split_mode = CLEAVE_SPLIT_NONE;
    cp.main_device = 2;
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_INVALID_ARG && !c);
    cleave_model_free(m);
}

int main(void) {
    const char *stories = tu_stories_model();
    if (stories) compare_model("stories260K", stories);
    const char *archs[] = {"llama", "qwen2", "qwen3", "qwen3moe", "mixtral", "gpt-oss"};
    for (int a = 0; a < 6; a++) {
        const char *p = tu_tiny_model(archs[a], CLEAVE_TYPE_F32);
        char label[32];
        snprintf(label, sizeof label, "tiny %s", archs[a]);
        if (p) compare_model(label, p);
    }
    const char *wide = tu_gen_model("tiny8", "llama", CLEAVE_TYPE_F32, 42);
    if (wide) compare_model("tiny8 llama", wide);
    /* q8_0 weights: the tensor split cuts o and down between 32-blocks */
    const char *q8 = tu_tiny_model("llama", CLEAVE_TYPE_Q8_0);
    if (q8) compare_model("tiny llama q8_0", q8);
    /* and each expert's rows and columns */
    const char *moe_q8 = tu_tiny_model("qwen3moe", CLEAVE_TYPE_Q8_0);
    if (moe_q8) compare_model("tiny qwen3moe q8_0", moe_q8);
    /* Not tiny8 in q8_0: over its 8 layers a tensor split's last-bit
     * differences (partial sums added in another order) round some int8
     * activation the other way, and the logits move by about 5e-3, a sixth
     * of what q8_0 weights move them from f16 (2.8e-2): noise of the
     * weight type, not of the split (the layer split stays exact). */
    const char *p = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    if (p) refusals(p);
    return tu_finish("test_split_equivalence");
}
