/* `cleave quantize`: rewrites a GGUF with its weights in a llama.cpp file
 * type. Metadata is copied entry by entry (types kept), each tensor's new
 * type comes from the mixture rules (src/quant/quant_mix.c), and tensors
 * are converted one at a time while the writer streams them, so memory
 * holds one converted tensor, never the model. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleave.h"
#include "base/error.h"
#include "base/mem.h"
#include "gguf.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

typedef struct {
    const gguf_tensor *src;
    cleave_type type; /* written type */
    size_t nbytes;    /* written bytes */
} q_plan;

typedef struct {
    const cleave_quantize_params *p;
    q_plan *plan;
    size_t n;
    size_t cur;           /* tensor whose converted bytes buf holds */
    uint8_t *buf;
    size_t buf_cap;
    uint64_t done, total; /* weights converted so far, and to convert */
    uint64_t cur_elems;
} q_state;

cleave_quantize_params cleave_quantize_default_params(void) {
    return (cleave_quantize_params){.type = "Q4_K_M"};
}

const char *cleave_quantize_type_names(void) { return quant_mix_names(); }

static void note(const cleave_quantize_params *p, const char *fmt, ...) ERR_PRINTF(2, 3);
static void note(const cleave_quantize_params *p, const char *fmt, ...) {
    if (!p->note) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->note(line, p->note_user);
}

/* The hyperparameters the mixture rules read; absent keys leave defaults
 * (the rules then treat the model as having no GQA). */
static quant_mix_model model_facts(const gguf_file *f) {
    quant_mix_model mm = {.n_gqa = 1, .has_output = gguf_find_tensor(f, "output.weight") != NULL};
    const char *arch = NULL;
    size_t len = 0;
    char a[64] = "", key[128];
    if (!gguf_get_str(f, "general.architecture", &arch, &len) && len < sizeof a) {
        memcpy(a, arch, len);
        a[len] = 0;
    }
    uint32_t n_head = 0, n_head_kv = 0;
    snprintf(key, sizeof key, "%s.block_count", a);
    if (gguf_get_u32(f, key, &mm.n_layer)) mm.n_layer = 0;
    snprintf(key, sizeof key, "%s.attention.head_count", a);
    if (gguf_get_u32(f, key, &n_head)) n_head = 0;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", a);
    if (gguf_get_u32(f, key, &n_head_kv)) n_head_kv = n_head;
    if (n_head && n_head_kv) mm.n_gqa = n_head / n_head_kv;
    mm.is_70b = !strcmp(a, "llama") && mm.n_layer == 80 && n_head_kv && n_head_kv != n_head;
    snprintf(key, sizeof key, "%s.expert_count", a);
    if (gguf_get_u32(f, key, &mm.n_expert)) mm.n_expert = 0;
    for (size_t i = 0; i < gguf_n_tensors(f); i++)
        if (strstr(gguf_tensor_at(f, i)->name, "attn_v.weight")) mm.n_attn_v++;
    err_clear(); /* absent keys are not errors here */
    return mm;
}

static bool convertible(uint32_t t) {
    return t == CLEAVE_TYPE_F32 || t == CLEAVE_TYPE_F16 || t == CLEAVE_TYPE_BF16 ||
           t == CLEAVE_TYPE_Q8_0;
}

/* Decides every tensor's type; refuses inputs that cannot be converted. */
static cleave_status make_plan(const gguf_file *f, const quant_mix *mix, q_state *s,
                               cleave_quantize_stats *stats) {
    quant_mix_model mm = model_facts(f);
    bool warned_q8 = false;
    for (size_t i = 0; i < s->n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        q_plan *q = &s->plan[i];
        q->src = t;
        q->type = (cleave_type)t->type;
        if (quant_mix_quantizes(t->name, t->n_dims)) {
            cleave_type wanted;
            q->type = quant_mix_tensor_type(mix, s->p->pure, &mm, t->name, t->ne[0], &wanted);
            if (wanted != q->type) {
                note(s->p, "%s: rows of %llu weights are not whole %s blocks: using %s",
                     t->name, (unsigned long long)t->ne[0], cleave_type_name(wanted),
                     cleave_type_name(q->type));
                stats->n_fallback++;
            }
        }
        if ((uint32_t)q->type != t->type) {
            const char *tn = NULL;
            quant_type_info(t->type, &tn, NULL, NULL);
            if (!convertible(t->type))
                return err_set(CLEAVE_ERR_UNSUPPORTED,
                               "%s: tensor '%s' is %s: only f32, f16, bf16 (or q8_0) weights can be "
                               "quantized; start from the unquantized model",
                               gguf_path(f), t->name, tn ? tn : "of an unknown type");
            if (t->type == CLEAVE_TYPE_Q8_0 && !warned_q8) {
                note(s->p, "warning: %s holds q8_0 weights: requantizing them loses precision "
                           "(quantize from the f16/bf16 model where you can)", gguf_path(f));
                warned_q8 = true;
            }
            s->total += t->n_elems;
            stats->n_converted++;
        }
        q->nbytes = quant_row_bytes(q->type, t->ne[0]) * (size_t)(t->n_elems / t->ne[0]);
        stats->bytes_in += t->nbytes;
        stats->bytes_out += q->nbytes;
        stats->n_weights += t->n_elems;
        stats->n_tensors++;
    }
    return CLEAVE_OK;
}

