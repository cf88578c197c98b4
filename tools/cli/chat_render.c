/* Chat rendering over cleave_chat_template_of and cleave_chat_apply
 * (chat_render.h). */
#include <stdlib.h>

#include "chat_render.h"
#include "base/error.h"

const char *chat_template_name(const cleave_model *m, const char *asked) {
    const char *name = asked;
    if (!name && cleave_chat_template_of(m, &name) != CLEAVE_OK) return NULL;
    return name;
}

char *chat_render(const cleave_model *m, const char *asked, const cleave_chat_message *msgs,
                  size_t n_msgs, bool add_assistant, size_t *len) {
    *len = 0;
    const char *name = chat_template_name(m, asked);
    if (!name) return NULL;
    size_t need = 0;
    /* a size query: fails for want of room, saying how much */
    cleave_status st = cleave_chat_apply(name, msgs, n_msgs, add_assistant, NULL, 0, &need);
    if (st && !(st == CLEAVE_ERR_INVALID_ARG && need)) return NULL;
    char *text = malloc(need + 1);
    if (!text) {
        err_set(CLEAVE_ERR_OOM, "out of memory for a chat of %zu bytes", need);
        return NULL;
    }
    if (cleave_chat_apply(name, msgs, n_msgs, add_assistant, text, need + 1, len) != CLEAVE_OK) {
        free(text);
        return NULL;
    }
    text[*len] = '\0';
    return text;
}
