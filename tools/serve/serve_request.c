/* A request body as OpenAI's completions and chat completions APIs define
 * it, checked field by field: a field of the wrong type or out of range is
 * refused by name rather than ignored, and so is anything cleave cannot do
 * (logit_bias, tools, echo) and any field not on the allow-list
 * (serve_fields.c), so a client never gets a silently different answer. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <pthread.h>

#include "base/mem.h"
#include "serve.h"

typedef struct {
    char *err;
    size_t cap;
    const char **param;
    bool oom; /* the failure was memory, not the request: 500, not 400 */
} why;

/* cJSON allocates through the library's checked allocator, so a parse
 * that runs out of memory says so (and tests can make each allocation
 * fail in turn) instead of reading as "not valid JSON". */
static _Thread_local bool json_oom;
static void *json_alloc(size_t n) {
    void *p = mem_alloc(n, "the request's JSON");
    if (!p) json_oom = true;
    return p;
}
static pthread_once_t json_once = PTHREAD_ONCE_INIT;
static void json_hooks(void) {
    cJSON_Hooks h = {json_alloc, free};
    cJSON_InitHooks(&h);
}

static bool fail(why *w, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, w->cap, fmt, ap);
    va_end(ap);
    *w->param = param;
    return false;
}

/* A number field in [lo, hi] when present (not null); *out is kept when absent. */
static bool number(const cJSON *o, const char *name, double lo, double hi, bool integer, double *out, why *w) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsNumber(f)) return fail(w, name, "'%s' must be a number", name);
    double v = f->valuedouble;
    if (!isfinite(v) || v < lo || v > hi) return fail(w, name, "'%s' must be between %g and %g", name, lo, hi);
    if (integer && v != floor(v)) return fail(w, name, "'%s' must be an integer", name);
    *out = v;
    return true;
}

static bool boolean(const cJSON *o, const char *name, bool *out, why *w) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsBool(f)) return fail(w, name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(f);
    return true;
}

static bool out_of_memory(why *w, const char *param) {
    w->oom = true;
    return fail(w, param, "out of memory");
}

static char *dup_string(const char *s, why *w, const char *param) {
    char *d = mem_strdup(s, "a request's string");
    if (!d) out_of_memory(w, param);
    return d;
}

/* stop: a string or an array of at most SERVE_MAX_STOP strings. */
static bool stops(const cJSON *o, serve_params *p, why *w) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!f || cJSON_IsNull(f)) return true;
    if (cJSON_IsString(f)) return (p->stop[p->n_stop] = dup_string(f->valuestring, w, "stop")) && ++p->n_stop;
    if (!cJSON_IsArray(f)) return fail(w, "stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(f) > SERVE_MAX_STOP)
        return fail(w, "stop", "'stop' has more than %d strings", SERVE_MAX_STOP);
    const cJSON *e;
    cJSON_ArrayForEach(e, f) {
        if (!cJSON_IsString(e)) return fail(w, "stop", "'stop' must be a string or an array of strings");
        if (!*e->valuestring) continue;
        if (!(p->stop[p->n_stop] = dup_string(e->valuestring, w, "stop"))) return false;
        p->n_stop++;
    }
    return true;
}

/* n, logprobs (chat: logprobs + top_logprobs; completions: logprobs N)
 * and llama.cpp's n_probs (N alternatives on either). */
static bool choices(const cJSON *o, bool chat, serve_params *p, why *w) {
    double n = 1, top = -1, n_probs = -1;
    if (!number(o, "n", 1, SERVE_MAX_CHOICES, true, &n, w)) return false;
    p->n = (int)n;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "logprobs");
    if (chat) {
        bool want = false;
        if (!boolean(o, "logprobs", &want, w) || !number(o, "top_logprobs", 0, SERVE_MAX_LOGPROBS, true, &top, w))
            return false;
        if (top >= 0 && !want) return fail(w, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (want) p->logprobs = top >= 0 ? (int)top : 0;
    } else if (!number(o, "top_logprobs", 0, 0, true, &top, w)) {
        return fail(w, "top_logprobs", "'top_logprobs' is the chat's: completions take 'logprobs': N");
    } else if (f && !cJSON_IsNull(f)) {
        /* OpenAI's completions take an integer; false is "none" as some clients send */
        if (cJSON_IsFalse(f)) top = -1;
        else if (!number(o, "logprobs", 0, SERVE_MAX_LOGPROBS, true, &top, w)) return false;
        p->logprobs = (int)top;
    }
    if (!number(o, "n_probs", 0, SERVE_MAX_LOGPROBS, true, &n_probs, w)) return false;
    if (n_probs > 0 && (int)n_probs > p->logprobs) p->logprobs = (int)n_probs;
    return true;
}

