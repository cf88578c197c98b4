/* The engine against an independent reference: a naive forward pass written
 * here from the model math (double accumulation, weights dequantized once,
 * one token at a time) that shares nothing with the backend ops. Every
 * architecture and weight type, plus stories260K; f32 KV cache. Block
 * types are tested on random-block models (no quantizer needed) of the
 * "small" shape, whose rows are whole 256-blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/vocab_synth.h"
#include "quant/quant.h"
#include "testutil.h"

/* RoPE context scaling as a test writes it into a file (the reference
 * takes these numbers, not what the engine read). */
typedef struct {
    const char *type;   /* "linear" or "yarn" */
    float factor;
    uint32_t n_ctx_orig; /* yarn */
    bool old_key;       /* written as rope.scale_linear, no type */
} ref_scaling;

typedef struct {
    const struct cleave_model *m;
    float *k_cache, *v_cache; /* [layer][pos][n_head_kv*head_dim] */
    size_t max_pos;
    const ref_scaling *sc;    /* NULL: plain RoPE */
} ref_state;

static float *deq(const gguf_tensor *t) {
    if (!t) return NULL;
    float *out = malloc(t->n_elems * sizeof(float));
    quant_dequantize_row((cleave_type)t->type, t->data, out, t->n_elems);
    return out;
}

/* Inputs that lay within 1e-4 of a step of a rounding boundary: the
 * engine's input differs from this one by f32 rounding (~1e-6 relative:
 * with steps of max/127, ~4e-5 of a step for typical inputs) and may
 * round the other way. */
static size_t ref_near_ties;

/* A matmul of block-quantized weights takes its input rounded to int8
 * blocks (ggml's vec_dot semantics, which the engine follows): blocks as
 * wide as the weight's (32, or 256 for the K-quants and IQ4_XS), step
 * max|x| / 127 in f32, round to nearest even. */
static void ref_round_act(uint32_t type, const float *x, double *xr, size_t n) {
    size_t be = 1;
    quant_type_info(type, NULL, &be, NULL);
    if (be == 1) {
        for (size_t i = 0; i < n; i++) xr[i] = x[i];
        return;
    }
    for (size_t i = 0; i < n; i += be) {
        float amax = 0;
        for (size_t j = 0; j < be; j++) amax = fmaxf(amax, fabsf(x[i + j]));
        float id = amax > 0 ? 127.0f / amax : 0.0f, d = amax / 127.0f;
        for (size_t j = 0; j < be; j++) {
            float v = x[i + j] * id;
            if (fabsf(v - floorf(v) - 0.5f) < 1e-4f) ref_near_ties++;
            xr[i + j] = (double)d * nearbyintf(v);
        }
    }
}

/* y[rows] = W[rows][cols] x (+ b) */
static void ref_matvec(const gguf_tensor *W, const gguf_tensor *b, const float *x, float *y) {
    size_t cols = W->ne[0], rows = W->ne[1];
    float *w = deq(W), *bias = deq(b);
    double *xr = malloc(cols * sizeof *xr);
    ref_round_act(W->type, x, xr, cols);
    for (size_t r = 0; r < rows; r++) {
        double acc = bias ? bias[r] : 0.0;
        for (size_t c = 0; c < cols; c++) acc += (double)w[r * cols + c] * xr[c];
        y[r] = (float)acc;
    }
    free(w);
    free(bias);
    free(xr);
}

/* The mixture of experts on one token's normed input h, into o: the
 * router's softmax, the k most probable experts (ties to the lower index),
 * their probabilities renormalised, each expert's SwiGLU FFN (rows
 * e * n_ff.. of the stacked gate and up, e * n_embd.. of down) weighted
 * and summed. */
