/* `cleave run -cnv` / `cleave chat`: a conversation in the model's chat
 * template. Each turn renders the whole conversation, tokenizes it, keeps
 * the part of the KV cache that equals its start and decodes only the
 * rest, then streams the answer, which joins the conversation. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_render.h"
#include "run.h"

/* Ctrl-C: set by the handler; an answer in progress stops at its next
 * token, a prompt being read ends the conversation. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct {
    cleave_chat_message *msgs;
    char **owned; /* the texts msgs point to that this conversation allocated */
    size_t n, cap;
    int32_t *cached; /* the tokens in the KV cache, positions 0.. */
    size_t n_cached, cap_cached;
} conversation;

static bool add_message(conversation *c, const char *role, char *text) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        cleave_chat_message *m = realloc(c->msgs, cap * sizeof *m);
        if (m) c->msgs = m;
        char **o = m ? realloc(c->owned, cap * sizeof *o) : NULL;
        if (o) c->owned = o;
        if (!m || !o) {
            free(text);
            return false;
        }
        c->cap = cap;
    }
    c->msgs[c->n] = (cleave_chat_message){role, text};
    c->owned[c->n++] = text;
    return true;
}

static bool remember(conversation *c, int32_t tok) {
    if (c->n_cached == c->cap_cached) {
        size_t cap = c->cap_cached ? c->cap_cached * 2 : 256;
        int32_t *t = realloc(c->cached, cap * sizeof *t);
        if (!t) return false;
        c->cached = t, c->cap_cached = cap;
    }
    c->cached[c->n_cached++] = tok;
    return true;
}

/* A line of stdin without its line end (free it); NULL at the end of
 * input or on Ctrl-C. */
static char *read_line(bool tty) {
    if (tty) {
        fputs("> ", stdout);
        fflush(stdout);
    }
    if (interrupted) return NULL; /* Ctrl-C as the answer ended */
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0 || interrupted) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    return line;
}

/* The rendered conversation's tokens (free them), NULL after a message. */
static int32_t *tokenize_turn(cleave_model *m, const run_opts *o, const conversation *c,
                              size_t *n) {
    size_t len;
    char *text = chat_render(o->tmpl, c->msgs, c->n, true, &len);
    if (!text) {
        fprintf(stderr, "cleave %s: rendering the chat: %s\n", o->cmd, cleave_last_error());
        return NULL;
    }
    size_t cap = len + 8;
    int32_t *toks = malloc(cap * sizeof *toks);
    cleave_status st =
        toks ? cleave_tokenize_chat(m, text, len, o->bos, toks, cap, n) : CLEAVE_ERR_OOM;
    free(text);
    if (st) {
        if (toks)
            cli_fail("tokenizing the chat", st);
        else
            fprintf(stderr, "cleave %s: out of memory for the chat's tokens\n", o->cmd);
        free(toks);
        return NULL;
    }
    return toks;
}

/* One answer: the turn's tokens into the cache (only those past the
 * cached prefix), then tokens streamed until end-of-generation, -n, a full
 * context or Ctrl-C. The answer's text into *answer (free it); 0, or the
 * exit code after a message. */
