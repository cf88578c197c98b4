/* The HTTP side of `cleave serve` (libmicrohttpd, event-driven: a few
 * threads, each polling its share of the connections with epoll): routes,
 * OpenAI's response and error shapes, and server-sent events for stream:
 * true. A handler tokenizes and checks its request and queues it; then
 * the connection is suspended, not waited on, and the step loop's news
 * resumes it to send what is new. A slow or idle client costs a socket,
 * never a thread, so it holds nobody up. Nothing here touches the
 * context. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "serve.h"

#define SERVE_MAX_IDS 32

struct serve {
    cleave_model *m;
    serve_opts o;
    serve_sched *sched;
    struct MHD_Daemon *d;
    int port;
    char alias[256];
    /* the ids the model answers to: the alias, then --alias / --served-model-name's others */
    const char *ids[SERVE_MAX_IDS];
    size_t n_ids;
    char general_name[128]; /* general.name, also an id ("" none) */
    time_t created;
    _Atomic int in_flight; /* queued requests whose answers are not yet sent */
    bool loopback;         /* listening on 127.0.0.0/8 (serve_guard.c) */
    serve_watch *watch;    /* the bound on a request's arrival (serve_watch.c) */
    struct waiter *waiting; /* suspended connections, under the scheduler's lock */
};

/* A suspended connection: resumed at the scheduler's next news. */
typedef struct waiter {
    struct MHD_Connection *c;
    struct waiter *next;
    bool listed;
} waiter;

/* Under the scheduler's lock: c sleeps until its request has news (the
 * lock makes news between the caller's check and here impossible). */
static void sleep_until_news(serve *s, waiter *w, struct MHD_Connection *c) {
    if (!w->listed) w->c = c, w->next = s->waiting, s->waiting = w, w->listed = true;
    MHD_suspend_connection(c);
}

/* Under the scheduler's lock: w goes (its connection or stream is freed). */
static void unlist(serve *s, waiter *w) {
    if (!w->listed) return;
    for (waiter **p = &s->waiting; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->listed = false;
}

/* The scheduler's news (under its lock): every sleeper wakes and looks. */
static void on_news(void *arg) {
    serve *s = arg;
    for (waiter *w = s->waiting, *n; w; w = n) {
        n = w->next;
        w->listed = false;
        MHD_resume_connection(w->c);
    }
    s->waiting = NULL;
}

/* The watch's entry of a connection (NULL: unwatched). */
static serve_watch_conn *watched(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (serve_watch_conn *)ci->socket_context : NULL;
}

/* MHD's news of a connection's socket: watched from its start to its close. */
static void connection_news(void *cls, struct MHD_Connection *c, void **socket_context,
                            enum MHD_ConnectionNotificationCode toe) {
    serve *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? serve_watch_open(s->watch, ci->connect_fd) : NULL;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        serve_watch_close(s->watch, *socket_context);
        *socket_context = NULL;
    }
}

/* A request's body as it arrives, and the request it became. */
typedef struct conn {
    serve_buf body;
    bool too_big;
    bool in_flight; /* counted in serve.in_flight until the connection is done with it */
    serve_req **r;  /* a whole (not streamed) answer being waited for: its choices */
    size_t n_r;
    waiter w;
} conn;

/* An event stream's state, owned by its response. */
typedef struct stream {
    serve *srv;
    serve_req **r; /* the choices */
    size_t n_r;
    struct stream_choice {
        size_t sent, lp_sent; /* bytes of text and tokens' logprobs sent */
        bool role_sent, done;
    } *at;
    struct MHD_Connection *c;
    waiter w;
    serve_buf out; /* formatted, not yet handed to the connection */
    size_t off;
    bool ended;
    time_t created;
} stream;

/* The origin --cors lets read the answer being made on this thread, or
 * NULL: route() sets it for the handler call it makes, whose responses
 * are all queued within that call. */
static _Thread_local const char *cors_origin;

/* Queues res (with CORS headers for an origin --cors allows) and lets go of it. */
static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *res) {
    if (cors_origin) {
        MHD_add_response_header(res, "Access-Control-Allow-Origin", cors_origin);
        MHD_add_response_header(res, "Vary", "Origin");
    }
    enum MHD_Result ret = MHD_queue_response(c, status, res);
    MHD_destroy_response(res);
    return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *text, const char *type) {
    struct MHD_Response *res =
        MHD_create_response_from_buffer(text ? strlen(text) : 0, text ? text : (char *)"", MHD_RESPMEM_MUST_FREE);
    if (!res) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", type);
    return queue(c, status, res);
}

/* Takes o (deletes it); status 500 when it cannot be printed. */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, cJSON *o) {
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!text) return send_text(c, 500, strdup("{\"error\":{\"message\":\"out of memory\"}}"), "application/json");
    return send_text(c, status, text, "application/json");
}

