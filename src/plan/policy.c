/* The phase-switch cost model (see policy.h). */
#include "policy.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/file.h"

static const char *const mode_names[POLICY_MODES] = {"layer", "tensor"};

/* what: the curve's name in messages ("prefill rate of layer mode") */
static cleave_status check_curve(const policy_curve *c, const char *what) {
    if (c->n < 1 || c->n > POLICY_MAX_POINTS)
        return err_set(CLEAVE_ERR_INVALID_ARG, "policy: the %s has %zu points (1..%d)", what, c->n,
                       POLICY_MAX_POINTS);
    for (size_t i = 0; i < c->n; i++) {
        if (!(c->tokens[i] > 0) || !isfinite(c->tokens[i]) || (i && !(c->tokens[i] > c->tokens[i - 1])))
            return err_set(CLEAVE_ERR_INVALID_ARG,
                           "policy: the %s: token counts must be positive and increasing (point %zu: %g)",
                           what, i, c->tokens[i]);
        if (!(c->rate[i] > 0) || !isfinite(c->rate[i]))
            return err_set(CLEAVE_ERR_INVALID_ARG, "policy: the %s at %g tokens is %g tok/s (must be > 0)",
                           what, c->tokens[i], c->rate[i]);
    }
    return CLEAVE_OK;
}

/* Linear in log(tokens) between points, flat beyond them. */
static double rate_at(const policy_curve *c, double tokens) {
    if (tokens <= c->tokens[0]) return c->rate[0];
    if (tokens >= c->tokens[c->n - 1]) return c->rate[c->n - 1];
    size_t i = 1;
    while (c->tokens[i] < tokens) i++;
    double a = log(c->tokens[i - 1]), b = log(c->tokens[i]), t = (log(tokens) - a) / (b - a);
    return c->rate[i - 1] + t * (c->rate[i] - c->rate[i - 1]);
}

cleave_status policy_rate_at(const policy_curve *c, double tokens, double *rate) {
    if (!c || !rate || !(tokens >= 0) || !isfinite(tokens))
        return err_set(CLEAVE_ERR_INVALID_ARG, "policy: bad rate query");
    cleave_status st = check_curve(c, "rate curve");
    if (st) return st;
    *rate = rate_at(c, tokens);
    return CLEAVE_OK;
}

cleave_status policy_check(const policy_rates *r) {
    if (!r) return err_set(CLEAVE_ERR_INVALID_ARG, "policy: no rates");
    for (int m = 0; m < POLICY_MODES; m++) {
        char what[64];
        snprintf(what, sizeof what, "prefill rate of %s mode", mode_names[m]);
        cleave_status st = check_curve(&r->pp[m], what);
        if (!st) {
            snprintf(what, sizeof what, "generation rate of %s mode", mode_names[m]);
            st = check_curve(&r->tg[m], what);
        }
        if (st) return st;
        if (!(r->switch_fixed_s[m] >= 0) || !(r->switch_per_token_s[m] >= 0) ||
            !isfinite(r->switch_fixed_s[m]) || !isfinite(r->switch_per_token_s[m]))
            return err_set(CLEAVE_ERR_INVALID_ARG,
                           "policy: the switch from %s mode costs %g s + %g s per token (must be >= 0)",
                           mode_names[m], r->switch_fixed_s[m], r->switch_per_token_s[m]);
    }
    return CLEAVE_OK;
}

int policy_prefill_mode(policy_plan p) {
    return p == POLICY_TENSOR || p == POLICY_TENSOR_THEN_LAYER ? POLICY_MODE_TENSOR : POLICY_MODE_LAYER;
}

int policy_generate_mode(policy_plan p) {
    return p == POLICY_TENSOR || p == POLICY_LAYER_THEN_TENSOR ? POLICY_MODE_TENSOR : POLICY_MODE_LAYER;
}

const char *policy_plan_name(policy_plan p) {
    switch (p) {
    case POLICY_LAYER: return "layer";
    case POLICY_TENSOR: return "tensor";
    case POLICY_LAYER_THEN_TENSOR: return "layer, then tensor";
    case POLICY_TENSOR_THEN_LAYER: return "tensor, then layer";
    default: return "?";
    }
}

cleave_status policy_predict(const policy_rates *r, uint32_t prompt, uint32_t n_gen,
                             double seconds[POLICY_PLANS]) {
    if (!seconds) return err_set(CLEAVE_ERR_INVALID_ARG, "policy: nowhere to put the prediction");
    cleave_status st = policy_check(r);
    if (st) return st;
    double p = prompt, depth = p + n_gen / 2.0;
    for (int plan = 0; plan < POLICY_PLANS; plan++) {
        int a = policy_prefill_mode((policy_plan)plan), b = policy_generate_mode((policy_plan)plan);
        double t = prompt ? p / rate_at(&r->pp[a], p) : 0.0;
        if (a != b) t += r->switch_fixed_s[a] + r->switch_per_token_s[a] * p;
        if (n_gen) t += n_gen / rate_at(&r->tg[b], depth);
        seconds[plan] = t;
    }
    return CLEAVE_OK;
}

