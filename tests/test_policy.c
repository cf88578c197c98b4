/* The phase-switch cost model (src/policy.c): rate curves, predictions
 * checked by hand, decisions on a grid of prompt and generation lengths
 * (consistent with the predictions, never worse than the better pure mode
 * by more than the margin), the break-even points, and bad input. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/policy.h"
#include "testutil.h"

static policy_curve flat(double rate) {
    policy_curve c = {.n = 1};
    c.tokens[0] = 1, c.rate[0] = rate;
    return c;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b)); }

/* Rates shaped like 8B bf16 on two H200 (bench/RESULTS.md): tensor
 * prefills faster on short prompts, layer on long ones; tensor generates
 * faster; decode slows with depth. Switching costs 30 ms (half of 16 GB
 * of weights over NVLink) plus 0.2 us per cached token (half of its 128 KB
 * of f16 KV). */
static policy_rates h200_like(void) {
    policy_rates r;
    memset(&r, 0, sizeof r);
    const double pp_tokens[4] = {512, 4096, 16384, 65536};
    const double pp_layer[4] = {34900, 51500, 34800, 18300};
    const double pp_tensor[4] = {43100, 50100, 35600, 13500};
    const double tg_tokens[3] = {128, 4096, 65536};
    const double tg_layer[3] = {217, 192, 124};
    const double tg_tensor[3] = {321, 269, 161};
    r.pp[POLICY_MODE_LAYER].n = r.pp[POLICY_MODE_TENSOR].n = 4;
    r.tg[POLICY_MODE_LAYER].n = r.tg[POLICY_MODE_TENSOR].n = 3;
    for (int i = 0; i < 4; i++) {
        r.pp[0].tokens[i] = r.pp[1].tokens[i] = pp_tokens[i];
        r.pp[0].rate[i] = pp_layer[i];
        r.pp[1].rate[i] = pp_tensor[i];
    }
    for (int i = 0; i < 3; i++) {
        r.tg[0].tokens[i] = r.tg[1].tokens[i] = tg_tokens[i];
        r.tg[0].rate[i] = tg_layer[i];
        r.tg[1].rate[i] = tg_tensor[i];
    }
    for (int m = 0; m < POLICY_MODES; m++) r.switch_fixed_s[m] = 0.03, r.switch_per_token_s[m] = 2e-7;
    return r;
}

static void test_curves(void) {
    policy_curve c = {.n = 3, .tokens = {100, 1000, 10000}, .rate = {10, 20, 40}};
    double v;
    CHECK_OK(policy_rate_at(&c, 1000, &v));
    CHECK(near(v, 20));
    CHECK_OK(policy_rate_at(&c, sqrt(100.0 * 1000.0), &v)); /* halfway in log: the mean */
    CHECK(near(v, 15));
    CHECK_OK(policy_rate_at(&c, 0, &v)); /* flat beyond the ends */
    CHECK(near(v, 10));
    CHECK_OK(policy_rate_at(&c, 1e9, &v));
    CHECK(near(v, 40));
    policy_curve one = flat(7);
    CHECK_OK(policy_rate_at(&one, 12345, &v));
    CHECK(near(v, 7));
    /* malformed curves and queries */
    policy_curve bad = c;
    bad.tokens[2] = 1000; /* not increasing */
    CHECK(policy_rate_at(&bad, 10, &v) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "increasing") != NULL);
    bad = c;
    bad.rate[1] = 0;
    CHECK(policy_rate_at(&bad, 10, &v) == CLEAVE_ERR_INVALID_ARG);
    bad = c;
    bad.rate[1] = NAN;
    CHECK(policy_rate_at(&bad, 10, &v) == CLEAVE_ERR_INVALID_ARG);
    bad.n = 0;
    CHECK(policy_rate_at(&bad, 10, &v) == CLEAVE_ERR_INVALID_ARG);
    bad.n = POLICY_MAX_POINTS + 1;
    CHECK(policy_rate_at(&bad, 10, &v) == CLEAVE_ERR_INVALID_ARG);
    CHECK(policy_rate_at(&c, -1, &v) == CLEAVE_ERR_INVALID_ARG);
    CHECK(policy_rate_at(NULL, 1, &v) == CLEAVE_ERR_INVALID_ARG);
}

