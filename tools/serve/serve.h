/* `cleave serve`: an OpenAI-compatible HTTP server over one context.
 *
 *   serve_text.c     what of a generated text may be sent yet (stop
 *                    strings, unfinished UTF-8), pure
 *   serve_request.c  a request's JSON body -> serve_params, checked
 *   serve_fields.c   the allow-list of a request's fields
 *   serve_endpoints.c llama-server's side routes' answers (/tokenize,
 *                    /detokenize, /slots, /metrics)
 *   serve_sched.c    the slots and the step loop: continuous batching of
 *                    every active request into one cleave_decode_batch
 *   serve_pool.c     the threads that sample a step's requests at once
 *   serve_http.c     routes, responses and server-sent events (libmicrohttpd)
 *
 * Requests wait in a queue for one of n_parallel slots; slot i is sequence
 * i of the context and owns its n_ctx / n_parallel cells (the context's
 * seq_regions, which cmd_serve sets to n_parallel). A slot keeps its
 * tokens after a request ends, so the next request that shares a prefix
 * with them processes only the rest. */
#ifndef CLEAVE_TOOLS_SERVE_H
#define CLEAVE_TOOLS_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

/* ---- serve_text.c ------------------------------------------------------- */

/* The bytes of text[0, len) that can be released: up to the first stop
 * string (then *stop_found = true), else all but a tail that is the start of
 * a stop string or an unfinished UTF-8 character; with final, everything up
 * to a stop string. Strings searched start at byte `from` or later (bytes
 * before it were searched by an earlier call). */
size_t serve_text_release(const char *text, size_t len, size_t from, char *const *stop, size_t n_stop,
                          bool final, bool *stop_found);
/* Appends text[0, n) to *out as valid UTF-8, each invalid byte as U+FFFD
 * (the replacement character). false: out of memory. */
typedef struct serve_buf {
    char *p;
    size_t len, cap;
} serve_buf;
bool serve_buf_add(serve_buf *b, const char *s, size_t n);
bool serve_buf_add_utf8(serve_buf *b, const char *s, size_t n);

/* ---- serve_request.c ---------------------------------------------------- */

#define SERVE_MAX_STOP 16
/* Alternatives a token's logprobs may list (OpenAI's top_logprobs: 20). */
#define SERVE_MAX_LOGPROBS 20
/* Choices one request may ask for: n times the prompts. */
#define SERVE_MAX_CHOICES 64

/* One prompt: text (chat: the template applied), or token ids. */
typedef struct serve_prompt {
    char *text;
    int32_t *tokens;
    size_t n_tokens;
} serve_prompt;

typedef struct serve_params {
    bool chat;           /* /v1/chat/completions */
    serve_prompt *prompts; /* a completion's prompt may be several; a chat has one */
    size_t n_prompts;
    int n;               /* choices per prompt, each its own sequence */
    int logprobs;        /* -1: none; else the chosen token's logprob and this many alternatives */
    long long max_tokens; /* -1: until the slot's context is full */
    cleave_sampler_params sp;
    char *stop[SERVE_MAX_STOP];
    size_t n_stop;
    bool stream, include_usage;
    bool ignore_eos; /* llama.cpp's: generate through end-of-generation tokens (benchmarks) */
    bool max_tokens_given; /* max_tokens or max_completion_tokens was in the request */
    char *model;           /* the request's model, or NULL */
} serve_params;

/* What a request may leave out. */
typedef struct serve_defaults {
    long long max_tokens_completion; /* /v1/completions: OpenAI's 16 */
    long long max_tokens_cap;        /* the server's -n: a limit on any request, -1 none */
    const cleave_chat_template *chat_template; /* chats' template; NULL: chats are refused */
    uint32_t n_vocab;                /* token ids in a prompt are below it */
} serve_defaults;
/* Whether a string of the JSON body holds the escape \u0000 (a NUL the
 * parsed strings would end at); field gets the top-level key it is under
 * ("" at the top). */
bool serve_json_nul_field(const char *body, size_t len, char *field, size_t cap);

/* Whether a top-level field of a request (chat or not) may pass: one
 * cleave implements, or one that cannot change the answer. Any other
 * field is refused by name, so nothing asked for is silently left out. */
bool serve_field_allowed(const char *name, bool chat);

