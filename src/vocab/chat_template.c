/* cleave_chat_template: the model's own Jinja chat template run by the
 * interpreter in jinja_*.c, or a built-in family (chat.c) where the model
 * has none, its Jinja does not parse, or the caller names one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "model/gguf.h"
#include "model/model.h"
#include "vocab/jinja.h"
#include "vocab/tokenizer.h"

struct cleave_chat_template {
    jinja_template *jinja; /* NULL: the built-in family */
    char *source;          /* the Jinja text as given */
    const char *family;
    char *bos, *eos;
    char describe[512];
};

static cleave_status token_text(const cleave_model *m, int32_t id, char **out) {
    const char *s = "";
    size_t n = 0;
    if (m && m->tok && id >= 0 && !tokenizer_token_text(m->tok, id, &s, &n)) s = "", n = 0;
    *out = mem_strndup(s, n, "chat template token");
    return *out ? CLEAVE_OK : CLEAVE_ERR_OOM;
}

/* A family's name as chat.c knows it, or UNSUPPORTED listing them. */
static cleave_status builtin(const char *name, const char **family) {
    size_t n;
    cleave_status st = cleave_chat_apply(name, NULL, 0, false, NULL, 0, &n);
    if (st) return st;
    *family = name;
    return CLEAVE_OK;
}

static cleave_status load_jinja(cleave_chat_template *t, const char *text, size_t n) {
    if (!(t->source = mem_strndup(text, n, "chat template text"))) return CLEAVE_ERR_OOM;
    return jinja_parse(text, n, &t->jinja);
}

cleave_status cleave_chat_template_load(const cleave_model *model, const char *name,
                                        const char *jinja_text, cleave_chat_template **out) {
    if (out) *out = NULL;
    if (!out || (!model && !name && !jinja_text))
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "chat template: a model, a family name or a Jinja text required");
    if (name && jinja_text)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "chat template: name a family or give a Jinja text, not both");
    cleave_chat_template *t = mem_calloc(1, sizeof *t, "chat template");
    if (!t) return CLEAVE_ERR_OOM;
    cleave_status st = token_text(model, model ? cleave_token_bos(model) : -1, &t->bos);
    if (!st) st = token_text(model, model ? cleave_token_eos(model) : -1, &t->eos);
    if (!st && jinja_text) {
        size_t n = strlen(jinja_text);
        st = load_jinja(t, jinja_text, n);
        if (st)
            st = err_wrap(st, "the chat template file did not parse");
        else
            snprintf(t->describe, sizeof t->describe, "the given template (Jinja, %zu bytes)", n);
    } else if (!st && name) {
        st = builtin(name, &t->family);
        if (!st) snprintf(t->describe, sizeof t->describe, "%s (built in)", name);
    } else if (!st) {
        const char *text;
        size_t n;
        if (gguf_find_key(model->file, "tokenizer.chat_template") < 0 ||
            gguf_get_str(model->file, "tokenizer.chat_template", &text, &n)) {
            err_clear();
            t->family = "chatml";
            snprintf(t->describe, sizeof t->describe, "chatml (built in; the model has none)");
        } else if (load_jinja(t, text, n)) {
            char why[400];
            snprintf(why, sizeof why, "%s", cleave_last_error());
            jinja_free(t->jinja), t->jinja = NULL;
            free(t->source), t->source = NULL;
            const char *family;
            if (cleave_chat_template_of(model, &family)) {
                st = err_set(CLEAVE_ERR_INVALID_ARG, "the model's chat template did not parse: %s",
                             why);
            } else {
                t->family = family;
                snprintf(t->describe, sizeof t->describe,
                         "%s (built in; the model's template did not parse: %s)", family, why);
            }
        } else {
            snprintf(t->describe, sizeof t->describe, "the model's template (Jinja, %zu bytes)", n);
        }
    }
    if (st) {
        cleave_chat_template_free(t);
        return st;
    }
    *out = t;
    return CLEAVE_OK;
}

void cleave_chat_template_free(cleave_chat_template *t) {
    if (!t) return;
    jinja_free(t->jinja);
    free(t->source);
    free(t->bos);
    free(t->eos);
    free(t);
}

const char *cleave_chat_template_describe(const cleave_chat_template *t) {
    return t ? t->describe : "";
}

const char *cleave_chat_template_source(const cleave_chat_template *t) {
    return t ? t->source : NULL;
}

cleave_status cleave_chat_template_apply(const cleave_chat_template *t,
                                         const cleave_chat_message *msgs, size_t n_msgs,
                                         bool add_generation_prompt, char *buf, size_t cap,
                                         size_t *n_out) {
    if (!t || (!msgs && n_msgs) || !n_out || (!buf && cap))
        return err_set(CLEAVE_ERR_INVALID_ARG, "chat template: arguments required");
    if (!t->jinja)
        return cleave_chat_apply(t->family, msgs, n_msgs, add_generation_prompt, buf, cap, n_out);
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return err_set(CLEAVE_ERR_INVALID_ARG,
                           "chat template: message %zu has no role or content", i);
    jinja_render_args a = {.msgs = msgs,
                           .n_msgs = n_msgs,
                           .add_generation_prompt = add_generation_prompt,
                           .bos_token = t->bos,
                           .eos_token = t->eos,
                           .limits = jinja_default_limits()};
    char *text;
    size_t n;
    cleave_status st = jinja_render(t->jinja, &a, &text, &n);
    if (st) return st;
    *n_out = n;
    if (n > cap)
        st = err_set(CLEAVE_ERR_INVALID_ARG, "chat template: %zu bytes, room for %zu", n, cap);
    else if (n)
        memcpy(buf, text, n);
    free(text);
    return st;
}
