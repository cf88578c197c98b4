/* `cleave run`: stream a completion. stdout carries only the prompt and the
 * generated text, as it comes; logs and speeds go to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_render.h"
#include "run.h"

#define RUN_SYNOPSIS "-m MODEL [-p PROMPT] [flags]"

static void run_usage(FILE *out, const char *cmd) {
    if (!strcmp(cmd, "chat"))
        fprintf(out, "usage: cleave chat -m MODEL.gguf [-sys TEXT] [-p FIRST] [options]\n"
                     "  a conversation (as cleave run -cnv): a user line from stdin at a time, the\n"
                     "  answer streamed; /exit or end of input leaves, Ctrl-C stops an answer\n");
    fprintf(out,
            "usage: cleave run -m MODEL.gguf [-p PROMPT | -f FILE] [options]\n"
            "  -m, --model PATH        GGUF model\n"
            "  -p, --prompt TEXT       prompt (\"\" starts from BOS alone)\n"
            "  -f, --file PATH         read the prompt from a file\n"
            "  -n, --n-predict N       tokens to generate (default 128; -1 = until EOS or context end)\n"
            "  -c, --ctx-size N        context size in tokens (default: model's, at most 4096)\n"
            "  -b, --batch-size N      tokens per forward pass in prompt processing (default 512)\n"
            "  -ub, --ubatch-size N    layer split: prefill as a pipeline of N-token micro-batches\n"
            "  -t, --threads N         CPU threads of each CPU device (default: the cores, divided\n"
            "                          among cpu:N's N devices)\n"
            CLI_PLACEMENT_HELP
            "  -psm, --prefill-split-mode M\n"
            "                          process the prompt under split mode M (none, layer, tensor),\n"
            "                          then switch the live context to -sm for generation; a switch\n"
            "                          the devices cannot hold is known (and said) before the prompt,\n"
            "                          and generation then stays in M\n"
            "  -pts, --prefill-tensor-split L\n"
            "                          the prefill phase's shares, as -ts is the generation phase's\n"
            "                          (default: fitted to the devices' memory for M)\n"
            "  --psm-policy P          off (run in -sm throughout), always (default: switch when -psm\n"
            "                          and -sm differ), auto (the modes of both phases chosen per\n"
            "                          request from measured rates: needs --psm-rates)\n"
            "  --psm-rates PATH        rates written by `cleave calibrate` on these devices\n"
            "  --psm-keep-both         keep the placement a switch leaves on the devices, so a switch\n"
            "                          back moves only the KV cache (needs room for both)\n"
            "  -ctk, --cache-type-k T  K cache type: f16 (default), f32, bf16, q8_0, q5_0, q4_0\n"
            "  -ctv, --cache-type-v T  V cache type, as -ctk (default: -ctk's)\n"
            "  --temp T                temperature (default 0.8; 0 = greedy)\n"
            "  --top-k N               (default 40; 0 = off)\n"
            "  --top-p P               (default 0.95; 1 = off)\n"
            "  --min-p P               (default 0.05; 0 = off)\n"
            "  --repeat-penalty X      (default 1.0 = off)\n"
            "  --repeat-last-n N       tokens the penalties look back (default 64; -1 = all)\n"
            "  --frequency-penalty X   (default 0)\n"
            "  --presence-penalty X    (default 0)\n"
            "  -s, --seed N            sampling seed (default -1: a random one, printed on stderr)\n"
            "  --ignore-eos            generate on past end-of-generation tokens\n"
            "  --bos, --no-bos         prepend BOS to the prompt, or do not (default: as the vocabulary's\n"
            "                          tokenizer.ggml.add_bos_token says, as llama.cpp)\n"
            "  -np, --parallel N       N sequences of the prompt share the context (sequence i samples\n"
            "                          with seed + i); their texts are printed when all are done\n"
            "  --np-stagger K          the sequences' prompts arrive K steps apart (default 0: together)\n"
            "  --np-dwell K            with -psm and -np: a mode is kept at least K steps (default 8)\n"
            "  --chat                  the prompt is a user's message, in the model's chat template\n"
            "                          (its own Jinja, tokenizer.chat_template; chatml when it has none)\n"
            "  --chat-template NAME    a built-in family instead (implies --chat): llama3, chatml,\n"
            "                          mistral, llama2, qwen3, qwen3-nothink or gpt-oss\n"
            "  --chat-template-file F  a Jinja chat template from F instead (implies --chat)\n"
            "  -sys, --system-prompt T with --chat or -cnv: a system message first (also --system)\n"
            "  -cnv, --conversation    a conversation in the chat template: user lines from stdin\n"
            "                          (\"> \" on a terminal), each answer streamed and kept in the\n"
            "                          KV cache; -p is the first message; /exit or end of input\n"
            "                          leaves; Ctrl-C stops an answer, at the prompt it leaves;\n"
            "                          -n bounds each answer (default: until end-of-generation)\n"
            "  -e, --escape            process escapes (\\n, \\t, \\\\, \\\", \\') in -p, -sys and\n"
            "                          the conversation's lines\n"
            "  --prompt-cache FILE     restore the processed prompt from FILE when it holds a prefix\n"
            "                          of this one, process the rest, and save it there\n"
            "  --prompt-cache-ro       use --prompt-cache's file, never write it\n"
            "  --prompt-cache-lossy    restore it into a KV type that loses precision (q8_0 into f16)\n"
            "  --mem-report            print planned and peak memory per device\n");
}

static bool flag_is(const char *a, const char *name, const char *alias) {
    return !strcmp(a, name) || (alias && !strcmp(a, alias));
}

static bool parse(int argc, char **argv, run_opts *o) {
    o->n_predict = 128;
    o->seed = CLI_SEED_RANDOM;
    cli_usage_for(o->cmd, RUN_SYNOPSIS);
    o->n_parallel = 1;
    o->np_dwell = 8;
    o->kv_type = CLEAVE_TYPE_F16;
    o->kv_type_v = CLEAVE_KV_TYPE_AS_K;
    o->place = cli_placement_default();
    o->sp = cleave_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        int pr;
#define IS(s1, s2) flag_is(a, s1, s2)
        if (IS("-h", "--help")) {
            run_usage(stdout, o->cmd);
            exit(0);
        } else if (IS("-m", "--model") && v) o->model = v, i++;
        else if (IS("-p", "--prompt") && v) o->prompt = v, i++;
        else if (IS("-f", "--file") && v) o->prompt_file = v, i++;
        else if (IS("-n", "--n-predict")) {
            if (!cli_int(a, v, -1, 1 << 30, &o->n_predict)) return false;
            o->n_predict_set = true, i++;
        }
        else if (IS("-c", "--ctx-size")) { if (!cli_int(a, v, 0, 1 << 24, &o->n_ctx)) return false; i++; }
        else if (IS("-b", "--batch-size")) { if (!cli_int(a, v, 1, 1 << 20, &o->n_batch)) return false; i++; }
        else if (IS("-ub", "--ubatch-size")) { if (!cli_int(a, v, 0, 1 << 20, &o->n_ubatch)) return false; i++; }
        else if (IS("-t", "--threads")) { if (!cli_int(a, v, 0, 1024, &o->threads)) return false; i++; }
        else if (IS("-ctk", "--cache-type-k") || IS("--cache-type", NULL) || IS("-ctv", "--cache-type-v")) {
            bool k = strcmp(a, "-ctv") && strcmp(a, "--cache-type-v");
            if (cleave_type_from_name(v, k ? &o->kv_type : &o->kv_type_v) != CLEAVE_OK) {
                fprintf(stderr, "cleave: %s: unknown type '%s'\n", a, v ? v : "");
                return false;
            }
            i++;
        }
        else if (IS("--temp", NULL)) { if (!cli_float(a, v, &o->sp.temperature)) return false; i++; }
        else if (IS("--top-k", NULL)) { if (!cli_int(a, v, 0, 1 << 30, &x)) return false; o->sp.top_k = (int32_t)x; i++; }
        else if (IS("--top-p", NULL)) { if (!cli_float(a, v, &o->sp.top_p)) return false; i++; }
        else if (IS("--min-p", NULL)) { if (!cli_float(a, v, &o->sp.min_p)) return false; i++; }
        else if (IS("--repeat-penalty", NULL)) { if (!cli_float(a, v, &o->sp.repeat_penalty)) return false; i++; }
        else if (IS("--repeat-last-n", NULL)) { if (!cli_int(a, v, -1, 1 << 30, &x)) return false; o->sp.penalty_last_n = (int32_t)x; i++; }
        else if (IS("--frequency-penalty", NULL)) { if (!cli_float(a, v, &o->sp.frequency_penalty)) return false; i++; }
        else if (IS("--presence-penalty", NULL)) { if (!cli_float(a, v, &o->sp.presence_penalty)) return false; i++; }
        else if (IS("-s", "--seed")) {
            if (!cli_int(a, v, -1, INT64_MAX, &o->seed)) return false;
            i++;
        }
        else if (IS("--ignore-eos", NULL)) o->ignore_eos = true;
        else if (IS("-cnv", "--conversation")) o->conversation = true;
        else if (IS("-e", "--escape")) o->escape = true;
        else if (IS("--psm-policy", NULL) && v) {
            if (strcmp(v, "off") && strcmp(v, "always") && strcmp(v, "auto")) {
                fprintf(stderr, "cleave run: --psm-policy: expected off, always or auto, got '%s'\n", v);
                return false;
            }
            o->psm_policy = v, i++;
        }
        else if (IS("--psm-rates", NULL) && v) o->psm_rates = v, i++;
        else if (IS("--psm-keep-both", NULL)) o->psm_keep_both = true;
        else if ((pr = cli_placement_flag(a, v, &o->place)) != 0 || (pr = cli_phase_flag(a, v, &o->place)) != 0) {
            if (pr < 0) return false;
            i++;
        }
        else if (IS("-np", "--parallel")) { if (!cli_int(a, v, 1, 256, &o->n_parallel)) return false; i++; }
        else if (IS("--np-stagger", NULL)) { if (!cli_int(a, v, 0, 1 << 20, &o->np_stagger)) return false; i++; }
        else if (IS("--np-dwell", NULL)) { if (!cli_int(a, v, 0, 1 << 20, &o->np_dwell)) return false; i++; }
        else if (IS("--chat", NULL)) o->chat = true;
        else if (IS("--chat-template", NULL) && v) o->chat_template = v, o->chat = true, i++;
        else if (IS("--chat-template-file", NULL) && v) o->chat_template_file = v, o->chat = true, i++;
        else if ((IS("-sys", "--system-prompt") || IS("--system", NULL)) && v) o->system = v, i++;
        else if (IS("--prompt-cache", NULL) && v) o->prompt_cache = v, i++;
        else if (IS("--prompt-cache-ro", NULL)) o->prompt_cache_ro = true;
        else if (IS("--prompt-cache-lossy", NULL)) o->prompt_cache_lossy = true;
        else if (IS("--no-bos", NULL)) o->bos = CLEAVE_BOS_NEVER;
        else if (IS("--bos", NULL)) o->bos = CLEAVE_BOS_ALWAYS;
        else if (IS("--mem-report", NULL)) o->mem_report = true;
        else {
            cli_bad_option(o->cmd, RUN_SYNOPSIS, a);
            return false;
        }
#undef IS
    }
    if (!o->model) {
        cli_usage_error(o->cmd, RUN_SYNOPSIS, "-m MODEL is required");
        return false;
    }
    if (o->conversation && (o->n_parallel > 1 || o->prompt_cache || o->prompt_file || o->place.has_psm)) {
        cli_usage_error(o->cmd, RUN_SYNOPSIS,
                        "a conversation takes none of -np, --prompt-cache, -f, -psm");
        return false;
    }
    bool auto_policy = o->psm_policy && !strcmp(o->psm_policy, "auto");
    if (auto_policy && !o->psm_rates) {
        fprintf(stderr, "cleave run: --psm-policy auto needs --psm-rates (write one with cleave calibrate)\n");
        return false;
    }
    if (o->psm_policy && !strcmp(o->psm_policy, "off")) o->place.has_psm = false, o->place.n_prefill_shares = 0;
    return cli_phase_check(&o->place, o->cmd, RUN_SYNOPSIS);
}

/* --psm-policy auto: the modes of both phases for this request, from the
 * rates file, chosen before the model is placed, so it is placed in the
 * prefill mode directly and generate() moves it on after the prompt. A
 * plan the devices cannot hold for this request (a mode that does not
 * fit, a switch whose peak passes a budget: cleave_placement_preview) is
 * left out. */