static void ref_experts(const model_hparams *hp, const model_layer *L, const float *h, float *o) {
    size_t e = hp->n_embd, ff = hp->n_ff, ne = hp->n_expert, k = hp->n_expert_used;
    float *logit = malloc(ne * 4), *gw = deq(L->w_gate), *uw = deq(L->w_up), *dw = deq(L->w_down);
    float *gb = deq(L->b_gate), *ub = deq(L->b_up), *db = deq(L->b_down);
    double *xr = malloc((e > ff ? e : ff) * sizeof *xr), *act = malloc(ff * sizeof *act);
    ref_matvec(L->router, L->router_b, h, logit);
    double mx = -INFINITY, sum = 0, chosen = 0, p[64];
    int32_t ids[64];
    for (size_t i = 0; i < ne; i++) mx = fmax(mx, logit[i]);
    for (size_t i = 0; i < ne; i++) sum += exp(logit[i] - mx);
    tu_top_k(logit, ne, k, ids);
    for (size_t j = 0; j < k; j++) chosen += p[j] = exp(logit[ids[j]] - mx) / sum;
    /* Qwen3-MoE and Mixtral renormalise the chosen probabilities; gpt-oss
     * takes the softmax of the chosen logits: the same weights */
    for (size_t i = 0; i < e; i++) o[i] = 0;
    for (size_t j = 0; j < k; j++) {
        size_t x = (size_t)ids[j];
        ref_round_act(L->w_gate->type, h, xr, e);
        for (size_t r = 0; r < ff; r++) {
            double g = gb ? gb[x * ff + r] : 0, u = ub ? ub[x * ff + r] : 0;
            for (size_t c = 0; c < e; c++) {
                g += (double)gw[(x * ff + r) * e + c] * xr[c];
                u += (double)uw[(x * ff + r) * e + c] * xr[c];
            }
            g = (float)g, u = (float)u;
            if (hp->swiglu_oai) { /* gpt-oss: gate clamped above, up both ways, then (up + 1) */
                double lim = hp->swiglu_limit;
                g = fmin(g, lim), u = fmax(fmin(u, lim), -lim);
                act[r] = (float)(g / (1.0 + exp(-hp->swiglu_alpha * g)) * (u + 1.0));
            } else {
                act[r] = (float)(g / (1.0 + exp(-g)) * u);
            }
        }
        float *af = malloc(ff * 4);
        for (size_t r = 0; r < ff; r++) af[r] = (float)act[r];
        ref_round_act(L->w_down->type, af, xr, ff);
        free(af);
        for (size_t r = 0; r < e; r++) {
            double acc = db ? db[x * e + r] : 0;
            for (size_t c = 0; c < ff; c++) acc += (double)dw[(x * e + r) * ff + c] * xr[c];
            o[r] += (float)(p[j] / chosen) * (float)acc;
        }
    }
    free(logit), free(gw), free(uw), free(dw), free(gb), free(ub), free(db), free(xr), free(act);
}

static void ref_rmsnorm(const float *x, const gguf_tensor *wt, float *y, size_t n, float eps) {
    float *w = deq(wt);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / (double)n + eps);
    for (size_t i = 0; i < n; i++) y[i] = (float)(x[i] * inv * w[i]);
    free(w);
}

/* YaRN (Peng et al. 2023) per pair: a pair that turns r = n_ctx_orig *
 * freq / (2 pi) times over the original context keeps its angle when r >
 * 32 (beta_fast), is interpolated (angle / factor) when r < 1 (beta_slow),
 * and is mixed linearly in between, the bounds rounded outward to whole
 * pairs; cos and sin are scaled by 1 + 0.1 ln(factor). */
static void ref_yarn(double *theta, double *mag, size_t i, const model_hparams *hp, const ref_scaling *sc) {
    double n_rot = hp->n_rot, base = hp->rope_freq_base;
    /* the pair d at which r(d) = turns: n_ctx_orig base^(-2d/n_rot) / (2 pi) = turns */
    double d_fast = n_rot * log(sc->n_ctx_orig / (2 * M_PI * 32.0)) / (2 * log(base));
    double d_slow = n_rot * log(sc->n_ctx_orig / (2 * M_PI * 1.0)) / (2 * log(base));
    double lo = floor(d_fast), hi = ceil(d_slow);
    if (lo < 0) lo = 0;
    if (hi > n_rot - 1) hi = n_rot - 1;
    double keep; /* share of the extrapolated (unscaled) angle */
    if ((double)i <= lo) keep = 1;
    else if ((double)i >= hi) keep = 0;
    else keep = 1 - ((double)i - lo) / (hi - lo);
    *theta = keep * *theta + (1 - keep) * *theta / sc->factor;
    *mag = 1 + 0.1 * log(sc->factor);
}

