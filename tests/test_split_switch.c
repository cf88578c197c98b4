/* A live context switching split mode (cleave_context_set_split_mode) on
 * virtual CPU devices: prefill under one mode and generate under the
 * other, both ways, and switching back and forth every few tokens, give
 * the greedy tokens of a pure mode (200 tokens; logits within 1e-4
 * relative, f32 weights and cache) on stories260K and tiny generated
 * models (llama, qwen3, the mixtures of experts) on cpu:2 and cpu:3 with
 * uneven shares, and over 8 devices (tiny8: a layer and a kv head each;
 * a mixture of experts on cpu:4). A switch
 * the devices cannot hold fails with a message, and the context goes on in
 * its old mode with the same output. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "testutil.h"

#define N_PROMPT 40
#define N_GEN 200

typedef struct {
    const char *label;
    const char *devices;
    cleave_split_mode first, then; /* prefill mode, generation mode */
    int every;                    /* > 0: switch between them every this many tokens */
    const float *shares;
    size_t n_shares;
} scenario;

/* The tests' context parameters: f32 cache, prompts in batches of 16,
 * one thread. */
static cleave_context_params params(const char *devices, cleave_split_mode mode, uint32_t n_ctx) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = n_ctx, cp.n_batch = 16, cp.n_threads = 1, cp.kv_type = CLEAVE_TYPE_F32;
    cp.devices = devices, cp.split_mode = mode;
    return cp;
}