/* Flat rates, so every prediction can be written down. */
static void test_predict_by_hand(void) {
    policy_rates r;
    memset(&r, 0, sizeof r);
    r.pp[POLICY_MODE_LAYER] = flat(20000), r.pp[POLICY_MODE_TENSOR] = flat(10000);
    r.tg[POLICY_MODE_LAYER] = flat(100), r.tg[POLICY_MODE_TENSOR] = flat(200);
    r.switch_fixed_s[POLICY_MODE_LAYER] = 0.1, r.switch_per_token_s[POLICY_MODE_LAYER] = 1e-5;
    r.switch_fixed_s[POLICY_MODE_TENSOR] = 0.2;
    double s[POLICY_PLANS];
    CHECK_OK(policy_predict(&r, 10000, 100, s));
    CHECK(near(s[POLICY_LAYER], 0.5 + 1.0));
    CHECK(near(s[POLICY_TENSOR], 1.0 + 0.5));
    CHECK(near(s[POLICY_LAYER_THEN_TENSOR], 0.5 + 0.1 + 0.1 + 0.5));
    CHECK(near(s[POLICY_TENSOR_THEN_LAYER], 1.0 + 0.2 + 1.0));
    policy_decision d;
    CHECK_OK(policy_decide(&r, 10000, 100, 0.02, &d));
    CHECK(d.plan == POLICY_LAYER_THEN_TENSOR);
    CHECK(policy_prefill_mode(d.plan) == POLICY_MODE_LAYER);
    CHECK(policy_generate_mode(d.plan) == POLICY_MODE_TENSOR);
    /* nothing to generate: the faster prefill, no switch */
    CHECK_OK(policy_decide(&r, 10000, 0, 0.0, &d));
    CHECK(d.plan == POLICY_LAYER && near(d.seconds[POLICY_LAYER], 0.5));
    /* no prompt: the faster generation */
    CHECK_OK(policy_decide(&r, 0, 100, 0.0, &d));
    CHECK(d.plan == POLICY_TENSOR);

    /* The break-even length of the answer: switching pays once the
     * generation saves its cost, n (1/100 - 1/200) = 0.1 + 0.1 -> n = 40
     * (margin 0); a margin m asks n/200 + 0.7 < (1 - m)(0.5 + n/100). */
    CHECK_OK(policy_decide(&r, 10000, 39, 0.0, &d));
    CHECK(d.plan == POLICY_LAYER);
    CHECK_OK(policy_decide(&r, 10000, 41, 0.0, &d));
    CHECK(d.plan == POLICY_LAYER_THEN_TENSOR);
    double m = 0.02, n_even = (0.7 - (1 - m) * 0.5) / ((1 - m) / 100.0 - 1 / 200.0);
    CHECK_OK(policy_decide(&r, 10000, (uint32_t)floor(n_even), m, &d));
    CHECK(d.plan == POLICY_LAYER);
    CHECK_OK(policy_decide(&r, 10000, (uint32_t)ceil(n_even) + 1, m, &d));
    CHECK(d.plan == POLICY_LAYER_THEN_TENSOR);

    /* a switch that cannot fit the devices is never chosen: the best plan
     * left, whatever the prediction of the one left out */
    bool no_switch[POLICY_PLANS] = {true, true, false, false};
    CHECK_OK(policy_decide_among(&r, 10000, 100, 0.02, no_switch, &d));
    CHECK(d.plan == POLICY_LAYER || d.plan == POLICY_TENSOR);
    CHECK(d.seconds[POLICY_LAYER_THEN_TENSOR] < d.seconds[d.plan]); /* it would have been faster */
    bool tensor_only[POLICY_PLANS] = {false, true, false, false};
    CHECK_OK(policy_decide_among(&r, 10000, 100, 0.02, tensor_only, &d));
    CHECK(d.plan == POLICY_TENSOR);
    /* no single mode fits, a switch does: the switch, margin or not */
    bool switches[POLICY_PLANS] = {false, false, true, true};
    CHECK_OK(policy_decide_among(&r, 10000, 100, 0.02, switches, &d));
    CHECK(d.plan == POLICY_LAYER_THEN_TENSOR);
    bool none[POLICY_PLANS] = {false, false, false, false};
    CHECK(policy_decide_among(&r, 10000, 100, 0.02, none, &d) == CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(policy_decide_among(&r, 10000, 100, 0.02, NULL, &d));
    CHECK(d.plan == POLICY_LAYER_THEN_TENSOR);
}

/* The reference request: 58,248 prompt tokens, 128 generated. */
static void test_reference_request(void) {
    policy_rates r = h200_like();
    policy_decision d;
    CHECK_OK(policy_decide(&r, 58248, 128, 0.02, &d));
    CHECK_MSG(d.plan == POLICY_LAYER_THEN_TENSOR, "58k + 128: chose %s", policy_plan_name(d.plan));
    CHECK(d.seconds[POLICY_LAYER_THEN_TENSOR] < d.seconds[POLICY_LAYER]);
    CHECK(d.seconds[POLICY_LAYER] < d.seconds[POLICY_TENSOR]);
    /* a short prompt: tensor is faster in both phases, no switch */
    CHECK_OK(policy_decide(&r, 512, 128, 0.02, &d));
    CHECK_MSG(d.plan == POLICY_TENSOR, "512 + 128: chose %s", policy_plan_name(d.plan));
    /* a long prompt and a one-token answer: no switch for one token */
    CHECK_OK(policy_decide(&r, 58248, 1, 0.02, &d));
    CHECK_MSG(d.plan == POLICY_LAYER, "58k + 1: chose %s", policy_plan_name(d.plan));
}

/* Every point of the grid: the choice follows the predictions. */
static void test_grid(void) {
    policy_rates r = h200_like();
    const uint32_t prompts[] = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    const uint32_t gens[] = {32, 64, 128, 256, 512, 1024, 2048};
    const double margin = 0.02;
    int switched = 0;
    for (size_t i = 0; i < sizeof prompts / sizeof *prompts; i++)
        for (size_t j = 0; j < sizeof gens / sizeof *gens; j++) {
            policy_decision d;
            CHECK_OK(policy_decide(&r, prompts[i], gens[j], margin, &d));
            const double *s = d.seconds;
            double pure = fmin(s[POLICY_LAYER], s[POLICY_TENSOR]);
            double any = fmin(pure, fmin(s[POLICY_LAYER_THEN_TENSOR], s[POLICY_TENSOR_THEN_LAYER]));
            /* never predicted slower than the better pure mode */
            CHECK(s[d.plan] <= pure);
            if (d.plan >= POLICY_LAYER_THEN_TENSOR) {
                switched++;
                CHECK(s[d.plan] < pure * (1 - margin)); /* it pays by more than the margin */
                CHECK(near(s[d.plan], any));
            } else {
                CHECK(near(s[d.plan], pure));
                /* a switch plan that would have paid by the margin was not skipped */
                CHECK(fmin(s[POLICY_LAYER_THEN_TENSOR], s[POLICY_TENSOR_THEN_LAYER]) >= pure * (1 - margin));
            }
        }
    CHECK_MSG(switched > 0, "the grid never switches");
}

static void test_bad_input(void) {
    policy_rates r = h200_like();
    policy_decision d;
    CHECK(policy_decide(&r, 100, 100, 1.0, &d) == CLEAVE_ERR_INVALID_ARG);
    CHECK(policy_decide(&r, 100, 100, -0.1, &d) == CLEAVE_ERR_INVALID_ARG);
    CHECK(policy_decide(&r, 100, 100, NAN, &d) == CLEAVE_ERR_INVALID_ARG);
    CHECK(policy_decide(NULL, 100, 100, 0.0, &d) == CLEAVE_ERR_INVALID_ARG);
    CHECK(policy_decide(&r, 100, 100, 0.0, NULL) == CLEAVE_ERR_INVALID_ARG);
    policy_rates b = r;
    b.switch_fixed_s[POLICY_MODE_TENSOR] = -1;
    CHECK(policy_check(&b) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "tensor") != NULL);
    b = r;
    b.tg[POLICY_MODE_LAYER].rate[1] = -5;
    CHECK(policy_decide(&b, 100, 100, 0.0, &d) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "generation rate of layer mode") != NULL);
    b = r;
    b.pp[POLICY_MODE_TENSOR].n = 0;
    CHECK(policy_check(&b) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "prefill rate of tensor mode") != NULL);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

