/* Each phase its own placement, end to end on virtual CPU devices with
 * budgets: what cleave_placement_preview says is what the context then
 * allocates, per device and phase (weights copied, not mapped, so the
 * allocator sees them); uneven budgets where equal shares cannot place
 * the tensor phase but fitted ones can; shares given per phase in both
 * directions; a -ts that makes generation impossible known when the
 * context is made, the request going on in the prefill mode; and the
 * same greedy text as one device in every case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "testutil.h"

#define N_PROMPT 12
#define N_GEN 16

static size_t nv;
static int32_t prompt[N_PROMPT];

static cleave_context_params params(const char *devices, cleave_split_mode pre, cleave_split_mode gen) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 256, cp.n_batch = 32, cp.n_threads = 1, cp.kv_type = CLEAVE_TYPE_F32;
    cp.devices = devices, cp.split_mode = gen, cp.prefill_split_mode = pre;
    cp.fit = true, cp.fit_min_ctx = 64;
    return cp;
}

/* The prompt, then N_GEN greedy tokens, moving to the generation phase
 * after the prompt; *switched: whether that switch happened. */
static bool generate(cleave_context *c, int32_t *gen, bool *switched) {
    if (cleave_decode(c, prompt, N_PROMPT, 0, 0, false)) return false;
    cleave_split_mode before = cleave_context_split_mode(c);
    cleave_status st = cleave_context_set_phase(c, CLEAVE_PHASE_GENERATE);
    *switched = st == CLEAVE_OK && cleave_context_split_mode(c) != before;
    if (st) CHECK_MSG(cleave_context_split_mode(c) == before, "a refused switch moved the context");
    for (int i = 0; i < N_GEN; i++) {
        gen[i] = tu_argmax(cleave_get_logits(c, -1), nv);
        if (cleave_decode(c, &gen[i], 1, N_PROMPT + i, 0, false)) return false;
    }
    return true;
}

static size_t phase_total(const cleave_placement_report *r, int k, size_t d) {
    return r->phase[k].weights[d] + r->phase[k].kv[d] + r->phase[k].compute[d];
}

/* Within 1% (and 4 KiB: allocations round up). */
static bool near(size_t got, size_t want) {
    size_t diff = got > want ? got - want : want - got;
    return diff <= want / 100 + 4096;
}

/* The context's allocations equal the preview's phase k on every device. */
static void check_allocated(cleave_context *c, const cleave_placement_report *r, int k, const char *what) {
    for (size_t d = 0; d < r->n_devices; d++) {
        cleave_device_memory mem;
        CHECK_OK(cleave_context_memory(c, d, &mem));
        size_t want = phase_total(r, k, d);
        CHECK_MSG(near(mem.used, want), "%s, %s phase, device %zu: allocated %zu, preview said %zu", what,
                  k ? "generation" : "prefill", d, mem.used, want);
        CHECK(mem.planned_weights == r->phase[k].weights[d] && mem.planned_kv == r->phase[k].kv[d]);
        fprintf(stderr, "  %s, %s phase, device %zu: preview %zu bytes, allocated %zu\n", what,
                k ? "generation" : "prefill", d, want, mem.used);
    }
}

/* A context of cp: the preview, then the context's allocations in both
 * phases, and its text against ref. Returns whether the switch happened. */
