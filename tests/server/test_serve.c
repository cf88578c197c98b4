/* `cleave serve`, in-process on a free port, driven over real sockets:
 * - greedy answers equal what the library gives for the same prompt alone,
 *   for text and token-id prompts, chats (chatml), one at a time and eight
 *   at once over four slots with prompts longer than a step's budget;
 * - a stream's chunks add up to the same text and end as OpenAI's do;
 * - stop strings cut the answer (also across chunks) and say "stop";
 * - a repeated prompt reuses the slot's cache; a seed repeats an answer;
 * - bad requests get 4xx with OpenAI's error shape, naming the field, and
 *   the server goes on; a client that leaves frees its slot; a full queue
 *   is 503; stopping ends an open stream and a queued request;
 * - -psm layer -sm tensor: prompts and answers under their own splits, the
 *   same answers;
 * - serve_text_release and serve_parse on their own (and parse fuzzed). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/error.h"
#include "serve/serve.h"
#include "testutil.h"

#define SLOTS 4
#define SLOT_CELLS 256
#define N_GEN 24
/* Polls of 10 ms for what the server will do (a slot freed, a request
 * started): up to 2 minutes, so a loaded machine only makes them slower */
#define WAIT_POLLS 12000

static int port;

/* The built-in chatml template the tests' chats render through. */
static const cleave_chat_template *chatml(void) {
    static cleave_chat_template *t;
    if (!t && cleave_chat_template_load(NULL, "chatml", NULL, &t)) t = NULL;
    return t;
}

/* ---- a small HTTP/1.0 client: the server closes when it is done --------- */

static int connect_to(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    /* a reply that never comes fails the check after 2 minutes instead of hanging the test */
    struct timeval patience = {.tv_sec = 120};
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

static int send_request(const char *method, const char *path, const char *body, size_t body_len, const char *headers) {
    int fd = connect_to();
    if (fd < 0) return -1;
    char head[1024], own_host[64] = "";
    if (!headers || !strstr(headers, "Host:")) snprintf(own_host, sizeof own_host, "Host: 127.0.0.1:%d\r\n", port);
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.0\r\n%sContent-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n",
                     method, path, own_host, headers ? headers : "", body ? body_len : 0);
    if (write(fd, head, (size_t)n) != n || (body && write(fd, body, body_len) != (ssize_t)body_len)) {
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct {
    int status;
    char *body; /* NUL-terminated */
} reply;

static reply read_reply(int fd) {
    reply r = {0};
    serve_buf b = {0};
    char chunk[4096];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0) serve_buf_add(&b, chunk, (size_t)n);
    close(fd);
    char *sep = b.p ? strstr(b.p, "\r\n\r\n") : NULL;
    if (!sep || sscanf(b.p, "HTTP/1.%*d %d", &r.status) != 1) {
        free(b.p);
        return r;
    }
    r.body = strdup(sep + 4);
    free(b.p);
    return r;
}

static reply http(const char *method, const char *path, const char *body, const char *headers) {
    int fd = send_request(method, path, body, body ? strlen(body) : 0, headers);
    return fd < 0 ? (reply){0} : read_reply(fd);
}

/* The whole response, headers too (malloc'd; NULL when none came). */
static char *http_raw(const char *method, const char *path, const char *body, const char *headers) {
    int fd = send_request(method, path, body, body ? strlen(body) : 0, headers);
    if (fd < 0) return NULL;
    serve_buf b = {0};
    char chunk[4096];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0) serve_buf_add(&b, chunk, (size_t)n);
    close(fd);
    return b.p;
}

/* Host, Origin and CORS (serve_guard.c): on loopback only loopback Host
 * names; a foreign Origin refused unless --cors lists it; CORS headers
 * only for a listed origin. cors: the server's --cors. */
static void check_guard(const char *cors) {
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":1}";
    reply r = http("POST", "/v1/completions", body, "Host: evil.example:8080\r\n");
    CHECK_MSG(r.status == 403 && r.body && strstr(r.body, "forbidden_host"), "a rebound Host: %d %s", r.status,
              r.body ? r.body : "");
    free(r.body);
    r = http("GET", "/health", NULL, "Host: localhost:1234\r\n");
    CHECK_MSG(r.status == 200, "Host localhost: %d", r.status);
    free(r.body);
    r = http("POST", "/v1/completions", body, "Origin: http://evil.example\r\n");
    CHECK_MSG(r.status == 403 && r.body && strstr(r.body, "forbidden_origin"), "a foreign Origin: %d %s", r.status,
              r.body ? r.body : "");
    free(r.body);
    char *raw = http_raw("GET", "/health", NULL, "Origin: http://localhost:3000\r\n");
    CHECK_MSG(raw && strstr(raw, " 200 ") && !strstr(raw, "Access-Control-Allow-Origin"),
              "a loopback page: answered, no CORS headers: %s", raw ? raw : "(none)");
    free(raw);
    if (cors) {
        char hdr[128];
        snprintf(hdr, sizeof hdr, "Origin: %s\r\n", cors);
        raw = http_raw("GET", "/health", NULL, hdr);
        char want[160];
        snprintf(want, sizeof want, "Access-Control-Allow-Origin: %s", cors);
        CHECK_MSG(raw && strstr(raw, " 200 ") && strstr(raw, want), "a --cors origin: %s", raw ? raw : "(none)");
        free(raw);
    }
}

/* POSTs body; the JSON reply (NULL if not JSON) and its status. */
static cJSON *post(const char *path, const char *body, int *status) {
    reply r = http("POST", path, body, NULL);
    *status = r.status;
    cJSON *o = r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return o;
}

static const char *str_at(const cJSON *o, const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static double num_at(const cJSON *o, const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

static const cJSON *choice(const cJSON *o) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
}

/* The answer's text of a completion or chat reply (NULL if none). */
static const char *answer(const cJSON *o) {
    const cJSON *c = choice(o);
    const char *t = str_at(c, "text", NULL);
    return t ? t : str_at(c, "message", "content");
}

/* ---- what the library answers alone ------------------------------------- */

static cleave_model *model;
static size_t n_vocab;

/* The greedy answer of n_gen tokens (*eog: it ended early). Cells of a
 * slot shared with others can lie in another order than in a context of
 * its own, which changes the attention's sums in the last bits; so each
 * greedy choice here must win by far more than that, or the comparison
 * would test rounding rather than the server. */
static float min_gap = 1e30f;
/* Whether every reference's choices won by over 1e-3 (the trained model's
 * do; a random tiny one, used where the shared models are absent, may not):
 * else answers are compared by their end only, not by their text. */
static bool refs_sure(void) {
    static bool said;
    if (min_gap > 1e-3f) return true;
    if (!said) fprintf(stderr, "note: a reference's choice wins by %g only: texts not compared\n", min_gap);
    said = true;
    return false;
}

static char *reference(const char *text, int n_gen, bool *eog) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = SLOT_CELLS;
    cp.n_threads = 1;
    cp.kv_type = CLEAVE_TYPE_F32;
    cleave_context *ctx = NULL;
    cleave_sampler *smp = NULL;
    cleave_sampler_params sp = cleave_sampler_default_params();
    sp.temperature = 0;
    int32_t toks[SLOT_CELLS];
    size_t n = 0;
    serve_buf out = {0};
    serve_buf_add(&out, "", 0);
    *eog = false;
    CHECK_OK(cleave_context_new(model, &cp, &ctx));
    CHECK_OK(cleave_sampler_new(&sp, (uint32_t)n_vocab, &smp));
    CHECK_OK(cleave_tokenize_ex(model, text, strlen(text), true, true, toks, SLOT_CELLS, &n));
    if (!ctx || !smp || !n) goto done;
    CHECK_OK(cleave_decode(ctx, toks, n, 0, 0, false));
    int32_t prev = toks[n - 1];
    for (int i = 0; i < n_gen; i++) {
        int32_t t;
        const float *lg = cleave_get_logits(ctx, -1);
        CHECK_OK(cleave_sampler_sample(smp, lg, &t));
        for (size_t v = 0; lg && v < n_vocab; v++) /* the runner-up's distance */
            if ((int32_t)v != t && lg[t] - lg[v] < min_gap) min_gap = lg[t] - lg[v];
        if ((*eog = cleave_token_is_eog(model, t))) break;
        char piece[256];
        size_t k = 0;
        cleave_token_to_piece(model, prev, t, piece, sizeof piece, &k);
        serve_buf_add(&out, piece, k);
        CHECK_OK(cleave_decode(ctx, &t, 1, (int32_t)(n + (size_t)i), 0, false));
        prev = t;
    }
done:
    cleave_sampler_free(smp);
    cleave_context_free(ctx);
    serve_buf clean = {0}; /* as the server sends it */
    serve_buf_add(&clean, "", 0);
    serve_buf_add_utf8(&clean, out.p, out.len);
    free(out.p);
    return clean.p;
}

/* A JSON string literal of s (malloc'd). */
static char *quote(const char *s) {
    cJSON *o = cJSON_CreateString(s);
    char *q = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return q;
}

static char *completion_body(const char *prompt, int max_tokens, const char *extra) {
    char *q = quote(prompt), *b = malloc(strlen(q) + 512 + (extra ? strlen(extra) : 0));
    sprintf(b, "{\"model\":\"stories\",\"prompt\":%s,\"max_tokens\":%d,\"temperature\":0%s%s}", q,
            max_tokens, extra ? "," : "", extra ? extra : "");
    free(q);
    return b;
}

/* ---- checks ---------------------------------------------------------------- */

#define N_PROMPTS 4
static const char *prompts[N_PROMPTS] = {
    "Once upon a time",
    "The little dog ran to the park and saw a big red ball. He wanted to play with it, so he ran after the ball "
    "and jumped into the grass where the birds were singing",
    "Lily and Tom",
    "One day, a girl named Sue went to the store with her mom to buy some food for dinner",
};
static char *refs[N_PROMPTS];
static bool ref_eog[N_PROMPTS];