static cleave_context *make_ctx(cleave_model *m, const char *devices, cleave_split_mode mode,
                                uint32_t n_ctx, bool keep_both) {
    cleave_context_params cp = params(devices, mode, n_ctx);
    cp.keep_both_placements = keep_both;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

static cleave_context *open_ctx(cleave_model *m, const char *devices, cleave_split_mode mode,
                                const float *shares, size_t n_shares, const size_t *budgets) {
    cleave_context_params cp = params(devices, mode, N_PROMPT + N_GEN + 8);
    cp.shares = shares, cp.n_shares = shares ? n_shares : 0;
    if (budgets) cp.budgets = budgets, cp.n_budgets = n_shares;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

/* The model at path, its vocabulary size and a prompt of N_PROMPT tokens
 * (BOS first where it has one); NULL when it does not load. */
static cleave_model *load(const char *path, size_t *nv, int32_t *prompt) {
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return NULL;
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    *nv = d.n_vocab;
    prompt[0] = cleave_token_bos(m) >= 0 ? cleave_token_bos(m) : 1;
    for (int i = 1; i < N_PROMPT; i++) prompt[i] = (int32_t)((i * 7919 + 11) % *nv);
    return m;
}

/* The prompt, then N_GEN greedy tokens; after the prompt the context
 * switches to sc->then, and with sc->every > 0 back and forth from there.
 * logits: every generation step's row. Returns false when a decode failed. */
static bool run(cleave_context *c, const scenario *sc, const int32_t *prompt, size_t nv,
                float *logits, int32_t *gen, int *switches) {
    if (cleave_decode(c, prompt, N_PROMPT, 0, 0, false)) return false;
    *switches = 0;
    if (sc && sc->then != sc->first) {
        CHECK_OK(cleave_context_set_split_mode(c, sc->then, sc->shares, sc->n_shares));
        CHECK(cleave_context_split_mode(c) == sc->then);
        ++*switches;
    }
    for (int i = 0; i < N_GEN; i++) {
        const float *l = cleave_get_logits(c, -1);
        memcpy(logits + (size_t)i * nv, l, nv * sizeof(float));
        gen[i] = tu_argmax(l, nv);
        if (sc && sc->every > 0 && i % sc->every == sc->every - 1) {
            cleave_split_mode next = cleave_context_split_mode(c) == sc->first ? sc->then : sc->first;
            CHECK_OK(cleave_context_set_split_mode(c, next, sc->shares, sc->n_shares));
            ++*switches;
        }
        if (cleave_decode(c, &gen[i], 1, N_PROMPT + i, 0, false)) return false;
    }
    return true;
}

static void check_model(const char *label, const char *path, const char *devices,
                        const float *shares, size_t n_shares) {
    size_t nv;
    int32_t prompt[N_PROMPT];
    cleave_model *m = load(path, &nv, prompt);
    if (!m) return;
    float *ref = malloc((size_t)N_GEN * nv * 4), *got = malloc((size_t)N_GEN * nv * 4);
    int32_t ref_gen[N_GEN], got_gen[N_GEN];
    int sw = 0;
    /* the reference: a pure layer split */
    cleave_context *c = open_ctx(m, devices, CLEAVE_SPLIT_LAYER, shares, n_shares, NULL);
    bool ok = c && ref && got && run(c, NULL, prompt, nv, ref, ref_gen, &sw);
    CHECK_MSG(ok, "%s: the reference run failed: %s", label, cleave_last_error());
    cleave_context_free(c);
    const scenario cases[] = {
        {"pure tensor", devices, CLEAVE_SPLIT_TENSOR, CLEAVE_SPLIT_TENSOR, 0, shares, n_shares},
        {"-psm layer -sm tensor", devices, CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR, 0, shares, n_shares},
        {"-psm tensor -sm layer", devices, CLEAVE_SPLIT_TENSOR, CLEAVE_SPLIT_LAYER, 0, shares, n_shares},
        {"back and forth every 7", devices, CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR, 7, shares, n_shares},
        {"none, then tensor", devices, CLEAVE_SPLIT_NONE, CLEAVE_SPLIT_TENSOR, 0, shares, n_shares},
    };
    for (size_t k = 0; ok && k < sizeof cases / sizeof *cases; k++) {
        const scenario *sc = &cases[k];
        c = open_ctx(m, devices, sc->first, shares, n_shares, NULL);
        bool ran = c && run(c, sc, prompt, nv, got, got_gen, &sw);
        CHECK_MSG(ran, "%s %s: %s", label, sc->label, cleave_last_error());
        double worst = 0;
        int diff = 0;
        for (int i = 0; ran && i < N_GEN; i++) {
            worst = fmax(worst, tu_rel_err(got + (size_t)i * nv, ref + (size_t)i * nv, nv));
            diff += got_gen[i] != ref_gen[i];
        }
        fprintf(stderr, "%-18s %-8s %-26s switches %3d  logits %.2e  tokens differ %d/%d\n", label,
                devices, sc->label, sw, worst, diff, N_GEN);
        CHECK_MSG(ran && worst < 1e-4, "%s %s: logits differ by %g", label, sc->label, worst);
        CHECK_MSG(ran && diff == 0, "%s %s: %d tokens differ", label, sc->label, diff);
        cleave_context_free(c);
    }
    free(ref);
    free(got);
    cleave_model_free(m);
}

/* Budgets that hold the layer split but not the tensor split (its
 * all-reduce buffers need more than a tenth over the layer plan): the
 * switch fails, says why, and the context goes on in layer mode with the
 * output it would have had. */
static void refused_switch(const char *path) {
    size_t nv;
    int32_t prompt[N_PROMPT];
    cleave_model *m = load(path, &nv, prompt);
    if (!m) return;
    cleave_context *c = open_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, NULL, 2, NULL);
    if (!c) {
        cleave_model_free(m);
        return;
    }
    cleave_device_memory mem[2];
    size_t budgets[2];
    for (int i = 0; i < 2; i++) {
        CHECK_OK(cleave_context_memory(c, (size_t)i, &mem[i]));
        size_t planned = mem[i].planned_weights + mem[i].planned_kv + mem[i].planned_compute;
        budgets[i] = planned + planned / 10; /* the layer plan and a tenth more */
    }
    float *ref = malloc((size_t)N_GEN * nv * 4), *got = malloc((size_t)N_GEN * nv * 4);
    int32_t ref_gen[N_GEN], got_gen[N_GEN];
    int sw;
    bool ok = ref && got && run(c, NULL, prompt, nv, ref, ref_gen, &sw);
    cleave_context_free(c);
    c = open_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, NULL, 2, budgets);
    ok = ok && c && cleave_decode(c, prompt, N_PROMPT, 0, 0, false) == CLEAVE_OK;
    CHECK(ok);
    if (ok) {
        cleave_status st = cleave_context_set_split_mode(c, CLEAVE_SPLIT_TENSOR, NULL, 0);
        CHECK_MSG(st == CLEAVE_ERR_OOM, "a switch past the budgets: status %d", (int)st);
        CHECK_MSG(strstr(cleave_last_error(), "stays in layer mode") != NULL, "message: %s",
                  cleave_last_error());
        CHECK(cleave_context_split_mode(c) == CLEAVE_SPLIT_LAYER);
        int diff = 0;
        for (int i = 0; i < N_GEN; i++) {
            const float *l = cleave_get_logits(c, -1);
            got_gen[i] = tu_argmax(l, nv);
            diff += got_gen[i] != ref_gen[i];
            if (cleave_decode(c, &got_gen[i], 1, N_PROMPT + i, 0, false)) {
                CHECK_MSG(false, "decode after a refused switch: %s", cleave_last_error());
                break;
            }
        }
        CHECK_MSG(diff == 0, "after a refused switch: %d tokens differ", diff);
        fprintf(stderr, "refused switch: \"%s\"; the run went on, tokens differ %d/%d\n",
                cleave_last_error(), diff, N_GEN);
    }
    cleave_context_free(c);
    free(ref);
    free(got);
    cleave_model_free(m);
}