/* Fields cleave cannot honour: refused when they ask for something. */
static bool unsupported(const cJSON *o, why *w) {
    const cJSON *f;
    if ((f = cJSON_GetObjectItemCaseSensitive(o, "echo")) && cJSON_IsTrue(f))
        return fail(w, "echo", "'echo' is not supported");
    return true;
}

/* The name of a refused field, kept past the parse that found it (its
 * JSON is freed by then): the handler on this thread reads it at once. */
static _Thread_local char refused_name[64];

/* Every field on the allow-list (serve_fields.c); null counts as absent. */
static bool allowed_fields(const cJSON *o, bool chat, why *w) {
    const cJSON *f;
    cJSON_ArrayForEach(f, o) {
        if (!f->string || cJSON_IsNull(f) || serve_field_allowed(f->string, chat)) continue;
        snprintf(refused_name, sizeof refused_name, "%s", f->string);
        return fail(w, refused_name,
                    "'%s' is not supported by cleave%s: the request is refused rather than "
                    "answered without it",
                    refused_name,
                    !chat && !strcmp(f->string, "messages")
                        ? " on /v1/completions (use /v1/chat/completions)"
                    : chat && !strcmp(f->string, "prompt")
                        ? " on /v1/chat/completions (use /v1/completions)"
                        : "");
    }
    return true;
}

/* Allowed fields that pass only with a value asking for nothing cleave
 * lacks: best_of 1, an empty logit_bias, no tools, a text response. */
