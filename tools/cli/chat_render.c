/* Chat rendering over cleave_chat_template_load and _apply (chat_render.h). */
#include <stdio.h>
#include <stdlib.h>

#include "chat_render.h"
#include "cli.h"

cleave_chat_template *chat_template_open(const char *cmd, const cleave_model *m, const char *name,
                                         const char *file) {
    char *text = NULL;
    size_t len = 0;
    if (file && !(text = cli_read_file(file, &len))) {
        fprintf(stderr, "cleave %s: --chat-template-file %s: %s\n", cmd, file, cleave_last_error());
        return NULL;
    }
    cleave_chat_template *t = NULL;
    cleave_status st = cleave_chat_template_load(m, text ? NULL : name, text, &t);
    free(text);
    if (st) {
        fprintf(stderr, "cleave %s: the chat template: %s\n", cmd, cleave_last_error());
        return NULL;
    }
    fprintf(stderr, "cleave: chat template: %s\n", cleave_chat_template_describe(t));
    return t;
}

char *chat_render(const cleave_chat_template *t, const cleave_chat_message *msgs, size_t n_msgs,
                  bool add_assistant, size_t *len) {
    *len = 0;
    size_t need = 0;
    /* a size query: fails for want of room, saying how much */
    cleave_status st = cleave_chat_template_apply(t, msgs, n_msgs, add_assistant, NULL, 0, &need);
    if (st && !(st == CLEAVE_ERR_INVALID_ARG && need)) return NULL;
    char *text = malloc(need + 1);
    if (!text) {
        fprintf(stderr, "cleave: out of memory for a chat of %zu bytes\n", need);
        return NULL;
    }
    if (cleave_chat_template_apply(t, msgs, n_msgs, add_assistant, text, need + 1, len) != CLEAVE_OK) {
        free(text);
        return NULL;
    }
    text[*len] = '\0';
    return text;
}