static void ref_rope(float *v, size_t pos, const model_hparams *hp, const float *ff, const ref_scaling *sc) {
    size_t n_rot = hp->n_rot;
    for (size_t i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos * pow(hp->rope_freq_base, -2.0 * (double)i / (double)n_rot);
        if (ff) theta /= ff[i];
        double mag = 1;
        if (sc && !strcmp(sc->type, "yarn")) ref_yarn(&theta, &mag, i, hp, sc);
        else if (sc) theta /= sc->factor;
        double c = mag * cos(theta), s = mag * sin(theta);
        size_t a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + n_rot / 2 : 2 * i + 1;
        double x0 = v[a], x1 = v[b];
        v[a] = (float)(x0 * c - x1 * s);
        v[b] = (float)(x0 * s + x1 * c);
    }
}

static void ref_token(ref_state *st, int32_t tok, size_t pos, float *logits) {
    const struct cleave_model *m = st->m;
    const model_hparams *hp = &m->hp;
    size_t e = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd, kd = hp->n_head_kv * hd;
    float *x = calloc(e, 4), *h = calloc(e, 4), *q = calloc(qd, 4), *att = calloc(qd, 4),
          *o = calloc(e, 4), *g = calloc(hp->n_ff, 4), *u = calloc(hp->n_ff, 4),
          *sc = calloc(pos + 1, 4);
    float *emb = deq(m->tok_embd), *ff = deq(m->rope_freqs);
    memcpy(x, emb + (size_t)tok * e, e * 4);
    free(emb);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        float *kc = st->k_cache + ((size_t)l * st->max_pos + pos) * kd;
        float *vc = st->v_cache + ((size_t)l * st->max_pos + pos) * kd;
        ref_rmsnorm(x, L->attn_norm, h, e, hp->norm_eps);
        ref_matvec(L->wq, L->bq, h, q);
        ref_matvec(L->wk, L->bk, h, kc);
        ref_matvec(L->wv, L->bv, h, vc);
        for (size_t hh = 0; hh < hp->n_head; hh++) {
            if (L->q_norm) ref_rmsnorm(q + hh * hd, L->q_norm, q + hh * hd, hd, hp->norm_eps);
            ref_rope(q + hh * hd, pos, hp, ff, st->sc);
        }
        for (size_t hh = 0; hh < hp->n_head_kv; hh++) {
            if (L->k_norm) ref_rmsnorm(kc + hh * hd, L->k_norm, kc + hh * hd, hd, hp->norm_eps);
            ref_rope(kc + hh * hd, pos, hp, ff, st->sc);
        }
        size_t group = hp->n_head / hp->n_head_kv;
        uint32_t window = hp->swa_pattern && l % hp->swa_pattern < hp->swa_pattern - 1 ? hp->n_swa : 0;
        size_t oldest = window && pos >= window ? pos - window + 1 : 0; /* a sliding window's first key */
        float *sinks = deq(L->sinks);
        for (size_t hh = 0; hh < hp->n_head; hh++) {
            size_t kh = hh / group;
            double mx = sinks ? sinks[hh] : -INFINITY, sum = sinks ? 1.0 : 0.0; /* a sink: exp(0) once mx is it */
            for (size_t t = 0; t < oldest; t++) sc[t] = -INFINITY;
            for (size_t t = oldest; t <= pos; t++) {
                const float *kt = st->k_cache + ((size_t)l * st->max_pos + t) * kd + kh * hd;
                double s = 0;
                for (size_t i = 0; i < hd; i++) s += (double)q[hh * hd + i] * kt[i];
                sc[t] = (float)(s / sqrt((double)hd));
                if (sc[t] > mx) mx = sc[t];
            }
            if (sinks) sum = exp(sinks[hh] - mx);
            for (size_t t = 0; t <= pos; t++) sum += exp(sc[t] - mx);
            for (size_t i = 0; i < hd; i++) {
                double acc = 0;
                for (size_t t = 0; t <= pos; t++) {
                    const float *vt = st->v_cache + ((size_t)l * st->max_pos + t) * kd + kh * hd;
                    acc += exp(sc[t] - mx) / sum * vt[i];
                }
                att[hh * hd + i] = (float)acc;
            }
        }
        free(sinks);
        ref_matvec(L->wo, L->bo, att, o);
        for (size_t i = 0; i < e; i++) x[i] += o[i];
        ref_rmsnorm(x, L->ffn_norm, h, e, hp->norm_eps);
        if (L->router) {
            ref_experts(hp, L, h, o);
        } else {
            ref_matvec(L->w_gate, NULL, h, g);
            ref_matvec(L->w_up, NULL, h, u);
            for (size_t i = 0; i < hp->n_ff; i++) g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
            ref_matvec(L->w_down, NULL, g, o);
        }
        for (size_t i = 0; i < e; i++) x[i] += o[i];
    }
    ref_rmsnorm(x, m->output_norm, h, e, hp->norm_eps);
    ref_matvec(m->output, NULL, h, logits);
    free(x), free(h), free(q), free(att), free(o), free(g), free(u), free(sc), free(ff);
}