/* Parses a request body: 0, or the HTTP status of its failure (400 for
 * the request, 500 when memory ran out) with err (a sentence) and *param
 * (the offending field, or NULL) set; nothing to free then. */
int serve_parse(const char *body, size_t len, bool chat, const serve_defaults *d, serve_params *out,
                 char *err, size_t err_cap, const char **param);
void serve_params_free(serve_params *p);
/* dst gets src's settings (sampling, stops, limits), no prompts: what
 * each choice of a request keeps. false: out of memory (dst empty). */
bool serve_params_clone(serve_params *dst, const serve_params *src);

/* ---- serve_pool.c ------------------------------------------------------- */

/* n_threads helpers for fn(arg, i), i in [0, n); the caller works too.
 * NULL (no helpers: the caller does it all) when n_threads < 1. */
typedef struct serve_pool serve_pool;
serve_pool *serve_pool_new(int n_threads);
void serve_pool_for(serve_pool *p, int n, void (*fn)(void *arg, int i), void *arg);
void serve_pool_free(serve_pool *p);

/* ---- serve_sched.c ------------------------------------------------------ */

typedef enum serve_finish {
    SERVE_RUNNING = 0,
    SERVE_FINISH_STOP,   /* an end-of-generation token or a stop string */
    SERVE_FINISH_LENGTH, /* max_tokens or the slot's context */
    SERVE_FINISH_ERROR,  /* see err / http_status */
} serve_finish;

/* A generated token's logprob (the model's distribution, before sampling
 * settings) and its most likely alternatives, and where its text ends in
 * the request's raw text. */
typedef struct serve_logprob {
    int32_t token, prev; /* prev: the token before it (its piece's leading space) */
    float logprob;
    size_t end;       /* bytes of raw text up to its end */
    size_t end_chars; /* characters (UTF-8 lead bytes) up to its end: a completion's text_offset */
    int n_top;
    int32_t top[SERVE_MAX_LOGPROBS];
    float top_logprob[SERVE_MAX_LOGPROBS];
} serve_logprob;

/* One request between the HTTP thread that made it and the step loop: one
 * choice of a response (several for n > 1 or several prompts). */
typedef struct serve_req {
    serve_params p;
    int32_t *prompt; /* tokenized */
    size_t n_prompt;
    /* guarded by the scheduler's mutex */
    serve_buf raw;          /* generated text as the tokens' pieces */
    size_t released;        /* bytes of raw that may be sent */
    size_t searched;        /* bytes of raw already searched for stop strings */
    serve_finish finish;
    int http_status;        /* with SERVE_FINISH_ERROR */
    char err[256];
    bool stop_hit;          /* released ends where a stop string begins */
    bool cancelled;         /* the client went away */
    int refs;               /* the HTTP side and the scheduler */
    long long n_cached, n_gen; /* prompt tokens found in the slot's cache; tokens generated */
    double t_queued, t_start, t_first, t_end; /* seconds (CLOCK_MONOTONIC) */
    unsigned long long id;
    int index; /* the choice's index in its response */
    /* n > 1: the request of the same prompt whose cells this one copies
     * instead of processing the prompt again (its index in the array
     * submitted with it, -1: none; the scheduler keeps its id) */
    int lead;
    unsigned long long lead_id;
    double copy_ms; /* the copy took */
    serve_logprob *lp; /* with p.logprobs >= 0: one per token of raw */
    size_t n_lp, cap_lp;
} serve_req;

/* n > 1: a prompt's later choices copy the first's cells when that is
 * measured to cost less than processing the prompt again (AUTO), always
 * (ON), or never (OFF). */
typedef enum { SERVE_COPY_AUTO = 0, SERVE_COPY_ON, SERVE_COPY_OFF } serve_copy_policy;
/* AUTO's choice: copying `cells` cells (a copy moves all of the source's)
 * against processing `tokens` prompt tokens, at the rates measured so far
 * (copied cells and prefill tokens per second; 0: none measured yet).
 * Unmeasured copies are tried on small copies (at most probe cells) to
 * measure them; an unmeasured prefill rate lets the copy go ahead. */
bool serve_copy_pays(double copy_rate, double prefill_rate, size_t cells, size_t tokens, size_t probe);

