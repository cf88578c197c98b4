/* The JSON of a completion's answer (OpenAI's shapes): the envelope, a
 * choice with its text, finish reason and logprobs, and the usage of all
 * of a response's choices. Pure: the caller holds what it reads still
 * (finished requests, or the scheduler's lock). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve.h"

cJSON *serve_reply_envelope(const char *model, const serve_req *r, bool chunk, time_t created) {
    char id[64];
    snprintf(id, sizeof id, "%s-%llu-%lld", r->p.chat ? "chatcmpl" : "cmpl", r->id, (long long)created);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", r->p.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", model);
    return o;
}

/* A token's text, valid UTF-8 (a piece that is part of a character reads
 * as U+FFFD; its bytes are exact), and its bytes. */
static bool token_text(const cleave_model *m, int32_t prev, int32_t token, serve_buf *text, cJSON **bytes) {
    char piece[256];
    size_t n = 0;
    text->len = 0;
    if (cleave_token_to_piece(m, prev, token, piece, sizeof piece, &n)) n = 0;
    if (!serve_buf_add(text, "", 0) || !serve_buf_add_utf8(text, piece, n)) return false;
    if (bytes) {
        *bytes = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(*bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    }
    return true;
}

/* Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}. */
static bool chat_logprobs(cJSON *c, const cleave_model *m, const serve_req *r, size_t lp0, size_t lp1) {
    cJSON *content = cJSON_AddArrayToObject(cJSON_AddObjectToObject(c, "logprobs"), "content");
    serve_buf t = {0};
    bool ok = true;
    for (size_t i = lp0; i < lp1 && ok; i++) {
        const serve_logprob *lp = &r->lp[i];
        cJSON *e = cJSON_CreateObject(), *bytes;
        cJSON_AddItemToArray(content, e);
        if (!(ok = token_text(m, lp->prev, lp->token, &t, &bytes))) break;
        cJSON_AddStringToObject(e, "token", t.p);
        cJSON_AddNumberToObject(e, "logprob", lp->logprob);
        cJSON_AddItemToObject(e, "bytes", bytes);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; k < lp->n_top && ok; k++) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddItemToArray(top, a);
            if (!(ok = token_text(m, lp->prev, lp->top[k], &t, &bytes))) break;
            cJSON_AddStringToObject(a, "token", t.p);
            cJSON_AddNumberToObject(a, "logprob", lp->top_logprob[k]);
            cJSON_AddItemToObject(a, "bytes", bytes);
        }
    }
    free(t.p);
    return ok;
}

/* Completions' logprobs: {tokens, token_logprobs, top_logprobs: [{text: lp}], text_offset}. */
static bool completion_logprobs(cJSON *c, const cleave_model *m, const serve_req *r, size_t lp0, size_t lp1) {
    cJSON *o = cJSON_AddObjectToObject(c, "logprobs");
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    serve_buf t = {0};
    bool ok = true;
    for (size_t i = lp0; i < lp1 && ok; i++) {
        const serve_logprob *lp = &r->lp[i];
        if (!(ok = token_text(m, lp->prev, lp->token, &t, NULL))) break;
        cJSON_AddItemToArray(tokens, cJSON_CreateString(t.p));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp->logprob));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(i ? r->lp[i - 1].end_chars : 0)));
        cJSON *top = cJSON_CreateObject();
        cJSON_AddItemToArray(tops, top);
        for (int k = 0; k < lp->n_top && ok; k++) {
            if (!(ok = token_text(m, lp->prev, lp->top[k], &t, NULL))) break;
            if (!cJSON_GetObjectItemCaseSensitive(top, t.p)) /* two ids of one text: the likelier */
                cJSON_AddNumberToObject(top, t.p, lp->top_logprob[k]);
        }
    }
    free(t.p);
    return ok;
}

size_t serve_reply_logprobs_upto(const serve_req *r, size_t from, size_t released, bool finished) {
    size_t k = from;
    /* a token is sent with the text it ends in; at the end, also one a
     * stop string cut into (its start released) */
    while (k < r->n_lp && (r->lp[k].end <= released || (finished && (k ? r->lp[k - 1].end : 0) < released))) k++;
    return k;
}

bool serve_reply_choice(cJSON *o, const cleave_model *m, const serve_req *r, const serve_reply_part *part) {
    cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
    if (!choices) choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", r->index);
    bool with_lp = r->p.logprobs >= 0 && (part->lp1 > part->lp0 || !part->chunk);
    if (r->p.chat) {
        cJSON *msg = cJSON_AddObjectToObject(c, part->chunk ? "delta" : "message");
        if (part->role) cJSON_AddStringToObject(msg, "role", "assistant");
        if (part->text) cJSON_AddStringToObject(msg, "content", part->text);
        if (with_lp && !chat_logprobs(c, m, r, part->lp0, part->lp1)) return false;
    } else {
        cJSON_AddStringToObject(c, "text", part->text ? part->text : "");
        if (with_lp) {
            if (!completion_logprobs(c, m, r, part->lp0, part->lp1)) return false;
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    }
    if (part->finish) cJSON_AddStringToObject(c, "finish_reason", part->finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return true;
}

void serve_reply_usage(cJSON *o, serve_req *const *r, size_t n) {
    /* a prompt counts once, however many choices answer it */
    double prompt = 0, gen = 0, cached = 0, pp_n = 0, pp_ms = 0, tg_ms = 0, queued_ms = 0, copied = 0;
    for (size_t i = 0; i < n; i++) {
        gen += (double)r[i]->n_gen;
        if (r[i]->copy_ms > 0) copied += (double)r[i]->n_cached;
        pp_n += (double)r[i]->n_prompt - (double)r[i]->n_cached; /* what every choice processed */
        double pp = r[i]->t_first > r[i]->t_start ? r[i]->t_first - r[i]->t_start : 0;
        double tg = r[i]->t_end > r[i]->t_first ? r[i]->t_end - r[i]->t_first : 0;
        tg_ms = tg * 1e3 > tg_ms ? tg * 1e3 : tg_ms;
        if (r[i]->lead >= 0) continue;
        prompt += (double)r[i]->n_prompt, cached += (double)r[i]->n_cached;
        pp_ms = pp * 1e3 > pp_ms ? pp * 1e3 : pp_ms;
        double q = (r[i]->t_start - r[i]->t_queued) * 1e3;
        queued_ms = q > queued_ms ? q : queued_ms;
    }
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", cached);
    /* llama.cpp's timings: what the request cost on the server (the
     * slowest choice's times; the tokens every choice processed) */
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "prompt_n", pp_n);
    cJSON_AddNumberToObject(t, "prompt_ms", pp_ms);
    cJSON_AddNumberToObject(t, "predicted_n", gen);
    cJSON_AddNumberToObject(t, "predicted_ms", tg_ms);
    cJSON_AddNumberToObject(t, "queued_ms", queued_ms);
    /* n > 1: prompt cells the later choices copied instead of processing */
    cJSON_AddNumberToObject(t, "prompt_copied_n", copied);
}