/* Every allocation of a switch failing in turn: each failure comes back
 * as out of memory, the context stays in layer mode with its logits, and
 * once nothing fails the switched context generates the reference tokens
 * (leaks: the sanitizer build). */
static void alloc_failures(const char *path) {
    size_t nv;
    int32_t prompt[N_PROMPT], ref_gen[N_GEN], gen;
    cleave_model *m = load(path, &nv, prompt);
    if (!m) return;
    float *ref = malloc((size_t)N_GEN * nv * 4), *last = malloc(nv * 4);
    int sw;
    cleave_context *c = open_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, NULL, 2, NULL);
    bool ok = c && ref && last && run(c, NULL, prompt, nv, ref, ref_gen, &sw);
    cleave_context_free(c);
    c = ok ? open_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, NULL, 2, NULL) : NULL;
    ok = c && cleave_decode(c, prompt, N_PROMPT, 0, 0, false) == CLEAVE_OK;
    CHECK(ok);
    int failed = 0;
    if (ok) memcpy(last, cleave_get_logits(c, -1), nv * 4);
    for (long k = 1; ok && k < 100000; k++) {
        err_clear();
        err_fail_alloc_countdown = k;
        cleave_status st = cleave_context_set_split_mode(c, CLEAVE_SPLIT_TENSOR, NULL, 0);
        bool injected = err_fail_alloc_countdown == 0;
        err_fail_alloc_countdown = 0;
        if (!injected) {
            CHECK_OK(st);
            break;
        }
        failed++;
        CHECK_MSG(st == CLEAVE_ERR_OOM, "allocation %ld of the switch: %s", k, cleave_last_error());
        CHECK(cleave_context_split_mode(c) == CLEAVE_SPLIT_LAYER);
        CHECK(memcmp(last, cleave_get_logits(c, -1), nv * 4) == 0);
    }
    CHECK(ok && cleave_context_split_mode(c) == CLEAVE_SPLIT_TENSOR && failed > 10);
    int diff = 0;
    for (int i = 0; ok && i < N_GEN; i++) {
        gen = tu_argmax(cleave_get_logits(c, -1), nv);
        diff += gen != ref_gen[i];
        if (cleave_decode(c, &gen, 1, N_PROMPT + i, 0, false)) break;
    }
    fprintf(stderr, "switch with allocations failing: %d failed cleanly, then tokens differ %d/%d\n",
            failed, diff, N_GEN);
    CHECK(diff == 0);
    cleave_context_free(c);
    free(ref);
    free(last);
    cleave_model_free(m);
}