/* Runs n tokens through both and returns the worst relative logit error
 * up to the first token whose reference met a rounding near-tie (every
 * token if none), and in *after the worst from that token on (0 if none):
 * from there on the two may differ by one activation step. */
static double compare(const char *path, size_t n, int threads, const ref_scaling *sc, double *after) {
    double ignored;
    if (!after) after = &ignored;
    cleave_model *m;
    cleave_context *ctx;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    cleave_context_params cp = cleave_context_default_params();
    cp.kv_type = CLEAVE_TYPE_F32;
    cp.n_ctx = 64;
    cp.n_threads = threads;
    CHECK_OK(cleave_context_new(m, &cp, &ctx));
    const model_hparams *hp = &m->hp;
    int32_t toks[64];
    for (size_t i = 0; i < n; i++) toks[i] = (int32_t)((i * 37 + 5) % hp->n_vocab);
    CHECK_OK(cleave_decode(ctx, toks, n, 0, 0, true));

    ref_state st = {m, NULL, NULL, n, sc};
    size_t kd = (size_t)hp->n_head_kv * hp->head_dim;
    st.k_cache = calloc((size_t)hp->n_layer * n * kd, 4);
    st.v_cache = calloc((size_t)hp->n_layer * n * kd, 4);
    float *ref = malloc(hp->n_vocab * 4);
    double worst = 0;
    *after = 0;
    ref_near_ties = 0;
    for (size_t i = 0; i < n; i++) {
        ref_token(&st, toks[i], i, ref);
        double e = tu_rel_err(cleave_get_logits(ctx, (int32_t)i), ref, hp->n_vocab);
        double *w = ref_near_ties ? after : &worst; /* a flip in K/V reaches later tokens */
        if (e > *w || e != e) *w = e;
    }
    free(ref);
    free(st.k_cache);
    free(st.v_cache);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return worst;
}

static cleave_status set_scaling(gguf_writer *w, const gguf_file *src, void *user) {
    const ref_scaling *sc = user;
    const char *arch;
    size_t len;
    cleave_status st = gguf_get_str(src, "general.architecture", &arch, &len);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%.*s.%s", (int)len, arch, suffix), key)
    if (!st && sc->old_key) return gguf_set_f32(w, KEY("rope.scale_linear"), sc->factor);
    if (!st) st = gguf_set_str(w, KEY("rope.scaling.type"), sc->type);
    if (!st) st = gguf_set_f32(w, KEY("rope.scaling.factor"), sc->factor);
    if (!st && sc->n_ctx_orig) st = gguf_set_u32(w, KEY("rope.scaling.original_context_length"), sc->n_ctx_orig);
#undef KEY
    return st;
}

/* A tiny model with RoPE scaling against the reference applying the same
 * numbers; and against the unscaled reference, which it must be far from
 * (so the scaling is not lost on the way). */
static void check_scaled(const char *arch, const ref_scaling *sc, const char *label) {
    const char *base = tu_tiny_model(arch, CLEAVE_TYPE_F32);
    if (!base) return;
    char name[96];
    snprintf(name, sizeof name, "%s-%s.gguf", arch, label);
    const char *path = tu_tmp(name);
    if (!tu_gguf_rewrite(base, path, true, 0, SIZE_MAX, set_scaling, (void *)sc)) return;
    double err = compare(path, 12, 2, sc, NULL), off = compare(path, 12, 2, NULL, NULL);
    fprintf(stderr, "%-6s %-13s max rel logit error %.2e (unscaled reference: %.2e)\n", arch, label, err, off);
    CHECK_MSG(err < 1e-4, "%s %s: %g", arch, label, err);
    CHECK_MSG(off > 1e-2, "%s %s: the scaling changes nothing (%g)", arch, label, off);
}

