/* Chat rendering over cleave_chat_template_load and _apply (chat_render.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    /* room for the messages and the template's markup at a guess, so a
     * conversation renders once; a template that writes more renders
     * again with the size it said */
    size_t cap = 4096;
    for (size_t i = 0; i < n_msgs; i++) cap += (msgs[i].content ? strlen(msgs[i].content) : 0) + 256;
    for (int attempt = 0; attempt < 2; attempt++) {
        char *text = malloc(cap + 1);
        if (!text) {
            fprintf(stderr, "cleave: out of memory for a chat of %zu bytes\n", cap);
            return NULL;
        }
        size_t need = 0;
        cleave_status st = cleave_chat_template_apply(t, msgs, n_msgs, add_assistant, text, cap, &need);
        if (!st) {
            text[need] = '\0';
            *len = need;
            return text;
        }
        free(text);
        if (st != CLEAVE_ERR_INVALID_ARG || need <= cap) return NULL; /* the template's own error */
        cap = need;
    }
    return NULL;
}