static void check_answer(const char *what, const cJSON *o, int status, const char *want, const char *finish) {
    const char *got = answer(o);
    CHECK_MSG(status == 200, "%s: status %d", what, status);
    CHECK_MSG(got && want && (!refs_sure() || strcmp(got, want) == 0), "%s: got '%s', want '%s'", what,
              got ? got : "(none)", want);
    const char *f = str_at(choice(o), "finish_reason", NULL);
    CHECK_MSG(f && strcmp(f, finish) == 0, "%s: finish_reason %s, want %s", what, f ? f : "(none)", finish);
}

typedef struct {
    int i, status;
    cJSON *o;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    char *b = completion_body(prompts[j->i % N_PROMPTS], N_GEN, NULL);
    j->o = post("/v1/completions", b, &j->status);
    free(b);
    return NULL;
}

/* Events of an SSE body: the concatenated text, the last finish_reason,
 * whether [DONE] ended it; usage's completion tokens (-1 if none). */
static void parse_stream(const char *body, serve_buf *text, char *finish, size_t fcap, bool *done, double *usage,
                         bool *role_first) {
    *done = false, *usage = -1, finish[0] = 0, *role_first = false;
    serve_buf_add(text, "", 0);
    int events = 0;
    for (const char *p = body; p && (p = strstr(p, "data: ")); p += 6) {
        CHECK(!*done); /* nothing after [DONE] */
        if (!strncmp(p + 6, "[DONE]\n\n", 8)) {
            *done = true;
            continue;
        }
        const char *end = strstr(p, "\n\n");
        cJSON *o = end ? cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6)) : NULL;
        CHECK_MSG(o != NULL, "an event is not JSON: %.80s", p);
        if (!o) return;
        const cJSON *c = choice(o);
        const char *t = str_at(c, "text", NULL);
        if (!t) t = str_at(c, "delta", "content");
        if (events++ == 0) *role_first = str_at(c, "delta", "role") != NULL;
        if (t) serve_buf_add(text, t, strlen(t));
        const char *f = str_at(c, "finish_reason", NULL);
        if (f) snprintf(finish, fcap, "%s", f);
        if (num_at(o, "usage", "completion_tokens") >= 0) *usage = num_at(o, "usage", "completion_tokens");
        cJSON_Delete(o);
    }
}

static void check_stream(const char *what, const char *path, const char *body, const char *want, const char *finish,
                         bool chat) {
    reply r = http("POST", path, body, NULL);
    CHECK_MSG(r.status == 200, "%s: status %d", what, r.status);
    serve_buf text = {0};
    char f[32];
    bool done, role_first;
    double usage;
    parse_stream(r.body ? r.body : "", &text, f, sizeof f, &done, &usage, &role_first);
    CHECK_MSG(text.p && (!refs_sure() || strcmp(text.p, want) == 0), "%s: streamed '%s', want '%s'", what, text.p,
              want);
    CHECK_MSG(!strcmp(f, finish), "%s: finish_reason %s, want %s", what, f, finish);
    CHECK_MSG(done, "%s: no data: [DONE] at the end", what);
    CHECK_MSG(!chat || role_first, "%s: the first chunk has no role", what);
    CHECK_MSG(!strstr(body, "include_usage") || usage >= 1, "%s: no usage chunk", what);
    free(text.p);
    free(r.body);
}

static void check_error(const char *what, const char *path, const char *body, int want_status, const char *param,
                        const char *code) {
    int status;
    cJSON *o = post(path, body, &status);
    CHECK_MSG(status == want_status, "%s: status %d, want %d", what, status, want_status);
    const char *msg = str_at(o, "error", "message"), *p = str_at(o, "error", "param"), *c = str_at(o, "error", "code");
    CHECK_MSG(msg && *msg, "%s: no error.message", what);
    CHECK_MSG(!param || (p && !strcmp(p, param)), "%s: error.param %s, want %s", what, p ? p : "null", param);
    CHECK_MSG(!code || (c && !strcmp(c, code)), "%s: error.code %s, want %s", what, c ? c : "null", code);
    cJSON_Delete(o);
}

static int health_num(const char *field) {
    reply r = http("GET", "/health", NULL, NULL);
    cJSON *o = r.body ? cJSON_Parse(r.body) : NULL;
    int n = (int)num_at(o, field, NULL);
    cJSON_Delete(o);
    free(r.body);
    return n;
}

static void check_text_release(void) {
    char *stop[] = {"abc", "xy"};
    bool found;
    CHECK(serve_text_release("hello ab", 8, 0, stop, 2, false, &found) == 6 && !found); /* "ab" may begin "abc" */
    CHECK(serve_text_release("hello x", 7, 0, stop, 2, false, &found) == 6 && !found);
    CHECK(serve_text_release("hello abd", 9, 0, stop, 2, false, &found) == 9 && !found);
    CHECK(serve_text_release("hello abcdef", 12, 8, stop, 2, false, &found) == 6 && found); /* straddles from */
    CHECK(serve_text_release("hello ab", 8, 0, stop, 2, true, &found) == 8 && !found);
    CHECK(serve_text_release("caf\xc3", 4, 0, NULL, 0, false, &found) == 3); /* half a character waits */
    CHECK(serve_text_release("caf\xc3\xa9", 5, 0, NULL, 0, false, &found) == 5);
    CHECK(serve_text_release("\xe2\x82", 2, 0, NULL, 0, false, &found) == 0);
    serve_buf b = {0};
    CHECK(serve_buf_add_utf8(&b, "a\xff" "b\xc3\xa9\xe2\x82", 7));
    CHECK(b.p && !strcmp(b.p, "a\xef\xbf\xbd" "b\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd"));
    free(b.p);
    /* no text yet: a stream's first wait can end before a request has any
     * (queued, or a slow prompt), and its text is NULL with length 0; the
     * sanitizer build stopped the server on the offset and the copy */
    char field[32];
    const char *j1 = "{\"user\":\"a\",\"prompt\":\"x\\u0000\"}", *j2 = "{\"prompt\":\"x\\\\u0000\"}",
               *j3 = "{\"messages\":[{\"content\":\"\\u0000\"}]}";
    CHECK(serve_json_nul_field(j1, strlen(j1), field, sizeof field) && !strcmp(field, "prompt"));
    CHECK(!serve_json_nul_field(j2, strlen(j2), field, sizeof field)); /* an escaped backslash, then "u0000" */
    CHECK(serve_json_nul_field(j3, strlen(j3), field, sizeof field) && !strcmp(field, "messages"));
    CHECK(serve_key_matches("sesame", "Bearer sesame") && !serve_key_matches("sesame", "Bearer sesam") &&
          !serve_key_matches("sesame", "Bearer sesame2") && !serve_key_matches("sesame", NULL) &&
          !serve_key_matches("", "Bearer "));
    CHECK(serve_host_allowed(true, "127.0.0.1:80") && serve_host_allowed(true, "[::1]:8080") &&
          serve_host_allowed(true, "LOCALHOST") && !serve_host_allowed(true, "127.0.0.1.evil.example") &&
          !serve_host_allowed(true, "localhost.evil.example:80") && serve_host_allowed(false, "anything"));
    CHECK(serve_origin_allowed(NULL, true, "http://127.0.0.1:3000") && !serve_origin_allowed(NULL, true, "null") &&
          !serve_origin_allowed(NULL, false, "http://127.0.0.1:3000") &&
          serve_origin_allowed("http://a.example,https://b.example", false, "https://b.example") &&
          !serve_origin_allowed("http://a.example", false, "http://a.example.evil") &&
          serve_origin_allowed("*", false, "http://x"));
    serve_buf e = {0};
    CHECK(serve_buf_add_utf8(&e, NULL, 0) && serve_buf_add(&e, NULL, 0) && e.p && e.len == 0 && !e.p[0]);
    free(e.p);
}

/* Each allocation of a request's parse failing in turn (the JSON's, the
 * strings', the chat's text): 500 "out of memory", never a 400 that
 * blames the request or an empty message, and nothing leaked (the
 * sanitizer build); then the parse succeeds. */
static void check_parse_oom(void) {
    static const struct {
        const char *body;
        bool chat;
    } bodies[] = {
        {"{\"prompt\":\"Once\",\"stop\":[\"a\",\"bc\"],\"max_tokens\":4}", false},
        {"{\"prompt\":[1,2,3],\"seed\":5}", false},
        {"{\"messages\":[{\"role\":\"system\",\"content\":\"x\"},{\"role\":\"user\",\"content\":"
         "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]}",
         true},
    };
    serve_defaults d = {16, -1, chatml(), 512};
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        int failures = 0;
        for (long k = 1; k < 10000; k++) {
            serve_params p;
            char err[256] = "";
            const char *param;
            err_fail_alloc_countdown = k;
            int st = serve_parse(bodies[i].body, strlen(bodies[i].body), bodies[i].chat, &d, &p, err, sizeof err, &param);
            bool injected = err_fail_alloc_countdown == 0;
            err_fail_alloc_countdown = 0;
            if (!injected) {
                CHECK_MSG(st == 0, "body %zu parses once memory suffices: %d %s", i, st, err);
                if (!st) serve_params_free(&p);
                break;
            }
            failures++;
            CHECK_MSG(st == 500 && strstr(err, "out of memory"), "body %zu, allocation %ld: %d '%s'", i, k, st, err);
            if (!st) serve_params_free(&p);
        }
        CHECK_MSG(failures >= 2, "body %zu: %d allocations failed in turn", i, failures);
    }
}

/* Mutated bodies: serve_parse never crashes, and frees what it refuses
 * (ASan's leak check in the sanitizer build). */
static void fuzz_parse(void) {
    const char *seeds[] = {
        "{\"prompt\":\"hi\",\"max_tokens\":5,\"stop\":[\"a\",\"b\"],\"temperature\":0.5,\"seed\":3,\"stream\":true}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}],\"top_p\":0.9}",
        "{\"prompt\":[1,2,3],\"logit_bias\":{},\"n\":1,\"stream_options\":{\"include_usage\":true}}",
    };
    serve_defaults d = {16, -1, chatml(), 512};
    uint64_t x = 42;
    for (int it = 0; it < 3000; it++) {
        char buf[512];
        const char *s = seeds[it % 3];
        size_t n = strlen(s);
        memcpy(buf, s, n);
        for (int k = 0; k < 1 + it % 4; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            buf[(x >> 33) % n] = "{}[]\",:0-9.aetn \\"[(x >> 20) % 18];
        }
        serve_params p;
        char err[256];
        const char *param;
        if (serve_parse(buf, n, it % 3 == 1, &d, &p, err, sizeof err, &param) == 0) serve_params_free(&p);
    }
}

