/* A conversation as the prompt text of the model's chat template: the
 * command line's one place for chats (run --chat, run -cnv / chat). */
#ifndef CLEAVE_TOOLS_CHAT_RENDER_H
#define CLEAVE_TOOLS_CHAT_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include "cleave.h"

/* The template a command runs: --chat-template-file's Jinja (file), else
 * --chat-template's family (name), else the model's own Jinja (chatml when
 * it has none). NULL after a message on stderr naming cmd; else it was
 * described on stderr. Free with cleave_chat_template_free. */
cleave_chat_template *chat_template_open(const char *cmd, const cleave_model *m, const char *name,
                                         const char *file);
/* msgs rendered in t, with the assistant's turn opened when add_assistant:
 * a NUL-terminated text (free it) of *len bytes, or NULL (cleave_last_error
 * says why: the template's raise_exception, a limit, memory). */
char *chat_render(const cleave_chat_template *t, const cleave_chat_message *msgs, size_t n_msgs,
                  bool add_assistant, size_t *len);

#endif