/* The "small" llama shape with every weight matrix of random blocks: type
 * `main`, and `big` for attn_v, ffn_down and the embeddings (the tensors
 * a Q4_K_M file keeps in Q6_K). Scales are set so the weights have the
 * f32 model's rms, 1 / sqrt(n_embd), which keeps activations sane. */
static const char *block_model(const char *label, cleave_type main_type, cleave_type big) {
    const char *f32 = tu_gen_model("small", "llama", CLEAVE_TYPE_F32, 7);
    struct cleave_model *m = NULL;
    if (!f32) return NULL;
    CHECK_OK(model_load(f32, &m));
    if (!m) return NULL;
    gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_new(&w));
    CHECK_OK(model_write_hparams(w, &m->hp, label, main_type));
    CHECK_OK(vocab_synth_write(w, m->hp.n_vocab));
    size_t nt = gguf_n_tensors(m->file);
    void **bufs = calloc(nt, sizeof *bufs);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(m->file, i);
        if (t->n_dims != 2) {
            CHECK_OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL,
                                            NULL, NULL));
            continue;
        }
        bool is_big = strstr(t->name, "attn_v") || strstr(t->name, "ffn_down") ||
                      strstr(t->name, "token_embd") || strstr(t->name, "output.");
        cleave_type type = is_big ? big : main_type;
        size_t bytes = quant_row_bytes(type, t->ne[0]) * t->ne[1];
        float *v = malloc(t->n_elems * sizeof(float));
        bufs[i] = malloc(bytes);
        /* once at unit scale to measure, once at the scale that gives the
         * target rms (same random state: the same quants and signs) */
        uint64_t start = rng;
        tu_random_blocks(type, bufs[i], t->n_elems, 1.0f, &rng);
        quant_dequantize_row(type, bufs[i], v, t->n_elems);
        double ss = 0;
        for (size_t k = 0; k < t->n_elems; k++) ss += (double)v[k] * v[k];
        double rms = sqrt(ss / (double)t->n_elems);
        rng = start;
        tu_random_blocks(type, bufs[i], t->n_elems,
                         (float)(1.0 / sqrt((double)m->hp.n_embd) / rms), &rng);
        free(v);
        CHECK_OK(gguf_writer_add_tensor(w, t->name, type, 2, t->ne, bufs[i], NULL, NULL, NULL));
    }
    static char paths[16][4096];
    static int slot;
    char name[96];
    snprintf(name, sizeof name, "blocks-%s.gguf", label);
    char *path = paths[slot++ % 16];
    snprintf(path, 4096, "%s", tu_tmp(name));
    CHECK_OK(gguf_writer_write(w, path, NULL, NULL));
    gguf_writer_free(w);
    for (size_t i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    model_free(m);
    return path;
}

/* Only rounding differs. */
#define TOL 1e-4
/* After an input near a rounding boundary of the int8 activations (block
 * types only) one input of one matmul may differ by a step, 1/127 of its
 * block's max, and through the K/V cache the tokens after it too: up to
 * 2.3e-2 of the logits measured on these small random models (random
 * Q6_K sub-block scales span -128..127, so single weights can dominate).
 * A wrong kernel is caught before the first tie, and by test_cpu_quant's
 * exact checks. */
#define TOL_AFTER_TIE 5e-2

static void check_after(double after) {
    if (after > 0) fprintf(stderr, ", after a rounding tie %.2e (tolerance %.0e)", after, TOL_AFTER_TIE);
    fprintf(stderr, "\n");
    CHECK_MSG(after < TOL_AFTER_TIE, "after a rounding tie: %g", after);
}