static bool harmless_values(const cJSON *o, why *w) {
    const cJSON *f;
    if ((f = cJSON_GetObjectItemCaseSensitive(o, "best_of")) && cJSON_IsNumber(f) && f->valuedouble != 1)
        return fail(w, "best_of", "'best_of' must be 1");
    if ((f = cJSON_GetObjectItemCaseSensitive(o, "logit_bias")) && !cJSON_IsNull(f) &&
        !(cJSON_IsObject(f) && !f->child))
        return fail(w, "logit_bias", "'logit_bias' is not supported");
    const char *lists[] = {"tools", "functions"};
    for (size_t i = 0; i < 2; i++)
        if ((f = cJSON_GetObjectItemCaseSensitive(o, lists[i])) && !cJSON_IsNull(f) &&
            !(cJSON_IsArray(f) && !f->child))
            return fail(w, lists[i], "'%s' (tool calls) is not supported", lists[i]);
    if ((f = cJSON_GetObjectItemCaseSensitive(o, "response_format")) && cJSON_IsObject(f)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
            return fail(w, "response_format", "'response_format' other than text is not supported");
    }
    /* without tools, a choice among them or leave to call several changes nothing */
    const char *choices[] = {"tool_choice", "function_call"};
    for (size_t i = 0; i < 2; i++)
        if ((f = cJSON_GetObjectItemCaseSensitive(o, choices[i])) && !cJSON_IsNull(f) &&
            !(cJSON_IsString(f) &&
              (!strcmp(f->valuestring, "none") || !strcmp(f->valuestring, "auto"))))
            return fail(w, choices[i], "'%s' (tool calls) is not supported", choices[i]);
    /* false asks for the whole prompt processed again, which cleave never does */
    if ((f = cJSON_GetObjectItemCaseSensitive(o, "cache_prompt")) && !cJSON_IsNull(f) && !cJSON_IsTrue(f))
        return fail(w, "cache_prompt", "'cache_prompt' other than true is not supported: cleave always reuses a "
                                       "slot's cached prefix");
    if ((f = cJSON_GetObjectItemCaseSensitive(o, "parallel_tool_calls")) && !cJSON_IsNull(f) &&
        !cJSON_IsBool(f))
        return fail(w, "parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    return true;
}

static bool sampling(const cJSON *o, serve_params *p, why *w) {
    double temp = 1, top_p = 1, top_k = 0, min_p = 0, freq = 0, pres = 0, rep = 1, seed = -1;
    if (!number(o, "temperature", 0, 100, false, &temp, w) || !number(o, "top_p", 0, 1, false, &top_p, w) ||
        !number(o, "top_k", 0, 1e9, true, &top_k, w) || !number(o, "min_p", 0, 1, false, &min_p, w) ||
        !number(o, "frequency_penalty", -2, 2, false, &freq, w) ||
        !number(o, "presence_penalty", -2, 2, false, &pres, w) ||
        !number(o, "repeat_penalty", 0, 100, false, &rep, w) ||
        !number(o, "seed", -9007199254740991.0, 9007199254740991.0, true, &seed, w))
        return false;
    cleave_sampler_params sp = cleave_sampler_default_params();
    sp.temperature = (float)temp;
    sp.top_p = (float)top_p;
    sp.top_k = (int32_t)top_k;
    sp.min_p = (float)min_p;
    sp.frequency_penalty = (float)freq;
    sp.presence_penalty = (float)pres;
    sp.repeat_penalty = (float)rep;
    sp.penalty_last_n = 64;
    /* no seed (or -1, as llama.cpp has it): a different one each request */
    static _Atomic uint64_t counter;
    sp.seed = seed != -1 ? (uint64_t)(int64_t)seed
                         : ((uint64_t)time(NULL) << 20 ^ ++counter) * 0x9e3779b97f4a7c15ull;
    p->sp = sp;
    return true;
}

/* One prompt of token ids (a JSON array of integers below n_vocab). */
static bool token_prompt(const cJSON *f, const serve_defaults *d, serve_prompt *out, const char *where, why *w) {
    size_t n = (size_t)cJSON_GetArraySize(f);
    if (!n) return fail(w, "prompt", "%s is an empty array of token ids", where);
    if (!(out->tokens = mem_alloc(n * sizeof *out->tokens, "a prompt's tokens"))) return out_of_memory(w, "prompt");
    const cJSON *e;
    cJSON_ArrayForEach(e, f) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble >= d->n_vocab)
            return fail(w, "prompt", "%s: token ids must be integers in [0, %u)", where, d->n_vocab);
        out->tokens[out->n_tokens++] = (int32_t)e->valuedouble;
    }
    return true;
}

/* prompt: a string, token ids, or an array of strings or of arrays of
 * token ids (each its own prompt, answered by choices of their own). */
static bool prompt(const cJSON *o, const serve_defaults *d, serve_params *p, why *w) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (!f || cJSON_IsNull(f)) return fail(w, "prompt", "'prompt' is required");
    if (!cJSON_IsString(f) && !cJSON_IsArray(f))
        return fail(w, "prompt", "'prompt' must be a string, an array of token ids, or an array of strings "
                                 "or of arrays of token ids");
    if (cJSON_IsArray(f) && !f->child) return fail(w, "prompt", "'prompt' is an empty array");
    /* a list of prompts when the array holds strings or arrays; else one prompt */
    bool list = cJSON_IsArray(f) && (cJSON_IsString(f->child) || cJSON_IsArray(f->child));
    size_t n = list ? (size_t)cJSON_GetArraySize(f) : 1;
    if (n > SERVE_MAX_CHOICES) return fail(w, "prompt", "'prompt' has %zu prompts; at most %d", n, SERVE_MAX_CHOICES);
    if (!(p->prompts = mem_calloc(n, sizeof *p->prompts, "prompts"))) return out_of_memory(w, "prompt");
    p->n_prompts = n;
    if (!list) {
        if (cJSON_IsString(f)) return (p->prompts[0].text = dup_string(f->valuestring, w, "prompt")) != NULL;
        return token_prompt(f, d, &p->prompts[0], "'prompt'", w);
    }
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, f) {
        char where[48];
        snprintf(where, sizeof where, "prompt[%zu]", i);
        if (cJSON_IsString(e) != cJSON_IsString(f->child) || (!cJSON_IsString(e) && !cJSON_IsArray(e)))
            return fail(w, "prompt", "%s is a %s: a list of prompts holds only strings or only arrays of token ids",
                        where, cJSON_IsString(e) ? "string" : cJSON_IsArray(e) ? "array" : "number or object");
        if (cJSON_IsString(e) ? !(p->prompts[i].text = dup_string(e->valuestring, w, "prompt"))
                              : !token_prompt(e, d, &p->prompts[i], where, w))
            return false;
        i++;
    }
    return true;
}