/* The switch report: every byte that reached a device left one, the KV
 * cache of the used cells moved in full (f32), the weights too. */
static void report(const char *path) {
    size_t nv;
    int32_t prompt[N_PROMPT];
    cleave_model *m = load(path, &nv, prompt);
    if (!m) return;
    cleave_context *c = open_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, NULL, 2, NULL);
    cleave_switch_report r;
    CHECK_OK(cleave_context_switch_report(c, &r));
    CHECK(r.kv_bytes == 0 && r.bytes_in[0] == 0 && r.seconds == 0);
    CHECK_OK(cleave_decode(c, prompt, N_PROMPT, 0, 0, false));
    CHECK_OK(cleave_context_set_split_mode(c, CLEAVE_SPLIT_TENSOR, NULL, 0));
    CHECK_OK(cleave_context_switch_report(c, &r));
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    size_t kv = (size_t)d.n_layer * N_PROMPT * 2 * d.n_head_kv * d.head_dim * sizeof(float);
    CHECK_MSG(r.kv_bytes == kv, "KV moved: %zu bytes, expected %zu", r.kv_bytes, kv);
    CHECK(r.n_devices == 2 && r.seconds > 0);
    CHECK(r.bytes_in[0] + r.bytes_in[1] == r.bytes_out[0] + r.bytes_out[1]);
    /* every weight byte of the model lands somewhere (more: norms go to both) */
    CHECK(r.bytes_in[0] + r.bytes_in[1] >= d.weight_bytes - d.weight_bytes / 100 + kv ||
          d.weight_type != CLEAVE_TYPE_F32);
    fprintf(stderr, "switch report: in %zu + %zu bytes, out %zu + %zu, KV %zu, %.2f ms\n",
            r.bytes_in[0], r.bytes_in[1], r.bytes_out[0], r.bytes_out[1], r.kv_bytes, r.seconds * 1e3);
    /* between the devices: what one sent the other received; each half of
     * its layers and their KV moves over (the rest is copied within it) */
    fprintf(stderr, "between the devices: %zu and %zu bytes\n", r.peer_out[0], r.peer_out[1]);
    CHECK(r.peer_out[0] == r.peer_in[1] && r.peer_out[1] == r.peer_in[0]);
    for (int i = 0; i < 2; i++)
        CHECK(r.peer_out[i] > 0 && r.peer_out[i] <= r.bytes_out[i] && r.peer_in[i] <= r.bytes_in[i]);
    size_t peer = r.peer_out[0] + r.peer_out[1], all = d.weight_bytes + kv;
    CHECK_MSG(peer > all * 4 / 10 && peer < all * 6 / 10, "%zu bytes between the devices, of %zu", peer, all);
    CHECK(cleave_context_switch_report(NULL, &r) == CLEAVE_ERR_INVALID_ARG);
    cleave_context_free(c);
    cleave_model_free(m);
}

/* The in-place switch gives up each piece as soon as its new copy holds
 * it, so its peak stays below that of building the new placement beside
 * the old (what keep_both_placements does): on every device that held
 * KV, by about its KV cache, less one layer. */