static int choose_modes(run_opts *o, cleave_model *m, const cleave_context_params *cp, size_t n_prompt,
                        uint32_t n_ctx) {
    uint32_t n_gen = o->n_predict < 0 ? (n_ctx > n_prompt ? n_ctx - (uint32_t)n_prompt : 0) : (uint32_t)o->n_predict;
    uint32_t need = (uint32_t)n_prompt + n_gen < n_ctx ? (uint32_t)n_prompt + n_gen : n_ctx;
    cleave_context_params pair = *cp;
    pair.split_mode = CLEAVE_SPLIT_TENSOR, pair.prefill_split_mode = CLEAVE_SPLIT_LAYER;
    pair.shares = NULL, pair.prefill_shares = NULL, pair.n_shares = pair.n_prefill_shares = 0;
    pair.n_ctx = n_ctx;
    pair.fit = true; /* each mode's own shares for the devices */
    static cleave_placement_report rep; /* large: not on the stack */
    bool allowed[4] = {true, true, true, true};
    if (cleave_placement_preview(m, &pair, &rep) == CLEAVE_OK) {
        allowed[0] = rep.largest_ctx[CLEAVE_SPLIT_LAYER] >= need;
        allowed[1] = rep.largest_ctx[CLEAVE_SPLIT_TENSOR] >= need;
        bool pair_holds = rep.n_ctx >= need && rep.phase[CLEAVE_PHASE_GENERATE].fits;
        allowed[2] = pair_holds && rep.switch_fits[CLEAVE_PHASE_GENERATE];
        allowed[3] = pair_holds && rep.switch_fits[CLEAVE_PHASE_PREFILL];
        if (!allowed[2] || !allowed[3])
            fprintf(stderr, "cleave: psm policy: left out: %s%s%s%s\n",
                    !allowed[2] && !allowed[3] ? "both switches" : !allowed[2] ? "layer, then tensor" : "tensor, then layer",
                    rep.why[0] ? " (" : "", rep.why[0] ? rep.why : "", rep.why[0] ? ")" : "");
    }
    if (!allowed[0] && !allowed[1] && !allowed[2] && !allowed[3]) allowed[0] = allowed[1] = true; /* said later */
    cleave_psm_decision dec;
    cleave_status st = cleave_psm_decide_among(o->psm_rates, (uint32_t)n_prompt, n_gen, 0.02, allowed, &dec);
    if (st) return cli_fail("--psm-policy auto", st);
    static const char *const names[4] = {"layer", "tensor", "layer, then tensor", "tensor, then layer"};
    int best = dec.prefill == dec.generate ? (dec.prefill == CLEAVE_SPLIT_TENSOR ? 1 : 0)
                                           : (dec.prefill == CLEAVE_SPLIT_LAYER ? 2 : 3);
    fprintf(stderr, "cleave: psm policy for %zu + %u tokens: %s (predicted %.4g s; layer %.4g, tensor %.4g, "
                    "layer then tensor %.4g, tensor then layer %.4g)\n",
            n_prompt, n_gen, names[best], dec.seconds[best], dec.seconds[0], dec.seconds[1],
            dec.seconds[2], dec.seconds[3]);
    o->place.has_psm = true;
    o->place.psm = dec.prefill;
    o->place.mode = dec.generate;
    o->place.n_shares = o->place.n_prefill_shares = 0; /* each mode fitted */
    return 0;
}