/* msgs in the chat template as a NUL-terminated text; NULL after fail().
 * The buffer starts at a guess of the size (the messages and room for the
 * template's markup), so a chat renders once; a template that writes
 * more renders again with the size it said. */
static char *render_chat(const cleave_chat_template *t, const cleave_chat_message *msgs, size_t n, why *w) {
    size_t cap = 4096;
    for (size_t i = 0; i < n; i++) cap += strlen(msgs[i].content) + 256;
    for (int attempt = 0; attempt < 2; attempt++) {
        char *text = mem_alloc(cap + 1, "a chat's text");
        if (!text) return out_of_memory(w, "messages"), NULL;
        size_t need = 0;
        cleave_status st = cleave_chat_template_apply(t, msgs, n, true, text, cap, &need);
        if (!st) {
            text[need] = '\0'; /* the template's text has no terminator of its own */
            return text;
        }
        free(text);
        if (st == CLEAVE_ERR_OOM) return out_of_memory(w, "messages"), NULL;
        if (st != CLEAVE_ERR_INVALID_ARG || need <= cap) break; /* the template's own error */
        cap = need;
    }
    fail(w, "messages", "the chat template: %s", cleave_last_error());
    return NULL;
}

/* messages: [{role, content}], content a string or text parts; applied to
 * the chat template. */
static bool messages(const cJSON *o, const serve_defaults *d, serve_params *p, why *w) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!cJSON_IsArray(f) || !f->child) return fail(w, "messages", "'messages' must be a non-empty array");
    if (!d->chat_template)
        return fail(w, "messages",
                    "the server has no chat template (it could not load one at start); start it with "
                    "--chat-template NAME or --chat-template-file F");
    size_t n = (size_t)cJSON_GetArraySize(f), k = 0;
    cleave_chat_message *msgs = mem_calloc(n, sizeof *msgs, "messages");
    char **owned = mem_calloc(n, sizeof *owned, "messages' parts"); /* contents joined from parts */
    bool ok = msgs && owned;
    if (!ok) out_of_memory(w, "messages");
    const cJSON *e;
    cJSON_ArrayForEach(e, f) {
        if (!ok) break;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
                                      strcmp(role->valuestring, "assistant") && strcmp(role->valuestring, "developer"))) {
            ok = fail(w, "messages", "messages[%zu].role must be system, developer, user or assistant", k);
            break;
        }
        msgs[k].role = strcmp(role->valuestring, "developer") ? role->valuestring : "system";
        if (cJSON_IsString(content)) {
            msgs[k].content = content->valuestring;
        } else if (cJSON_IsArray(content)) {
            serve_buf b = {0};
            const cJSON *part;
            ok = serve_buf_add(&b, "", 0) || out_of_memory(w, "messages");
            cJSON_ArrayForEach(part, content) {
                if (!ok) break;
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
                    ok = fail(w, "messages", "messages[%zu].content: only text parts are supported", k);
                    break;
                }
                if (ok && !serve_buf_add(&b, text->valuestring, strlen(text->valuestring)))
                    ok = out_of_memory(w, "messages");
            }
            msgs[k].content = owned[k] = b.p;
            if (!ok) break;
        } else {
            ok = fail(w, "messages", "messages[%zu].content must be a string or an array of text parts", k);
            break;
        }
        k++;
    }
    if (ok && !(p->prompts = mem_calloc(1, sizeof *p->prompts, "prompts"))) ok = out_of_memory(w, "messages");
    if (ok && !(p->prompts[0].text = render_chat(d->chat_template, msgs, n, w))) ok = false;
    if (ok) p->n_prompts = 1;
    for (size_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(msgs);
    return ok;
}