static void in_place_peak(const char *path) {
    size_t nv;
    int32_t prompt[N_PROMPT];
    cleave_model *m = load(path, &nv, prompt);
    if (!m) return;
    size_t peak[2][2];
    for (int keep = 0; keep < 2; keep++) {
        cleave_context *c = make_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, 1024, keep);
        if (!c) break;
        CHECK_OK(cleave_decode(c, prompt, N_PROMPT, 0, 0, false));
        CHECK_OK(cleave_context_set_split_mode(c, CLEAVE_SPLIT_TENSOR, NULL, 0));
        for (int d = 0; d < 2; d++) {
            cleave_device_memory mem;
            CHECK_OK(cleave_context_memory(c, (size_t)d, &mem));
            peak[keep][d] = mem.peak;
        }
        cleave_context_free(c);
    }
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    /* device 0 held the first layers' KV (f32, 1024 cells) under the layer split */
    size_t kv_layer = (size_t)1024 * 2 * d.n_head_kv * d.head_dim * sizeof(float);
    for (int i = 0; i < 2; i++)
        fprintf(stderr, "peak on cpu:%d: in place %zu, beside %zu (a KV layer: %zu)\n", i, peak[0][i],
                peak[1][i], kv_layer);
    CHECK(peak[0][0] + kv_layer <= peak[1][0] && peak[0][1] + kv_layer <= peak[1][1]);
    /* and back to the layer split: each device ends holding what the plan
     * gives it (its layers' weights, now copies, their KV, the scratch),
     * not the KV of every layer */
    cleave_context *c = make_ctx(m, "cpu:2", CLEAVE_SPLIT_TENSOR, 1024, false);
    if (c) CHECK_OK(cleave_context_set_split_mode(c, CLEAVE_SPLIT_LAYER, NULL, 0));
    for (int i = 0; c && i < 2; i++) {
        cleave_device_memory mem;
        CHECK_OK(cleave_context_memory(c, (size_t)i, &mem));
        size_t planned = mem.planned_weights + mem.planned_kv + mem.planned_compute;
        CHECK_MSG(mem.used <= planned + (64u << 10), "cpu:%d after tensor->layer holds %zu, planned %zu",
                  i, mem.used, planned);
    }
    cleave_context_free(c);
    cleave_model_free(m);
}

/* keep_both_placements: back and forth every 5 tokens; once both
 * placements exist a switch moves only the KV cache, and the output is the
 * reference's. */
static void keep_both(const char *path) {
    size_t nv;
    int32_t prompt[N_PROMPT];
    cleave_model *m = load(path, &nv, prompt);
    if (!m) return;
    float *ref = malloc((size_t)N_GEN * nv * 4);
    int32_t ref_gen[N_GEN], gen;
    int sw;
    cleave_context *c = open_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, NULL, 2, NULL);
    bool ok = c && ref && run(c, NULL, prompt, nv, ref, ref_gen, &sw);
    cleave_context_free(c);
    c = make_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, N_PROMPT + N_GEN + 8, true);
    ok = ok && c && cleave_decode(c, prompt, N_PROMPT, 0, 0, false) == CLEAVE_OK;
    int diff = 0, kv_only = 0, switches = 0;
    for (int i = 0; ok && i < N_GEN; i++) {
        gen = tu_argmax(cleave_get_logits(c, -1), nv);
        diff += gen != ref_gen[i];
        if (i % 5 == 4) {
            cleave_split_mode next =
                cleave_context_split_mode(c) == CLEAVE_SPLIT_LAYER ? CLEAVE_SPLIT_TENSOR : CLEAVE_SPLIT_LAYER;
            CHECK_OK(cleave_context_set_split_mode(c, next, NULL, 0));
            cleave_switch_report r;
            CHECK_OK(cleave_context_switch_report(c, &r));
            kv_only += r.bytes_in[0] + r.bytes_in[1] == r.kv_bytes;
            switches++;
        }
        ok = cleave_decode(c, &gen, 1, N_PROMPT + i, 0, false) == CLEAVE_OK;
    }
    fprintf(stderr, "keep both placements: %d switches, %d of them KV only, tokens differ %d/%d\n",
            switches, kv_only, diff, N_GEN);
    CHECK(ok && diff == 0);
    CHECK_MSG(kv_only == switches - 1, "%d of %d switches moved only the KV cache", kv_only, switches);
    cleave_context_free(c);
    free(ref);
    cleave_model_free(m);
}

/* Calibration: refused on one device and for lengths that do not fit;
 * on two it writes rates that cleave_psm_decide reads, and leaves the
 * context in layer mode. */