typedef struct serve_sched_opts {
    int n_parallel;
    int queue_max;
    uint32_t n_batch; /* tokens a step may take (a token of each generating slot, then prompts) */
    /* -psm: the gate moves the context between the phases' placements,
     * psm's for prompts, mode's for answers */
    bool phased;
    cleave_split_mode psm, mode;
    uint32_t dwell;
    bool quiet; /* no log line per request */
    serve_copy_policy copy; /* n > 1: how a prompt's later choices get its cells */
} serve_sched_opts;

typedef struct serve_sched serve_sched;

/* Starts the step loop on its own thread; it alone uses ctx from then on. */
int serve_sched_start(cleave_model *m, cleave_context *ctx, const serve_sched_opts *o, serve_sched **out);
/* Stops the loop: requests not finished end with 503, and no more are
 * taken. serve_sched_free then frees it, once no HTTP thread uses it. */
void serve_sched_stop(serve_sched *s);
void serve_sched_free(serve_sched *s);
/* Cells a slot owns: a prompt must leave room for one generated token. */
uint32_t serve_sched_slot_cells(const serve_sched *s);
/* Queues r[0..n) in order, all or none (the scheduler takes a reference
 * of each). false: the queue has no room for them all. */
bool serve_sched_submit(serve_sched *s, serve_req *const *r, size_t n);
/* The scheduler's lock, under which a request's text and end are read. */
void serve_sched_lock(serve_sched *s);
void serve_sched_unlock(serve_sched *s);
/* Drops a reference (locks itself); the last one frees r. */
void serve_req_release(serve_sched *s, serve_req *r);
/* Marks r cancelled and drops the HTTP side's reference. */
void serve_req_cancel(serve_sched *s, serve_req *r);
/* Slots busy and requests queued now. */
void serve_sched_load(serve_sched *s, int *busy, int *queued);
/* What /metrics reports, read under the scheduler's lock: counters since
 * the start and the gauges of now. A step that mixes prompts and answers
 * shares its time between them by tokens. */
typedef struct serve_stats {
    long long finished_stop, finished_length, finished_error,
        cancelled; /* requests the step loop ended */
    long long refused_4xx,
        refused_5xx; /* requests answered with an error before they were queued */
    long long prompt_tokens, prompt_tokens_cached, generated_tokens;
    long long steps;
    double prefill_tokens, prefill_seconds, decode_tokens, decode_seconds;
    long long split_switches; /* -psm: the gate's switches, and the seconds they took */
    double split_switch_seconds;
    unsigned long long kv_staged_bytes; /* a tiered KV cache's copies from host memory */
    long long kv_cells_used;
    int busy, queued;
} serve_stats;
void serve_sched_stats(serve_sched *s, serve_stats *out);
/* A request refused before it was queued (its HTTP status). */
void serve_sched_note_refused(serve_sched *s, int http_status);

/* One slot as /slots shows it. */
typedef struct serve_slot_info {
    bool busy;
    size_t n_cached;               /* tokens in the slot's cells */
    unsigned long long request_id; /* of its request, while busy */
    size_t n_prompt;
    long long n_gen;
} serve_slot_info;
/* Fills out[0, n_parallel) (the caller's array of that many). */
void serve_sched_slots(serve_sched *s, serve_slot_info *out);
int serve_sched_n_parallel(const serve_sched *s);

/* fn(arg), under the scheduler's lock, whenever requests have news (each
 * step, each end, the stop): how the HTTP side wakes its suspended
 * connections. */
void serve_sched_on_news(serve_sched *s, void (*fn)(void *), void *arg);

/* ---- serve_reply.c: a completion's JSON ------------------------------------ */

#include <time.h>
struct cJSON;
/* The envelope of a response or a stream chunk (model: the id it answers as). */
struct cJSON *serve_reply_envelope(const char *model, const serve_req *r, bool chunk, time_t created);
/* What a choice says: its text (NULL: none in this chunk), finish reason
 * (NULL: running), the role (a chat's first delta), and the logprobs of
 * tokens [lp0, lp1) of the request. */
typedef struct serve_reply_part {
    bool chunk, role;
    const char *text, *finish;
    size_t lp0, lp1;
} serve_reply_part;
/* Adds r's choice to o's "choices". false: out of memory. */
bool serve_reply_choice(struct cJSON *o, const cleave_model *m, const serve_req *r, const serve_reply_part *part);
/* The tokens whose logprobs go with `released` bytes of r's text (the
 * count; the first `from` of them already known to). */