/* The rates file: a round trip keeps every number; bad files are refused
 * naming the line. */
static void test_rates_file(void) {
    policy_rates r = h200_like(), back;
    const char *path = tu_tmp("rates.txt");
    CHECK_OK(policy_save(&r, path));
    CHECK_OK(policy_load(path, &back));
    CHECK(memcmp(&r, &back, sizeof r) == 0);
    /* the same decisions from the loaded rates */
    policy_decision a, b;
    CHECK_OK(policy_decide(&r, 58248, 128, 0.02, &a));
    CHECK_OK(policy_decide(&back, 58248, 128, 0.02, &b));
    CHECK(a.plan == b.plan && a.seconds[a.plan] == b.seconds[b.plan]);

    write_text(path, "cleave-psm-rates 1\n# comment\npp layer 512 1000\ntg layer 128 10\n"
                     "pp tensor 512 2000\ntg tensor 128 20\n\nswitch layer 0.1 0\nswitch tensor 0.1 0\n");
    CHECK_OK(policy_load(path, &back));
    CHECK(back.pp[POLICY_MODE_TENSOR].rate[0] == 2000 && back.switch_fixed_s[POLICY_MODE_LAYER] == 0.1);
    write_text(path, "something else\n");
    CHECK(policy_load(path, &back) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "not a rates file") != NULL);
    write_text(path, "cleave-psm-rates 1\npp diagonal 512 1000\n");
    CHECK(policy_load(path, &back) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "line 2") != NULL);
    write_text(path, "cleave-psm-rates 1\npp layer 512\n");
    CHECK(policy_load(path, &back) == CLEAVE_ERR_INVALID_ARG);
    write_text(path, "cleave-psm-rates 1\npp layer 512 1000\ntg layer 128 10\npp tensor 512 2000\n"
                     "tg tensor 128 20\nswitch layer 0.1 0\n");
    CHECK(policy_load(path, &back) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "no switch cost for tensor") != NULL);
    write_text(path, "cleave-psm-rates 1\npp layer 512 1000\npp layer 256 900\ntg layer 128 10\n"
                     "pp tensor 512 2000\ntg tensor 128 20\nswitch layer 0.1 0\nswitch tensor 0.1 0\n");
    CHECK(policy_load(path, &back) == CLEAVE_ERR_INVALID_ARG); /* not increasing */
    write_text(path, "");
    CHECK(policy_load(path, &back) == CLEAVE_ERR_INVALID_ARG);
    CHECK(policy_load(tu_tmp("no-such-rates.txt"), &back) == CLEAVE_ERR_IO);
    CHECK(policy_save(&r, "/nonexistent-dir/rates.txt") == CLEAVE_ERR_IO);
}