/* Streams one token's text to stdout. */
static void emit(cleave_model *m, int32_t prev, int32_t tok) {
    char piece[256];
    size_t n;
    if (cleave_token_to_piece(m, prev, tok, piece, sizeof piece, &n) == CLEAVE_OK) {
        fwrite(piece, 1, n, stdout);
        fflush(stdout);
    }
}

/* -psm: the prompt is in; the live context moves to the generation
 * phase's placement, or, when it cannot, generation goes on where it is. */
static void switch_for_generation(cleave_context *ctx) {
    double t0 = cli_now();
    cleave_split_mode from = cleave_context_split_mode(ctx);
    /* GPUs copy their new slices of the weights: show it (on CPUs it is
     * over before a bar could say anything) */
    bool gpu = strncmp(cleave_context_device(ctx), "cpu", 3) != 0;
    cleave_context_set_progress(ctx, gpu ? cli_progress : NULL, (void *)"switching split mode");
    cleave_status st = cleave_context_set_phase(ctx, CLEAVE_PHASE_GENERATE);
    if (st) { /* one known not to fit was said when the context was made, and not tried */
        fprintf(stderr, "\ncleave: warning: %s\n", cleave_last_error());
        return;
    }
    fprintf(stderr, "\ncleave: switched from %s to %s split in %.1f ms, now on %s\n",
            cleave_split_mode_name(from), cleave_split_mode_name(cleave_context_split_mode(ctx)),
            (cli_now() - t0) * 1e3, cleave_context_device(ctx));
    cleave_switch_report r;
    if (cleave_context_switch_report(ctx, &r) == CLEAVE_OK) {
        for (size_t d = 0; d < r.n_devices; d++) {
            cleave_device_memory mem;
            if (cleave_context_memory(ctx, d, &mem)) continue;
            fprintf(stderr,
                    "cleave:   %-28s in %9.1f MiB, out %9.1f MiB (from and to other devices %.1f, %.1f), "
                    "peak %9.1f MiB\n",
                    mem.name, r.bytes_in[d] / 1048576.0, r.bytes_out[d] / 1048576.0, r.peer_in[d] / 1048576.0,
                    r.peer_out[d] / 1048576.0, mem.peak / 1048576.0);
        }
        fprintf(stderr, "cleave:   of which KV cache %.1f MiB\n", r.kv_bytes / 1048576.0);
        fprintf(stderr, "cleave:   time: prepare %.1f ms, allocate %.1f ms, copy %.1f ms, free %.1f ms, other %.1f ms\n",
                r.seconds_prepare * 1e3, r.seconds_alloc * 1e3, r.seconds_copy * 1e3, r.seconds_free * 1e3,
                (r.seconds - r.seconds_prepare - r.seconds_alloc - r.seconds_copy - r.seconds_free) * 1e3);
    }
}

