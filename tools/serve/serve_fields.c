/* The fields a request may carry: an allow-list, so a field cleave does
 * not implement (llama.cpp's grammar or mirostat, OpenAI's suffix...) is
 * refused by name instead of being dropped while the answer comes back
 * as if it had been honoured. What passes is either implemented or
 * changes no output (who the user is, what to store, how to stream). Some
 * pass only with a harmless value (an empty logit_bias, no tools):
 * serve_request.c checks those values. */
#include <string.h>

#include "serve.h"

static const char *const both[] = {
    /* implemented */
    "model",
    "stream",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty",
    "seed",
    "stop",
    "ignore_eos",
    /* implemented or refused by value where they ask for something (serve_request.c) */
    "n",
    "logprobs",
    "top_logprobs",
    "n_probs",
    "logit_bias",
    "response_format",
    "cache_prompt", /* llama.cpp's (its web UI sends true): cleave always reuses a slot's prefix */
    /* no effect on the answer */
    "stream_options",
    "user",
    "metadata",
    "store",
    "service_tier",
};
static const char *const completion_only[] = {"prompt", "echo", "best_of"};
static const char *const chat_only[] = {
    "messages",
    "max_completion_tokens",
    /* tool calls: only their absence passes (serve_request.c) */
    "tools",
    "functions",
    "tool_choice",
    "function_call",
    "parallel_tool_calls",
};

static bool listed(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, list[i])) return true;
    return false;
}

bool serve_field_allowed(const char *name, bool chat) {
    if (listed(name, both, sizeof both / sizeof *both)) return true;
    return chat ? listed(name, chat_only, sizeof chat_only / sizeof *chat_only)
                : listed(name, completion_only, sizeof completion_only / sizeof *completion_only);
}