typedef struct {
    reply r;
} stream_job;

static void *run_long_stream(void *arg) {
    stream_job *j = arg;
    const char *b = "{\"prompt\":\"Once\",\"max_tokens\":16000,\"ignore_eos\":true,\"temperature\":"
                    "1,\"stream\":true}";
    j->r = http("POST", "/v1/completions", b, "Authorization: Bearer sesame\r\n");
    return NULL;
}

static void *run_queued(void *arg) {
    stream_job *j = arg;
    j->r = http("POST", "/v1/completions", "{\"prompt\":\"Lily\",\"max_tokens\":4}", "Authorization: Bearer sesame\r\n");
    return NULL;
}

/* Whether the server closed fd within 2 minutes (EOF or a reset, after
 * whatever it sent). */
static bool closed_by_server(int fd) {
    char buf[512];
    for (int i = 0; i < 1200; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) return true;
        }
    }
    return false;
}

/* Slow clients: 300 connections that each sent one byte of a request
 * (256 took every connection before) hold nobody up: /health is answered
 * while they stay open; past the read bound each is cut; past the
 * per-client limit a connection is closed unanswered. */
static void check_slow_clients(cleave_context *ctx) {
    serve_opts so = {.host = "127.0.0.1", .port = 0, .alias = "stories", .max_body = 4096, .read_timeout = 2,
                     .defaults = {16, -1, chatml(), (uint32_t)n_vocab},
                     .sched = {.n_parallel = 1, .queue_max = 4, .n_batch = 16, .quiet = true}};
    serve *srv = NULL;
    if (serve_start(model, ctx, &so, &srv)) {
        CHECK(!"the slow-clients server starts");
        return;
    }
    port = serve_port(srv);
    reply off = http("GET", "/metrics", NULL, NULL);
    CHECK_MSG(off.status == 404 && off.body && strstr(off.body, "--metrics"), "/metrics off: %d",
              off.status);
    free(off.body);
    enum { SLOW = 300 };
    int fds[SLOW], open_fds = 0;
    for (int i = 0; i < SLOW; i++) {
        fds[i] = connect_to();
        if (fds[i] >= 0 && write(fds[i], "G", 1) == 1) open_fds++;
    }
    CHECK_MSG(open_fds == SLOW, "%d of %d slow connections opened", open_fds, SLOW);
    reply h = http("GET", "/health", NULL, NULL);
    CHECK_MSG(h.status == 200, "/health beside %d slow clients: %d", SLOW, h.status);
    free(h.body);
    int cut = 0;
    for (int i = 0; i < SLOW; i++)
        if (fds[i] >= 0) cut += closed_by_server(fds[i]), close(fds[i]);
    CHECK_MSG(cut == open_fds, "%d of %d slow clients cut off past --timeout-read", cut, open_fds);
    serve_stop(srv);

    so.max_per_client = 4;
    if (serve_start(model, ctx, &so, &srv)) {
        CHECK(!"the per-client server starts");
        return;
    }
    port = serve_port(srv);
    int mine[4];
    for (int i = 0; i < 4; i++) mine[i] = connect_to();
    reply over = http("GET", "/health", NULL, NULL);
    CHECK_MSG(over.status == 0, "a fifth connection from one address: answered %d", over.status);
    free(over.body);
    for (int i = 0; i < 4; i++)
        if (mine[i] >= 0) close(mine[i]);
    int status = 0;
    for (int i = 0; i < WAIT_POLLS && status != 200; i++) { /* once the server has seen them go */
        reply again = http("GET", "/health", NULL, NULL);
        status = again.status;
        free(again.body);
        if (status != 200) usleep(10000);
    }
    CHECK_MSG(status == 200, "/health once the client's connections closed: %d", status);
    serve_stop(srv);
}


/* ---- n > 1, several prompts, logprobs ------------------------------------- */

/* choices[] of a reply by their index (NULL where absent). */
static const cJSON *choice_at(const cJSON *o, int index) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(o, "choices"))
        if (num_at(c, "index", NULL) == index) return c;
    return NULL;
}

static const char *choice_text(const cJSON *c) {
    const char *t = str_at(c, "text", NULL);
    return t ? t : str_at(c, "message", "content");
}

/* The library's logprob of the greedy first token after text, and that token's piece. */
static float first_logprob(const char *text, char *piece, size_t cap) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = SLOT_CELLS, cp.n_threads = 1, cp.kv_type = CLEAVE_TYPE_F32;
    cleave_context *ctx = NULL;
    int32_t toks[SLOT_CELLS];
    size_t n = 0;
    float lp = 1;
    piece[0] = 0;
    CHECK_OK(cleave_context_new(model, &cp, &ctx));
    CHECK_OK(cleave_tokenize_ex(model, text, strlen(text), true, true, toks, SLOT_CELLS, &n));
    if (ctx && n && !cleave_decode(ctx, toks, n, 0, 0, false)) {
        const float *lg = cleave_get_logits(ctx, -1);
        size_t best = 0;
        double sum = 0;
        for (size_t v = 0; v < n_vocab; v++) best = lg[v] > lg[best] ? v : best;
        for (size_t v = 0; v < n_vocab; v++) sum += exp((double)(lg[v] - lg[best]));
        lp = (float)-log(sum);
        size_t k = 0;
        cleave_token_to_piece(model, toks[n - 1], (int32_t)best, piece, cap - 1, &k);
        piece[k] = 0;
    }
    cleave_context_free(ctx);
    return lp;
}