static bool run_case(cleave_model *m, const cleave_context_params *cp, const int32_t *ref, const char *what) {
    static cleave_placement_report r, live;
    CHECK_OK(cleave_placement_preview(m, cp, &r));
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, cp, &c));
    if (!c) return false;
    CHECK_OK(cleave_context_placement(c, &live));
    CHECK(live.n_ctx == r.n_ctx && live.switch_fits[1] == r.switch_fits[1] &&
          memcmp(live.phase, r.phase, sizeof r.phase) == 0);
    CHECK(cleave_context_n_ctx(c) == r.n_ctx && cleave_context_phase(c) == CLEAVE_PHASE_PREFILL);
    check_allocated(c, &r, CLEAVE_PHASE_PREFILL, what);
    int32_t gen[N_GEN];
    bool switched = false;
    CHECK(generate(c, gen, &switched));
    CHECK_MSG(switched == (r.two_phases && r.switch_fits[CLEAVE_PHASE_GENERATE]), "%s: switched %d, preview %d",
              what, switched, r.switch_fits[CLEAVE_PHASE_GENERATE]);
    if (switched) {
        CHECK(cleave_context_phase(c) == CLEAVE_PHASE_GENERATE);
        check_allocated(c, &r, CLEAVE_PHASE_GENERATE, what);
        /* the switch's fullest point as the preview said it */
        for (size_t d = 0; d < r.n_devices; d++) {
            cleave_device_memory mem;
            CHECK_OK(cleave_context_memory(c, d, &mem));
            size_t want = r.switch_peak[CLEAVE_PHASE_GENERATE][d];
            fprintf(stderr, "  %s, switch, device %zu: peak predicted %zu, allocator's %zu\n", what, d, want, mem.peak);
            CHECK_MSG(mem.peak <= want + 4096 && mem.peak + want / 20 >= want,
                      "%s, device %zu: the switch peaked at %zu, predicted %zu", what, d, mem.peak, want);
        }
        /* its copies within the preview's, made for the whole context in use */
        cleave_switch_report sw;
        CHECK_OK(cleave_context_switch_report(c, &sw));
        for (size_t d = 0; d < r.n_devices; d++) {
            size_t o = r.switch_bytes_out[CLEAVE_PHASE_GENERATE][d], in = r.switch_bytes_in[CLEAVE_PHASE_GENERATE][d];
            fprintf(stderr, "  %s, switch, device %zu: sent %zu, received %zu; preview (full) %zu, %zu\n", what, d,
                    sw.peer_out[d], sw.peer_in[d], o, in);
            CHECK_MSG(sw.peer_out[d] <= o && sw.peer_in[d] <= in && (o == 0) == (sw.peer_out[d] == 0) &&
                          sw.peer_out[d] <= sw.bytes_out[d],
                      "%s, device %zu: sent %zu and received %zu, the preview said %zu and %zu", what, d,
                      sw.peer_out[d], sw.peer_in[d], o, in);
        }
    }
    int diff = 0;
    for (int i = 0; i < N_GEN; i++) diff += gen[i] != ref[i];
    CHECK_MSG(diff == 0, "%s: %d of %d tokens differ from one device's", what, diff, N_GEN);
    cleave_context_free(c);
    return switched;
}

static void totals(cleave_model *m, cleave_context_params cp, size_t need[2]) {
    static cleave_placement_report r;
    CHECK_OK(cleave_placement_preview(m, &cp, &r));
    for (size_t d = 0; d < 2; d++) need[d] = phase_total(&r, CLEAVE_PHASE_PREFILL, d);
}

/* argv[1], argv[2]: the two devices and the one device to run on
 * (default cpu:2 and cpu; on a GPU machine cuda:0,cuda:0 and cuda:0). */
