/* The answers of llama-server's side routes, made from their inputs
 * (serve_http.c sends them): /tokenize, /detokenize, /slots and /metrics.
 * Each returns an HTTP status; on failure err says why and *param names
 * the field. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve.h"

static int bad(int status, char *err, size_t cap, const char **param, const char *field,
               const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    *param = field;
    return status;
}

/* Whether s[0, n) is valid UTF-8 (no overlong forms, surrogates or code
 * points past U+10FFFF): a piece that is not is sent as its bytes. */
static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        unsigned cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        static const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += k;
    }
    return true;
}

/* A token's own text, its leading space kept (prev is then neither the
 * start nor BOS, which would drop SentencePiece's space): a tokenizer's
 * piece as llama-server shows it. */
static cleave_status own_piece(const cleave_model *m, int32_t t, char *buf, size_t cap, size_t *n) {
    int32_t bos = cleave_token_bos(m);
    return cleave_token_to_piece(m, t == bos ? (bos == 0 ? 1 : 0) : t, t, buf, cap, n);
}

int serve_tokenize(const cleave_model *m, const char *body, size_t len, cJSON **out, char *err,
                   size_t cap, const char **param) {
    *out = NULL, *param = NULL;
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return bad(400, err, cap, param, NULL, "the body must be a JSON object with 'content'");
    }
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(o, "add_special");
    const cJSON *parse = cJSON_GetObjectItemCaseSensitive(o, "parse_special");
    const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(o, "with_pieces");
    int status = 0;
    if (!cJSON_IsString(content))
        status = bad(400, err, cap, param, "content", "'content' must be a string");
    const cJSON *flags[] = {add, parse, pieces};
    const char *names[] = {"add_special", "parse_special", "with_pieces"};
    for (int i = 0; !status && i < 3; i++)
        if (flags[i] && !cJSON_IsNull(flags[i]) && !cJSON_IsBool(flags[i]))
            status = bad(400, err, cap, param, names[i], "'%s' must be true or false", names[i]);
    size_t n = 0, room = 0;
    int32_t *ids = NULL;
    if (!status) {
        const char *text = content->valuestring;
        size_t text_len = strlen(text);
        room = text_len + 8;
        for (int attempt = 0; attempt < 2 && !status; attempt++) {
            free(ids);
            if (!(ids = malloc(room * sizeof *ids))) {
                status = bad(500, err, cap, param, NULL, "out of memory");
                break;
            }
            cleave_status st = cleave_tokenize_ex(m, text, text_len, cJSON_IsTrue(add),
                                                  !cJSON_IsFalse(parse), ids, room, &n);
            if (!st) break;
            if (st == CLEAVE_ERR_INVALID_ARG && n > room) {
                room = n;
                continue;
            }
            status = bad(400, err, cap, param, "content", "tokenizing: %s", cleave_last_error());
        }
    }
    cJSON *res = status ? NULL : cJSON_CreateObject(),
          *arr = res ? cJSON_AddArrayToObject(res, "tokens") : NULL;
    for (size_t i = 0; arr && i < n; i++) {
        if (!cJSON_IsTrue(pieces)) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            continue;
        }
        char buf[256];
        size_t k = 0;
        if (own_piece(m, ids[i], buf, sizeof buf, &k)) k = 0;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", ids[i]);
        if (valid_utf8((const unsigned char *)buf, k)) {
            buf[k < sizeof buf ? k : sizeof buf - 1] = '\0';
            cJSON_AddStringToObject(e, "piece", buf);
        } else { /* part of a character: its bytes, as llama-server sends them */
            cJSON *bytes = cJSON_AddArrayToObject(e, "piece");
            for (size_t j = 0; j < k; j++)
                cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)buf[j]));
        }
        cJSON_AddItemToArray(arr, e);
    }
    free(ids);
    cJSON_Delete(o);
    if (!status && !res) status = bad(500, err, cap, param, NULL, "out of memory");
    *out = res;
    return status;
}

int serve_detokenize(const cleave_model *m, uint32_t n_vocab, const char *body, size_t len,
                     cJSON **out, char *err, size_t cap, const char **param) {
    *out = NULL, *param = NULL;
    cJSON *o = cJSON_ParseWithLength(body, len);
    const cJSON *toks = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "tokens") : NULL;
    int status = 0;
    if (!cJSON_IsArray(toks))
        status = bad(400, err, cap, param, "tokens", "'tokens' must be an array of token ids");
    serve_buf text = {0};
    int32_t prev = -1;
    size_t i = 0;
    const cJSON *e;
    if (!status && !serve_buf_add(&text, "", 0))
        status = bad(500, err, cap, param, NULL, "out of memory");
    const cJSON *list = status ? NULL : toks;
    cJSON_ArrayForEach(e, list) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(v >= 0 && v < n_vocab && v == floor(v))) {
            status = bad(400, err, cap, param, "tokens", "tokens[%zu] is not a token id in [0, %u)",
                         i, n_vocab);
            break;
        }
        char buf[256];
        size_t k = 0;
        if (cleave_token_to_piece(m, prev, (int32_t)v, buf, sizeof buf, &k) ||
            !serve_buf_add(&text, buf, k)) {
            status = bad(500, err, cap, param, NULL, "out of memory");
            break;
        }
        prev = (int32_t)v, i++;
    }
    serve_buf clean = {0}; /* JSON strings are UTF-8: a cut character becomes U+FFFD */
    if (!status && (!serve_buf_add(&clean, "", 0) || !serve_buf_add_utf8(&clean, text.p, text.len)))
        status = bad(500, err, cap, param, NULL, "out of memory");
    if (!status && (*out = cJSON_CreateObject())) cJSON_AddStringToObject(*out, "content", clean.p);
    free(text.p);
    free(clean.p);
    cJSON_Delete(o);
    if (!status && !*out) status = bad(500, err, cap, param, NULL, "out of memory");
    return status;
}