/* --prompt-cache: restores the file's state when it holds a prefix of the
 * prompt (with the logits of its last token when it is the whole prompt);
 * the count of prompt tokens it covers, 0 when it is absent or not used
 * (said why). */
static size_t restore_prompt_cache(cleave_context *ctx, const run_opts *o, const int32_t *prompt, size_t n) {
    size_t len = 0;
    char *buf = cli_read_file(o->prompt_cache, &len);
    if (!buf) return 0; /* none yet (or unreadable: it is written anew) */
    size_t cap_ids = len / sizeof(int32_t) + 1; /* more than a state of len bytes holds */
    int32_t *ids = malloc(cap_ids * sizeof *ids);
    size_t n_ids = 0, used = 0;
    const char *why = NULL;
    if (!ids) why = "out of memory";
    else if (cleave_state_tokens(ctx, buf, len, ids, cap_ids, &n_ids)) why = cleave_last_error();
    else if (!n_ids || n_ids > n || memcmp(ids, prompt, n_ids * sizeof *ids)) why = "it holds another prompt";
    else if (cleave_state_seq_set(ctx, 0, buf, len, &(cleave_state_options){.allow_lossy = o->prompt_cache_lossy}))
        why = cleave_last_error();
    else if (n_ids == n && !cleave_get_logits(ctx, -1)) {
        cleave_kv_clear(ctx);
        why = "it has no logits for the last token";
    } else
        used = n_ids;
    if (why) fprintf(stderr, "cleave: prompt cache %s not used: %s\n", o->prompt_cache, why);
    else fprintf(stderr, "cleave: prompt cache %s: %zu of %zu prompt tokens restored\n", o->prompt_cache, used, n);
    free(buf);
    free(ids);
    return used;
}