int main(int argc, char **argv) {
    const char *two = argc > 2 ? argv[1] : "cpu:2", *one_dev = argc > 2 ? argv[2] : "cpu";
    const char *path = tu_stories_model();
    if (!path) return 77;
    /* weights copied into the devices' memory: the allocator counts them
     * (GPUs always copy them) */
    setenv("CLEAVE_NO_MAP", "1", 1);
    options_reload();
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return tu_finish("test_phases");
    cleave_model_desc desc;
    cleave_model_describe(m, &desc);
    nv = desc.n_vocab;
    prompt[0] = cleave_token_bos(m) >= 0 ? cleave_token_bos(m) : 1;
    for (int i = 1; i < N_PROMPT; i++) prompt[i] = (int32_t)((i * 7919 + 11) % nv);

    /* one device: the reference text */
    int32_t ref[N_GEN];
    bool sw;
    cleave_context_params one = params(one_dev, CLEAVE_SPLIT_AS_GENERATE, CLEAVE_SPLIT_NONE);
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &one, &c));
    CHECK(c && generate(c, ref, &sw) && !sw);
    cleave_context_free(c);

    /* no budgets: layer then tensor, fitted (equal) shares */
    cleave_context_params cp = params(two, CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR);
    CHECK(run_case(m, &cp, ref, "layer -> tensor"));

    /* uneven budgets: equal tensor shares overflow the small device, fitted
     * ones do not, and the switch fits both */
    cleave_context_params t = params(two, CLEAVE_SPLIT_AS_GENERATE, CLEAVE_SPLIT_TENSOR);
    t.fit = false;
    size_t eq[2];
    totals(m, t, eq);
    size_t budgets[2] = {eq[0] * 3, eq[1] * 85 / 100};
    t.budgets = budgets, t.n_budgets = 2;
    CHECK(cleave_context_new(m, &t, &c) == CLEAVE_ERR_OOM); /* equal shares: device 1 over */
    cp.budgets = budgets, cp.n_budgets = 2;
    static cleave_placement_report r;
    CHECK_OK(cleave_placement_preview(m, &cp, &r));
    CHECK_MSG(r.switch_fits[CLEAVE_PHASE_GENERATE] &&
                  r.phase[CLEAVE_PHASE_GENERATE].shares[0] > 1.5 * r.phase[CLEAVE_PHASE_GENERATE].shares[1],
              "fitted tensor shares %.3f/%.3f, switch fits %d: %s", r.phase[1].shares[0], r.phase[1].shares[1],
              r.switch_fits[1], r.why);
    CHECK(run_case(m, &cp, ref, "fitted shares, uneven budgets"));

    /* the same budgets with -ts 1,1 for generation: known at once, the
     * request goes on in layer mode; the prefill phase is still fitted */
    const float equal[2] = {1, 1};
    cleave_context_params bad = cp;
    bad.shares = equal, bad.n_shares = 2;
    CHECK_OK(cleave_placement_preview(m, &bad, &r));
    CHECK_MSG(!r.switch_fits[CLEAVE_PHASE_GENERATE] && strstr(r.why, "cannot happen") && strstr(r.why, "-ts "),
              "why: %s", r.why);
    fprintf(stderr, "-ts 1,1 on uneven budgets: %s\n", r.why);
    CHECK(!run_case(m, &bad, ref, "-ts 1,1 on uneven budgets"));
    CHECK_OK(cleave_context_new(m, &bad, &c));
    if (c) {
        cleave_status st = cleave_context_set_phase(c, CLEAVE_PHASE_GENERATE);
        CHECK(st == CLEAVE_ERR_OOM && strstr(cleave_last_error(), "stays in layer mode"));
        CHECK(cleave_context_split_mode(c) == CLEAVE_SPLIT_LAYER && cleave_context_phase(c) == CLEAVE_PHASE_PREFILL);
        CHECK_OK(cleave_context_set_phase(c, CLEAVE_PHASE_PREFILL)); /* already there */
    }
    cleave_context_free(c);

    /* shares given per phase, both directions */
    const float a[2] = {1, 3}, b[2] = {3, 1};
    for (int dir = 0; dir < 2; dir++) {
        cleave_context_params s = params(two, dir ? CLEAVE_SPLIT_TENSOR : CLEAVE_SPLIT_LAYER,
                                         dir ? CLEAVE_SPLIT_LAYER : CLEAVE_SPLIT_TENSOR);
        s.prefill_shares = dir ? b : a, s.n_prefill_shares = 2;
        s.shares = dir ? a : b, s.n_shares = 2;
        CHECK_OK(cleave_placement_preview(m, &s, &r));
        const double *pw = r.phase[0].shares, *gw = r.phase[1].shares;
        CHECK_MSG(dir ? pw[0] == 3 * pw[1] && 3 * gw[0] == gw[1] : 3 * pw[0] == pw[1] && gw[0] == 3 * gw[1],
                  "direction %d: shares %g/%g then %g/%g", dir, pw[0], pw[1], gw[0], gw[1]);
        CHECK(run_case(m, &s, ref, dir ? "tensor -pts 3,1 -> layer -ts 1,3" : "layer -pts 1,3 -> tensor -ts 3,1"));
    }

    /* bad input: errors, never a crash */
    cleave_context_params e = params(two, CLEAVE_SPLIT_AS_GENERATE, CLEAVE_SPLIT_TENSOR);
    e.prefill_shares = a, e.n_prefill_shares = 2;
    CHECK(cleave_context_new(m, &e, &c) == CLEAVE_ERR_INVALID_ARG); /* shares of no phase */
    CHECK(cleave_placement_preview(m, &e, &r) == CLEAVE_ERR_INVALID_ARG);
    e.prefill_split_mode = CLEAVE_SPLIT_LAYER, e.n_prefill_shares = 3;
    CHECK(cleave_context_new(m, &e, &c) == CLEAVE_ERR_INVALID_ARG); /* 3 shares, 2 devices */
    e.prefill_split_mode = (cleave_split_mode)7, e.prefill_shares = NULL, e.n_prefill_shares = 0;
    CHECK(cleave_context_new(m, &e, &c) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_context_set_phase(NULL, CLEAVE_PHASE_GENERATE) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_context_placement(NULL, &r) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_placement_preview(NULL, &cp, &r) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_placement_preview(m, &cp, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(cleave_context_new(m, &cp, &c));
    if (c) CHECK(cleave_context_set_phase(c, (cleave_phase)5) == CLEAVE_ERR_INVALID_ARG);
    cleave_context_free(c);
    cleave_model_free(m);
    return tu_finish("test_phases");
}
