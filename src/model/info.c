/* `cleave info`: what a GGUF model is and what running it needs. Reads the
 * header only (tensors stay mapped, untouched). */
#include <stdio.h>

#include "cleave.h"
#include "base/error.h"
#include "model.h"
#include "plan/plan.h"
#include "quant/quant.h"

static void print_tensor(const gguf_tensor *t, FILE *out) {
    const char *tn = "?";
    quant_type_info(t->type, &tn, NULL, NULL);
    char shape[96];
    int at = snprintf(shape, sizeof shape, "[%llu", (unsigned long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims && at > 0 && (size_t)at < sizeof shape; d++)
        at += snprintf(shape + at, sizeof shape - (size_t)at, ", %llu", (unsigned long long)t->ne[d]);
    if (at > 0 && (size_t)at < sizeof shape) snprintf(shape + at, sizeof shape - (size_t)at, "]");
    fprintf(out, "  %-32s %-6s %-24s %10.2f MiB\n", t->name, tn, shape, t->nbytes / 1048576.0);
}

cleave_status cleave_print_info(const char *path, uint32_t n_ctx, void *file) {
    FILE *out = file ? file : stdout;
    struct cleave_model *m;
    cleave_status st = model_load(path, &m);
    if (st) return st;
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    const model_hparams *hp = &m->hp;
    if (!n_ctx) n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    size_t n_shards = gguf_shards_count(m->shards);
    fprintf(out, "file:          %s (GGUF v%u, %.2f MiB", path, gguf_version(m->file),
            gguf_shards_size(m->shards) / 1048576.0);
    if (n_shards > 1) fprintf(out, " in %zu shards", n_shards);
    fprintf(out, ")\n");
    for (size_t i = 0; n_shards > 1 && i < n_shards; i++) {
        const gguf_file *f = gguf_shards_file(m->shards, i);
        fprintf(out, "  shard %zu:     %s (%zu tensors, %.2f MiB)\n", i + 1, gguf_path(f), gguf_n_tensors(f),
                gguf_file_size(f) / 1048576.0);
    }
    fprintf(out, "name:          %s\n", d.name[0] ? d.name : "(none)");
    fprintf(out, "architecture:  %s\n", d.arch);
    fprintf(out, "parameters:    %.3f M (%s weights mostly)\n", d.n_params / 1e6,
            cleave_type_name(d.weight_type));
    fprintf(out, "vocab:         %u   bos %d   eos %d\n", d.n_vocab, cleave_token_bos(m),
            cleave_token_eos(m));
    fprintf(out, "embedding:     %u   layers %u   ffn %u\n", d.n_embd, d.n_layer, d.n_ff);
    if (hp->n_expert)
        fprintf(out, "experts:       %u, %u used a token, each FFN %u wide%s\n", hp->n_expert, hp->n_expert_used,
                hp->n_ff, hp->swiglu_oai ? " (clamped SwiGLU)" : "");
    fprintf(out, "heads:         %u query, %u kv (GQA %u), head size %u\n", d.n_head, d.n_head_kv,
            d.n_head / d.n_head_kv, d.head_dim);
    fprintf(out, "rope:          %s, base %g, %u dims%s\n", d.rope_neox ? "neox" : "normal",
            (double)d.rope_freq_base, hp->n_rot, d.has_rope_freqs ? ", frequency factors" : "");
    model_rope_ext re;
    model_rope_resolve(hp, &re);
    if (re.scaled)
        fprintf(out, "rope scaling:  %s, factor %g, original context %u, attn factor %g%s\n",
                model_rope_type_name(hp->rope_scaling.type), 1.0 / re.freq_scale, re.n_ctx_orig,
                (double)re.attn_factor, re.ext_factor != 0 ? ", YaRN ramp" : "");
    if (hp->n_swa && hp->swa_pattern)
        fprintf(out, "sliding window: %u on %u of every %u layers\n", hp->n_swa, hp->swa_pattern - 1, hp->swa_pattern);
    else if (hp->n_swa)
        fprintf(out, "sliding window: %u (contexts stay within it)\n", hp->n_swa);
    fprintf(out, "norm eps:      %g\n", (double)d.norm_eps);
    fprintf(out, "output:        %s\n", d.tied_output ? "tied to the token embedding" : "separate");
    fprintf(out, "train context: %u\n", d.n_ctx_train);
    fprintf(out, "\ntensors (%zu):\n", gguf_shards_n_tensors(m->shards));
    for (size_t i = 0; i < gguf_shards_n_tensors(m->shards); i++)
        print_tensor(gguf_shards_tensor_at(m->shards, i), out);

    size_t kv16 = model_kv_bytes_per_token(hp, CLEAVE_TYPE_F16, CLEAVE_TYPE_F16) * n_ctx;
    size_t kv32 = model_kv_bytes_per_token(hp, CLEAVE_TYPE_F32, CLEAVE_TYPE_F32) * n_ctx;
    size_t compute = plan_compute_bytes(hp, 512, n_ctx);
    fprintf(out, "\nmemory at context %u, batch 512:\n", n_ctx);
    fprintf(out, "  weights          %10.2f MiB\n", d.weight_bytes / 1048576.0);
    fprintf(out, "  KV cache f16     %10.2f MiB  (f32: %.2f MiB)\n", kv16 / 1048576.0,
            kv32 / 1048576.0);
    fprintf(out, "  compute buffers  %10.2f MiB\n", compute / 1048576.0);
    fprintf(out, "  total (f16 KV)   %10.2f MiB\n", (d.weight_bytes + kv16 + compute) / 1048576.0);
    model_free(m);
    return CLEAVE_OK;
}