static int answer_turn(cleave_model *m, cleave_context *ctx, cleave_sampler *smp, const run_opts *o,
                       conversation *c, int turn, char **answer) {
    *answer = NULL;
    size_t n;
    int32_t *toks = tokenize_turn(m, o, c, &n);
    if (!toks) return 1;
    uint32_t n_ctx = cleave_context_n_ctx(ctx);
    int rc = 1;
    if (n >= n_ctx) {
        fprintf(stderr,
                "cleave %s: the conversation has %zu tokens and the context holds %u; use a larger "
                "-c\n",
                o->cmd, n, n_ctx);
        goto out;
    }
    /* the cache's common prefix with this turn's text stays; at least one
     * token is decoded, for the logits the answer starts from */
    size_t keep = 0;
    while (keep < c->n_cached && keep < n && c->cached[keep] == toks[keep])
        keep++;
    if (keep == n) keep--;
    cleave_status st = cleave_kv_seq_rm(ctx, 0, (int32_t)keep, -1);
    if (!st) st = cleave_decode(ctx, toks + keep, n - keep, (int32_t)keep, 0, false);
    if (st) {
        rc = cli_fail("processing the chat", st);
        goto out;
    }
    c->n_cached = keep;
    for (size_t i = keep; i < n; i++) {
        if (!remember(c, toks[i])) goto oom;
        cleave_sampler_accept(smp, toks[i]);
    }
    fprintf(stderr, "cleave: turn %d: %zu prompt tokens, %zu reused from the cache, %zu decoded\n",
            turn, n, keep, n - keep);

    size_t len = 0, cap = 256;
    char *text = malloc(cap);
    if (!text) goto oom;
    text[0] = '\0';
    int32_t prev = toks[n - 1], tok, pos = (int32_t)n;
    long long generated = 0;
    if ((st = cleave_sampler_sample(smp, cleave_get_logits(ctx, -1), &tok))) {
        free(text);
        rc = cli_fail("sampling", st);
        goto out;
    }
    while (o->n_predict < 0 || generated < o->n_predict) {
        if (interrupted) { /* Ctrl-C: this answer ends here, the conversation goes on */
            interrupted = 0;
            fprintf(stderr, "\ncleave: answer stopped\n");
            break;
        }
        if (!o->ignore_eos && cleave_token_is_eog(m, tok)) break;
        char piece[256];
        size_t k = 0;
        if (cleave_token_to_piece(m, prev, tok, piece, sizeof piece, &k) == CLEAVE_OK) {
            fwrite(piece, 1, k, stdout);
            fflush(stdout);
            if (len + k + 1 > cap) {
                char *t = realloc(text, cap = (cap + k) * 2);
                if (!t) {
                    free(text);
                    goto oom;
                }
                text = t;
            }
            memcpy(text + len, piece, k);
            text[len += k] = '\0';
        }
        generated++;
        if ((uint32_t)pos >= n_ctx) {
            fprintf(stderr, "\ncleave: context of %u tokens is full; the answer stops here\n",
                    n_ctx);
            break;
        }
        int32_t at = pos++, seq0 = 0, next;
        if ((st = cleave_decode_batch_sample(ctx, &tok, &at, &seq0, 1, &smp, &next)) ||
            (next == CLEAVE_TOKEN_SAMPLE_ON_HOST &&
             (st = cleave_sampler_sample(smp, cleave_get_logits(ctx, -1), &next)))) {
            free(text);
            rc = cli_fail("generation", st);
            goto out;
        }
        if (!remember(c, tok)) {
            free(text);
            goto oom;
        }
        prev = tok;
        tok = next;
    }
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "cleave: turn %d: %lld tokens generated\n", turn, generated);
    *answer = text;
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "cleave %s: out of memory\n", o->cmd);
out:
    free(toks);
    return rc;
}

int run_conversation(cleave_model *m, cleave_context *ctx, cleave_sampler *smp, const run_opts *o) {
    conversation c;
    memset(&c, 0, sizeof c);
    cleave_context_set_progress(ctx, NULL, NULL); /* the answer follows at once */
    /* no SA_RESTART: Ctrl-C at the prompt ends getline's wait */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    bool tty = isatty(STDIN_FILENO) != 0;
    int rc = 0;
    char *sys = o->system ? strdup(o->system) : NULL;
    if (o->system && (!sys || !add_message(&c, "system", sys))) rc = 1;
    for (int turn = 1; !rc; turn++) {
        char *line = NULL;
        if (turn == 1 && o->prompt && o->prompt[0])
            line = strdup(o->prompt); /* -p: the first message, escapes done */
        else if (!(line = read_line(tty)))
            break; /* the end of input, or Ctrl-C at the prompt */
        else if (o->escape)
            cli_unescape(line);
        if (!line) {
            rc = 1;
            break;
        }
        if (!strcmp(line, "/exit")) {
            free(line);
            break;
        }
        if (!line[0]) { /* nothing said: ask again */
            free(line);
            turn--;
            continue;
        }
        char *answer;
        if (!add_message(&c, "user", line) ||
            (rc = answer_turn(m, ctx, smp, o, &c, turn, &answer))) {
            rc = rc ? rc : 1;
            break;
        }
        if (!add_message(&c, "assistant", answer)) rc = 1;
    }
    if (interrupted) fprintf(stderr, "\n");
    sigaction(SIGINT, &old, NULL);
    for (size_t i = 0; i < c.n; i++)
        free(c.owned[i]);
    free(c.msgs);
    free(c.owned);
    free(c.cached);
    return rc;
}