cJSON *serve_slots_json(const serve_slot_info *info, int n, uint32_t cells) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddStringToObject(o, "state", info[i].busy ? "processing" : "idle");
        cJSON_AddBoolToObject(o, "is_processing", info[i].busy);
        cJSON_AddNumberToObject(o, "n_ctx", cells);
        cJSON_AddNumberToObject(o, "n_cached", (double)info[i].n_cached);
        if (info[i].busy) {
            cJSON_AddNumberToObject(o, "id_task", (double)info[i].request_id);
            cJSON_AddNumberToObject(o, "n_prompt_tokens", (double)info[i].n_prompt);
            cJSON_AddNumberToObject(o, "n_decoded", (double)info[i].n_gen);
        } else {
            cJSON_AddNumberToObject(o, "id_task", -1);
            cJSON_AddNumberToObject(o, "n_prompt_tokens", 0);
            cJSON_AddNumberToObject(o, "n_decoded", 0);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* Prometheus's text format, one family at a time. */
static bool family(serve_buf *b, const char *name, const char *type, const char *help) {
    char line[400];
    int n = snprintf(line, sizeof line, "# HELP cleave:%s %s\n# TYPE cleave:%s %s\n", name, help,
                     name, type);
    return serve_buf_add(b, line, (size_t)n);
}
static bool sample(serve_buf *b, const char *name, const char *labels, double v) {
    char line[200];
    int n = snprintf(line, sizeof line, "cleave:%s%s %.17g\n", name, labels ? labels : "", v);
    return serve_buf_add(b, line, (size_t)n);
}
static bool one(serve_buf *b, const char *name, const char *type, const char *help, double v) {
    return family(b, name, type, help) && sample(b, name, NULL, v);
}

char *serve_metrics_text(const serve_stats *t, int n_parallel, uint32_t cells) {
    serve_buf b = {0};
    bool ok = family(&b, "requests_total", "counter",
                     "Requests the step loop ended, by how they ended.") &&
              sample(&b, "requests_total", "{finish=\"stop\"}", (double)t->finished_stop) &&
              sample(&b, "requests_total", "{finish=\"length\"}", (double)t->finished_length) &&
              sample(&b, "requests_total", "{finish=\"error\"}", (double)t->finished_error) &&
              sample(&b, "requests_total", "{finish=\"cancelled\"}", (double)t->cancelled) &&
              family(&b, "requests_refused_total", "counter",
                     "Completion requests answered with an error before they were queued, by "
                     "status class.") &&
              sample(&b, "requests_refused_total", "{status=\"4xx\"}", (double)t->refused_4xx) &&
              sample(&b, "requests_refused_total", "{status=\"5xx\"}", (double)t->refused_5xx) &&
              one(&b, "prompt_tokens_total", "counter", "Prompt tokens of the requests started.",
                  (double)t->prompt_tokens) &&
              one(&b, "prompt_tokens_cached_total", "counter",
                  "Of them, tokens found in a slot's cache.", (double)t->prompt_tokens_cached) &&
              one(&b, "generation_tokens_total", "counter", "Tokens generated.",
                  (double)t->generated_tokens) &&
              one(&b, "steps_total", "counter", "Steps of the step loop (one batched decode each).",
                  (double)t->steps) &&
              one(&b, "prefill_tokens_total", "counter", "Prompt tokens decoded by the steps.",
                  t->prefill_tokens) &&
              one(&b, "prefill_seconds_total", "counter",
                  "Seconds of decoding spent on prompt tokens (a mixed step shared by tokens).",
                  t->prefill_seconds) &&
              one(&b, "decode_tokens_total", "counter", "Generated tokens fed back by the steps.",
                  t->decode_tokens) &&
              one(&b, "decode_seconds_total", "counter",
                  "Seconds of decoding spent on generated tokens.", t->decode_seconds) &&
              one(&b, "prefill_tokens_per_second", "gauge",
                  "Prompt tokens per second of decoding, since the start.",
                  t->prefill_seconds > 0 ? t->prefill_tokens / t->prefill_seconds : 0) &&
              one(&b, "decode_tokens_per_second", "gauge",
                  "Generated tokens per second of decoding, since the start.",
                  t->decode_seconds > 0 ? t->decode_tokens / t->decode_seconds : 0) &&
              one(&b, "split_mode_switches_total", "counter",
                  "Split-mode switches made by -psm's gate.", (double)t->split_switches) &&
              one(&b, "split_mode_switch_seconds_total", "counter", "Seconds those switches took.",
                  t->split_switch_seconds) &&
              one(&b, "kv_staged_bytes_total", "counter",
                  "Bytes a tiered KV cache copied from host memory into device staging.",
                  (double)t->kv_staged_bytes) &&
              one(&b, "kv_cells_used", "gauge", "KV cells the slots hold (their cached tokens).",
                  (double)t->kv_cells_used) &&
              one(&b, "kv_cells", "gauge", "KV cells of all slots.", (double)cells * n_parallel) &&
              one(&b, "requests_queued", "gauge", "Requests waiting for a slot.", t->queued) &&
              one(&b, "slots_busy", "gauge", "Slots processing a request.", t->busy) &&
              one(&b, "slots", "gauge", "Slots (-np).", n_parallel);
    if (!ok) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