size_t serve_reply_logprobs_upto(const serve_req *r, size_t from, size_t released, bool finished);
/* usage (and llama.cpp's timings) of a response's choices r[0..n). */
void serve_reply_usage(struct cJSON *o, serve_req *const *r, size_t n);

/* ---- serve_endpoints.c: llama-server's side routes' answers ------------------ */

struct cJSON;
/* /tokenize: {"content", "add_special" (false), "parse_special" (true),
 * "with_pieces" (false)} -> {"tokens": [id...]} or [{"id", "piece"}], a
 * piece as a string when it is valid UTF-8, else its byte values. 0 or an
 * HTTP status with err and *param set. */
int serve_tokenize(const cleave_model *m, const char *body, size_t len, struct cJSON **out,
                   char *err, size_t cap, const char **param);
/* /detokenize: {"tokens": [id...]} -> {"content"}; an id outside the vocabulary is 400. */
int serve_detokenize(const cleave_model *m, uint32_t n_vocab, const char *body, size_t len,
                     struct cJSON **out, char *err, size_t cap, const char **param);
struct cJSON *serve_slots_json(const serve_slot_info *info, int n, uint32_t cells);
/* /metrics in Prometheus's text format (malloc'd; NULL: out of memory). */
char *serve_metrics_text(const serve_stats *t, int n_parallel, uint32_t cells);

/* ---- serve_http.c -------------------------------------------------------- */

typedef struct serve_opts {
    const char *host; /* an IPv4 address to listen on */
    int port;         /* 0: any free port (serve_port says which) */
    const char *alias; /* the model's id in /v1/models */
    const char *const *aliases; /* more ids the model answers to and /v1/models lists */
    size_t n_aliases;
    const char *model_path; /* the file (its path and basename are also ids), or NULL */
    bool metrics;           /* GET /metrics (Prometheus text) answers; else 404 */
    bool slots;             /* GET /slots answers; else 404 */
    const char *api_key; /* when set, requests need "Authorization: Bearer KEY" */
    const char *cors;    /* origins (comma-separated, or "*") that browsers may let call and read; NULL: none */
    size_t max_body;   /* bytes */
    int max_connections;       /* open at once (0: 1024) */
    int http_threads;          /* threads polling the connections (0: 4) */
    int max_per_client;        /* open at once from one address (0: 512) */
    double read_timeout;       /* seconds a client has to send a whole request (0: 30; < 0: no bound) */
    cleave_bos bos;    /* text prompts' BOS (token-id prompts are taken as given) */
    serve_defaults defaults;
    serve_sched_opts sched;
} serve_opts;

typedef struct serve serve;

/* ---- serve_watch.c: a bound on the time a request takes to arrive -------- */

typedef struct serve_watch serve_watch;
typedef struct serve_watch_conn serve_watch_conn;
/* Starts the watch (0; 1 when it cannot); limit_s <= 0: no bound, *out NULL. */
int serve_watch_start(double limit_s, serve_watch **out);
void serve_watch_stop(serve_watch *w);
/* A connection on socket fd began reading its first request (NULL: unwatched). */
serve_watch_conn *serve_watch_open(serve_watch *w, int fd);
/* It closes (before its socket does). */
void serve_watch_close(serve_watch *w, serve_watch_conn *k);
/* Its request is in (false), or it waits for its next one (true: the clock restarts). */
void serve_watch_reading(serve_watch *w, serve_watch_conn *k, bool reading);

/* ---- serve_guard.c: who may talk to the server ---------------------------- */

/* A Host header the server answers: any unless it listens on loopback,
 * then only loopback names (localhost, 127.x.x.x, [::1]; a rebound DNS
 * name is refused). */
bool serve_host_allowed(bool loopback, const char *host);
/* A browser's Origin header: none, one --cors lists ("*": any), or on a
 * loopback server a loopback page. */
bool serve_origin_allowed(const char *cors, bool loopback, const char *origin);
/* "Bearer KEY" for this key, compared in constant time. */
bool serve_key_matches(const char *key, const char *auth);

/* Starts listening; 0, or 1 after printing why not. */
int serve_start(cleave_model *m, cleave_context *ctx, const serve_opts *o, serve **out);
int serve_port(const serve *s);
/* Ends open requests (503), closes the listener, frees s. */
void serve_stop(serve *s);

#endif