static void check_choices(void) {
    int status;
    /* n = 3, greedy: three choices, each the answer alone; the later two
     * copied the first's prompt cells; the prompt counted once */
    char *b = completion_body(prompts[1], N_GEN, "\"n\":3");
    cJSON *r = post("/v1/completions", b, &status);
    free(b);
    CHECK_MSG(status == 200 && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "choices")) == 3,
              "n 3: status %d, %d choices", status, cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "choices")));
    for (int i = 0; i < 3; i++) {
        const char *t = choice_text(choice_at(r, i));
        CHECK_MSG(t && (!refs_sure() || !strcmp(t, refs[1])), "n 3: choice %d '%s', want '%s'", i, t ? t : "(none)",
                  refs[1]);
    }
    int32_t toks[SLOT_CELLS];
    size_t n_tok = 0;
    CHECK_OK(cleave_tokenize_ex(model, prompts[1], strlen(prompts[1]), true, true, toks, SLOT_CELLS, &n_tok));
    CHECK_MSG(num_at(r, "usage", "prompt_tokens") == (double)n_tok, "n 3: prompt_tokens %g, want %zu once",
              num_at(r, "usage", "prompt_tokens"), n_tok);
    /* each later choice ran only its last token: its other cells were
     * copied from the first's, or were already in the idle slot it got
     * (an earlier request's prompt, left there by whichever slot the
     * scheduler gave it: not fixed, so either counts) */
    double copied = num_at(r, "timings", "prompt_copied_n");
    CHECK_MSG((copied == 0 || copied == (double)(n_tok - 1) || copied == 2.0 * (double)(n_tok - 1)) &&
                  num_at(r, "timings", "prompt_n") == num_at(r, "usage", "prompt_tokens") -
                                                           num_at(cJSON_GetObjectItemCaseSensitive(r, "usage"),
                                                                  "prompt_tokens_details", "cached_tokens") + 2,
              "n 3: the later choices copied %g prompt cells (whole prompts of %zu) and processed %g tokens in all",
              copied, n_tok - 1, num_at(r, "timings", "prompt_n"));
    cJSON_Delete(r);
    /* a first choice that ends at its first token has left its slot when
     * the others start: they copy its cells from there all the same (a
     * prompt no slot has seen, so none holds it as an earlier cache) */
    const char *fresh = "One day a small robot found a red ball in the park";
    b = completion_body(fresh, 1, "\"n\":3");
    r = post("/v1/completions", b, &status);
    free(b);
    CHECK_OK(cleave_tokenize_ex(model, fresh, strlen(fresh), true, true, toks, SLOT_CELLS, &n_tok));
    /* (one may take the first's slot, its cells there as a cache) */
    CHECK_MSG(status == 200 && num_at(r, "timings", "prompt_copied_n") >= (double)(n_tok - 1) &&
                  num_at(r, "timings", "prompt_n") ==
                      (double)n_tok - num_at(cJSON_GetObjectItemCaseSensitive(r, "usage"), "prompt_tokens_details",
                                             "cached_tokens") + 2,
              "n 3 of one token: %g prompt cells copied, %g processed for %zu-token prompts",
              num_at(r, "timings", "prompt_copied_n"), num_at(r, "timings", "prompt_n"), n_tok);
    cJSON_Delete(r);

    /* two prompts, two choices each: index = prompt * n + choice */
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":[\"%s\",\"%s\"],\"n\":2,\"max_tokens\":%d,\"temperature\":0}", prompts[0],
             prompts[2], N_GEN);
    r = post("/v1/completions", body, &status);
    CHECK_MSG(status == 200 && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "choices")) == 4,
              "2 prompts x 2: status %d", status);
    for (int i = 0; i < 4; i++) {
        const char *t = choice_text(choice_at(r, i)), *want = refs[i / 2 ? 2 : 0];
        CHECK_MSG(t && (!refs_sure() || !strcmp(t, want)), "2 prompts x 2: choice %d '%s', want '%s'", i,
                  t ? t : "(none)", want);
    }
    cJSON_Delete(r);

    /* sampled with a seed: the choices differ from each other, and the
     * same request gives the same choices again */
    b = completion_body(prompts[0], N_GEN, "\"n\":2,\"seed\":7,\"temperature\":1.5");
    char *again[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        char *bb = strdup(b);
        char *t0 = strstr(bb, "\"temperature\":0,"); /* completion_body's greedy default gives way */
        if (t0) memmove(t0, t0 + 16, strlen(t0 + 16) + 1);
        r = post("/v1/completions", bb, &status);
        free(bb);
        const char *c0 = choice_text(choice_at(r, 0)), *c1 = choice_text(choice_at(r, 1));
        CHECK_MSG(status == 200 && c0 && c1 && strcmp(c0, c1), "n 2 sampled: the choices are the same: '%s'",
                  c0 ? c0 : "(none)");
        char *joined = malloc((c0 ? strlen(c0) : 0) + (c1 ? strlen(c1) : 0) + 2);
        sprintf(joined, "%s|%s", c0 ? c0 : "", c1 ? c1 : "");
        again[k] = joined;
        cJSON_Delete(r);
    }
    CHECK_MSG(!strcmp(again[0], again[1]), "n 2 with a seed: '%s' then '%s'", again[0], again[1]);
    free(again[0]), free(again[1]), free(b);

    /* completions' logprobs: the greedy token is the likeliest, its
     * logprob the library's, the tokens spell the text */
    char piece[64];
    float want_lp = first_logprob(prompts[0], piece, sizeof piece);
    b = completion_body(prompts[0], N_GEN, "\"logprobs\":3");
    r = post("/v1/completions", b, &status);
    free(b);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(choice(r), "logprobs");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    const cJSON *tlp = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    CHECK_MSG(status == 200 && cJSON_GetArraySize(tokens) == (int)num_at(r, "usage", "completion_tokens") -
                                                                 (ref_eog[0] ? 1 : 0),
              "logprobs: %d tokens for %g generated", cJSON_GetArraySize(tokens), num_at(r, "usage", "completion_tokens"));
    serve_buf spelt = {0};
    serve_buf_add(&spelt, "", 0);
    const cJSON *t, *offsets = cJSON_GetObjectItemCaseSensitive(lp, "text_offset");
    int k = 0;
    cJSON_ArrayForEach(t, tokens) {
        /* each token's text_offset: where it starts in the text (ASCII here: bytes are characters) */
        const cJSON *off = cJSON_GetArrayItem(offsets, k++);
        CHECK_MSG(off && off->valuedouble == (double)spelt.len, "logprobs: token %d's text_offset %g, want %zu", k - 1,
                  off ? off->valuedouble : -1.0, spelt.len);
        if (cJSON_IsString(t)) serve_buf_add(&spelt, t->valuestring, strlen(t->valuestring));
    }
    CHECK_MSG(answer(r) && !strcmp(spelt.p, answer(r)), "logprobs: the tokens spell '%s', the text is '%s'", spelt.p,
              answer(r) ? answer(r) : "(none)");
    free(spelt.p);
    double got_lp = cJSON_IsNumber(cJSON_GetArrayItem(tlp, 0)) ? cJSON_GetArrayItem(tlp, 0)->valuedouble : 1;
    CHECK_MSG(fabs(got_lp - want_lp) < 1e-3, "logprobs: the first token's %g, the library's %g", got_lp, want_lp);
    const char *tok0 = cJSON_IsString(cJSON_GetArrayItem(tokens, 0)) ? cJSON_GetArrayItem(tokens, 0)->valuestring : "";
    CHECK_MSG(!strcmp(tok0, piece), "logprobs: the first token '%s', the library's '%s'", tok0, piece);
    for (int i = 0; i < cJSON_GetArraySize(tokens); i++) {
        const cJSON *alts = cJSON_GetArrayItem(top, i), *a;
        double chosen = cJSON_GetArrayItem(tlp, i)->valuedouble, best = -1e30;
        int n_alts = 0;
        cJSON_ArrayForEach(a, alts) best = a->valuedouble > best ? a->valuedouble : best, n_alts++;
        CHECK_MSG(n_alts >= 1 && n_alts <= 3 && fabs(best - chosen) < 1e-5 && chosen <= 0,
                  "logprobs: token %d: %d alternatives, the best %g, the chosen %g", i, n_alts, best, chosen);
    }
    cJSON_Delete(r);

    /* chat's logprobs with top_logprobs, and llama.cpp's n_probs */
    r = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"temperature\":0,"
             "\"logprobs\":true,\"top_logprobs\":2}",
             &status);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice(r), "logprobs"), "content");
    const cJSON *e0 = cJSON_GetArrayItem(content, 0);
    CHECK_MSG(status == 200 && cJSON_GetArraySize(content) >= 1 && str_at(e0, "token", NULL) &&
                  cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(e0, "bytes")) &&
                  cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e0, "top_logprobs")) == 2,
              "chat logprobs: status %d, %d entries", status, cJSON_GetArraySize(content));
    cJSON_Delete(r);
    r = post("/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2,\"temperature\":0,\"n_probs\":5}", &status);
    top = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice(r), "logprobs"), "top_logprobs");
    CHECK_MSG(status == 200 && cJSON_GetArraySize(cJSON_GetArrayItem(top, 0)) == 5, "n_probs 5: %d alternatives",
              cJSON_GetArraySize(cJSON_GetArrayItem(top, 0)));
    cJSON_Delete(r);

    /* a stream of n = 2 with logprobs: each index's chunks add up to its answer, a logprob per token */
    b = completion_body(prompts[0], N_GEN, "\"n\":2,\"stream\":true,\"logprobs\":1");
    reply sr = http("POST", "/v1/completions", b, NULL);
    free(b);
    serve_buf txt[2] = {{0}};
    int n_lp[2] = {0, 0}, finished[2] = {0, 0};
    for (const char *p = sr.body; p && (p = strstr(p, "data: {")); p += 6) {
        const char *end = strstr(p, "\n\n");
        cJSON *o = end ? cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6)) : NULL;
        const cJSON *c = choice(o);
        int i = (int)num_at(c, "index", NULL);
        if (c && (i == 0 || i == 1)) {
            const char *x = str_at(c, "text", NULL);
            if (x) serve_buf_add(&txt[i], x, strlen(x));
            n_lp[i] += cJSON_GetArraySize(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "logprobs"), "tokens"));
            finished[i] += str_at(c, "finish_reason", NULL) != NULL;
        }
        cJSON_Delete(o);
    }
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(txt[i].p && (!refs_sure() || !strcmp(txt[i].p, refs[0])), "stream n 2: choice %d '%s'", i,
                  txt[i].p ? txt[i].p : "(none)");
        CHECK_MSG(finished[i] == 1, "stream n 2: choice %d finished %d times", i, finished[i]);
        CHECK_MSG(n_lp[i] == N_GEN || ref_eog[0], "stream n 2: choice %d has %d logprobs for %d tokens", i, n_lp[i],
                  N_GEN);
        free(txt[i].p);
    }
    CHECK_MSG(sr.body && strstr(sr.body, "data: [DONE]"), "stream n 2: no [DONE]");
    free(sr.body);
}

/* ---- the HTTP surface llama-server's and vLLM's clients expect ----------- */

/* The allow-list on its own: fields cleave does not implement refused by
 * name, those it does or that change nothing pass (null counts as absent). */
static void check_fields(void) {
    serve_defaults d = {16, -1, chatml(), 512};
    static const char *const refused[] = {
        "\"grammar\":\"root ::= x\"",
        "\"json_schema\":{}",
        "\"mirostat\":2",
        "\"mirostat_tau\":5",
        "\"mirostat_eta\":0.1",
        "\"typical_p\":0.5",
        "\"dry_multiplier\":0.8",
        "\"dry_base\":1.75",
        "\"xtc_probability\":0.5",
        "\"xtc_threshold\":0.1",
        "\"samplers\":[\"top_k\"]",
        "\"cache_prompt\":false",
        "\"tfs_z\":0.9",
        "\"n_keep\":4",
        "\"id_slot\":0",
        "\"suffix\":\"end\"",
        "\"penalty_last_n\":32",
        "\"dynatemp_range\":0.5",
        "\"logit_bias\":{\"5\":-100}",
        "\"made_up_field\":1",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char body[256], name[64] = "";
        snprintf(body, sizeof body, "{\"prompt\":\"x\",%s}", refused[i]);
        sscanf(refused[i], "\"%63[^\"]\"", name);
        serve_params p;
        char err[256] = "";
        const char *param = NULL;
        int st = serve_parse(body, strlen(body), false, &d, &p, err, sizeof err, &param);
        CHECK_MSG(st == 400 && param && !strcmp(param, name) && strstr(err, name), "%s: %d %s (%s)",
                  refused[i], st, param ? param : "null", err);
        if (!st) serve_params_free(&p);
    }
    static const struct {
        const char *body;
        bool chat;
        const char *param;
    } refused_by_route[] = {
        {"{\"prompt\":\"x\",\"messages\":[]}", false, "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prompt\":\"x\"}", true, "prompt"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", true, "echo"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]"
         "}",
         true, "tools"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
         true, "tool_choice"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
         "\"json_object\"}}",
         true, "response_format"},
    };
    for (size_t i = 0; i < sizeof refused_by_route / sizeof *refused_by_route; i++) {
        serve_params p;
        char err[256] = "";
        const char *param = NULL;
        const char *b = refused_by_route[i].body;
        int st =
            serve_parse(b, strlen(b), refused_by_route[i].chat, &d, &p, err, sizeof err, &param);
        CHECK_MSG(st == 400 && param && !strcmp(param, refused_by_route[i].param), "%s: %d %s", b,
                  st, param ? param : "null");
        if (!st) serve_params_free(&p);
    }
    static const struct {
        const char *body;
        bool chat;
    } passing[] = {
        {"{\"prompt\":\"x\",\"model\":\"m\",\"user\":\"u\",\"metadata\":{\"a\":\"b\"},\"store\":"
         "false,"
         "\"service_tier\":\"auto\",\"stream_options\":{\"include_usage\":true},\"n\":1,"
         "\"logprobs\":null,"
         "\"top_logprobs\":0,\"n_probs\":0,\"echo\":false,\"cache_prompt\":true,\"best_of\":1,\"logit_bias\":{},"
         "\"grammar\":null,"
         "\"suffix\":null,\"top_k\":40,\"min_p\":0.05,\"repeat_penalty\":1.1,\"ignore_eos\":false}",
         false},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":4,"
         "\"tools\":[],"
         "\"tool_choice\":\"none\",\"parallel_tool_calls\":true,\"response_format\":{\"type\":"
         "\"text\"},"
         "\"logprobs\":false,\"user\":\"u\"}",
         true},
    };
    for (size_t i = 0; i < sizeof passing / sizeof *passing; i++) {
        serve_params p;
        char err[256] = "";
        const char *param = NULL;
        int st = serve_parse(passing[i].body, strlen(passing[i].body), passing[i].chat, &d, &p, err,
                             sizeof err, &param);
        CHECK_MSG(st == 0, "allowed fields refused: %d %s (%s)", st, param ? param : "null", err);
        if (!st) {
            CHECK(p.max_tokens_given == passing[i].chat);
            CHECK(!passing[i].chat ? p.model && !strcmp(p.model, "m") : !p.model);
            serve_params_free(&p);
        }
    }
    /* n > 1 and logprobs are on the list (their values are checked by serve_request.c's choices()) */
    CHECK(serve_field_allowed("n", false) && serve_field_allowed("logprobs", true) &&
          serve_field_allowed("top_logprobs", true) && serve_field_allowed("n_probs", false));
    CHECK(!serve_field_allowed("messages", false) && !serve_field_allowed("prompt", true) &&
          !serve_field_allowed("mirostat", false));
}