int serve_parse(const char *body, size_t len, bool chat, const serve_defaults *d, serve_params *out,
                char *err, size_t err_cap, const char **param) {
    why w = {err, err_cap, param, false};
    memset(out, 0, sizeof *out);
    out->chat = chat;
    *param = NULL;
    pthread_once(&json_once, json_hooks);
    json_oom = false;
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o) {
        if (json_oom) return out_of_memory(&w, NULL), 500;
        return fail(&w, NULL, "the body is not valid JSON"), 400;
    }
    bool ok = cJSON_IsObject(o) || fail(&w, NULL, "the body must be a JSON object");
    /* a NUL in the text cleave reads would cut it there: refused, naming
     * the field (the fields that change no output may hold one) */
    static const char *const text_fields[] = {"prompt", "messages", "stop"};
    char nul_in[32];
    if (ok && serve_json_nul_field(body, len, nul_in, sizeof nul_in))
        for (size_t i = 0; i < sizeof text_fields / sizeof *text_fields; i++)
            if (!strcmp(nul_in, text_fields[i])) {
                ok = fail(&w, text_fields[i], "'%s' holds a NUL character (\\u0000), which cleave does not take in text",
                          text_fields[i]);
                break;
            }
    ok = ok && allowed_fields(o, chat, &w);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (ok && model && !cJSON_IsNull(model) && !cJSON_IsString(model)) ok = fail(&w, "model", "'model' must be a string");
    if (ok && cJSON_IsString(model))
        ok = (out->model = dup_string(model->valuestring, &w, "model")) != NULL;
    double max_tokens = chat ? -1 : (double)d->max_tokens_completion;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "max_tokens"),
                *mct = chat ? cJSON_GetObjectItemCaseSensitive(o, "max_completion_tokens") : NULL;
    out->max_tokens_given = (mt && !cJSON_IsNull(mt)) || (mct && !cJSON_IsNull(mct));
    out->logprobs = -1;
    ok = ok && unsupported(o, &w) && harmless_values(o, &w) && choices(o, chat, out, &w) &&
         sampling(o, out, &w) && stops(o, out, &w) && boolean(o, "stream", &out->stream, &w) &&
         boolean(o, "ignore_eos", &out->ignore_eos, &w) &&
         number(o, "max_tokens", 0, 1e12, true, &max_tokens, &w) &&
         (!chat || number(o, "max_completion_tokens", 0, 1e12, true, &max_tokens, &w)) &&
         (chat ? messages(o, d, out, &w) : prompt(o, d, out, &w));
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (ok && so && !cJSON_IsNull(so))
        ok = cJSON_IsObject(so) ? boolean(so, "include_usage", &out->include_usage, &w)
                                : fail(&w, "stream_options", "'stream_options' must be an object");
    if (ok && max_tokens == 0) ok = fail(&w, "max_tokens", "'max_tokens' must be at least 1");
    if (ok && d->max_tokens_cap >= 0 && (max_tokens < 0 || max_tokens > d->max_tokens_cap))
        max_tokens = (double)d->max_tokens_cap;
    out->max_tokens = (long long)max_tokens;
    cJSON_Delete(o);
    if (!ok) serve_params_free(out);
    return ok ? 0 : w.oom ? 500 : 400;
}

void serve_params_free(serve_params *p) {
    for (size_t i = 0; p->prompts && i < p->n_prompts; i++) free(p->prompts[i].text), free(p->prompts[i].tokens);
    free(p->prompts);
    free(p->model);
    for (size_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

bool serve_params_clone(serve_params *dst, const serve_params *src) {
    *dst = *src;
    dst->prompts = NULL, dst->n_prompts = 0, dst->model = NULL; /* the model was checked on arrival */
    for (size_t i = 0; i < src->n_stop; i++)
        if (!(dst->stop[i] = mem_strdup(src->stop[i], "a request's stop string"))) {
            dst->n_stop = i;
            serve_params_free(dst);
            return false;
        }
    return true;
}
