/* Public model and token API: thin wrappers that validate arguments and
 * hand over to the model and tokenizer modules. */
#include <stdio.h>
#include <string.h>

#include "cleave.h"
#include "error.h"
#include "model.h"
#include "quant.h"
#include "tokenizer.h"

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
    return m ? model_kv_bytes_per_token(&m->hp, kv_type) : 0;
}

int32_t cleave_token_bos(const cleave_model *m) {
    return m && m->tok ? tokenizer_bos(m->tok) : -1;
}
int32_t cleave_token_eos(const cleave_model *m) {
    return m && m->tok ? tokenizer_eos(m->tok) : -1;
}
bool cleave_token_is_eog(const cleave_model *m, int32_t t) {
    return m && m->tok && tokenizer_is_eog(m->tok, t);
}

static cleave_status no_tokenizer(const cleave_model *m) {
    return err_set(CLEAVE_ERR_UNSUPPORTED, "%s (token ids still work, e.g. in cleave bench)",
                   m->tok_error);
}

cleave_status cleave_tokenize(const cleave_model *m, const char *text, size_t len, bool add_bos,
                              int32_t *tokens, size_t cap, size_t *n_out) {
    if (!m || (!text && len) || !n_out)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: null argument");
    if (!m->tok) return no_tokenizer(m);
    return tokenizer_encode(m->tok, text ? text : "", len, add_bos, tokens, cap, n_out);
}

cleave_status cleave_tokenize_ex(const cleave_model *m, const char *text, size_t len, bool add_special,
                                 bool parse_special, int32_t *tokens, size_t cap, size_t *n_out) {
    if (!m || (!text && len) || !n_out) return err_set(CLEAVE_ERR_INVALID_ARG, "tokenize: null argument");
    if (!m->tok) return no_tokenizer(m);
    return tokenizer_encode_ex(m->tok, text ? text : "", len, add_special, parse_special, tokens, cap, n_out);
}

cleave_status cleave_token_to_piece(const cleave_model *m, int32_t prev, int32_t token, char *buf,
                                    size_t cap, size_t *n_out) {
    if (!m || !n_out) return err_set(CLEAVE_ERR_INVALID_ARG, "token_to_piece: null argument");
    if (!m->tok) return no_tokenizer(m);
    return tokenizer_piece(m->tok, prev, token, buf, cap, n_out);
}