/* GETs path: its status and JSON (NULL if not JSON). */
static cJSON *get_json(const char *path, int *status) {
    reply r = http("GET", path, NULL, NULL);
    *status = r.status;
    cJSON *o = r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return o;
}

/* A counter's value in /metrics's text (-1 when absent). */
static double metric(const char *name) {
    reply r = http("GET", "/metrics", NULL, NULL);
    double v = -1;
    size_t n = strlen(name);
    for (const char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ') v = strtod(p + n + 1, NULL);
    free(r.body);
    return v;
}

/* The ids of text with add_special false, parse_special true, as the library gives them. */
static size_t lib_tokens(const char *text, bool add_special, int32_t *ids, size_t cap) {
    size_t n = 0;
    CHECK_OK(cleave_tokenize_ex(model, text, strlen(text), add_special, true, ids, cap, &n));
    return n;
}

static void check_tokenize(void) {
    static const char *const texts[] = {"Once upon a time", "caf\xc3\xa9 \xf0\x9f\x98\x80 5",
                                        "Lily\nand Tom"};
    int status;
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        int32_t want[128];
        size_t n_want = lib_tokens(texts[t], false, want, 128);
        char *q = quote(texts[t]), body[512];
        snprintf(body, sizeof body, "{\"content\":%s}", q);
        cJSON *o = post("/tokenize", body, &status);
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "tokens");
        bool same = status == 200 && cJSON_GetArraySize(arr) == (int)n_want;
        for (size_t i = 0; same && i < n_want; i++)
            same = cJSON_GetArrayItem(arr, (int)i)->valuedouble == want[i];
        CHECK_MSG(same, "/tokenize '%s': %d, %d ids, want %zu", texts[t], status,
                  cJSON_GetArraySize(arr), n_want);
        /* back: /detokenize gives the text */
        serve_buf ids = {0};
        serve_buf_add(&ids, "{\"tokens\":[", 11);
        for (size_t i = 0; i < n_want; i++) {
            char num[16];
            int k = snprintf(num, sizeof num, "%s%d", i ? "," : "", want[i]);
            serve_buf_add(&ids, num, (size_t)k);
        }
        serve_buf_add(&ids, "]}", 3);
        cJSON *d = post("/detokenize", ids.p, &status);
        const char *content = str_at(d, "content", NULL);
        CHECK_MSG(status == 200 && content && !strcmp(content, texts[t]),
                  "/detokenize: %d '%s', want '%s'", status, content ? content : "(none)",
                  texts[t]);
        free(ids.p);
        cJSON_Delete(d);
        cJSON_Delete(o);
        /* with pieces: the same ids, and their bytes (a string, or byte values
         * where a piece is not whole UTF-8) make the text, its dummy space aside */
        snprintf(body, sizeof body, "{\"content\":%s,\"with_pieces\":true}", q);
        o = post("/tokenize", body, &status);
        arr = cJSON_GetObjectItemCaseSensitive(o, "tokens");
        serve_buf bytes = {0};
        serve_buf_add(&bytes, "", 0);
        same = status == 200 && cJSON_GetArraySize(arr) == (int)n_want;
        bool any_bytes = false;
        for (size_t i = 0; same && i < n_want; i++) {
            const cJSON *e = cJSON_GetArrayItem(arr, (int)i),
                        *piece = cJSON_GetObjectItemCaseSensitive(e, "piece");
            same = num_at(e, "id", NULL) == want[i];
            if (cJSON_IsString(piece)) {
                serve_buf_add(&bytes, piece->valuestring, strlen(piece->valuestring));
            } else if (cJSON_IsArray(piece)) {
                any_bytes = true;
                const cJSON *b;
                cJSON_ArrayForEach(b, piece) {
                    char c = (char)(int)b->valuedouble;
                    same &= cJSON_IsNumber(b) && b->valuedouble >= 0 && b->valuedouble < 256;
                    serve_buf_add(&bytes, &c, 1);
                }
            } else {
                same = false;
            }
        }
        const char *text =
            bytes.p && bytes.p[0] == ' ' && texts[t][0] != ' ' ? bytes.p + 1 : bytes.p;
        CHECK_MSG(same && text && !strcmp(text, texts[t]), "/tokenize with_pieces '%s': '%s'",
                  texts[t], text ? text : "(none)");
        if (t == 1) /* stories' 512 pieces have no emoji: its bytes are byte tokens, each a part of
                       a character */
            CHECK_MSG(any_bytes, "no piece sent as bytes for '%s'", texts[t]);
        free(bytes.p);
        free(q);
        cJSON_Delete(o);
    }
    /* add_special: BOS first where the vocabulary adds it */
    int32_t with_bos[64];
    size_t n_bos = lib_tokens("Once", true, with_bos, 64);
    cJSON *o = post("/tokenize", "{\"content\":\"Once\",\"add_special\":true}", &status);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    CHECK_MSG(status == 200 && cJSON_GetArraySize(arr) == (int)n_bos &&
                  cJSON_GetArrayItem(arr, 0)->valuedouble == with_bos[0],
              "add_special: %d ids, want %zu", cJSON_GetArraySize(arr), n_bos);
    cJSON_Delete(o);
    check_error("tokenize without content", "/tokenize", "{\"text\":\"x\"}", 400, "content", NULL);
    check_error("tokenize, with_pieces a string", "/tokenize",
                "{\"content\":\"x\",\"with_pieces\":\"yes\"}", 400, "with_pieces", NULL);
    check_error("detokenize, an id past the vocabulary", "/detokenize", "{\"tokens\":[1,999999]}",
                400, "tokens", NULL);
    check_error("detokenize, a negative id", "/detokenize", "{\"tokens\":[-1]}", 400, "tokens",
                NULL);
    check_error("detokenize, a fraction", "/detokenize", "{\"tokens\":[1.5]}", 400, "tokens", NULL);
    check_error("detokenize, a string", "/detokenize", "{\"tokens\":[\"a\"]}", 400, "tokens", NULL);
    check_error("detokenize without tokens", "/detokenize", "{}", 400, "tokens", NULL);
    reply g = http("GET", "/tokenize", NULL, NULL);
    CHECK(g.status == 405);
    free(g.body);
}

/* The main server: ids, models.retrieve, refused fields, the context's
 * bound, /props, /slots, /metrics, /apply-template, embeddings. */
