/* Chat templates: a conversation as the prompt text a model was trained
 * on. This file holds the built-in families: it recognises the common
 * ones by the markers in tokenizer.chat_template and writes their format
 * itself, as llama.cpp's llama_chat_apply_template does.
 *
 * How the pieces fit: cleave_chat_template_* (chat_template.c) is the
 * API callers use. It runs the model's own Jinja (tokenizer.chat_template,
 * or a text the caller gives) with the interpreter in jinja_*.c (jinja.h:
 * lexer, parser, values, evaluator, builtins), and falls back to a family
 * here when the model has no template (chatml) or its Jinja does not
 * parse (the family its markers name). cleave_chat_template_of and
 * cleave_chat_apply remain the families' direct entry points. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model/gguf.h"
#include "model/model.h"

/* qwen3: chatml, the model thinking first as its template does by
 * default; qwen3-nothink: the empty think block its template writes with
 * enable_thinking false. gpt-oss: the harmony format as llama.cpp writes
 * it without Jinja. */
static const char *const NAMES[] = {"llama3", "chatml", "mistral", "llama2", "qwen3", "qwen3-nothink", "gpt-oss"};
#define N_NAMES (sizeof NAMES / sizeof NAMES[0])
#define NAME_LIST "llama3, chatml, mistral, llama2, qwen3, qwen3-nothink, gpt-oss"

cleave_status cleave_chat_template_of(const cleave_model *m, const char **name) {
    if (!m || !name) return err_set(CLEAVE_ERR_INVALID_ARG, "chat template: model and name required");
    *name = NULL;
    const char *t;
    size_t n;
    if (gguf_find_key(m->file, "tokenizer.chat_template") < 0 || gguf_get_str(m->file, "tokenizer.chat_template", &t, &n))
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "the model has no chat template (tokenizer.chat_template); name one (" NAME_LIST
                       "), e.g. the fallback chatml");
    char buf[8192];
    snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf - 1 ? n : sizeof buf - 1), t);
    if (strstr(buf, "<|start_header_id|>")) *name = "llama3";
    else if (strstr(buf, "<|start|>") && strstr(buf, "<|channel|>")) *name = "gpt-oss";
    else if (strstr(buf, "<|im_start|>") && strstr(buf, "<think>")) *name = "qwen3";
    else if (strstr(buf, "<|im_start|>")) *name = "chatml";
    else if (strstr(buf, "[INST]") && strstr(buf, "<<SYS>>")) *name = "llama2";
    else if (strstr(buf, "[INST]")) *name = "mistral";
    if (*name) return CLEAVE_OK;
    return err_set(CLEAVE_ERR_UNSUPPORTED,
                   "the model's chat template is not one cleave knows (markers of " NAME_LIST
                   " not found); name one, e.g. the fallback chatml");
}

typedef struct {
    char *buf;
    size_t cap, n;
} out_text;

static void put(out_text *o, const char *s) {
    size_t k = strlen(s);
    if (o->n < o->cap) memcpy(o->buf + o->n, s, o->n + k <= o->cap ? k : o->cap - o->n);
    o->n += k;
}

cleave_status cleave_chat_apply(const char *name, const cleave_chat_message *msgs, size_t n_msgs,
                                bool add_assistant, char *buf, size_t cap, size_t *n_out) {
    if (!name || (!msgs && n_msgs) || !n_out || (!buf && cap))
        return err_set(CLEAVE_ERR_INVALID_ARG, "chat template: arguments required");
    int kind = -1;
    for (int i = 0; i < (int)N_NAMES; i++)
        if (!strcmp(name, NAMES[i])) kind = i;
    if (kind < 0) return err_set(CLEAVE_ERR_UNSUPPORTED, "chat template '%s' unknown (" NAME_LIST ")", name);
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return err_set(CLEAVE_ERR_INVALID_ARG, "chat template: message %zu has no role or content", i);
    out_text o = {buf, cap, 0};
    const char *system = NULL;
    for (size_t i = 0; i < n_msgs; i++) {
        const cleave_chat_message *msg = &msgs[i];
        bool sys = !strcmp(msg->role, "system"), user = !strcmp(msg->role, "user");
        switch (kind) {
        case 0: /* llama3 */
            put(&o, "<|start_header_id|>"), put(&o, msg->role), put(&o, "<|end_header_id|>\n\n");
            put(&o, msg->content), put(&o, "<|eot_id|>");
            break;
        case 1: /* chatml */
        case 4: /* qwen3 */
        case 5: /* qwen3-nothink */
            put(&o, "<|im_start|>"), put(&o, msg->role), put(&o, "\n"), put(&o, msg->content), put(&o, "<|im_end|>\n");
            break;
        case 6: /* gpt-oss */
            put(&o, "<|start|>"), put(&o, msg->role), put(&o, "<|message|>"), put(&o, msg->content);
            put(&o, strcmp(msg->role, "assistant") ? "<|end|>" : "<|return|>");
            break;
        default: /* mistral, llama2: the system text goes into the first user turn */
            if (sys) {
                system = msg->content;
            } else if (user) {
                put(&o, "[INST] ");
                if (system && kind == 3) put(&o, "<<SYS>>\n"), put(&o, system), put(&o, "\n<</SYS>>\n\n");
                else if (system) put(&o, system), put(&o, "\n\n");
                system = NULL;
                put(&o, msg->content), put(&o, " [/INST]");
            } else {
                put(&o, msg->content), put(&o, kind == 3 ? " </s>" : "</s>");
            }
        }
    }
    if (add_assistant && kind == 0) put(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    if (add_assistant && (kind == 1 || kind == 4 || kind == 5)) put(&o, "<|im_start|>assistant\n");
    if (add_assistant && kind == 5) put(&o, "<think>\n\n</think>\n\n");
    if (add_assistant && kind == 6) put(&o, "<|start|>assistant");
    *n_out = o.n;
    if (o.n > cap) return err_set(CLEAVE_ERR_INVALID_ARG, "chat template: %zu bytes, room for %zu", o.n, cap);
    return CLEAVE_OK;
}
