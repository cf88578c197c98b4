/* The engine against an independent reference: a naive forward pass written
 * here from the model math (double accumulation, weights dequantized once,
 * one token at a time) that shares nothing with the backend ops. Every
 * architecture and weight type, plus stories260K; f32 KV cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "quant/quant.h"
#include "testutil.h"

typedef struct {
    const struct cleave_model *m;
    float *k_cache, *v_cache; /* [layer][pos][n_head_kv*head_dim] */
    size_t max_pos;
} ref_state;

static float *deq(const gguf_tensor *t) {
    if (!t) return NULL;
    float *out = malloc(t->n_elems * sizeof(float));
    quant_dequantize_row((cleave_type)t->type, t->data, out, t->n_elems);
    return out;
}

/* y[rows] = W[rows][cols] x (+ b) */
static void ref_matvec(const gguf_tensor *W, const gguf_tensor *b, const float *x, float *y) {
    size_t cols = W->ne[0], rows = W->ne[1];
    float *w = deq(W), *bias = deq(b);
    for (size_t r = 0; r < rows; r++) {
        double acc = bias ? bias[r] : 0.0;
        for (size_t c = 0; c < cols; c++) acc += (double)w[r * cols + c] * x[c];
        y[r] = (float)acc;
    }
    free(w);
    free(bias);
}

static void ref_rmsnorm(const float *x, const gguf_tensor *wt, float *y, size_t n, float eps) {
    float *w = deq(wt);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / (double)n + eps);
    for (size_t i = 0; i < n; i++) y[i] = (float)(x[i] * inv * w[i]);
    free(w);
}

static void ref_rope(float *v, size_t pos, const model_hparams *hp, const float *ff) {
    size_t n_rot = hp->n_rot;
    for (size_t i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos * pow(hp->rope_freq_base, -2.0 * (double)i / (double)n_rot);
        if (ff) theta /= ff[i];
        double c = cos(theta), s = sin(theta);
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
            ref_rope(q + hh * hd, pos, hp, ff);
        }
        for (size_t hh = 0; hh < hp->n_head_kv; hh++) {
            if (L->k_norm) ref_rmsnorm(kc + hh * hd, L->k_norm, kc + hh * hd, hd, hp->norm_eps);
            ref_rope(kc + hh * hd, pos, hp, ff);
        }
        size_t group = hp->n_head / hp->n_head_kv;
        for (size_t hh = 0; hh < hp->n_head; hh++) {
            size_t kh = hh / group;
            double mx = -INFINITY, sum = 0;
            for (size_t t = 0; t <= pos; t++) {
                const float *kt = st->k_cache + ((size_t)l * st->max_pos + t) * kd + kh * hd;
                double s = 0;
                for (size_t i = 0; i < hd; i++) s += (double)q[hh * hd + i] * kt[i];
                sc[t] = (float)(s / sqrt((double)hd));
                if (sc[t] > mx) mx = sc[t];
            }
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
        ref_matvec(L->wo, NULL, att, o);
        for (size_t i = 0; i < e; i++) x[i] += o[i];
        ref_rmsnorm(x, L->ffn_norm, h, e, hp->norm_eps);
        ref_matvec(L->w_gate, NULL, h, g);
        ref_matvec(L->w_up, NULL, h, u);
        for (size_t i = 0; i < hp->n_ff; i++) g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        ref_matvec(L->w_down, NULL, g, o);
        for (size_t i = 0; i < e; i++) x[i] += o[i];
    }
    ref_rmsnorm(x, m->output_norm, h, e, hp->norm_eps);
    ref_matvec(m->output, NULL, h, logits);
    free(x), free(h), free(q), free(att), free(o), free(g), free(u), free(sc), free(ff);
}

/* Runs n tokens through both and returns the worst relative logit error. */
static double compare(const char *path, size_t n, int threads) {
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

    ref_state st = {m, NULL, NULL, n};
    size_t kd = (size_t)hp->n_head_kv * hp->head_dim;
    st.k_cache = calloc((size_t)hp->n_layer * n * kd, 4);
    st.v_cache = calloc((size_t)hp->n_layer * n * kd, 4);
    float *ref = malloc(hp->n_vocab * 4);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        ref_token(&st, toks[i], i, ref);
        double e = tu_rel_err(cleave_get_logits(ctx, (int32_t)i), ref, hp->n_vocab);
        if (e > worst || e != e) worst = e;
    }
    free(ref);
    free(st.k_cache);
    free(st.v_cache);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return worst;
}

int main(void) {
    const char *archs[] = {"llama", "qwen2", "qwen3"};
    const cleave_type types[] = {CLEAVE_TYPE_F32, CLEAVE_TYPE_F16, CLEAVE_TYPE_BF16,
                                 CLEAVE_TYPE_Q8_0};
    for (size_t a = 0; a < 3; a++) {
        for (size_t t = 0; t < 4; t++) {
            const char *path = tu_tiny_model(archs[a], types[t]);
            if (!path) continue;
            /* Same dequantized weights on both sides and f32 activations:
             * only rounding differs. */
            double tol = 1e-4;
            double err = compare(path, 12, 2);
            fprintf(stderr, "%-6s %-5s max rel logit error %.2e (tolerance %.0e)\n", archs[a],
                    cleave_type_name(types[t]), err, tol);
            CHECK_MSG(err < tol, "%s %s: %g", archs[a], cleave_type_name(types[t]), err);
        }
    }
    const char *stories = tu_stories_model();
    if (stories) {
        double err = compare(stories, 24, 1);
        fprintf(stderr, "stories260K  max rel logit error %.2e\n", err);
        CHECK_MSG(err < 1e-4, "stories260K: %g", err);
    }
    return tu_finish("test_forward_reference");
}