static cJSON *error_json(const char *message, const char *type, const char *param, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param); else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code); else cJSON_AddNullToObject(e, "code");
    return o;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *message,
                                  const char *param, const char *code) {
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                       : status >= 500 ? "server_error" : "invalid_request_error";
    return send_json(c, status, error_json(message, type, param, code));
}

static const char *finish_name(serve_finish f) { return f == SERVE_FINISH_LENGTH ? "length" : "stop"; }

/* ---- streaming ---------------------------------------------------------- */

static bool event(stream *st, cJSON *o) {
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    bool ok = text && serve_buf_add(&st->out, "data: ", 6) && serve_buf_add(&st->out, text, strlen(text)) &&
              serve_buf_add(&st->out, "\n\n", 2);
    free(text);
    return ok;
}

/* Cancels choices r[0..n) (the client is gone) and frees the array. */
static void cancel_all(serve *s, serve_req **r, size_t n) {
    for (size_t i = 0; i < n; i++) serve_req_cancel(s->sched, r[i]);
    free(r);
}

/* Under the scheduler's lock: whether a choice has something to send. */
static bool has_news(const stream *st, size_t i) {
    const serve_req *r = st->r[i];
    const struct stream_choice *a = &st->at[i];
    return !a->done && (r->released > a->sent || r->finish != SERVE_RUNNING || (r->p.chat && !a->role_sent));
}

/* One choice's news as events: the role first (chat), its fresh text with
 * those tokens' logprobs, then its end. Called under the scheduler's lock
 * (the step loop writes the text and the logprobs it reads). */
static bool choice_events(stream *st, size_t i, serve_req **failed) {
    serve *s = st->srv;
    serve_req *r = st->r[i];
    struct stream_choice *a = &st->at[i];
    serve_finish f = r->finish;
    if (f == SERVE_FINISH_ERROR) {
        *failed = r;
        return true;
    }
    bool ok = true;
    if (r->p.chat && !a->role_sent) {
        cJSON *o = serve_reply_envelope(s->alias, r, true, st->created);
        serve_reply_part part = {.chunk = true, .role = true, .text = ""};
        ok = serve_reply_choice(o, s->m, r, &part) ? event(st, o) : (cJSON_Delete(o), false);
        a->role_sent = true;
    }
    serve_buf text = {0};
    size_t fresh = r->released - a->sent;
    size_t lp1 = serve_reply_logprobs_upto(r, a->lp_sent, r->released, f != SERVE_RUNNING);
    if (ok && (fresh || lp1 > a->lp_sent)) {
        ok = serve_buf_add_utf8(&text, fresh ? r->raw.p + a->sent : "", fresh) && serve_buf_add(&text, "", 0);
        cJSON *o = ok ? serve_reply_envelope(s->alias, r, true, st->created) : NULL;
        serve_reply_part part = {.chunk = true, .text = text.p, .lp0 = a->lp_sent, .lp1 = lp1};
        ok = o && serve_reply_choice(o, s->m, r, &part) ? event(st, o) : (cJSON_Delete(o), false);
        a->sent = r->released, a->lp_sent = lp1;
    }
    free(text.p);
    if (ok && f != SERVE_RUNNING) {
        cJSON *o = serve_reply_envelope(s->alias, r, true, st->created);
        serve_reply_part part = {.chunk = true, .finish = finish_name(f), .lp0 = lp1, .lp1 = lp1};
        ok = serve_reply_choice(o, s->m, r, &part) ? event(st, o) : (cJSON_Delete(o), false);
        a->done = true;
    }
    return ok;
}

/* Formats what the choices have released since the last call, and their
 * ends: 1; 0 when there is nothing yet (the connection then sleeps until
 * the scheduler's news); -1 on failure. */
