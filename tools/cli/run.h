/* `cleave run`'s options, shared by its one-sequence path (cmd_run.c) and
 * its several-sequence path (run_parallel.c). */
#ifndef CLEAVE_TOOLS_RUN_H
#define CLEAVE_TOOLS_RUN_H

#include "cli.h"

typedef struct {
    const char *cmd; /* "run" or "chat": the name its messages give */
    const char *model, *prompt, *prompt_file;
    cli_placement place;
    long long n_predict, n_ctx, n_batch, n_ubatch, threads;
    long long n_parallel;    /* -np: sequences sharing the context */
    long long np_stagger;    /* --np-stagger: steps between their prompts' arrivals */
    long long np_dwell;      /* --np-dwell: steps a mode is kept at least (the gate) */
    cleave_type kv_type, kv_type_v; /* -ctk, -ctv (CLEAVE_KV_TYPE_AS_K: -ctk's) */
    cleave_bos bos;          /* --bos, --no-bos; else as the vocabulary's metadata says */
    bool verbose_prompt, mem_report;
    const char *psm_policy;  /* off, always (the default) or auto */
    const char *psm_rates;   /* auto: the rates file of `cleave calibrate` */
    bool psm_keep_both;      /* keep the placement a switch leaves resident */
    const char *prompt_cache; /* --prompt-cache: a state file of a processed prompt */
    bool prompt_cache_ro;     /* --prompt-cache-ro: read it, never write it */
    bool prompt_cache_lossy;  /* --prompt-cache-lossy: restore into a KV type that loses precision */
    bool chat;                /* --chat: the prompt is a user's message in the model's chat template */
    const char *chat_template; /* --chat-template NAME: this family instead of the model's */
    const char *chat_template_file; /* --chat-template-file F: this Jinja instead of the model's */
    const cleave_chat_template *tmpl; /* the one loaded (chat_render.h), for --chat and -cnv */
    const char *system;       /* -sys TEXT: a system message first */
    bool conversation;        /* -cnv (cleave chat): turns read from stdin */
    bool escape;              /* -e: \n, \t, \\ ... in the prompt and system texts */
    bool ignore_eos;          /* --ignore-eos: generate on past end-of-generation tokens */
    bool n_predict_set;       /* -n given (a conversation's answers default to unbounded) */
    long long seed;           /* -s; CLI_SEED_RANDOM: drawn and printed */
    cleave_sampler_params sp;
} run_opts;

/* -cnv: a conversation in the model's chat template on a context and
 * sampler made from o (conversation.c). */
int run_conversation(cleave_model *m, cleave_context *ctx, cleave_sampler *smp, const run_opts *o);

/* -np N: N sequences of the same prompt share the context (sequence i
 * samples with seed + i); their prompts arrive np_stagger steps apart and
 * run in the same batches as the others' generated tokens; with -psm, the
 * gate (cleave_psm_gate_step) says when the context switches. Prints each
 * sequence's text once all are done. */
int run_parallel(cleave_model *m, cleave_context *ctx, const run_opts *o, const char *text,
                 size_t text_len, const int32_t *prompt, size_t n_prompt);

#endif
