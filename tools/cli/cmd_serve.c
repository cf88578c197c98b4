/* `cleave serve`: an OpenAI-compatible HTTP server (/v1/completions,
 * /v1/chat/completions, /v1/models, /health, and llama-server's /tokenize,
 * /detokenize, /apply-template, /props, /slots, /metrics) over one model
 * and context, placed with the same flags as run and bench; the flags of
 * llama-server and vLLM that mean the same are taken too. Runs until
 * SIGINT or SIGTERM, then ends open requests and exits. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_render.h"
#include "cli.h"
#ifdef CLEAVE_WITH_SERVER
#include "serve/serve.h"
#endif

static void serve_usage(FILE *out) {
    fprintf(out,
            "usage: cleave serve MODEL.gguf [options]   (or -m MODEL.gguf)\n"
            "  -m, --model PATH        GGUF model\n"
            "  --host ADDR             IPv4 address to listen on (default 127.0.0.1; 0.0.0.0: all)\n"
            "  --port N                port (default 8080; 0: any free one, see --port-file)\n"
            "  --port-file PATH        write the port listened on to PATH once listening\n"
            "  -np, --parallel N       requests processed at once (default 1); each slot holds\n"
            "                          c / N tokens of prompt and answer\n"
            "  -c, --ctx-size N        cells of KV cache in all, shared by the slots (default: the\n"
            "                          model's, at most 4096)\n"
            "  --max-model-len N       cells per slot (vLLM's): -c is then N times -np\n"
            "  -b, --batch-size N      tokens a step takes: a token of each answering request, then\n"
            "                          prompts (default 512)\n"
            "  -n, --n-predict N       the most tokens any answer may have (default: no limit)\n"
            "  --queue N               requests that may wait for a slot (default 64; more: 503)\n"
            "  -a, --alias NAME        an id of the model in /v1/models (default: the file's name);\n"
            "                          may be given several times, the first is the main one\n"
            "  --served-model-name NAME [NAME...]\n"
            "                          the same, vLLM's way; a request's model must be one of these,\n"
            "                          the file's path or name, or general.name (else 404)\n"
            "  --api-key KEY           require \"Authorization: Bearer KEY\" (not on /health)\n"
            "  --api-key-file F        the same with the key read from F (its first line), so it is\n"
            "                          not in the process list\n"
            "  --cors ORIGIN[,..]      origins a browser may let call and read this server (\"*\": any);\n"
            "                          default none (on a loopback address, pages served from\n"
            "                          loopback may call it; other Host names are refused)\n"
            "  --bos, --no-bos         prepend BOS to text prompts, or do not (default: as the\n"
            "                          vocabulary's tokenizer.ggml.add_bos_token says)\n"
            "  --chat-template NAME    a built-in family instead of the model's own Jinja template:\n"
            "                          llama3, chatml, mistral, llama2, qwen3, qwen3-nothink, gpt-oss\n"
            "  --chat-template-file F  a Jinja chat template from F instead of the model's\n"
            "  --max-body MIB          the largest request body (default 16)\n"
            "  --max-connections N     connections open at once (default 1024)\n"
            "  --http-threads, --threads-http N\n"
            "                          threads polling the connections, event-driven (default 4)\n"
            "  --max-connections-per-client N\n"
            "                          of them from one address (default 512)\n"
            "  --timeout-read S        seconds a client has to send a whole request, headers and\n"
            "                          body (default 30; 0: no bound): slow senders are cut off\n"
            "  --timeout S             llama-server's name for --timeout-read\n"
            "  --metrics               GET /metrics: Prometheus counters and gauges (default off)\n"
            "  --slots, --no-slots     GET /slots: each slot's state (default off)\n"
            "  -fa, --flash-attn on|auto, -cb, --cont-batching\n"
            "                          accepted: cleave always runs both (-fa off and -nocb are refused)\n"
            "  -psm, --prefill-split-mode M\n"
            "                          steps of prompts alone run under split mode M, steps of\n"
            "                          answers alone under -sm (the switch gate of run -np)\n"
            "  -pts, --prefill-tensor-split L\n"
            "                          the shares of -psm's placement, as -ts is -sm's (default:\n"
            "                          fitted to the devices' memory)\n"
            "  --np-dwell K            with -psm: a mode is kept at least K steps (default 8)\n"
            "  --quiet                 no log line per request\n"
            "  --copy-prompt-cells M   n > 1: a prompt's later choices copy the first's KV cells:\n"
            "                          auto (default: when measured cheaper than processing the\n"
            "                          prompt again), on, or off\n"
            "  -t, -ub, -ctk           as in cleave bench\n" CLI_PLACEMENT_HELP);
}

#ifdef CLEAVE_WITH_SERVER
#define SERVE_SYNOPSIS "MODEL.gguf [options]   (or -m MODEL.gguf)"

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

#define SERVE_MAX_ALIASES 16

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *port_file = NULL, *key_file = NULL, *tmpl_name = NULL, *tmpl_file = NULL;
    serve_copy_policy copy = SERVE_COPY_AUTO;
    long long n_ctx = 0, port = 8080, np = 1, queue = 64, n_predict = -1, max_body = 16, dwell = 8;
    cli_context_opts cx = cli_context_default(512);
    cli_placement pl = cli_placement_default();
    serve_opts o = {.host = "127.0.0.1"};
    long long max_conn = 1024, per_client = 512, http_threads = 4, max_model_len = 0;
    double read_timeout = 30;
    bool quiet = false;
    const char *aliases[SERVE_MAX_ALIASES];
    size_t n_aliases = 0;
    cli_usage_for("serve", SERVE_SYNOPSIS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = v, i++;
        else if (a[0] != '-' && !model) model = a; /* vLLM's positional model */
        else if ((!strcmp(a, "-a") || !strcmp(a, "--alias")) && v) {
            if (n_aliases == SERVE_MAX_ALIASES) {
                fprintf(stderr, "cleave serve: at most %d model names\n", SERVE_MAX_ALIASES);
                return 2;
            }
            aliases[n_aliases++] = v, i++;
        } else if (!strcmp(a, "--served-model-name") && v && v[0] != '-') {
            for (; i + 1 < argc && argv[i + 1][0] != '-'; i++) {
                if (n_aliases == SERVE_MAX_ALIASES) {
                    fprintf(stderr, "cleave serve: at most %d model names\n", SERVE_MAX_ALIASES);
                    return 2;
                }
                aliases[n_aliases++] = argv[i + 1];
            }
        } else if (!strcmp(a, "--max-model-len")) { if (!cli_int(a, v, 2, 1 << 24, &max_model_len)) return 2; i++; }
        else if (!strcmp(a, "-fa") || !strcmp(a, "--flash-attn")) {
            /* a bare -fa (older llama.cpp) is on */
            if (v && (!strcmp(v, "on") || !strcmp(v, "auto") || !strcmp(v, "1") || !strcmp(v, "true"))) i++;
            else if (v && (!strcmp(v, "off") || !strcmp(v, "0") || !strcmp(v, "false"))) {
                fprintf(stderr, "cleave serve: %s %s: cleave always runs flash attention (its attention "
                                "kernels are fused); leave the flag out or give on\n", a, v);
                return 1;
            }
        } else if (!strcmp(a, "-cb") || !strcmp(a, "--cont-batching")) {
        } /* always on */
        else if (!strcmp(a, "-nocb") || !strcmp(a, "--no-cont-batching")) {
            fprintf(stderr, "cleave serve: %s: cleave always batches requests continuously (its step loop); "
                            "-np 1 serves one at a time\n", a);
            return 1;
        } else if (!strcmp(a, "--embedding") || !strcmp(a, "--embeddings")) {
            fprintf(stderr, "cleave serve: %s: cleave does not compute embeddings (the engine keeps no pooled "
                            "hidden state, only the next token's logits)\n", a);
            return 1;
        } else if (!strcmp(a, "--metrics")) o.metrics = true;
        else if (!strcmp(a, "--slots")) o.slots = true;
        else if (!strcmp(a, "--no-slots")) o.slots = false;
        else if (!strcmp(a, "--host") && v) o.host = v, i++;
        else if (!strcmp(a, "--port")) { if (!cli_int(a, v, 0, 65535, &port)) return 2; i++; }
        else if (!strcmp(a, "--port-file") && v) port_file = v, i++;
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) { if (!cli_int(a, v, 1, 256, &np)) return 2; i++; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (!cli_int(a, v, -1, 1 << 30, &n_predict)) return 2; i++; }
        else if (!strcmp(a, "--queue")) { if (!cli_int(a, v, 1, 1 << 16, &queue)) return 2; i++; }
        else if (!strcmp(a, "--api-key") && v) o.api_key = v, i++;
        else if (!strcmp(a, "--api-key-file") && v) key_file = v, i++;
        else if (!strcmp(a, "--cors") && v) o.cors = v, i++;
        else if (!strcmp(a, "--max-connections")) { if (!cli_int(a, v, 1, 1 << 16, &max_conn)) return 2; i++; }
        else if (!strcmp(a, "--http-threads") || !strcmp(a, "--threads-http")) { if (!cli_int(a, v, 1, 256, &http_threads)) return 2; i++; }
        else if (!strcmp(a, "--max-connections-per-client")) { if (!cli_int(a, v, 1, 1 << 16, &per_client)) return 2; i++; }
        else if (!strcmp(a, "--timeout-read") || !strcmp(a, "--timeout")) {
            char *end = NULL;
            read_timeout = v ? strtod(v, &end) : -1;
            if (!v || end == v || *end || !(read_timeout >= 0) || read_timeout > 86400) {
                fprintf(stderr, "cleave serve: %s needs seconds in 0..86400 (0: no bound), got '%s'\n", a,
                        v ? v : "");
                return 2;
            }
            i++;
        }
        else if (!strcmp(a, "--bos")) o.bos = CLEAVE_BOS_ALWAYS;
        else if (!strcmp(a, "--no-bos")) o.bos = CLEAVE_BOS_NEVER;
        else if (!strcmp(a, "--chat-template") && v) tmpl_name = v, i++;
        else if (!strcmp(a, "--chat-template-file") && v) tmpl_file = v, i++;
        else if (!strcmp(a, "--max-body")) { if (!cli_int(a, v, 1, 1024, &max_body)) return 2; i++; }
        else if (!strcmp(a, "--np-dwell")) { if (!cli_int(a, v, 0, 1 << 20, &dwell)) return 2; i++; }
        else if (!strcmp(a, "--quiet")) quiet = true;
        else if (!strcmp(a, "--copy-prompt-cells") && v) {
            if (!strcmp(v, "auto")) copy = SERVE_COPY_AUTO;
            else if (!strcmp(v, "on")) copy = SERVE_COPY_ON;
            else if (!strcmp(v, "off")) copy = SERVE_COPY_OFF;
            else return cli_usage_error("serve", SERVE_SYNOPSIS, "--copy-prompt-cells %s: auto, on or off", v);
            i++;
        }
        else if ((r = cli_bench_flag(a, v, &n_ctx, &cx, &pl)) != 0 || (r = cli_phase_flag(a, v, &pl)) != 0) {
            if (r < 0) return 2;
            i++;
        } else {
            return cli_bad_option("serve", SERVE_SYNOPSIS, a);
        }
    }
    if (!cli_phase_check(&pl, "serve", SERVE_SYNOPSIS)) return 2;
    if (!model) {
        return cli_usage_error("serve", SERVE_SYNOPSIS, "a model is required (MODEL.gguf or -m MODEL.gguf)");
    }
    /* vLLM's --max-model-len is a slot's context; -c is all slots' */
    if (max_model_len) {
        if (n_ctx && n_ctx != max_model_len * np) {
            fprintf(stderr, "cleave serve: -c %lld and --max-model-len %lld with -np %lld disagree (-c is "
                            "--max-model-len times -np); give one of them\n", n_ctx, max_model_len, np);
            return 2;
        }
        n_ctx = max_model_len * np;
    }
    char *key_text = NULL; /* --api-key-file's key, alive while the server runs */
    if (key_file) {
        size_t len = 0;
        if (!(key_text = cli_read_file(key_file, &len))) {
            fprintf(stderr, "cleave serve: --api-key-file: %s\n", cleave_last_error());
            return 2;
        }
        key_text[strcspn(key_text, "\r\n")] = '\0'; /* the first line */
        if (!key_text[0] || o.api_key) {
            fprintf(stderr, "cleave serve: --api-key-file %s: %s\n", key_file,
                    o.api_key ? "give --api-key or --api-key-file, not both" : "its first line is empty");
            free(key_text);
            return 2;
        }
        o.api_key = key_text;
    }
    cleave_model *m = NULL;
    cleave_context *ctx = NULL;
    cleave_status st = cleave_model_load(model, NULL, &m);
    if (st) {
        free(key_text);
        return cli_fail("loading model", st);
    }
    cleave_context_params cp = cli_context_params(&cx, &pl, (uint32_t)n_ctx);
    cp.seq_regions = (uint32_t)np;    /* slot i's cells are its own: a step reads only its slots' */
    int rc = cli_new_context(m, &cp, &ctx);
    if (rc) {
        cleave_model_free(m);
        free(key_text);
        return rc;
    }
    bool switch_fits = cli_phase_warning(ctx);
    /* the model's own template (chatml when it has none); one asked for must load */
    cleave_chat_template *tmpl = chat_template_open("serve", m, tmpl_name, tmpl_file);
    if (!tmpl && (tmpl_name || tmpl_file)) {
        cleave_context_free(ctx);
        cleave_model_free(m);
        free(key_text);
        return 1;
    }
    if (!tmpl) fprintf(stderr, "cleave serve: chats are refused until --chat-template or --chat-template-file is given\n");
    o.defaults.chat_template = tmpl;
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    o.port = (int)port;
    o.alias = n_aliases ? aliases[0] : base_name(model);
    o.aliases = n_aliases > 1 ? aliases + 1 : NULL;
    o.n_aliases = n_aliases > 1 ? n_aliases - 1 : 0;
    o.model_path = model;
    o.max_body = (size_t)max_body << 20;
    o.max_connections = (int)max_conn, o.max_per_client = (int)per_client, o.http_threads = (int)http_threads;
    o.read_timeout = read_timeout > 0 ? read_timeout : -1; /* 0 asked: no bound */
    o.defaults.max_tokens_completion = 16;
    o.defaults.max_tokens_cap = n_predict;
    o.defaults.n_vocab = d.n_vocab;
    o.sched = (serve_sched_opts){.n_parallel = (int)np, .queue_max = (int)queue, .n_batch = (uint32_t)cx.n_batch,
                                 .phased = cli_phased(&pl) && switch_fits, .psm = pl.psm, .mode = pl.mode,
                                 .dwell = (uint32_t)dwell, .quiet = quiet, .copy = copy};
    /* the signals go to sigwait below, not to whichever thread runs */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    serve *srv = NULL;
    rc = serve_start(m, ctx, &o, &srv);
    if (!rc) {
        fprintf(stderr, "cleave serve: %s (%s, %.1f M params) on %s; %lld slot%s of %u cells; listening on http://%s:%d\n",
                o.alias, d.arch, d.n_params / 1e6, cleave_context_device(ctx), np, np > 1 ? "s" : "",
                cleave_context_n_ctx(ctx) / (uint32_t)np, o.host, serve_port(srv));
        if (port_file) {
            FILE *f = fopen(port_file, "w");
            bool ok = f && fprintf(f, "%d\n", serve_port(srv)) > 0;
            if (f && fclose(f)) ok = false;
            if (!ok) {
                fprintf(stderr, "cleave serve: cannot write --port-file %s\n", port_file);
                rc = 1;
            }
        }
        int sig = 0;
        if (!rc) sigwait(&sigs, &sig);
        fprintf(stderr, "cleave serve: %s: stopping\n", sig == SIGINT ? "interrupted" : sig ? "terminated" : "error");
        serve_stop(srv);
    }
    cleave_chat_template_free(tmpl);
    cleave_context_free(ctx);
    cleave_model_free(m);
    free(key_text);
    return rc;
}
#else
int cmd_serve(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        serve_usage(stdout);
        return 0;
    }
    fprintf(stderr, "cleave serve: this build has no server: install libmicrohttpd-dev and libcjson-dev and "
                    "build again\n");
    return 1;
}
#endif