static void check_surface(const char *model_path, const char *chat_text) {
    int status;
    /* ids: every alias listed; each, the file's path and basename answer */
    cJSON *o = get_json("/v1/models", &status);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    CHECK_MSG(status == 200 && cJSON_GetArraySize(data) == 2 &&
                  str_at(cJSON_GetArrayItem(data, 0), "id", NULL) &&
                  !strcmp(str_at(cJSON_GetArrayItem(data, 0), "id", NULL), "stories") &&
                  str_at(cJSON_GetArrayItem(data, 1), "id", NULL) &&
                  !strcmp(str_at(cJSON_GetArrayItem(data, 1), "id", NULL), "second-name"),
              "/v1/models: %d, %d ids", status, cJSON_GetArraySize(data));
    cJSON_Delete(o);
    o = get_json("/v1/models/second-name", &status);
    CHECK_MSG(status == 200 && str_at(o, "id", NULL) &&
                  !strcmp(str_at(o, "id", NULL), "second-name") && str_at(o, "object", NULL) &&
                  !strcmp(str_at(o, "object", NULL), "model"),
              "models.retrieve: %d", status);
    cJSON_Delete(o);
    o = get_json("/v1/models/nothing-here", &status);
    CHECK_MSG(status == 404 && str_at(o, "error", "code") &&
                  !strcmp(str_at(o, "error", "code"), "model_not_found"),
              "models.retrieve of an unknown id: %d", status);
    cJSON_Delete(o);
    const char *base = strrchr(model_path, '/') ? strrchr(model_path, '/') + 1 : model_path;
    const char *names[] = {"stories", "second-name", model_path, base};
    for (size_t i = 0; i < 4; i++) {
        char *q = quote(names[i]), body[1024];
        snprintf(body, sizeof body, "{\"model\":%s,\"prompt\":\"Once\",\"max_tokens\":2}", q);
        cJSON *r = post("/v1/completions", body, &status);
        CHECK_MSG(status == 200 && answer(r), "model '%s': %d", names[i], status);
        cJSON_Delete(r);
        free(q);
    }
    check_error("an unknown model", "/v1/completions", "{\"model\":\"gpt-4\",\"prompt\":\"Once\"}",
                404, "model", "model_not_found");
    check_error("an unknown model, chat", "/v1/chat/completions",
                "{\"model\":\"gpt-4\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404,
                "model", "model_not_found");
    /* fields cleave does not implement, over HTTP */
    check_error("mirostat", "/v1/completions", "{\"prompt\":\"Once\",\"mirostat\":2}", 400,
                "mirostat", NULL);
    check_error("grammar, chat", "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"grammar\":\"root ::= x\"}",
                400, "grammar", NULL);
    cJSON *r = post(
        "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2,\"user\":\"u\","
        "\"store\":false,\"parallel_tool_calls\":false,\"stream_options\":null}",
        &status);
    CHECK_MSG(status == 200 && answer(r), "allowed fields over HTTP: %d", status);
    cJSON_Delete(r);

    /* the slot's bound: an explicit max_tokens past it is refused with the
     * numbers; without one the answer runs to the slot's end */
    int32_t ids[SLOT_CELLS];
    size_t n_p = lib_tokens(prompts[1], true, ids, SLOT_CELLS);
    char *b = completion_body(prompts[1], SLOT_CELLS, NULL);
    r = post("/v1/completions", b, &status);
    char want[160];
    snprintf(want, sizeof want,
             "maximum context length is %d tokens. However, you requested %zu tokens (%zu in",
             SLOT_CELLS, n_p + SLOT_CELLS, n_p);
    const char *msg = str_at(r, "error", "message");
    CHECK_MSG(status == 400 && str_at(r, "error", "code") &&
                  !strcmp(str_at(r, "error", "code"), "context_length_exceeded") && msg &&
                  strstr(msg, want),
              "max_tokens past the slot: %d %s", status, msg ? msg : "(none)");
    cJSON_Delete(r);
    free(b);
    b = completion_body(prompts[1], SLOT_CELLS - (int)n_p, NULL); /* just fits */
    r = post("/v1/completions", b, &status);
    CHECK_MSG(status == 200, "max_tokens that just fits: %d", status);
    cJSON_Delete(r);
    free(b);
    /* a prompt that leaves 8 cells: the default 16 of /v1/completions is not
     * the client's, so the answer runs to the slot's end */
    char long_prompt[2048] = "";
    for (int i = 0; i < SLOT_CELLS - 8; i++)
        strcat(long_prompt, i ? ",7" : "1");
    char lb[2200];
    snprintf(lb, sizeof lb, "{\"prompt\":[%s],\"ignore_eos\":true,\"temperature\":0}", long_prompt);
    r = post("/v1/completions", lb, &status);
    CHECK_MSG(status == 200 && num_at(r, "usage", "completion_tokens") == 9 &&
                  str_at(choice(r), "finish_reason", NULL) &&
                  !strcmp(str_at(choice(r), "finish_reason", NULL), "length"),
              "without max_tokens, to the slot's end: %d, %g tokens", status,
              num_at(r, "usage", "completion_tokens"));
    cJSON_Delete(r);
    snprintf(lb, sizeof lb, "{\"prompt\":[%s],\"max_tokens\":16}", long_prompt);
    check_error("the same with max_tokens 16", "/v1/completions", lb, 400, "max_tokens",
                "context_length_exceeded");

    /* /props */
    o = get_json("/props", &status);
    CHECK_MSG(
        status == 200 && num_at(o, "total_slots", NULL) == SLOTS &&
            num_at(o, "default_generation_settings", "n_ctx") == SLOT_CELLS &&
            str_at(o, "chat_template", NULL) &&
            !strncmp(str_at(o, "chat_template", NULL), "chatml", 6) && str_at(o, "model_alias", NULL) &&
            !strcmp(str_at(o, "model_alias", NULL), "stories") && str_at(o, "model_path", NULL) &&
            !strcmp(str_at(o, "model_path", NULL), model_path) && str_at(o, "build_info", NULL) &&
            !strncmp(str_at(o, "build_info", NULL), "cleave", 6) &&
            cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(o, "modalities")),
        "/props: %d", status);
    cJSON_Delete(o);

    /* /apply-template: the chat path's text */
    o = post("/apply-template",
             "{\"messages\":[{\"role\":\"system\",\"content\":\"Be "
             "brief.\"},{\"role\":\"user\",\"content\":"
             "\"Tell a story.\"}]}",
             &status);
    CHECK_MSG(status == 200 && str_at(o, "prompt", NULL) &&
                  !strcmp(str_at(o, "prompt", NULL), chat_text),
              "/apply-template: %d '%s'", status,
              str_at(o, "prompt", NULL) ? str_at(o, "prompt", NULL) : "(none)");
    cJSON_Delete(o);
    check_error("apply-template, a bad role", "/apply-template",
                "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages", NULL);

    /* embeddings: not computed, said so */
    check_error("embeddings", "/v1/embeddings", "{\"input\":\"x\",\"model\":\"stories\"}", 404,
                NULL, "embeddings_not_supported");
    reply e = http("POST", "/v1/embeddings", "{\"input\":\"x\"}", NULL);
    CHECK(e.body && strstr(e.body, "does not compute embeddings"));
    free(e.body);
    reply nr = http("GET", "/v2/nothing", NULL, NULL);
    CHECK_MSG(nr.status == 404 && nr.body && strstr(nr.body, "/tokenize") &&
                  strstr(nr.body, "/metrics") && strstr(nr.body, "/apply-template") &&
                  strstr(nr.body, "/props"),
              "no route lists the routes: %s", nr.body ? nr.body : "");
    free(nr.body);

    /* /slots: each slot; a finished request's tokens stay cached */
    o = get_json("/slots", &status);
    double cached = 0;
    bool shape = status == 200 && cJSON_GetArraySize(o) == SLOTS;
    for (int i = 0; shape && i < SLOTS; i++) {
        const cJSON *sl = cJSON_GetArrayItem(o, i);
        shape = num_at(sl, "id", NULL) == i && num_at(sl, "n_ctx", NULL) == SLOT_CELLS &&
                str_at(sl, "state", NULL) && !strcmp(str_at(sl, "state", NULL), "idle") &&
                num_at(sl, "id_task", NULL) == -1;
        cached += num_at(sl, "n_cached", NULL);
    }
    CHECK_MSG(shape && cached > 0, "/slots: %d, %g cached", status, cached);
    cJSON_Delete(o);

    /* /metrics: the counters move with requests */
    char *raw = http_raw("GET", "/metrics", NULL, NULL);
    CHECK_MSG(raw && strstr(raw, " 200 ") && strstr(raw, "text/plain; version=0.0.4") &&
                  strstr(raw, "# TYPE cleave:requests_total counter") &&
                  strstr(raw, "# TYPE cleave:slots_busy gauge"),
              "/metrics: %.200s", raw ? raw : "(none)");
    free(raw);
    double length0 = metric("cleave:requests_total{finish=\"length\"}"),
           gen0 = metric("cleave:generation_tokens_total"),
           prompt0 = metric("cleave:prompt_tokens_total"),
           refused0 = metric("cleave:requests_refused_total{status=\"4xx\"}"),
           steps0 = metric("cleave:steps_total");
    CHECK_MSG(length0 >= 1 && gen0 >= 1 && prompt0 >= 1 && refused0 >= 1 && steps0 >= 1,
              "/metrics after requests: %g %g %g %g %g", length0, gen0, prompt0, refused0, steps0);
    b = completion_body("Lily and Tom went", 3, "\"ignore_eos\":true");
    r = post("/v1/completions", b, &status);
    CHECK(status == 200 && num_at(r, "usage", "completion_tokens") == 3);
    double prompt_n = num_at(r, "usage", "prompt_tokens");
    cJSON_Delete(r);
    free(b);
    check_error("refused, counted", "/v1/completions", "{\"prompt\":\"x\",\"mirostat\":1}", 400,
                "mirostat", NULL);
    CHECK(metric("cleave:requests_total{finish=\"length\"}") == length0 + 1);
    CHECK(metric("cleave:generation_tokens_total") == gen0 + 3);
    CHECK(metric("cleave:prompt_tokens_total") == prompt0 + prompt_n);
    CHECK(metric("cleave:requests_refused_total{status=\"4xx\"}") == refused0 + 1);
    CHECK(metric("cleave:steps_total") > steps0);
    CHECK(metric("cleave:decode_tokens_total") >= 2 &&
          metric("cleave:prefill_tokens_total") >= prompt_n);
    CHECK(metric("cleave:slots_busy") == 0 && metric("cleave:requests_queued") == 0 &&
          metric("cleave:slots") == SLOTS);
    CHECK(metric("cleave:kv_cells_used") > 0 && metric("cleave:kv_cells") == SLOTS * SLOT_CELLS);
    CHECK(metric("cleave:split_mode_switches_total") == 0 &&
          metric("cleave:kv_staged_bytes_total") == 0);
}

/* n > 1's measured choice between copying a prompt's cells and processing it again. */
static void check_copy_policy(void) {
    /* the rates measured on 2 CPU cores (a 1B model) and on an H200 (8B) */
    CHECK(serve_copy_pays(20000, 42, 512, 511, 1024));      /* CPU: 26 ms against 12 s */
    CHECK(!serve_copy_pays(5000, 26000, 8000, 7999, 1024)); /* GPU: 1.6 s against 0.3 s */
    CHECK(serve_copy_pays(0, 26000, 600, 599, 1024));       /* unmeasured: a small copy measures it */
    CHECK(!serve_copy_pays(0, 26000, 8000, 7999, 1024));    /* but not a large one */
    CHECK(serve_copy_pays(5000, 0, 8000, 7999, 1024));      /* no prefill measured yet */
    /* a copy moves all of the source's cells: one that holds a long answer costs more */
    CHECK(!serve_copy_pays(1000, 1000, 4000, 100, 1024));
}

