/* A conversation as the prompt text of the model's chat template: the one
 * place the command line renders chats, so a template engine can replace
 * the families of cleave_chat_apply here alone. */
#ifndef CLEAVE_TOOLS_CHAT_RENDER_H
#define CLEAVE_TOOLS_CHAT_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include "cleave.h"

/* The template asked for (asked, when not NULL) or the model's; NULL when
 * the model has none cleave knows (cleave_last_error says which). */
const char *chat_template_name(const cleave_model *m, const char *asked);
/* msgs rendered in that template, with the assistant's turn opened when
 * add_assistant: a NUL-terminated text (free it) of *len bytes, or NULL
 * (cleave_last_error says why). */
char *chat_render(const cleave_model *m, const char *asked, const cleave_chat_message *msgs,
                  size_t n_msgs, bool add_assistant, size_t *len);

#endif