/* Progress within one tensor, as a fraction of every weight to convert. */
static bool tensor_progress(float fraction, void *user) {
    q_state *s = user;
    double done = (double)s->done + (double)fraction * (double)s->cur_elems;
    return s->p->progress(s->total ? (float)(done / (double)s->total) : 1.0f, s->p->progress_user);
}

/* The writer asks for a tensor's bytes in chunks, in order: the first
 * chunk converts the whole tensor (on every thread), later ones copy. */
static cleave_status fill(void *user, size_t index, size_t at, void *dst, size_t n) {
    q_state *s = user;
    const q_plan *q = &s->plan[index];
    if (s->cur != index) {
        if (q->nbytes > s->buf_cap) {
            free(s->buf);
            s->buf_cap = 0;
            if (!(s->buf = mem_alloc(q->nbytes, "quantized tensor"))) return CLEAVE_ERR_OOM;
            s->buf_cap = q->nbytes;
        }
        const gguf_tensor *t = q->src;
        s->cur_elems = t->n_elems;
        cleave_status st = quant_convert_rows(q->type, s->buf, (cleave_type)t->type, t->data,
                                              (size_t)(t->n_elems / t->ne[0]), (size_t)t->ne[0],
                                              s->p->n_threads, s->p->progress ? tensor_progress : NULL, s);
        if (st) return err_wrap(st, "%s", t->name);
        s->done += t->n_elems;
        s->cur = index;
    }
    if (at > q->nbytes || n > q->nbytes - at)
        return err_set(CLEAVE_ERR_INTERNAL, "quantize: chunk past the end of '%s'", q->src->name);
    memcpy(dst, s->buf + at, n);
    return CLEAVE_OK;
}

/* Metadata: everything but the keys this run decides, and split keys
 * (the output is one file). */
static cleave_status copy_metadata(gguf_writer *w, const gguf_file *f, const quant_mix *mix) {
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; !st && i < gguf_n_kv(f); i++) {
        const char *k = gguf_kv_key(f, i);
        if (!strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version") ||
            !strncmp(k, "split.", 6))
            continue;
        st = gguf_copy_kv(w, f, i);
    }
    if (!st) st = gguf_set_u32(w, "general.quantization_version", 2);
    if (!st) st = gguf_set_u32(w, "general.file_type", mix->ftype);
    return st;
}

static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

cleave_status cleave_quantize_model(const char *in, const char *out,
                                    const cleave_quantize_params *params,
                                    cleave_quantize_stats *stats_out) {
    if (!in || !out || !params)
        return err_set(CLEAVE_ERR_INVALID_ARG, "quantize: input, output and parameters required");
    const quant_mix *mix = quant_mix_find(params->type);
    if (!mix)
        return err_set(CLEAVE_ERR_INVALID_ARG, "unknown type '%s' (one of %s)",
                       params->type ? params->type : "(none)", quant_mix_names());
    cleave_quantize_params p = *params;
    if (p.n_threads <= 0) p.n_threads = default_threads();
    gguf_file *f = NULL;
    cleave_status st = gguf_open(in, &f);
    if (st) return st;
    uint32_t n_split = 0;
    if (gguf_find_key(f, "split.count") >= 0 && !gguf_get_u32(f, "split.count", &n_split) && n_split > 1) {
        gguf_close(f);
        return err_set(CLEAVE_ERR_UNSUPPORTED, "%s is shard 1 of %u: merge the shards first", in, n_split);
    }
    err_clear();
    cleave_quantize_stats stats = {0};
    q_state s = {.p = &p, .n = gguf_n_tensors(f), .cur = SIZE_MAX};
    s.plan = mem_calloc(s.n ? s.n : 1, sizeof *s.plan, "quantize plan");
    gguf_writer *w = NULL;
    if (!s.plan) st = CLEAVE_ERR_OOM;
    if (!st) st = make_plan(f, mix, &s, &stats);
    if (!st) st = gguf_writer_new(&w);
    if (!st) st = copy_metadata(w, f, mix);
    for (size_t i = 0; !st && i < s.n; i++) {
        const q_plan *q = &s.plan[i];
        bool same = (uint32_t)q->type == q->src->type;
        st = gguf_writer_add_tensor(w, q->src->name, (uint32_t)q->type, q->src->n_dims, q->src->ne,
                                    same ? q->src->data : NULL, same ? NULL : fill, &s, NULL);
    }
    if (!st) st = gguf_writer_write(w, out, NULL, NULL);
    if (!st && p.progress) p.progress(1.0f, p.progress_user);
    gguf_writer_free(w);
    free(s.buf);
    free(s.plan);
    gguf_close(f);
    if (!st && stats_out) *stats_out = stats;
    return st;
}