static int stream_fill(stream *st) {
    serve *s = st->srv;
    serve_sched_lock(s->sched);
    bool news = false, all_done = true;
    for (size_t i = 0; i < st->n_r && !news; i++) news = has_news(st, i);
    if (!news) {
        sleep_until_news(s, &st->w, st->c);
        serve_sched_unlock(s->sched);
        return 0;
    }
    serve_req *failed = NULL;
    bool ok = true;
    for (size_t i = 0; i < st->n_r && ok && !failed; i++)
        if (has_news(st, i)) ok = choice_events(st, i, &failed);
    for (size_t i = 0; i < st->n_r; i++) all_done = all_done && st->at[i].done;
    serve_sched_unlock(s->sched);
    if (ok && failed) { /* one choice failed: the answer ends with its error */
        ok = event(st, error_json(failed->err, failed->http_status >= 500 ? "server_error" : "invalid_request_error",
                                  NULL, NULL));
        all_done = true;
    } else if (ok && all_done && st->r[0]->p.include_usage) { /* finished: the step loop no longer writes them */
        cJSON *o = serve_reply_envelope(s->alias, st->r[0], true, st->created);
        cJSON_AddArrayToObject(o, "choices");
        serve_reply_usage(o, st->r, st->n_r);
        ok = event(st, o);
    }
    if (ok && all_done) {
        ok = serve_buf_add(&st->out, "data: [DONE]\n\n", 14);
        st->ended = true;
    }
    return ok ? 1 : -1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream *st = cls;
    while (st->off == st->out.len) {
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = st->out.len = 0;
        int got = stream_fill(st);
        if (got < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (got == 0) return 0; /* suspended: called again once resumed */
    }
    size_t n = st->out.len - st->off < max ? st->out.len - st->off : max;
    memcpy(buf, st->out.p + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

/* The response is done with: a request still running lost its client. */
static void stream_free(void *cls) {
    stream *st = cls;
    serve_sched_lock(st->srv->sched);
    unlist(st->srv, &st->w);
    serve_sched_unlock(st->srv->sched);
    cancel_all(st->srv, st->r, st->n_r);
    free(st->at);
    free(st->out.p);
    free(st);
}

/* ---- completions -------------------------------------------------------- */

/* Whether the client of a request that is not streamed hung up while it
 * waited (a stream finds out when it next writes). */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* A whole answer: the connection sleeps until the scheduler's news, and
 * each time it wakes, the answer goes out if all its choices are done (a
 * client that left ends its requests at the next step). */
static enum MHD_Result await_whole(struct MHD_Connection *c, serve *s, conn *k) {
    serve_req **r = k->r;
    size_t n = k->n_r;
    serve_sched_lock(s->sched);
    bool running = false;
    for (size_t i = 0; i < n; i++) running = running || r[i]->finish == SERVE_RUNNING;
    if (running) {
        if (client_gone(c)) {
            serve_sched_unlock(s->sched);
            k->r = NULL, k->n_r = 0;
            cancel_all(s, r, n);
            return MHD_NO;
        }
        sleep_until_news(s, &k->w, c);
        serve_sched_unlock(s->sched);
        return MHD_YES;
    }
    serve_sched_unlock(s->sched);
    k->r = NULL, k->n_r = 0;
    /* finished: the step loop no longer writes them */
    enum MHD_Result ret = MHD_NO;
    const serve_req *failed = NULL;
    for (size_t i = 0; i < n && !failed; i++) failed = r[i]->finish == SERVE_FINISH_ERROR ? r[i] : NULL;
    cJSON *o = failed ? NULL : serve_reply_envelope(s->alias, r[0], false, time(NULL));
    bool ok = failed || o;
    serve_buf text = {0};
    for (size_t i = 0; i < n && o && ok; i++) {
        text.len = 0;
        serve_reply_part part = {.role = true, .text = "", .finish = finish_name(r[i]->finish), .lp0 = 0,
                                 .lp1 = serve_reply_logprobs_upto(r[i], 0, r[i]->released, true)};
        ok = serve_buf_add(&text, "", 0) && serve_buf_add_utf8(&text, r[i]->raw.p, r[i]->released) &&
             serve_buf_add(&text, "", 0);
        part.text = text.p;
        ok = ok && serve_reply_choice(o, s->m, r[i], &part);
    }
    free(text.p);
    if (failed) {
        ret = send_error(c, (unsigned)failed->http_status, failed->err, NULL, NULL);
    } else if (!ok) {
        cJSON_Delete(o);
        ret = send_error(c, 500, "out of memory for the response", NULL, NULL);
    } else {
        serve_reply_usage(o, r, n);
        ret = send_json(c, 200, o);
    }
    for (size_t i = 0; i < n; i++) serve_req_release(s->sched, r[i]);
    free(r);
    return ret;
}

/* The prompt's tokens (malloc'd; OOM without a message); special tokens
 * in the text are tokens, as llama.cpp's server has it, and BOS as the
 * vocabulary's metadata says unless --bos / --no-bos. */
static cleave_status tokenize(const cleave_model *m, cleave_bos bos, bool chat, const char *text, int32_t **out,
                              size_t *n) {
    size_t len = strlen(text), cap = len + 8;
    *out = NULL, *n = 0;
    for (int attempt = 0; attempt < 2; attempt++) { /* the second with the room the first said it needs */
        free(*out);
        if (!(*out = malloc(cap * sizeof **out))) return CLEAVE_ERR_OOM;
        /* a chat's BOS once, where its template writes one too */
        cleave_status st = chat ? cleave_tokenize_chat(m, text, len, bos, *out, cap, n)
                                : cleave_tokenize_prompt(m, text, len, bos, true, *out, cap, n);
        if (st != CLEAVE_ERR_INVALID_ARG || *n <= cap) return st;
        cap = *n;
    }
    return CLEAVE_ERR_INTERNAL;
}

/* An error for a request of the completion routes, counted for /metrics. */
static enum MHD_Result refuse(struct MHD_Connection *c, serve *s, unsigned status,
                              const char *message, const char *param, const char *code) {
    serve_sched_note_refused(s->sched, (int)status);
    return send_error(c, status, message, param, code);
}

static const char *base_name(const char *path) {
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* Whether a request's model names this one: an id, the file as given or
 * its basename, or general.name. */
static bool model_known(const serve *s, const char *name) {
    for (size_t i = 0; i < s->n_ids; i++)
        if (!strcmp(name, s->ids[i])) return true;
    if (s->o.model_path &&
        (!strcmp(name, s->o.model_path) || !strcmp(name, base_name(s->o.model_path))))
        return true;
    return s->general_name[0] && !strcmp(name, s->general_name);
}

static enum MHD_Result unknown_model(struct MHD_Connection *c, serve *s, const char *name,
                                     bool count) {
    char msg[600];
    snprintf(msg, sizeof msg,
             "The model `%.200s` does not exist: this server serves `%.200s` (GET /v1/models lists "
             "its ids)",
             name, s->alias);
    if (count) serve_sched_note_refused(s->sched, 404);
    return send_error(c, 404, msg, "model", "model_not_found");
}

/* Frees choices r[0..n) that were never queued. */
static void free_unqueued(serve_req **r, size_t n) {
    for (size_t i = 0; r && i < n; i++)
        if (r[i]) serve_params_free(&r[i]->p), free(r[i]->prompt), free(r[i]);
    free(r);
}

/* The choices of a request: n for each prompt, each its own sequence; a
 * prompt's later choices copy the first's cells (serve_sched.c). 0, or
 * the HTTP status of the failure with err (and an OpenAI code, and the
 * field when it is not the prompt's) set. */
static int make_choices(serve *s, serve_params *p, serve_req ***out, size_t *n_out, char *err, size_t cap,
                        const char **code, const char **param) {
    size_t n = p->n_prompts * (size_t)p->n;
    serve_req **r = calloc(n, sizeof *r);
    *out = r, *n_out = n;
    if (!r) return snprintf(err, cap, "out of memory"), 500;
    if (n > (size_t)s->o.sched.queue_max) {
        snprintf(err, cap, "%zu choices (n times the prompts) are more than the server's queue holds (%d)", n,
                 s->o.sched.queue_max);
        return 400;
    }
    uint32_t cells = serve_sched_slot_cells(s->sched);
    for (size_t i = 0; i < n; i++) {
        if (!(r[i] = calloc(1, sizeof *r[i])) || !serve_params_clone(&r[i]->p, p))
            return free(r[i]), r[i] = NULL, snprintf(err, cap, "out of memory"), 500;
        serve_req *q = r[i];
        q->index = (int)i, q->lead = i % (size_t)p->n ? (int)(i - i % (size_t)p->n) : -1;
        /* choices after a prompt's first vary their seed, so they differ */
        q->p.sp.seed += (uint64_t)(i % (size_t)p->n);
        const serve_prompt *pr = &p->prompts[i / (size_t)p->n];
        const char *which = p->n_prompts > 1 ? "a prompt" : "the prompt";
        if (q->lead >= 0) {
            const serve_req *lead = r[q->lead];
            if (!(q->prompt = malloc(lead->n_prompt * sizeof *q->prompt)))
                return snprintf(err, cap, "out of memory"), 500;
            memcpy(q->prompt, lead->prompt, lead->n_prompt * sizeof *q->prompt);
            q->n_prompt = lead->n_prompt;
            continue;
        }
        if (pr->text) {
            cleave_status st = tokenize(s->m, s->o.bos, p->chat, pr->text, &q->prompt, &q->n_prompt);
            if (st) {
                snprintf(err, cap, "tokenizing %s: %s", which, st == CLEAVE_ERR_OOM ? "out of memory" : cleave_last_error());
                return st == CLEAVE_ERR_OOM ? 500 : 400;
            }
        } else if (!(q->prompt = malloc(pr->n_tokens * sizeof *q->prompt))) {
            return snprintf(err, cap, "out of memory"), 500;
        } else {
            memcpy(q->prompt, pr->tokens, pr->n_tokens * sizeof *q->prompt);
            q->n_prompt = pr->n_tokens;
        }
        if (q->n_prompt == 0) {
            snprintf(err, cap, "%s is empty and no BOS is added (%s)", which,
                     cleave_token_bos(s->m) < 0 ? "the model has none" : "the vocabulary's metadata says not to");
            return 400;
        }
        /* an explicit max_tokens that cannot fit is refused (as vLLM does);
         * without one the answer runs to the slot's end */
        bool over = p->max_tokens_given && p->max_tokens > 0 && q->n_prompt + (size_t)p->max_tokens > cells;
        if (q->n_prompt >= cells || over) {
            if (!over)
                snprintf(err, cap,
                         "This model's maximum context length is %u tokens. However, %s has %zu tokens (a "
                         "slot holds prompt and answer: start the server with a larger -c or "
                         "--max-model-len, or a smaller -np)",
                         cells, which, q->n_prompt);
            else
                snprintf(err, cap,
                         "This model's maximum context length is %u tokens. However, you requested %lld "
                         "tokens (%zu in %s, %lld in the completion). Please reduce the length of the "
                         "prompt or completion.",
                         cells, (long long)q->n_prompt + p->max_tokens, q->n_prompt, which, p->max_tokens);
            *code = "context_length_exceeded";
            *param = q->n_prompt < cells ? "max_tokens" : NULL;
            return 400;
        }
    }
    return 0;
}

static enum MHD_Result completion(struct MHD_Connection *c, serve *s, conn *k, bool chat) {
    char err[512];
    const char *param;
    serve_params p;
    int bad = serve_parse(k->body.p ? k->body.p : "", k->body.len, chat, &s->o.defaults, &p, err, sizeof err, &param);
    if (bad) return refuse(c, s, (unsigned)bad, err, param, NULL);
    if (p.model && !model_known(s, p.model)) {
        enum MHD_Result ret = unknown_model(c, s, p.model, true);
        serve_params_free(&p);
        return ret;
    }
    serve_req **r;
    size_t n;
    const char *code = NULL, *field = NULL;
    bad = make_choices(s, &p, &r, &n, err, sizeof err, &code, &field);
    bool stream_it = p.stream;
    serve_params_free(&p);
    if (bad) {
        free_unqueued(r, n);
        return refuse(c, s, (unsigned)bad, err, field ? field : bad == 400 ? (chat ? "messages" : "prompt") : NULL,
                      code);
    }
    for (size_t i = 0; i < n; i++) r[i]->refs = 1;
    if (!serve_sched_submit(s->sched, r, n)) {
        for (size_t i = 0; i < n; i++) serve_req_release(s->sched, r[i]);
        free(r);
        return refuse(c, s, 503, "the server is busy: every slot and queue place is taken; try again", NULL, NULL);
    }
    s->in_flight++;
    k->in_flight = true;
    if (!stream_it) {
        k->r = r, k->n_r = n;
        return await_whole(c, s, k);
    }
    stream *st = calloc(1, sizeof *st);
    struct stream_choice *at = calloc(n, sizeof *at);
    struct MHD_Response *res =
        st && at ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free) : NULL;
    if (!res) {
        free(st), free(at);
        cancel_all(s, r, n);
        return send_error(c, 500, "out of memory", NULL, NULL);
    }
    st->srv = s, st->r = r, st->n_r = n, st->at = at, st->c = c, st->created = time(NULL);
    MHD_add_response_header(res, "Content-Type", "text/event-stream");
    MHD_add_response_header(res, "Cache-Control", "no-cache");
    return queue(c, 200, res);
}

/* ---- routes -------------------------------------------------------------- */

static cJSON *model_object(const serve *s, const char *id) {
    cleave_model_desc d;
    cleave_model_describe(s->m, &d);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "cleave");
    cJSON_AddNumberToObject(m, "max_model_len", serve_sched_slot_cells(s->sched));
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", d.arch);
    cJSON_AddNumberToObject(meta, "n_vocab", d.n_vocab);
    cJSON_AddNumberToObject(meta, "n_ctx_train", d.n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_params", (double)d.n_params);
    cJSON_AddNumberToObject(meta, "n_ctx_slot", serve_sched_slot_cells(s->sched));
    return m;
}

/* GET /v1/models: every id; GET /v1/models/{id}: that one (the openai
 * client's models.retrieve), by any name the model answers to. */
static enum MHD_Result models(struct MHD_Connection *c, serve *s, const char *id) {
    if (id)
        return model_known(s, id) ? send_json(c, 200, model_object(s, id))
                                  : unknown_model(c, s, id, false);
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    for (size_t i = 0; i < s->n_ids; i++)
        cJSON_AddItemToArray(data, model_object(s, s->ids[i]));
    return send_json(c, 200, o);
}

/* The chat template /props shows: its Jinja source (the model's or
 * --chat-template-file's), else the built-in family's description; ""
 * when none. */
static const char *props_chat_template(const serve *s) {
    const cleave_chat_template *t = s->o.defaults.chat_template;
    const char *src = t ? cleave_chat_template_source(t) : NULL;
    return src ? src : t ? cleave_chat_template_describe(t) : "";
}

#ifndef CLEAVE_BUILD_COMMIT
#define CLEAVE_BUILD_COMMIT ""
#endif

static enum MHD_Result props(struct MHD_Connection *c, serve *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_path", s->o.model_path ? s->o.model_path : "");
    cJSON_AddStringToObject(o, "model_alias", s->alias);
    cJSON *ids = cJSON_AddArrayToObject(o, "model_ids");
    for (size_t i = 0; i < s->n_ids; i++)
        cJSON_AddItemToArray(ids, cJSON_CreateString(s->ids[i]));
    cJSON_AddNumberToObject(o, "total_slots", serve_sched_n_parallel(s->sched));
    cJSON *g = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(g, "n_ctx", serve_sched_slot_cells(s->sched));
    cJSON *params = cJSON_AddObjectToObject(g, "params");
    cJSON_AddNumberToObject(params, "n_predict", (double)s->o.defaults.max_tokens_cap);
    cJSON_AddNumberToObject(params, "max_tokens_completion",
                            (double)s->o.defaults.max_tokens_completion);
    cJSON_AddStringToObject(o, "chat_template", props_chat_template(s));
    if (s->o.defaults.chat_template) /* which it is: the model's, a file's, or a built-in family */
        cJSON_AddStringToObject(o, "chat_template_source", cleave_chat_template_describe(s->o.defaults.chat_template));
    char build[96];
    snprintf(build, sizeof build, "cleave%s%s", CLEAVE_BUILD_COMMIT[0] ? "-" : "",
             CLEAVE_BUILD_COMMIT);
    cJSON_AddStringToObject(o, "build_info", build);
    if (CLEAVE_BUILD_COMMIT[0])
        cJSON_AddStringToObject(o, "build_commit", CLEAVE_BUILD_COMMIT);
    else
        cJSON_AddNullToObject(o, "build_commit");
    cJSON *mod = cJSON_AddObjectToObject(o, "modalities");
    cJSON_AddBoolToObject(mod, "vision", false);
    cJSON_AddBoolToObject(mod, "audio", false);
    return send_json(c, 200, o);
}

static enum MHD_Result slots(struct MHD_Connection *c, serve *s) {
    if (!s->o.slots)
        return send_error(c, 404, "/slots is off: start the server with --slots to enable it", NULL,
                          "not_enabled");
    int n = serve_sched_n_parallel(s->sched);
    serve_slot_info *info = calloc((size_t)n, sizeof *info);
    if (!info) return send_error(c, 500, "out of memory", NULL, NULL);
    serve_sched_slots(s->sched, info);
    cJSON *a = serve_slots_json(info, n, serve_sched_slot_cells(s->sched));
    free(info);
    return send_json(c, 200, a);
}

static enum MHD_Result metrics(struct MHD_Connection *c, serve *s) {
    if (!s->o.metrics)
        return send_error(c, 404, "/metrics is off: start the server with --metrics to enable it",
                          NULL, "not_enabled");
    serve_stats t;
    serve_sched_stats(s->sched, &t);
    char *text =
        serve_metrics_text(&t, serve_sched_n_parallel(s->sched), serve_sched_slot_cells(s->sched));
    if (!text) return send_error(c, 500, "out of memory", NULL, NULL);
    return send_text(c, 200, text, "text/plain; version=0.0.4; charset=utf-8");
}

/* /tokenize and /detokenize (serve_endpoints.c). */
static enum MHD_Result tokens(struct MHD_Connection *c, serve *s, conn *k, bool detok) {
    char err[512];
    const char *param;
    cJSON *out;
    cleave_model_desc d;
    cleave_model_describe(s->m, &d);
    const char *body = k->body.p ? k->body.p : "";
    int st =
        detok ? serve_detokenize(s->m, d.n_vocab, body, k->body.len, &out, err, sizeof err, &param)
              : serve_tokenize(s->m, body, k->body.len, &out, err, sizeof err, &param);
    return st ? send_error(c, (unsigned)st, err, param, NULL) : send_json(c, 200, out);
}

/* /apply-template: a chat's messages as the prompt text the chat path makes. */
static enum MHD_Result apply_template(struct MHD_Connection *c, serve *s, conn *k) {
    char err[512];
    const char *param;
    serve_params p;
    int bad = serve_parse(k->body.p ? k->body.p : "", k->body.len, true, &s->o.defaults, &p, err,
                          sizeof err, &param);
    if (bad) return send_error(c, (unsigned)bad, err, param, NULL);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", p.n_prompts && p.prompts[0].text ? p.prompts[0].text : "");
    serve_params_free(&p);
    return send_json(c, 200, o);
}

static enum MHD_Result health(struct MHD_Connection *c, serve *s) {
    int busy, queued;
    serve_sched_load(s->sched, &busy, &queued);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddNumberToObject(o, "slots_idle", s->o.sched.n_parallel - busy);
    cJSON_AddNumberToObject(o, "slots_processing", busy);
    cJSON_AddNumberToObject(o, "requests_queued", queued);
    return send_json(c, 200, o);
}

static bool is(const char *url, const char *path) {
    return strcmp(url, path) == 0 || (strncmp(url, "/v1", 3) == 0 && strcmp(url + 3, path) == 0);
}

static enum MHD_Result route_allowed(struct MHD_Connection *c, serve *s, conn *k, const char *url,
                                     const char *method, bool get, bool post) {
    if (strcmp(method, "OPTIONS") == 0) { /* a browser's preflight */
        struct MHD_Response *res = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!res) return MHD_NO;
        MHD_add_response_header(res, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(res, "Access-Control-Allow-Headers", "Content-Type, Authorization");
        return queue(c, 204, res);
    }
    if (is(url, "/health")) return get ? health(c, s) : send_error(c, 405, "use GET", NULL, NULL);
    if (s->o.api_key &&
        !serve_key_matches(s->o.api_key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")))
        return send_error(c, 401, "invalid or missing API key (Authorization: Bearer KEY)", NULL, "invalid_api_key");
    bool chat = is(url, "/chat/completions");
    if (chat || is(url, "/completions")) {
        if (!post) return send_error(c, 405, "use POST", NULL, NULL);
        if (k->too_big) {
            char msg[128];
            snprintf(msg, sizeof msg, "the body is over %zu bytes", s->o.max_body);
            return send_error(c, 413, msg, NULL, NULL);
        }
        return completion(c, s, k, chat);
    }
    if (is(url, "/models"))
        return get ? models(c, s, NULL) : send_error(c, 405, "use GET", NULL, NULL);
    const char *id = !strncmp(url, "/v1/models/", 11) ? url + 11
                     : !strncmp(url, "/models/", 8)   ? url + 8
                                                      : NULL;
    if (id) return get ? models(c, s, id) : send_error(c, 405, "use GET", NULL, NULL);
    if (is(url, "/embeddings") || is(url, "/embedding"))
        return send_error(
            c, 404,
            "cleave does not compute embeddings: it keeps no pooled hidden state of a prompt, only "
            "the next token's logits",
            NULL, "embeddings_not_supported");
    bool post_route = is(url, "/tokenize") || is(url, "/detokenize") || is(url, "/apply-template");
    bool get_route = is(url, "/props") || is(url, "/slots") || is(url, "/metrics");
    if (post_route || get_route) {
        if (get_route && !get) return send_error(c, 405, "use GET", NULL, NULL);
        if (post_route && !post) return send_error(c, 405, "use POST", NULL, NULL);
        if (post_route && k->too_big)
            return send_error(c, 413, "the body is too large", NULL, NULL);
        if (is(url, "/tokenize")) return tokens(c, s, k, false);
        if (is(url, "/detokenize")) return tokens(c, s, k, true);
        if (is(url, "/apply-template")) return apply_template(c, s, k);
        if (is(url, "/props")) return props(c, s);
        if (is(url, "/slots")) return slots(c, s);
        return metrics(c, s);
    }
    char msg[600];
    snprintf(msg, sizeof msg,
             "no route %s %.200s (the routes: POST /v1/completions, /v1/chat/completions, "
             "/tokenize, /detokenize, "
             "/apply-template; GET /v1/models, /v1/models/{id}, /health, /props, /slots (--slots), "
             "/metrics (--metrics))",
             method, url);
    return send_error(c, 404, msg, NULL, NULL);
}

/* The guard (serve_guard.c) before any route: Host, Origin, CORS. */
static enum MHD_Result route(struct MHD_Connection *c, serve *s, conn *k, const char *url, const char *method) {
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!serve_host_allowed(s->loopback, host)) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "Host '%.200s' is not this server's: it listens on a loopback address and answers loopback "
                 "names only (a page's DNS rebinding would look like this)", host);
        return send_error(c, 403, msg, NULL, "forbidden_host");
    }
    if (!serve_origin_allowed(s->o.cors, s->loopback, origin)) {
        char msg[400];
        snprintf(msg, sizeof msg, "Origin '%.200s' may not call this server (--cors lists the origins that may)",
                 origin);
        return send_error(c, 403, msg, NULL, "forbidden_origin");
    }
    /* CORS headers for the origins --cors lists, not for loopback pages (same-site to a local UI) */
    cors_origin = origin && s->o.cors && serve_origin_allowed(s->o.cors, false, origin) ? origin : NULL;
    enum MHD_Result ret = route_allowed(c, s, k, url, method, get, post);
    cors_origin = NULL;
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    serve *s = cls;
    conn *k = *con_cls;
    if (!k) { /* the headers: a body may follow */
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        return MHD_YES;
    }
    if (k->r) return await_whole(c, s, k); /* woken: is the answer done? */
    if (*upload_size) {
        if (!k->too_big && k->body.len + *upload_size > s->o.max_body) k->too_big = true;
        if (!k->too_big && !serve_buf_add(&k->body, upload, *upload_size)) k->too_big = true;
        *upload_size = 0;
        return MHD_YES;
    }
    serve_watch_reading(s->watch, watched(c), false); /* the request is in: no longer bounded */
    return route(c, s, k, url, method);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    serve *s = cls;
    conn *k = *con_cls;
    serve_watch_reading(s->watch, watched(c), true); /* a kept-alive connection's next request */
    if (k) {
        serve_sched_lock(s->sched);
        unlist(s, &k->w);
        serve_sched_unlock(s->sched);
        if (k->r) cancel_all(s, k->r, k->n_r), k->r = NULL; /* ended while waiting (the server stops) */
    }
    if (k && k->in_flight) s->in_flight--;
    if (k) free(k->body.p);
    free(k);
    *con_cls = NULL;
}

int serve_start(cleave_model *m, cleave_context *ctx, const serve_opts *o, serve **out) {
    *out = NULL;
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)o->port);
    if (o->port < 0 || o->port > 65535 || inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        fprintf(stderr, "cleave serve: --host %s --port %d is not an IPv4 address and port\n", o->host, o->port);
        return 1;
    }
    serve *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "cleave serve: out of memory\n");
        return 1;
    }
    s->m = m, s->o = *o, s->created = time(NULL);
    s->loopback = (ntohl(addr.sin_addr.s_addr) >> 24) == 127;
    snprintf(s->alias, sizeof s->alias, "%s",
             o->alias        ? o->alias
             : o->model_path ? base_name(o->model_path)
                             : "model");
    s->ids[s->n_ids++] = s->alias;
    for (size_t i = 0; i < o->n_aliases && s->n_ids < SERVE_MAX_IDS; i++) {
        bool seen = false;
        for (size_t j = 0; j < s->n_ids; j++)
            seen |= !strcmp(s->ids[j], o->aliases[i]);
        if (!seen) s->ids[s->n_ids++] = o->aliases[i];
    }
    cleave_model_desc md;
    if (!cleave_model_describe(m, &md))
        snprintf(s->general_name, sizeof s->general_name, "%s", md.name);
    /* event-driven: a few threads poll every connection; slow clients are
     * bounded by the watch, the counts and the idle timeout */
    unsigned max_conn = o->max_connections > 0 ? (unsigned)o->max_connections : 1024;
    unsigned per_client = o->max_per_client > 0 ? (unsigned)o->max_per_client : 512;
    double read_s = o->read_timeout == 0 ? 30.0 : o->read_timeout;
    if (serve_watch_start(read_s, &s->watch)) {
        fprintf(stderr, "cleave serve: cannot start the request-time watch\n");
        free(s);
        return 1;
    }
    if (serve_sched_start(m, ctx, &o->sched, &s->sched)) {
        serve_watch_stop(s->watch);
        free(s);
        return 1;
    }
    serve_sched_on_news(s->sched, on_news, s);
    unsigned threads = o->http_threads > 0 ? (unsigned)o->http_threads : 4;
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_ALLOW_SUSPEND_RESUME, 0,
                            NULL, NULL, handle, s, MHD_OPTION_THREAD_POOL_SIZE, threads,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, max_conn,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_client > max_conn ? max_conn : per_client,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, connection_news, s, MHD_OPTION_END);
    if (!s->d) {
        fprintf(stderr, "cleave serve: cannot listen on %s:%d (in use, or not this host's address?)\n", o->host, o->port);
        serve_sched_free(s->sched);
        serve_watch_stop(s->watch);
        free(s);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    *out = s;
    return 0;
}

int serve_port(const serve *s) { return s->port; }

void serve_stop(serve *s) {
    if (!s) return;
    serve_sched_stop(s->sched); /* open requests end (503) and their threads answer */
    for (int i = 0; i < 500 && s->in_flight > 0; i++) nanosleep(&(struct timespec){0, 10000000L}, NULL);
    MHD_stop_daemon(s->d); /* closes what is left: idle keep-alive connections */
    serve_sched_free(s->sched);
    serve_watch_stop(s->watch); /* after the daemon: every connection has closed */
    free(s);
}