/* Several sequences: switches only when all are in one phase, never more
 * often than the dwell allows. */
static void test_gate(void) {
    policy_gate g = {POLICY_MODE_LAYER, 4, 4};
    const int P = POLICY_MODE_LAYER, G = POLICY_MODE_TENSOR;
    bool prefill[3] = {true, true, true}, generate[3] = {false, false, false}, mixed[3] = {true, false, false};
    CHECK(policy_gate_step(&g, prefill, 3, P, G) == POLICY_MODE_LAYER);
    CHECK(policy_gate_step(&g, mixed, 3, P, G) == POLICY_MODE_LAYER); /* mixed: stays */
    CHECK(policy_gate_step(&g, generate, 3, P, G) == POLICY_MODE_TENSOR);
    CHECK(g.since == 0);
    for (int i = 0; i < 10; i++) CHECK(policy_gate_step(&g, mixed, 3, P, G) == POLICY_MODE_TENSOR);
    CHECK(policy_gate_step(&g, prefill, 3, P, G) == POLICY_MODE_LAYER); /* dwell long passed */
    /* phases alternating every step: at most one switch per dwell */
    int switches = 0, mode = g.mode;
    for (int i = 0; i < 100; i++) {
        int m = policy_gate_step(&g, i % 2 ? prefill : generate, 3, P, G);
        switches += m != mode;
        mode = m;
    }
    CHECK_MSG(switches <= 100 / 4 + 1, "%d switches in 100 steps with a dwell of 4", switches);
    /* no sequences, or no phase table: the mode stays */
    CHECK(policy_gate_step(&g, NULL, 3, P, G) == mode);
    CHECK(policy_gate_step(&g, prefill, 0, P, G) == mode);
    CHECK(policy_gate_step(NULL, prefill, 3, P, G) == POLICY_MODE_LAYER);
}

int main(void) {
    test_gate();
    test_rates_file();
    test_curves();
    test_predict_by_hand();
    test_reference_request();
    test_grid();
    test_bad_input();
    return tu_finish("test_policy");
}
