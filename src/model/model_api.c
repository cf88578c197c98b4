/* Public model API: thin wrappers that validate arguments and
 * hand over to the model module. */
#include <stdio.h>
#include <string.h>

#include "cleave.h"
#include "base/error.h"
#include "model.h"
#include "quant/quant.h"

cleave_model_params cleave_model_default_params(void) {
    cleave_model_params p = {NULL, NULL, false};
    return p;
}

cleave_status cleave_model_load(const char *path, const cleave_model_params *params,
                                cleave_model **out) {
    if (!path || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "model load: path and out required");
    cleave_status st = params && params->vocab_only ? model_load_vocab(path, out) : model_load(path, out);
    /* The file is mapped, not read, so loading itself is quick; report the
     * end so progress bars close. */
    if (!st && params && params->progress) params->progress(1.0f, params->progress_user);
    return st;
}

void cleave_model_free(cleave_model *model) { model_free(model); }

typedef struct {
    uint64_t params, bytes;
    uint64_t type_bytes[64];
} count_acc;

static void count_tensor(const gguf_tensor *t, void *user) {
    count_acc *a = user;
    a->params += t->n_elems;
    a->bytes += t->nbytes;
    if (t->n_dims >= 2 && t->type < 64) a->type_bytes[t->type] += t->nbytes;
}

cleave_status cleave_model_describe(const cleave_model *m, cleave_model_desc *d) {
    if (!m || !d) return err_set(CLEAVE_ERR_INVALID_ARG, "describe: null argument");
    memset(d, 0, sizeof *d);
    const model_hparams *hp = &m->hp;
    snprintf(d->arch, sizeof d->arch, "%s", hp->arch_name);
    const char *name;
    size_t len;
    if (gguf_find_key(m->file, "general.name") >= 0 &&
        gguf_get_str(m->file, "general.name", &name, &len) == CLEAVE_OK)
        snprintf(d->name, sizeof d->name, "%.*s", (int)(len > 127 ? 127 : len), name);
    d->n_vocab = hp->n_vocab;
    d->n_embd = hp->n_embd;
    d->n_layer = hp->n_layer;
    d->n_head = hp->n_head;
    d->n_head_kv = hp->n_head_kv;
    d->head_dim = hp->head_dim;
    d->n_ff = hp->n_ff;
    d->n_ctx_train = hp->n_ctx_train;
    d->rope_freq_base = hp->rope_freq_base;
    d->norm_eps = hp->norm_eps;
    d->rope_neox = hp->rope_neox;
    d->tied_output = m->output == m->tok_embd;
    d->has_rope_freqs = m->rope_freqs != NULL;
    count_acc acc;
    memset(&acc, 0, sizeof acc);
    model_for_each_tensor(m, count_tensor, &acc);
    d->n_params = acc.params;
    d->weight_bytes = acc.bytes;
    size_t best = 0;
    for (size_t t = 1; t < 64; t++)
        if (acc.type_bytes[t] > acc.type_bytes[best]) best = t;
    d->weight_type = (cleave_type)best;
    return CLEAVE_OK;
}

size_t cleave_model_kv_bytes_per_token(const cleave_model *m, cleave_type kv_type) {
    return m ? model_kv_bytes_per_token(&m->hp, kv_type, kv_type) : 0;
}