int main(void) {
    check_copy_policy();
    check_text_release();
    check_fields();
    check_parse_oom();
    fuzz_parse();
    const char *path = tu_stories_model();
    if (!path) path = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    if (!path || !(model = tu_load(path, &n_vocab))) return tu_finish("test_serve");
    for (int i = 0; i < N_PROMPTS; i++) refs[i] = reference(prompts[i], N_GEN, &ref_eog[i]);

    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = SLOTS * SLOT_CELLS;
    cp.seq_regions = SLOTS; /* as cleave serve makes it */
    cp.n_threads = 1;
    cp.kv_type = CLEAVE_TYPE_F32;
    cleave_context *ctx = NULL;
    CHECK_OK(cleave_context_new(model, &cp, &ctx));
    static const char *const more_ids[] = {"second-name",
                                           "stories"}; /* the repeat is listed once */
    serve_opts o = {.host = "127.0.0.1",
                    .port = 0,
                    .alias = "stories",
                    .aliases = more_ids,
                    .n_aliases = 2,
                    .model_path = path,
                    .metrics = true,
                    .slots = true,
                    .max_body = 4096,
                    .max_connections = 64,
                    .defaults = {16, -1, chatml(), (uint32_t)n_vocab},
                    .sched = {.n_parallel = SLOTS, .queue_max = 64, .n_batch = 16, .quiet = true,
                              .copy = SERVE_COPY_ON}};
    serve *srv = NULL;
    if (!ctx || serve_start(model, ctx, &o, &srv)) {
        CHECK(!"the server starts");
        return tu_finish("test_serve");
    }
    port = serve_port(srv);
    int status;

    /* health and models */
    reply h = http("GET", "/health", NULL, NULL);
    CHECK(h.status == 200 && h.body && strstr(h.body, "\"ok\""));
    free(h.body);
    CHECK(health_num("slots_idle") == SLOTS);
    check_guard(NULL);
    reply mo = http("GET", "/v1/models", NULL, NULL);
    CHECK(mo.status == 200 && mo.body && strstr(mo.body, "\"id\":\"stories\""));
    free(mo.body);

    /* one at a time: the library's greedy answer; the prompts over the step's 16 tokens come in chunks */
    for (int i = 0; i < N_PROMPTS; i++) {
        char *b = completion_body(prompts[i], N_GEN, NULL);
        cJSON *r = post("/v1/completions", b, &status);
        check_answer("completion", r, status, refs[i], ref_eog[i] ? "stop" : "length");
        CHECK(!strcmp(str_at(r, "object", NULL) ? str_at(r, "object", NULL) : "", "text_completion"));
        CHECK(num_at(r, "usage", "prompt_tokens") > 0);
        CHECK(num_at(r, "usage", "total_tokens") == num_at(r, "usage", "prompt_tokens") + num_at(r, "usage", "completion_tokens"));
        cJSON_Delete(r);
        free(b);
    }

    /* the same prompt again (each slot holds one of the four): all but its
     * last token come from the slot's cache */
    char *b = completion_body(prompts[1], N_GEN, NULL);
    cJSON *r = post("/v1/completions", b, &status);
    CHECK(answer(r) && (!refs_sure() || !strcmp(answer(r), refs[1])));
    double cached = num_at(cJSON_GetObjectItemCaseSensitive(r, "usage"), "prompt_tokens_details", "cached_tokens");
    CHECK_MSG(cached == num_at(r, "usage", "prompt_tokens") - 1, "cached_tokens %g of %g", cached,
              num_at(r, "usage", "prompt_tokens"));
    cJSON_Delete(r);
    free(b);

    /* eight at once over four slots, mixing prefill and generation in the steps */
    job jobs[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) jobs[i] = (job){.i = i}, pthread_create(&th[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        const char *got = answer(jobs[i].o);
        CHECK_MSG(jobs[i].status == 200 && got && (!refs_sure() || !strcmp(got, refs[i % N_PROMPTS])),
                  "concurrent request %d: '%s'", i,
                  got ? got : "(none)");
        cJSON_Delete(jobs[i].o);
    }

    /* token ids as the prompt */
    int32_t ids[SLOT_CELLS];
    size_t n_ids = 0;
    CHECK_OK(cleave_tokenize_ex(model, prompts[2], strlen(prompts[2]), true, true, ids, SLOT_CELLS, &n_ids));
    char idb[2048] = "{\"prompt\":[";
    for (size_t i = 0; i < n_ids; i++) sprintf(idb + strlen(idb), "%s%d", i ? "," : "", ids[i]);
    sprintf(idb + strlen(idb), "],\"max_tokens\":%d,\"temperature\":0}", N_GEN);
    r = post("/v1/completions", idb, &status);
    CHECK(status == 200 && answer(r) && (!refs_sure() || !strcmp(answer(r), refs[2])));
    cJSON_Delete(r);

    check_choices();

    /* streams add up to the same text */
    b = completion_body(prompts[0], N_GEN, "\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    check_stream("stream", "/v1/completions", b, refs[0], ref_eog[0] ? "stop" : "length", false);
    free(b);

    /* a stop string from the middle of the answer: the text before it, "stop" */
    const char *ref = refs[3];
    size_t at = strlen(ref) / 2;
    char stop[8] = {0}, *want = NULL;
    memcpy(stop, ref + at, strlen(ref) >= 8 ? 3 : 0);
    bool ascii = true;
    for (const char *c = stop; *c; c++) ascii &= (unsigned char)*c < 0x80;
    if (!stop[0] || !ascii || !refs_sure()) {
        fprintf(stderr, "note: the model's answer is too short, not ASCII or not sure: stop strings not checked\n");
    } else {
        char *first = strstr(ref, stop);
        want = strndup(ref, (size_t)(first - ref));
        char *qs = quote(stop), extra[128];
        snprintf(extra, sizeof extra, "\"stop\":[%s,\"never appears here\"]", qs);
        b = completion_body(prompts[3], N_GEN, extra);
        r = post("/v1/completions", b, &status);
        check_answer("stop string", r, status, want, "stop");
        cJSON_Delete(r);
        free(b);
        snprintf(extra, sizeof extra, "\"stop\":%s,\"stream\":true", qs);
        b = completion_body(prompts[3], N_GEN, extra);
        check_stream("stop string, streamed", "/v1/completions", b, want, "stop", false);
        free(b);
        free(qs);
        free(want);
    }

    /* a seed repeats a sampled answer */
    const char *seeded = "{\"prompt\":\"Lily\",\"max_tokens\":20,\"temperature\":1.0,\"seed\":1234}";
    cJSON *s1 = post("/v1/completions", seeded, &status), *s2 = post("/v1/completions", seeded, &status);
    CHECK(answer(s1) && answer(s2) && !strcmp(answer(s1), answer(s2)));
    cJSON_Delete(s1);
    cJSON_Delete(s2);

    /* chats: the chatml text's greedy answer, whole and streamed */
    cleave_chat_message msgs[2] = {{"system", "Be brief."}, {"user", "Tell a story."}};
    char chat_text[512];
    size_t chat_len;
    bool chat_eog;
    CHECK_OK(cleave_chat_apply("chatml", msgs, 2, true, chat_text, sizeof chat_text - 1, &chat_len));
    chat_text[chat_len] = '\0';
    char *chat_ref = reference(chat_text, 12, &chat_eog);
    const char *chat = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                       "[{\"type\":\"text\",\"text\":\"Tell a story.\"}]}],\"max_tokens\":12,\"temperature\":0%s}";
    char cb[512];
    snprintf(cb, sizeof cb, chat, "");
    r = post("/v1/chat/completions", cb, &status);
    check_answer("chat", r, status, chat_ref, chat_eog ? "stop" : "length");
    CHECK(str_at(r, "object", NULL) && !strcmp(str_at(r, "object", NULL), "chat.completion"));
    CHECK(str_at(choice(r), "message", "role") && !strcmp(str_at(choice(r), "message", "role"), "assistant"));
    cJSON_Delete(r);
    snprintf(cb, sizeof cb, chat, ",\"stream\":true");
    check_stream("chat, streamed", "/v1/chat/completions", cb, chat_ref, chat_eog ? "stop" : "length", true);
    free(chat_ref);

    check_tokenize();
    check_surface(path, chat_text);

    /* bad requests: 4xx naming the field; the server goes on */
    check_error("not JSON", "/v1/completions", "{\"prompt\":", 400, NULL, NULL);
    check_error("not an object", "/v1/completions", "[1,2]", 400, NULL, NULL);
    check_error("no prompt", "/v1/completions", "{\"max_tokens\":3}", 400, "prompt", NULL);
    check_error("max_tokens a string", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"3\"}", 400, "max_tokens", NULL);
    check_error("max_tokens 0", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":0}", 400, "max_tokens", NULL);
    check_error("temperature < 0", "/v1/completions", "{\"prompt\":\"a\",\"temperature\":-1}", 400, "temperature", NULL);
    check_error("top_p > 1", "/v1/completions", "{\"prompt\":\"a\",\"top_p\":1.5}", 400, "top_p", NULL);
    check_error("n 0", "/v1/completions", "{\"prompt\":\"a\",\"n\":0}", 400, "n", NULL);
    check_error("n 65", "/v1/completions", "{\"prompt\":\"a\",\"n\":65}", 400, "n", NULL);
    check_error("logprobs 21", "/v1/completions", "{\"prompt\":\"a\",\"logprobs\":21}", 400, "logprobs", NULL);
    check_error("top_logprobs alone", "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}", 400, "top_logprobs",
                NULL);
    check_error("chat logprobs 3", "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":3}", 400, "logprobs", NULL);
    check_error("prompts mixed", "/v1/completions", "{\"prompt\":[\"a\",[1,2]]}", 400, "prompt", NULL);
    check_error("prompts with a number", "/v1/completions", "{\"prompt\":[\"a\",3]}", 400, "prompt", NULL);
    check_error("an empty prompt list", "/v1/completions", "{\"prompt\":[]}", 400, "prompt", NULL);
    check_error("an empty token prompt", "/v1/completions", "{\"prompt\":[[1],[]]}", 400, "prompt", NULL);
    check_error("n x prompts over the queue", "/v1/completions",
                "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":30}", 400, "prompt", NULL);
    check_error("stop of numbers", "/v1/completions", "{\"prompt\":\"a\",\"stop\":[1]}", 400, "stop", NULL);
    check_error("token id too big", "/v1/completions", "{\"prompt\":[1,999999]}", 400, "prompt", NULL);
    check_error("no messages", "/v1/chat/completions", "{\"messages\":[]}", 400, "messages", NULL);
    /* a NUL (\u0000) would cut the text there: refused, naming the field */
    check_error("a NUL in the prompt", "/v1/completions", "{\"prompt\":\"Once\\u0000 upon\"}", 400, "prompt", NULL);
    check_error("a NUL in a stop string", "/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"x\\u0000\"]}", 400, "stop",
                NULL);
    check_error("a NUL in a message", "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\\u0000\"}]}]}", 400,
                "messages", NULL);
    check_error("a bad role", "/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400,
                "messages", NULL);
    char big[1024] = "{\"prompt\":[1";
    for (int i = 0; i < SLOT_CELLS; i++) strcat(big, ",1");
    strcat(big, "]}");
    check_error("prompt over a slot", "/v1/completions", big, 400, "prompt", "context_length_exceeded");
    char *huge = malloc(8192);
    memset(huge, ' ', 8191);
    huge[8191] = 0;
    huge[0] = '{', huge[8190] = '}';
    check_error("body over --max-body", "/v1/completions", huge, 413, NULL, NULL);
    free(huge);
    reply g = http("GET", "/v1/completions", NULL, NULL);
    CHECK(g.status == 405);
    free(g.body);
    g = http("GET", "/v2/nothing", NULL, NULL);
    CHECK(g.status == 404 && g.body && strstr(g.body, "\"error\""));
    free(g.body);
    CHECK(health_num("slots_idle") == SLOTS);

    CHECK(health_num("slots_idle") == SLOTS);
    serve_stop(srv);
    cleave_context_free(ctx);

    /* One slot of 16k cells: an answer runs for many seconds, so a request
     * that ends in milliseconds was ended by the client or the stop. */
    cp.n_ctx = 16384;
    cp.seq_regions = 1;
    ctx = NULL;
    CHECK_OK(cleave_context_new(model, &cp, &ctx));
    o.sched.n_parallel = 1;
    o.sched.queue_max = 1;
    o.api_key = "sesame";
    o.cors = "http://app.example";
    if (!ctx || serve_start(model, ctx, &o, &srv)) {
        CHECK(!"the second server starts");
        return tu_finish("test_serve");
    }
    port = serve_port(srv);
    check_error("no key", "/v1/completions", "{\"prompt\":\"a\"}", 401, NULL, "invalid_api_key");
    check_guard(o.cors);
    static const char *const wrong[] = {"Authorization: Bearer sesamf\r\n", "Authorization: Bearer sesam\r\n",
                                        "Authorization: Bearer sesame!\r\n", "Authorization: Bearer \r\n",
                                        "Authorization: sesame\r\n"};
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
        reply w = http("POST", "/v1/completions", "{\"prompt\":\"a\"}", wrong[i]);
        CHECK_MSG(w.status == 401, "a wrong key (%s): %d", wrong[i], w.status);
        free(w.body);
    }
    const char *key = "Authorization: Bearer sesame\r\n";
    reply k = http("POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", key);
    CHECK(k.status == 200);
    free(k.body);

    /* a client that leaves mid-stream frees its slot at once */
    const char *long_stream = "{\"prompt\":\"Once\",\"max_tokens\":16000,\"ignore_eos\":true,"
                              "\"temperature\":1,\"stream\":true}";
    int fd = send_request("POST", "/v1/completions", long_stream, strlen(long_stream), key);
    char first_bytes[256];
    CHECK(fd >= 0 && read(fd, first_bytes, sizeof first_bytes) > 0);
    if (fd >= 0) close(fd);
    int idle = 0;
    /* the slot idle and nothing queued: on a loaded machine the stream's
     * first bytes (its headers) can come before it leaves the queue */
    for (int i = 0; i < WAIT_POLLS && ((idle = health_num("slots_idle")) != 1 || health_num("requests_queued") != 0); i++)
        usleep(10000);
    CHECK_MSG(idle == 1, "the slot is still busy 2 minutes after its client left");
    reply ok = http("POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", key);
    CHECK(ok.status == 200);
    free(ok.body);

    /* so does one that leaves while its whole answer is being made */
    const char *long_whole =
        "{\"prompt\":\"Once\",\"max_tokens\":16000,\"ignore_eos\":true,\"temperature\":1}";
    fd = send_request("POST", "/v1/completions", long_whole, strlen(long_whole), key);
    for (int i = 0; i < WAIT_POLLS && health_num("slots_idle") == 1; i++) usleep(10000);
    CHECK_MSG(health_num("slots_idle") == 0, "the long request did not start");
    reply sr = http("GET", "/slots", NULL, key);
    cJSON *so = sr.body ? cJSON_Parse(sr.body) : NULL;
    const cJSON *s0 = cJSON_GetArrayItem(so, 0);
    CHECK_MSG(sr.status == 200 && cJSON_GetArraySize(so) == 1 && str_at(s0, "state", NULL) &&
                  !strcmp(str_at(s0, "state", NULL), "processing") &&
                  num_at(s0, "id_task", NULL) > 0 && num_at(s0, "n_prompt_tokens", NULL) >= 1 &&
                  num_at(s0, "n_ctx", NULL) == 16384,
              "/slots while a request runs: %d %s", sr.status, sr.body ? sr.body : "");
    cJSON_Delete(so);
    free(sr.body);
    if (fd >= 0) close(fd);
    for (int i = 0; i < WAIT_POLLS && (idle = health_num("slots_idle")) != 1; i++) usleep(10000);
    CHECK_MSG(idle == 1, "the slot is still busy 2 minutes after its client left a request not streamed");

    /* the slot busy and the queue's one place taken: 503; stopping ends
     * the open stream with an error event and the queued request with 503 */
    stream_job sj = {0}, queued = {0};
    pthread_t st, qt;
    pthread_create(&st, NULL, run_long_stream, &sj);
    for (int i = 0; i < WAIT_POLLS && health_num("slots_idle") == 1; i++) usleep(10000);
    pthread_create(&qt, NULL, run_queued, &queued);
    for (int i = 0; i < WAIT_POLLS && health_num("requests_queued") != 1; i++) usleep(10000);
    reply busy = http("POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", key);
    CHECK_MSG(busy.status == 503 && busy.body && strstr(busy.body, "busy"), "a full queue: %d %s", busy.status,
              busy.body ? busy.body : "");
    free(busy.body);
    serve_stop(srv);
    pthread_join(st, NULL);
    pthread_join(qt, NULL);
    CHECK_MSG(sj.r.status == 200 && sj.r.body && strstr(sj.r.body, "shutting down") && strstr(sj.r.body, "[DONE]"),
              "open stream at stop: %d ...%s", sj.r.status,
              sj.r.body && strlen(sj.r.body) > 400 ? sj.r.body + strlen(sj.r.body) - 400 : "");
    CHECK_MSG(queued.r.status == 503 && queued.r.body && strstr(queued.r.body, "shutting down"),
              "queued at stop: %d %s", queued.r.status, queued.r.body ? queued.r.body : "");
    free(sj.r.body);
    free(queued.r.body);
    cleave_context_free(ctx);

    o.cors = NULL;
    /* -psm layer -sm tensor on two virtual CPU devices: prompts under the
     * layer split, answers under the tensor split, the same greedy text */
    cp.n_ctx = 2 * SLOT_CELLS;
    cp.seq_regions = 2;
    cp.devices = "cpu:2";
    cp.split_mode = CLEAVE_SPLIT_TENSOR;
    cp.prefill_split_mode = CLEAVE_SPLIT_LAYER;
    ctx = NULL;
    CHECK_OK(cleave_context_new(model, &cp, &ctx));
    o.api_key = NULL;
    o.sched = (serve_sched_opts){.n_parallel = 2, .queue_max = 8, .n_batch = 16, .quiet = true, .phased = true,
                                 .psm = CLEAVE_SPLIT_LAYER, .mode = CLEAVE_SPLIT_TENSOR, .dwell = 0};
    o.metrics = true, o.slots = false;
    if (!ctx || serve_start(model, ctx, &o, &srv)) {
        CHECK(!"the -psm server starts");
        return tu_finish("test_serve");
    }
    port = serve_port(srv);
    for (int i = 0; i < N_PROMPTS; i++) {
        b = completion_body(prompts[i], N_GEN, NULL);
        r = post("/v1/completions", b, &status);
        check_answer("-psm layer -sm tensor", r, status, refs[i], ref_eog[i] ? "stop" : "length");
        cJSON_Delete(r);
        free(b);
    }
    /* the gate's switches counted, with their seconds */
    CHECK_MSG(metric("cleave:split_mode_switches_total") >= 1 &&
                  metric("cleave:split_mode_switch_seconds_total") > 0,
              "switches in /metrics: %g, %g s", metric("cleave:split_mode_switches_total"),
              metric("cleave:split_mode_switch_seconds_total"));
    /* off unless asked for, saying how to turn it on */
    reply off = http("GET", "/slots", NULL, NULL);
    CHECK_MSG(off.status == 404 && off.body && strstr(off.body, "--slots"), "/slots off: %d",
              off.status);
    free(off.body);
    serve_stop(srv);
    CHECK_MSG(cleave_context_split_mode(ctx) == CLEAVE_SPLIT_TENSOR, "the answers ran under split %d",
              (int)cleave_context_split_mode(ctx));
    check_slow_clients(ctx);
    cleave_context_free(ctx);

    /* a tiered KV cache (16 cells in device memory): /metrics counts what
     * the steps staged from its host part, none before a prompt reaches it */
    cp.n_ctx = SLOT_CELLS;
    cp.seq_regions = 1;
    cp.devices = "cpu";
    cp.split_mode = CLEAVE_SPLIT_NONE;
    cp.kv_vram_cells = 16;
    ctx = NULL;
    CHECK_OK(cleave_context_new(model, &cp, &ctx));
    o.metrics = true;
    o.sched = (serve_sched_opts){.n_parallel = 1, .queue_max = 4, .n_batch = 16, .quiet = true};
    if (!ctx || serve_start(model, ctx, &o, &srv)) {
        CHECK(!"the tiered server starts");
        return tu_finish("test_serve");
    }
    port = serve_port(srv);
    CHECK(metric("cleave:kv_staged_bytes_total") == 0);
    b = completion_body(prompts[1], 4, NULL);
    r = post("/v1/completions", b, &status);
    CHECK_MSG(status == 200 && metric("cleave:kv_staged_bytes_total") > 0,
              "a prompt past 16 cells of a tiered cache: %d, %g bytes staged", status,
              metric("cleave:kv_staged_bytes_total"));
    cJSON_Delete(r);
    free(b);
    serve_stop(srv);

    for (int i = 0; i < N_PROMPTS; i++) free(refs[i]);
    cleave_context_free(ctx);
    cleave_model_free(model);
    return tu_finish("test_serve");
}