int main(void) {
    const char *archs[] = {"llama", "qwen2", "qwen3", "qwen3moe", "mixtral", "gpt-oss"};
    const ref_scaling oss_yarn = {"yarn", 4, 128, false}; /* tiny gpt-oss's, as its file states */
    const cleave_type types[] = {CLEAVE_TYPE_F32, CLEAVE_TYPE_F16, CLEAVE_TYPE_BF16,
                                 CLEAVE_TYPE_Q8_0};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        for (size_t t = 0; t < 4; t++) {
            const char *path = tu_tiny_model(archs[a], types[t]);
            if (!path) continue;
            /* Same dequantized weights on both sides and f32 activations (or
             * the same int8 rounding of them): only rounding differs. */
            bool oss = !strcmp(archs[a], "gpt-oss"); /* 12 tokens: past its window of 8 */
            double after, err = compare(path, 12, 2, oss ? &oss_yarn : NULL, &after);
            fprintf(stderr, "%-6s %-5s max rel logit error %.2e (tolerance %.0e)", archs[a],
                    cleave_type_name(types[t]), err, TOL);
            check_after(after);
            CHECK_MSG(err < TOL, "%s %s: %g", archs[a], cleave_type_name(types[t]), err);
        }
    }
    /* the GPU-shaped expert models (256 wide, 16 and 8 experts) */
    const char *small_moe[] = {"qwen3moe", "gpt-oss"};
    for (size_t a = 0; a < 2; a++) {
        const char *path = tu_gen_model("small", small_moe[a], CLEAVE_TYPE_F32, 7);
        if (!path) continue;
        cleave_model *m = NULL;
        CHECK_OK(cleave_model_load(path, NULL, &m));
        CHECK_MSG(m && m->hp.n_embd == 256 && m->hp.n_expert >= 8, "small %s: the small preset's shapes", small_moe[a]);
        cleave_model_free(m);
        const ref_scaling small_yarn = {"yarn", 4, 512, false}; /* small gpt-oss's, as its file states */
        double after, err = compare(path, 12, 2, a ? &small_yarn : NULL, &after);
        fprintf(stderr, "small %-8s f32 max rel logit error %.2e (tolerance %.0e)", small_moe[a], err, TOL);
        check_after(after);
        CHECK_MSG(err < TOL, "small %s: %g", small_moe[a], err);
    }
    /* RoPE scaling: linear x4, the older linear key, YaRN x4 from an
     * original context of 64 (the ramp over pairs 0..3 of llama's 8 and
     * qwen3's 16) on both pairings */
    const ref_scaling linear = {"linear", 4, 0, false}, old_key = {"linear", 4, 0, true},
                      yarn = {"yarn", 4, 64, false};
    check_scaled("llama", &linear, "linear");
    check_scaled("qwen2", &old_key, "scale_linear");
    check_scaled("llama", &yarn, "yarn");
    check_scaled("qwen3", &yarn, "yarn");

    /* Every block type on random blocks, then a Q4_K_M-like mix. */
    const cleave_type blocks[] = {CLEAVE_TYPE_Q4_0, CLEAVE_TYPE_Q4_1, CLEAVE_TYPE_Q5_0,
                                  CLEAVE_TYPE_Q5_1, CLEAVE_TYPE_Q8_0, CLEAVE_TYPE_IQ4_NL,
                                  CLEAVE_TYPE_Q2_K, CLEAVE_TYPE_Q3_K, CLEAVE_TYPE_Q4_K,
                                  CLEAVE_TYPE_Q5_K, CLEAVE_TYPE_Q6_K, CLEAVE_TYPE_IQ4_XS,
                                  CLEAVE_TYPE_MXFP4};
    for (size_t t = 0; t <= sizeof blocks / sizeof blocks[0]; t++) {
        bool mix = t == sizeof blocks / sizeof blocks[0];
        cleave_type main_type = mix ? CLEAVE_TYPE_Q4_K : blocks[t];
        const char *label = mix ? "q4_K_M-mix" : cleave_type_name(main_type);
        const char *path = block_model(label, main_type, mix ? CLEAVE_TYPE_Q6_K : main_type);
        if (!path) continue;
        double after, err = compare(path, 12, 2, NULL, &after);
        fprintf(stderr, "small  %-10s max rel logit error %.2e (tolerance %.0e)", label, err, TOL);
        check_after(after);
        CHECK_MSG(err < TOL, "%s: %g", label, err);
    }
    const char *stories = tu_stories_model();
    if (stories) {
        double after, err = compare(stories, 24, 1, NULL, &after);
        fprintf(stderr, "stories260K  max rel logit error %.2e (tolerance %.0e)", err, TOL);
        check_after(after);
        CHECK_MSG(err < TOL, "stories260K: %g", err);
    }
    return tu_finish("test_forward_reference");
}