static int generate(cleave_model *m, cleave_context *ctx, cleave_sampler *smp, const run_opts *o,
                    const char *text, size_t text_len, const int32_t *prompt, size_t n_prompt) {
    double t0 = cli_now();
    size_t cached = o->prompt_cache ? restore_prompt_cache(ctx, o, prompt, n_prompt) : 0;
    cleave_status st = cached < n_prompt ? cleave_decode(ctx, prompt + cached, n_prompt - cached, (int32_t)cached, 0, false)
                                         : CLEAVE_OK;
    if (st) return cli_fail("prompt processing", st);
    double t_prompt = cli_now() - t0;
    if (o->prompt_cache && !o->prompt_cache_ro && cached < n_prompt &&
        (st = cleave_state_seq_save_file(ctx, 0, prompt, n_prompt, o->prompt_cache)))
        fprintf(stderr, "cleave: warning: prompt cache not saved: %s\n", cleave_last_error());
    fwrite(text, 1, text_len, stdout);
    fflush(stdout);
    for (size_t i = 0; i < n_prompt; i++) cleave_sampler_accept(smp, prompt[i]);
    if (cli_phased(&o->place)) switch_for_generation(ctx);

    uint32_t n_ctx = cleave_context_n_ctx(ctx);
    int32_t pos = (int32_t)n_prompt, prev = prompt[n_prompt - 1];
    long long generated = 0;
    double t1 = cli_now();
    /* the first token from the prompt's logits; each next one drawn where
     * the step's logits are (only its id comes back), or here where the
     * context hands the row back */
    int32_t tok;
    if ((st = cleave_sampler_sample(smp, cleave_get_logits(ctx, -1), &tok))) return cli_fail("sampling", st);
    while (o->n_predict < 0 || generated < o->n_predict) {
        if (!o->ignore_eos && cleave_token_is_eog(m, tok)) break;
        emit(m, prev, tok);
        generated++;
        if ((uint32_t)pos >= n_ctx) {
            fprintf(stderr, "\ncleave: context of %u tokens is full; stopping\n", n_ctx);
            break;
        }
        int32_t at = pos++, seq0 = 0, next;
        if ((st = cleave_decode_batch_sample(ctx, &tok, &at, &seq0, 1, &smp, &next)))
            return cli_fail("generation", st);
        if (next == CLEAVE_TOKEN_SAMPLE_ON_HOST && (st = cleave_sampler_sample(smp, cleave_get_logits(ctx, -1), &next)))
            return cli_fail("sampling", st);
        prev = tok;
        tok = next;
    }
    double t_gen = cli_now() - t1;
    printf("\n");
    fflush(stdout);
    if (cached)
        fprintf(stderr, "\nprompt:     %6zu tokens processed, %zu restored from the cache, in %8.2f ms\n",
                n_prompt - cached, cached, t_prompt * 1e3);
    else
        fprintf(stderr, "\nprompt:     %6zu tokens in %8.2f ms (%8.2f tok/s)\n", n_prompt, t_prompt * 1e3,
                n_prompt / t_prompt);
    fprintf(stderr, "generation: %6lld tokens in %8.2f ms (%8.2f tok/s)\n", generated,
            t_gen * 1e3, generated ? generated / t_gen : 0.0);
    return 0;
}

