/* A Jinja2 interpreter for chat templates: the subset that models'
 * tokenizer.chat_template texts use, rendering byte for byte what
 * Python's jinja2 (ImmutableSandboxedEnvironment, trim_blocks and
 * lstrip_blocks on, as Hugging Face transformers sets it up) renders.
 *
 * Pieces: jinja_template.c reads the text as jinja2 does, jinja_lex.c
 * cuts it into tokens (whitespace control applied there), jinja_parse.c
 * builds the tree, jinja_value.c holds the values and their Python
 * semantics (str(), ==, truth, JSON), jinja_eval.c runs the tree;
 * jinja_filters.c, jinja_builtins.c (global functions and tests) and
 * jinja_methods.c (str, dict, list methods, on jinja_strings.c's Python
 * string operations) are what templates call. jinja_impl.h is what they
 * share. A parsed template is read-only, so one template renders on
 * several threads at once; each render owns an arena of its values.
 *
 * Sandboxed and bounded: no file access (include, import, extends are
 * refused), and every render has limits on output, steps, recursion and
 * memory; a limit hit is an error, never a hang. */
#ifndef CLEAVE_JINJA_H
#define CLEAVE_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

typedef struct jinja_template jinja_template;

/* Largest template text accepted (models' templates are tens of KiB). */
#define JINJA_MAX_SOURCE (1u << 20)

/* Parses src (n bytes); a syntax error names its line and column. */
cleave_status jinja_parse(const char *src, size_t n, jinja_template **out);
void jinja_free(jinja_template *t);

typedef struct jinja_limits {
    size_t max_output;  /* bytes rendered */
    uint64_t max_steps; /* nodes evaluated, loop iterations */
    int max_depth;      /* nested macro calls and expression nesting */
    size_t max_memory;  /* bytes of values a render may allocate */
} jinja_limits;

/* 8 MiB of output, 10 million steps, depth 64, 256 MiB of values. */
jinja_limits jinja_default_limits(void);

typedef struct jinja_render_args {
    const cleave_chat_message *msgs;
    size_t n_msgs;
    bool add_generation_prompt;
    const char *bos_token, *eos_token; /* NULL: "" */
    /* strftime_now's clock: the current local time, or (fixed_time) this
     * Unix time in UTC, so tests render the same text on every run. */
    bool fixed_time;
    int64_t time;
    jinja_limits limits;
} jinja_render_args;

/* Renders into a fresh mem_alloc'ed text (*out, NUL-terminated, *n_out
 * bytes). raise_exception and limit hits are CLEAVE_ERR_INVALID_ARG. */
cleave_status jinja_render(const jinja_template *t, const jinja_render_args *args, char **out,
                           size_t *n_out);

#endif