cleave_status policy_decide_among(const policy_rates *r, uint32_t prompt, uint32_t n_gen, double margin,
                                  const bool *allowed, policy_decision *out) {
    if (!out || !(margin >= 0 && margin < 1))
        return err_set(CLEAVE_ERR_INVALID_ARG, "policy: margin %g outside [0, 1)", margin);
    bool ok[POLICY_PLANS], any = false;
    for (int p = 0; p < POLICY_PLANS; p++) any |= ok[p] = !allowed || allowed[p];
    if (!any) return err_set(CLEAVE_ERR_INVALID_ARG, "policy: no plan is allowed");
    cleave_status st = policy_predict(r, prompt, n_gen, out->seconds);
    if (st) return st;
    const double *s = out->seconds;
    /* the best plan without a switch, which a switch must beat by the margin */
    int best = -1;
    for (int p = POLICY_LAYER; p <= POLICY_TENSOR; p++)
        if (ok[p] && (best < 0 || s[p] < s[best])) best = p;
    double bar = best >= 0 ? s[best] * (1.0 - margin) : 1e300;
    for (int p = POLICY_LAYER_THEN_TENSOR; p <= POLICY_TENSOR_THEN_LAYER; p++)
        if (ok[p] && s[p] < bar && (best < POLICY_LAYER_THEN_TENSOR || s[p] < s[best])) best = p;
    out->plan = (policy_plan)best;
    return CLEAVE_OK;
}

cleave_status policy_decide(const policy_rates *r, uint32_t prompt, uint32_t n_gen, double margin,
                            policy_decision *out) {
    return policy_decide_among(r, prompt, n_gen, margin, NULL, out);
}

int policy_gate_step(policy_gate *g, const bool *in_prefill, size_t n_active, int prefill_mode,
                     int generate_mode) {
    if (!g) return POLICY_MODE_LAYER;
    if (g->since < UINT32_MAX) g->since++;
    if (!n_active || !in_prefill) return g->mode;
    bool all_prefill = true, all_generate = true;
    for (size_t i = 0; i < n_active; i++) all_prefill &= in_prefill[i], all_generate &= !in_prefill[i];
    int want = all_prefill ? prefill_mode : all_generate ? generate_mode : g->mode;
    if (want != g->mode && g->since >= g->min_dwell) {
        g->mode = want;
        g->since = 0;
    }
    return g->mode;
}

/* ---- the rates file ------------------------------------------------------- */

#define RATES_MAGIC "cleave-psm-rates 1"

cleave_status policy_save(const policy_rates *r, const char *path) {
    cleave_status st = policy_check(r);
    if (st) return st;
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return err_set(CLEAVE_ERR_IO, "cannot write the rates file %s", path ? path : "(none)");
    fprintf(f, "%s\n# split-mode rates: prefill by prompt length, generation by context depth\n",
            RATES_MAGIC);
    for (int m = 0; m < POLICY_MODES; m++) {
        for (size_t i = 0; i < r->pp[m].n; i++)
            fprintf(f, "pp %s %.17g %.17g\n", mode_names[m], r->pp[m].tokens[i], r->pp[m].rate[i]);
        for (size_t i = 0; i < r->tg[m].n; i++)
            fprintf(f, "tg %s %.17g %.17g\n", mode_names[m], r->tg[m].tokens[i], r->tg[m].rate[i]);
        fprintf(f, "switch %s %.17g %.17g\n", mode_names[m], r->switch_fixed_s[m],
                r->switch_per_token_s[m]);
    }
    bool ok = !ferror(f);
    if (fclose(f) || !ok) return err_set(CLEAVE_ERR_IO, "writing the rates file %s failed", path);
    return CLEAVE_OK;
}

cleave_status policy_load(const char *path, policy_rates *out) {
    if (!out) return err_set(CLEAVE_ERR_INVALID_ARG, "policy: nowhere to load the rates");
    memset(out, 0, sizeof *out);
    FILE *f;
    cleave_status opened = file_fopen_read(path, &f);
    if (opened) return err_wrap(opened, "the rates file");
    char line[256];
    int no = 0;
    cleave_status st = CLEAVE_OK;
    bool magic = false, switches[POLICY_MODES] = {false};
    while (!st && fgets(line, sizeof line, f)) {
        no++;
        line[strcspn(line, "\r\n#")] = 0;
        if (!magic) {
            magic = strcmp(line, RATES_MAGIC) == 0;
            if (!magic) st = err_set(CLEAVE_ERR_INVALID_ARG, "%s is not a rates file (line 1)", path);
            continue;
        }
        char kind[16], mode[16], extra[2];
        double a, b;
        int got = sscanf(line, "%15s %15s %lf %lf %1s", kind, mode, &a, &b, extra);
        if (got <= 0) continue; /* blank */
        int m = -1;
        for (int k = 0; k < POLICY_MODES; k++)
            if (got >= 2 && !strcmp(mode, mode_names[k])) m = k;
        policy_curve *c = !strcmp(kind, "pp") ? &out->pp[m < 0 ? 0 : m] : !strcmp(kind, "tg") ? &out->tg[m < 0 ? 0 : m] : NULL;
        if (got != 4 || m < 0 || (!c && strcmp(kind, "switch"))) {
            st = err_set(CLEAVE_ERR_INVALID_ARG, "%s line %d: expected 'pp|tg|switch layer|tensor A B'",
                         path, no);
        } else if (!c) {
            out->switch_fixed_s[m] = a, out->switch_per_token_s[m] = b;
            switches[m] = true;
        } else if (c->n == POLICY_MAX_POINTS) {
            st = err_set(CLEAVE_ERR_INVALID_ARG, "%s line %d: more than %d points", path, no,
                         POLICY_MAX_POINTS);
        } else {
            c->tokens[c->n] = a, c->rate[c->n] = b;
            c->n++;
        }
    }
    fclose(f);
    if (!st && !magic) st = err_set(CLEAVE_ERR_INVALID_ARG, "%s is empty", path);
    for (int m = 0; !st && m < POLICY_MODES; m++)
        if (!switches[m])
            st = err_set(CLEAVE_ERR_INVALID_ARG, "%s: no switch cost for %s mode", path, mode_names[m]);
    if (!st) st = policy_check(out);
    return st;
}