/* `cleave run` and `cleave chat` (run -cnv): one command line, named cmd. */
static int run_command(int argc, char **argv, const char *cmd, bool conversation) {
    run_opts o;
    memset(&o, 0, sizeof o);
    o.cmd = cmd;
    o.conversation = conversation;
    if (!parse(argc, argv, &o)) return 1;
    /* a conversation answers until its end-of-generation token unless -n says */
    if (o.conversation && !o.n_predict_set) o.n_predict = -1;
    if (o.escape) {
        if (o.prompt) cli_unescape((char *)o.prompt);
        if (o.system) cli_unescape((char *)o.system);
    }
    o.sp.seed = cli_resolve_seed(o.seed);
    char *file_text = NULL, *chat_text = NULL;
    cleave_chat_template *tmpl = NULL;
    size_t plen = 0;
    const char *ptext = o.prompt ? o.prompt : "";
    if (o.prompt_file) {
        if (!(file_text = cli_read_file(o.prompt_file, &plen))) {
            fprintf(stderr, "cleave %s: cannot read the prompt file: %s\n", cmd,
                    cleave_last_error());
            return 1;
        }
        ptext = file_text;
    } else {
        plen = strlen(ptext);
    }

    int rc = 1;
    cleave_model *m = NULL;
    cleave_context *ctx = NULL;
    cleave_sampler *smp = NULL;
    int32_t *toks = NULL;
    size_t n = 0;
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = (uint32_t)o.n_ctx;
    cp.n_batch = (uint32_t)o.n_batch;
    cp.n_ubatch = (uint32_t)o.n_ubatch;
    cp.n_threads = (int)o.threads;
    cp.kv_type = o.kv_type;
    cp.kv_type_v = o.kv_type_v;
    cli_placement_apply(&o.place, &cp);
    cp.keep_both_placements = o.psm_keep_both;
    cleave_status st = cleave_model_load(o.model, NULL, &m);
    if (st) {
        rc = cli_fail("loading model", st);
        goto out;
    }
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    if (o.chat || o.conversation) {
        if (!(tmpl = chat_template_open(cmd, m, o.chat_template, o.chat_template_file))) goto out;
        o.tmpl = tmpl;
    }
    if (o.chat && !o.conversation) { /* the prompt as the user's turn of a conversation */
        cleave_chat_message msgs[2] = {{"system", o.system}, {"user", ptext}};
        size_t first = o.system ? 0 : 1;
        if (!(chat_text = chat_render(tmpl, msgs + first, 2 - first, true, &plen))) {
            fprintf(stderr, "cleave %s: --chat: %s\n", cmd, cleave_last_error());
            goto out;
        }
        ptext = chat_text;
    }
    if (!o.conversation) {
        size_t cap = plen + 8;
        toks = malloc(cap * sizeof *toks);
        if (!toks) {
            fprintf(stderr, "cleave %s: out of memory for the prompt\n", cmd);
            goto out;
        }
        /* a chat's markers are control tokens: parsed; a plain prompt's text stays text */
        st = o.chat ? cleave_tokenize_chat(m, ptext, plen, o.bos, toks, cap, &n)
                    : cleave_tokenize_prompt(m, ptext, plen, o.bos, false, toks, cap, &n);
        if (st) {
            rc = cli_fail("tokenizing the prompt", st);
            goto out;
        }
        if (n == 0) {
            fprintf(stderr, "cleave %s: the prompt is empty and no BOS is added (%s)\n", cmd,
                    cleave_token_bos(m) < 0 ? "the model has none"
                                            : "the vocabulary's metadata says not to; --bos adds it");
            goto out;
        }
    }
    if (o.psm_policy && !strcmp(o.psm_policy, "auto")) {
        /* the context a request of n tokens will have: -c, else the model's up to 4096 */
        uint32_t n_ctx = cp.n_ctx ? cp.n_ctx : d.n_ctx_train < 4096 ? d.n_ctx_train : 4096;
        if ((rc = choose_modes(&o, m, &cp, n, n_ctx))) goto out;
        cli_placement_apply(&o.place, &cp);
        rc = 1;
    }
    if ((rc = cli_new_context(m, &cp, &ctx))) goto out;
    rc = 1;
    if (!cli_phase_warning(ctx)) o.place.has_psm = false; /* said: no switch to try */
    cleave_type vt = o.kv_type_v == CLEAVE_KV_TYPE_AS_K ? o.kv_type : o.kv_type_v;
    fprintf(stderr, "cleave: %s, %s, %.1f M params, %u layers, context %u, KV %s/%s, on %s\n",
            o.model, d.arch, d.n_params / 1e6, d.n_layer, cleave_context_n_ctx(ctx),
            cleave_type_name(o.kv_type), cleave_type_name(vt), cleave_context_device(ctx));
    if (cleave_context_n_devices(ctx) > 1 || o.mem_report) cli_memory_report(ctx, false);
    for (size_t i = 0; i < cleave_context_n_devices(ctx); i++) {
        cleave_device_memory mem;
        if (cleave_context_memory(ctx, i, &mem) || !mem.planned_kv_host) continue;
        char asked[32];
        if (cp.kv_vram_cells == CLEAVE_KV_VRAM_AUTO) snprintf(asked, sizeof asked, "auto");
        else snprintf(asked, sizeof asked, "%lld", (long long)cp.kv_vram_cells);
        fprintf(stderr, "cleave: KV cache in two tiers on %s: %u of %u cells of each layer in device memory "
                        "(asked %s, rounded down to the device's granularity), the rest in host memory\n",
                mem.name, mem.kv_vram_cells, cleave_context_n_ctx(ctx), asked);
    }
    if (!o.conversation && n >= cleave_context_n_ctx(ctx)) {
        fprintf(stderr, "cleave %s: the prompt has %zu tokens but the context holds %u; use a larger -c\n",
                cmd, n, cleave_context_n_ctx(ctx));
        goto out;
    }
    if ((st = cleave_sampler_new(&o.sp, d.n_vocab, &smp))) {
        rc = cli_fail("sampler", st);
        goto out;
    }
    /* a prompt of several batches shows its progress on stderr, so the
     * prompt text is echoed once it has been processed */
    cleave_context_set_progress(ctx, cli_progress, (void *)"prompt");
    /* a chat shows the answer alone, not the template's text */
    if (o.conversation) rc = run_conversation(m, ctx, smp, &o);
    else if (o.n_parallel > 1) rc = run_parallel(m, ctx, &o, ptext, o.chat ? 0 : plen, toks, n);
    else rc = generate(m, ctx, smp, &o, ptext, o.chat ? 0 : plen, toks, n);
out:
    free(toks);
    free(file_text);
    free(chat_text);
    cleave_chat_template_free(tmpl);
    cleave_sampler_free(smp);
    if (ctx && o.mem_report) cli_memory_report(ctx, true);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return rc;
}

int cmd_run(int argc, char **argv) { return run_command(argc, argv, "run", false); }

int cmd_chat(int argc, char **argv) { return run_command(argc, argv, "chat", true); }