static void calibration(const char *path) {
    size_t nv;
    int32_t prompt[N_PROMPT];
    cleave_model *m = load(path, &nv, prompt);
    if (!m) return;
    const uint32_t pp[2] = {16, 64}, depths[2] = {16, 64}, bad[2] = {64, 16}, huge[1] = {100000};
    const char *rates = tu_tmp("switch-rates.txt");
    cleave_context *one = open_ctx(m, "cpu", CLEAVE_SPLIT_NONE, NULL, 1, NULL);
    CHECK(cleave_psm_calibrate(one, pp, 2, depths, 2, rates, NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "one device") != NULL);
    cleave_context_free(one);
    cleave_context *c = open_ctx(m, "cpu:2", CLEAVE_SPLIT_TENSOR, NULL, 2, NULL);
    CHECK(cleave_psm_calibrate(c, bad, 2, depths, 2, rates, NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_psm_calibrate(c, pp, 2, huge, 1, rates, NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_psm_calibrate(c, pp, 2, depths, 2, NULL, NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(cleave_psm_calibrate(c, pp, 2, depths, 2, rates, NULL, NULL));
    CHECK(cleave_context_split_mode(c) == CLEAVE_SPLIT_LAYER);
    CHECK_OK(cleave_decode(c, prompt, N_PROMPT, 0, 0, false)); /* the cache was left empty */
    cleave_psm_decision d;
    CHECK_OK(cleave_psm_decide(rates, 64, 64, 0.02, &d));
    CHECK((d.prefill == CLEAVE_SPLIT_LAYER || d.prefill == CLEAVE_SPLIT_TENSOR) && d.seconds[0] > 0);
    CHECK(cleave_psm_decide(tu_tmp("missing-rates.txt"), 64, 64, 0.02, &d) == CLEAVE_ERR_IO);
    cleave_context_free(c);
    cleave_model_free(m);
}

static void bad_input(const char *path) {
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return;
    cleave_context *c = open_ctx(m, "cpu:2", CLEAVE_SPLIT_LAYER, NULL, 2, NULL);
    const float three[3] = {1, 1, 1};
    CHECK(cleave_context_set_split_mode(NULL, CLEAVE_SPLIT_TENSOR, NULL, 0) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_context_set_split_mode(c, (cleave_split_mode)42, NULL, 0) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_context_set_split_mode(c, CLEAVE_SPLIT_TENSOR, three, 3) == CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(cleave_context_set_split_mode(c, CLEAVE_SPLIT_LAYER, NULL, 0)); /* already there */
    CHECK(cleave_context_split_mode(c) == CLEAVE_SPLIT_LAYER);
    cleave_context_free(c);
    cleave_model_free(m);
}

int main(void) {
    const float uneven3[3] = {3, 1, 2}, uneven2[2] = {1, 2}, uneven4[4] = {1, 2, 1, 1},
                uneven8[8] = {1, 1, 2, 1, 1, 1, 1, 2};
    const char *stories = tu_stories_model();
    if (stories) {
        check_model("stories260K", stories, "cpu:2", NULL, 2);
        check_model("stories260K", stories, "cpu:3", uneven3, 3);
        refused_switch(stories);
        alloc_failures(stories);
        report(stories);
        calibration(stories);
        keep_both(stories);
        in_place_peak(stories);
        bad_input(stories);
    }
    const char *llama = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    if (llama) check_model("tiny llama f32", llama, "cpu:2", uneven2, 2);
    const char *qwen3 = tu_tiny_model("qwen3", CLEAVE_TYPE_F32);
    if (qwen3) check_model("tiny qwen3 f32", qwen3, "cpu:3", NULL, 3);
    const char *moe = tu_tiny_model("qwen3moe", CLEAVE_TYPE_F32);
    if (moe) check_model("tiny qwen3moe f32", moe, "cpu:2", uneven2, 2);
    const char *oss = tu_tiny_model("gpt-oss", CLEAVE_TYPE_F32);
    if (oss) check_model("tiny gpt-oss f32", oss, "cpu:3", NULL, 3);
    const char *wide = tu_gen_model("tiny8", "llama", CLEAVE_TYPE_F32, 42);
    if (wide) check_model("tiny8 llama f32", wide, "cpu:8", uneven8, 8);
    if (moe) check_model("tiny qwen3moe f32", moe, "cpu:4", uneven4, 4);
    return tu_finish("test_split_switch");
}
