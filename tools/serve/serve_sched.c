/* The step loop of `cleave serve`: one thread owns the context and, each
 * step, runs one cleave_decode_batch_sample holding a token of every generating
 * slot and as much of the waiting prompts as the step's budget allows
 * (continuous batching: a long prompt never stalls the others' tokens for
 * more than one step's budget). HTTP threads only queue requests and read
 * what a request has released, under one mutex. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct slot {
    serve_req *r;     /* NULL: idle */
    int32_t *cache;   /* the tokens in this sequence's cells, by position */
    size_t n_cache;
    size_t n_done;    /* prompt tokens in the cache */
    cleave_sampler *smp;
    int32_t last;     /* the token to feed next (generating) */
    int32_t prev;     /* the token before the next piece (a leading space after BOS) */
    double last_used;
    size_t shown_cache; /* n_cache as of the last step, under mu: what /slots and /metrics read */
    int32_t row;      /* this step: the batch row whose logits it samples, or -1 */
    int32_t token;    /* this step: what was sampled */
    cleave_status sampled;
    char err[200];    /* why sampling failed (the message is the sampling thread's) */
    serve_logprob lp; /* this step, when its request asks for logprobs */
} slot;

struct serve_sched {
    cleave_model *m;
    cleave_context *ctx;
    serve_sched_opts o;
    uint32_t slot_cells, n_vocab;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the loop: a request arrived, or stop */
    pthread_cond_t news; /* HTTP threads: text released or a request ended */
    void (*on_news)(void *); /* and the HTTP side's hook (its suspended connections), under mu */
    void *on_news_arg;
    bool stopping;
    serve_req **queue; /* a ring of o.queue_max */
    size_t q_head, q_len;
    slot *slots;
    int32_t *tok, *pos, *sid;
    bool *in_prefill;
    cleave_psm_gate gate;
    bool switching;
    serve_pool *pool; /* samples the slots of a step in parallel */
    cleave_sampler **row_smp; /* the step's rows' samplers (cleave_decode_batch_sample) */
    int32_t *row_tok;         /* and the tokens drawn where the logits are */
    slot **to_sample;
    int n_to_sample;
    /* where the steps' time went, said at stop */
    long long n_steps, n_step_tokens;
    double t_decode, t_sample, t_steps;
    /* n > 1: a copy of a sequence's cells (a state blob), grown as needed */
    void *copy_buf;
    size_t copy_cap;
    double copied_cells, copy_seconds; /* the copies made, for the copy's rate */
    long long copies, copies_declined;
    unsigned long long next_id;
    serve_stats stats; /* under mu: /metrics's counters (its gauges are made when read) */
};

uint32_t serve_sched_slot_cells(const serve_sched *s) { return s->slot_cells; }

/* Under mu: requests have news (text released, an end). */
static void news_locked(serve_sched *s) {
    pthread_cond_broadcast(&s->news);
    if (s->on_news) s->on_news(s->on_news_arg);
}

void serve_sched_on_news(serve_sched *s, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&s->mu);
    s->on_news = fn, s->on_news_arg = arg;
    pthread_mutex_unlock(&s->mu);
}

void serve_sched_lock(serve_sched *s) { pthread_mutex_lock(&s->mu); }
void serve_sched_unlock(serve_sched *s) { pthread_mutex_unlock(&s->mu); }

static void req_free(serve_req *r) {
    serve_params_free(&r->p);
    free(r->prompt);
    free(r->raw.p);
    free(r->lp);
    free(r);
}

/* With the lock held. */
static void release_locked(serve_req *r) {
    if (--r->refs == 0) req_free(r);
}

void serve_req_release(serve_sched *s, serve_req *r) {
    pthread_mutex_lock(&s->mu);
    release_locked(r);
    pthread_mutex_unlock(&s->mu);
}

void serve_req_cancel(serve_sched *s, serve_req *r) {
    pthread_mutex_lock(&s->mu);
    r->cancelled = true;
    release_locked(r);
    pthread_mutex_unlock(&s->mu);
}

/* With the lock held: queued requests whose clients left give their
 * places back (the order of the rest kept), so a place a leaver held is
 * free at once, not only when the step loop next admits. */
static void drop_cancelled_locked(serve_sched *s) {
    size_t q = (size_t)s->o.queue_max, kept = 0;
    for (size_t i = 0; i < s->q_len; i++) {
        serve_req *r = s->queue[(s->q_head + i) % q];
        if (r->cancelled) release_locked(r);
        else s->queue[(s->q_head + kept++) % q] = r;
    }
    s->q_len = kept;
}

bool serve_sched_submit(serve_sched *s, serve_req *const *r, size_t n) {
    pthread_mutex_lock(&s->mu);
    drop_cancelled_locked(s);
    bool ok = !s->stopping && s->q_len + n <= (size_t)s->o.queue_max;
    for (size_t i = 0; ok && i < n; i++) {
        r[i]->refs++;
        r[i]->id = ++s->next_id;
        r[i]->t_queued = now();
        r[i]->lead_id = r[i]->lead >= 0 && (size_t)r[i]->lead < i ? r[r[i]->lead]->id : 0;
        s->queue[(s->q_head + s->q_len++) % (size_t)s->o.queue_max] = r[i];
    }
    if (ok) pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void serve_sched_load(serve_sched *s, int *busy, int *queued) {
    pthread_mutex_lock(&s->mu);
    *busy = 0;
    for (int i = 0; i < s->o.n_parallel; i++) *busy += s->slots[i].r != NULL;
    *queued = (int)s->q_len;
    pthread_mutex_unlock(&s->mu);
}

static void log_end(const serve_sched *s, const serve_req *r, int slot_i) {
    if (s->o.quiet) return;
    static const char *why[] = {"running", "stop", "length", "error"};
    double pp = r->t_first > r->t_start ? r->t_first - r->t_start : 0, tg = r->t_end - r->t_first;
    long long n_pp = (long long)r->n_prompt - r->n_cached;
    char copied[96] = "";
    if (r->copy_ms > 0)
        snprintf(copied, sizeof copied, "; its cells copied from another choice's slot in %.2f ms", r->copy_ms);
    fprintf(stderr,
            "cleave serve: request %llu, slot %d: %zu prompt tokens (%lld cached), %lld generated; "
            "prompt %.1f ms (%.1f tok/s%s), generation %.1f ms (%.2f tok/s), waited %.1f ms: %s%s%s\n",
            r->id, slot_i, r->n_prompt, r->n_cached, r->n_gen, pp * 1e3, pp > 0 ? n_pp / pp : 0.0, copied, tg * 1e3,
            tg > 0 && r->n_gen > 1 ? (r->n_gen - 1) / tg : 0.0, (r->t_start - r->t_queued) * 1e3,
            r->cancelled ? "cancelled" : why[r->finish], r->finish == SERVE_FINISH_ERROR ? ": " : "",
            r->finish == SERVE_FINISH_ERROR ? r->err : "");
}

/* With the lock held: r ends (unless it already has) and leaves its slot. */
static void end_locked(serve_sched *s, slot *sl, serve_finish f, int http_status, const char *err) {
    serve_req *r = sl->r;
    if (r->finish == SERVE_RUNNING) {
        bool stopped;
        if (!r->stop_hit) /* the held-back tail is text after all */
            r->released = serve_text_release(r->raw.p, r->raw.len, r->searched, r->p.stop, r->p.n_stop, true, &stopped);
        r->finish = f;
        r->http_status = http_status;
        if (err) snprintf(r->err, sizeof r->err, "%s", err);
        r->t_end = now();
    }
    log_end(s, r, (int)(sl - s->slots));
    if (r->cancelled)
        s->stats.cancelled++;
    else if (r->finish == SERVE_FINISH_STOP)
        s->stats.finished_stop++;
    else if (r->finish == SERVE_FINISH_LENGTH)
        s->stats.finished_length++;
    else
        s->stats.finished_error++;
    s->stats.generated_tokens += r->n_gen;
    cleave_sampler_free(sl->smp);
    sl->smp = NULL;
    sl->r = NULL;
    sl->last_used = now();
    release_locked(r);
    news_locked(s);
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* With the lock held: the slot running request id (its prompt's cells
 * there), or NULL. */
static slot *slot_running(serve_sched *s, unsigned long long id) {
    for (int i = 0; i < s->o.n_parallel; i++)
        if (s->slots[i].r && s->slots[i].r->id == id) return &s->slots[i];
    return NULL;
}

/* AUTO tries a copy of at most this many cells to measure the copy's rate
 * (on a GPU a copy of the state blob's cells has measured slower than the
 * forward pass; on CPUs far faster: bench/RESULTS.md). */
#define COPY_PROBE_CELLS 1024

bool serve_copy_pays(double copy_rate, double prefill_rate, size_t cells, size_t tokens, size_t probe) {
    if (copy_rate <= 0) return cells <= probe;
    if (prefill_rate <= 0) return true;
    return (double)cells / copy_rate < (double)tokens / prefill_rate;
}

/* A copy's blob above this is not worth its host memory: the prompt is
 * processed again instead (70B's cache of a 32k-token prompt is 10 GB). */
#define COPY_MAX_BYTES ((size_t)1 << 30)

/* The loop's thread (it alone uses the context), the lock not held: the
 * first keep cells of from's sequence become to's, as a state blob copied
 * between the sequences (layout-independent, so any placement and
 * tiering), through host memory. On CPUs that is hundreds of times
 * cheaper than a forward pass over the prompt; on a GPU, whose forward
 * pass runs at tens of thousands of tokens a second, it has measured
 * slower (bench/RESULTS.md): serve_copy_pays decides. NULL, or why it did
 * not (to then processes its prompt itself). */
static const char *copy_cells(serve_sched *s, slot *from, slot *to, size_t keep) {
    int32_t src = (int32_t)(from - s->slots), dst = (int32_t)(to - s->slots);
    size_t need = 0, n = 0;
    if (cleave_state_seq_size(s->ctx, src, 0, &need)) return cleave_last_error();
    if (need > COPY_MAX_BYTES) return "over 1 GiB of cells: processing the prompt costs less memory";
    if (need > s->copy_cap) {
        void *p = realloc(s->copy_buf, need);
        if (!p) return "out of memory";
        s->copy_buf = p, s->copy_cap = need;
    }
    if (cleave_state_seq_get(s->ctx, src, NULL, 0, s->copy_buf, s->copy_cap, &n) ||
        cleave_state_seq_set(s->ctx, dst, s->copy_buf, n, NULL))
        return cleave_last_error();
    memcpy(to->cache, from->cache, keep * sizeof *to->cache);
    return NULL;
}

/* With the lock held: whether a later choice copies a prompt's cells
 * (cells of them moved for tokens not processed), by the policy and, for
 * AUTO, the rates this server has measured. */
static bool copy_wanted(const serve_sched *s, size_t cells, size_t tokens) {
    if (s->o.copy != SERVE_COPY_AUTO) return s->o.copy == SERVE_COPY_ON;
    double copy_rate = s->copy_seconds > 0 ? s->copied_cells / s->copy_seconds : 0;
    double pf_rate = s->stats.prefill_seconds > 0 ? s->stats.prefill_tokens / s->stats.prefill_seconds : 0;
    return serve_copy_pays(copy_rate, pf_rate, cells, tokens, COPY_PROBE_CELLS);
}

/* With the lock held: a slot other than to whose cells hold r's prompt
 * (all but its last token): the first choice's, running or (it may have
 * ended at its first token) idle, or a choice that copied them before. */
static slot *copy_source(serve_sched *s, const serve_req *r, const slot *to) {
    for (int i = 0; i < s->o.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (sl != to && common_prefix(sl->cache, sl->n_cache, r->prompt, r->n_prompt) + 1 >= r->n_prompt) return sl;
    }
    return NULL;
}

/* With the lock held: the next queued request goes to the idle slot whose
 * cache shares the longest prefix with its prompt. false: nothing to start. */
static bool admit_locked(serve_sched *s) {
    drop_cancelled_locked(s);
    if (!s->q_len) return false;
    serve_req *r = s->queue[s->q_head];
    /* another choice of the same prompt that is to copy its cells waits
     * while the first choice's prompt runs (if that has gone, it runs its
     * own); one that is not to copy runs its prompt beside the first's */
    bool want_copy = r->lead_id && copy_wanted(s, r->n_prompt, r->n_prompt - 1);
    slot *lead = want_copy ? slot_running(s, r->lead_id) : NULL;
    if (lead && lead->n_done < lead->r->n_prompt) return false;
    slot *best = NULL, *lru = NULL;
    size_t best_lcp = 0;
    for (int i = 0; i < s->o.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (sl->r) continue;
        size_t lcp = common_prefix(sl->cache, sl->n_cache, r->prompt, r->n_prompt);
        if (!best || lcp > best_lcp) best = sl, best_lcp = lcp;
        if (!lru || sl->last_used < lru->last_used) lru = sl;
    }
    if (!best) return false;
    /* a slot that shares less than half the prompt (a BOS, a system
     * prompt's start) is not worth its cache: the least recently used one
     * gives its own up instead, so other conversations keep theirs */
    if (best_lcp * 2 < r->n_prompt && best != lru)
        best = lru, best_lcp = common_prefix(lru->cache, lru->n_cache, r->prompt, r->n_prompt);
    s->q_head = (s->q_head + 1) % (size_t)s->o.queue_max, s->q_len--;
    int32_t seq = (int32_t)(best - s->slots);
    best->r = r;
    r->t_start = now();
    if (!r->n_prompt || r->n_prompt >= s->slot_cells) { /* the HTTP side checks; this keeps the cache safe */
        end_locked(s, best, SERVE_FINISH_ERROR, 400, "the prompt does not fit a slot");
        return true;
    }
    /* all but the last prompt token are copied: that one runs in r's own
     * row for its logits */
    slot *src = NULL;
    if (r->lead_id && best_lcp + 1 < r->n_prompt) {
        bool declined = !want_copy;
        if (want_copy && (src = copy_source(s, r, best)) &&
            !copy_wanted(s, src->n_cache, r->n_prompt - 1 - best_lcp))
            src = NULL, declined = true;
        s->copies_declined += declined;
    }
    if (src) {
        /* HTTP threads need not wait for the copy: the slots are the loop's */
        pthread_mutex_unlock(&s->mu);
        double t0 = now();
        const char *why = copy_cells(s, src, best, r->n_prompt - 1);
        double t1 = now();
        pthread_mutex_lock(&s->mu);
        if (!why) {
            s->copies++, s->copied_cells += (double)src->n_cache, s->copy_seconds += t1 - t0;
            best_lcp = r->n_prompt - 1;
            r->copy_ms = (t1 - t0) * 1e3;
        } else {
            fprintf(stderr, "cleave serve: request %llu processes its prompt itself (copying another choice's cells: %s)\n",
                    r->id, why);
            best->n_cache = best_lcp = 0; /* what a failed copy left is cleared below */
        }
    }
    if (best_lcp == r->n_prompt) best_lcp--; /* the last prompt token runs again for its logits */
    r->n_cached = (long long)best_lcp;
    s->stats.prompt_tokens += (long long)r->n_prompt;
    s->stats.prompt_tokens_cached += (long long)best_lcp;
    best->n_cache = best->n_done = best->shown_cache = best_lcp;
    best->prev = r->prompt[r->n_prompt - 1];
    cleave_status st = cleave_kv_seq_rm(s->ctx, seq, (int32_t)best_lcp, -1);
    if (!st) st = cleave_sampler_new(&r->p.sp, s->n_vocab, &best->smp);
    if (st) {
        best->n_cache = best->n_done = best->shown_cache = 0;
        cleave_kv_seq_rm(s->ctx, seq, 0, -1);
        end_locked(s, best, SERVE_FINISH_ERROR, 500, cleave_last_error());
        return true;
    }
    /* the prompt is the penalties' history, as with cleave run */
    for (size_t k = 0; k < r->n_prompt; k++) cleave_sampler_accept(best->smp, r->prompt[k]);
    return true;
}

/* The next step's batch: a token of each generating slot first, then
 * prompt chunks in slot order until the budget is spent. Returns its size. */
static size_t build_batch(serve_sched *s, size_t *n_active) {
    size_t n = 0, budget = s->o.n_batch;
    *n_active = 0;
    for (int i = 0; i < s->o.n_parallel; i++) {
        slot *sl = &s->slots[i];
        sl->row = -1;
        if (!sl->r || sl->n_done < sl->r->n_prompt) continue;
        s->tok[n] = sl->last, s->pos[n] = (int32_t)sl->n_cache, s->sid[n] = i;
        sl->row = (int32_t)n++;
        s->in_prefill[(*n_active)++] = false;
    }
    budget = budget > n ? budget - n : 1; /* a prompt moves on every step */
    for (int i = 0; i < s->o.n_parallel && budget; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || sl->n_done >= sl->r->n_prompt) continue;
        size_t take = sl->r->n_prompt - sl->n_done;
        if (take > budget) take = budget;
        for (size_t k = 0; k < take; k++)
            s->tok[n] = sl->r->prompt[sl->n_done + k], s->pos[n] = (int32_t)(sl->n_done + k), s->sid[n] = i, n++;
        budget -= take;
        if (sl->n_done + take == sl->r->n_prompt) sl->row = (int32_t)(n - 1);
        s->in_prefill[(*n_active)++] = true;
    }
    return n;
}

/* With -psm: the step's mode by the gate; a switch that fails leaves the
 * context where it is and switching off. */
static void follow_gate(serve_sched *s, size_t n_active, double *switch_seconds) {
    *switch_seconds = -1; /* no switch */
    if (!s->switching || !n_active) return;
    cleave_split_mode want = cleave_psm_gate_step(&s->gate, s->in_prefill, n_active, s->o.psm, s->o.mode);
    if (want == cleave_context_split_mode(s->ctx)) return;
    cleave_phase phase = want == s->o.psm ? CLEAVE_PHASE_PREFILL : CLEAVE_PHASE_GENERATE;
    cleave_status st = cleave_context_set_phase(s->ctx, phase);
    cleave_switch_report rep;
    if (!st && !cleave_context_switch_report(s->ctx, &rep)) *switch_seconds = rep.seconds;
    if (st) {
        fprintf(stderr, "cleave serve: warning: staying in the %s split: %s\n",
                cleave_split_mode_name(cleave_context_split_mode(s->ctx)), cleave_last_error());
        s->switching = false;
    } else if (!s->o.quiet) {
        fprintf(stderr, "cleave serve: switched to the %s split (%zu active)\n", cleave_split_mode_name(want), n_active);
    }
}

/* The chosen token's logprob under the model's distribution (softmax of
 * the raw logits: what the model thinks, whatever the sampling settings)
 * and the n_top most likely tokens, best first. */
static void logprobs_of(const float *logits, uint32_t n_vocab, int32_t chosen, int n_top, serve_logprob *out) {
    float mx = logits[0];
    for (uint32_t v = 1; v < n_vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0;
    for (uint32_t v = 0; v < n_vocab; v++) sum += exp((double)(logits[v] - mx));
    float lse = mx + (float)log(sum);
    out->token = chosen;
    out->logprob = logits[chosen] - lse;
    out->n_top = 0;
    for (uint32_t v = 0; v < n_vocab && n_top > 0; v++) { /* insertion into the sorted few */
        int k = out->n_top < n_top ? out->n_top++ : n_top;
        if (k == n_top && logits[v] - lse <= out->top_logprob[n_top - 1]) continue;
        if (k == n_top) k--;
        while (k > 0 && out->top_logprob[k - 1] < logits[v] - lse) {
            out->top[k] = out->top[k - 1], out->top_logprob[k] = out->top_logprob[k - 1];
            k--;
        }
        out->top[k] = (int32_t)v, out->top_logprob[k] = logits[v] - lse;
    }
}

/* Samples one slot of the step (outside the lock, on any thread of the
 * pool: each slot's sampler is its own, the logits only read). */
static void sample_one(void *arg, int i) {
    serve_sched *s = arg;
    slot *sl = s->to_sample[i];
    const float *logits = cleave_get_logits(s->ctx, sl->row);
    sl->sampled = cleave_sampler_sample(sl->smp, logits, &sl->token);
    if (sl->sampled) snprintf(sl->err, sizeof sl->err, "sampling: %s", cleave_last_error());
    else if (sl->r->p.logprobs >= 0) logprobs_of(logits, s->n_vocab, sl->token, sl->r->p.logprobs, &sl->lp);
}

/* With the lock held: the step's logprobs of sl join its request's, the
 * token's text ending at byte end of the raw text (its characters counted
 * on from the last token's, so offsets cost no rescan). false: out of
 * memory. */
static bool keep_logprob(slot *sl, size_t end) {
    serve_req *r = sl->r;
    if (r->n_lp == r->cap_lp) {
        size_t cap = r->cap_lp ? 2 * r->cap_lp : 16;
        serve_logprob *p = realloc(r->lp, cap * sizeof *p);
        if (!p) return false;
        r->lp = p, r->cap_lp = cap;
    }
    size_t start = r->n_lp ? r->lp[r->n_lp - 1].end : 0, chars = r->n_lp ? r->lp[r->n_lp - 1].end_chars : 0;
    for (size_t i = start; i < end; i++) chars += ((unsigned char)r->raw.p[i] & 0xC0) != 0x80;
    sl->lp.prev = sl->prev, sl->lp.end = end, sl->lp.end_chars = chars;
    r->lp[r->n_lp++] = sl->lp;
    return true;
}

/* With the lock held: what slot sl's step sampled. */
static void publish_locked(serve_sched *s, slot *sl) {
    serve_req *r = sl->r;
    int32_t t = sl->token;
    if (sl->sampled) {
        end_locked(s, sl, SERVE_FINISH_ERROR, 500, sl->err);
        return;
    }
    if (r->n_gen++ == 0) r->t_first = now();
    if (!r->p.ignore_eos && cleave_token_is_eog(s->m, t)) {
        end_locked(s, sl, SERVE_FINISH_STOP, 0, NULL);
        return;
    }
    char piece[256];
    size_t n = 0;
    if (cleave_token_to_piece(s->m, sl->prev, t, piece, sizeof piece, &n) || !serve_buf_add(&r->raw, piece, n) ||
        (r->p.logprobs >= 0 && !keep_logprob(sl, r->raw.len))) {
        end_locked(s, sl, SERVE_FINISH_ERROR, 500, "out of memory for the generated text");
        return;
    }
    sl->prev = sl->last = t;
    bool stopped;
    r->released = serve_text_release(r->raw.p, r->raw.len, r->searched, r->p.stop, r->p.n_stop, false, &stopped);
    r->searched = r->raw.len;
    if ((r->stop_hit = stopped)) {
        end_locked(s, sl, SERVE_FINISH_STOP, 0, NULL);
    } else if ((r->p.max_tokens >= 0 && r->n_gen >= r->p.max_tokens) || sl->n_cache >= s->slot_cells) {
        end_locked(s, sl, SERVE_FINISH_LENGTH, 0, NULL); /* no cell left for feeding t */
    }
}

/* With the lock held: the step's tokens and time for /metrics (the
 * prompts' rows and the answers' shares of the pass by tokens), its
 * switch, and what the slots hold now. */
static void count_step_locked(serve_sched *s, size_t n, size_t n_active, double seconds,
                              double switch_s, uint64_t staged) {
    size_t decoding = 0; /* a generating slot feeds one token (build_batch) */
    for (size_t i = 0; i < n_active; i++)
        decoding += !s->in_prefill[i];
    serve_stats *t = &s->stats;
    t->steps++;
    t->decode_tokens += (double)decoding, t->prefill_tokens += (double)(n - decoding);
    t->decode_seconds += seconds * (double)decoding / (double)n;
    t->prefill_seconds += seconds * (double)(n - decoding) / (double)n;
    if (switch_s >= 0) t->split_switches++, t->split_switch_seconds += switch_s;
    t->kv_staged_bytes = staged;
    for (int i = 0; i < s->o.n_parallel; i++)
        s->slots[i].shown_cache = s->slots[i].n_cache;
}

void serve_sched_stats(serve_sched *s, serve_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->busy = 0, out->kv_cells_used = 0;
    for (int i = 0; i < s->o.n_parallel; i++) {
        out->busy += s->slots[i].r != NULL;
        out->kv_cells_used += (long long)s->slots[i].shown_cache;
    }
    out->queued = (int)s->q_len;
    pthread_mutex_unlock(&s->mu);
}

void serve_sched_note_refused(serve_sched *s, int http_status) {
    pthread_mutex_lock(&s->mu);
    if (http_status >= 500)
        s->stats.refused_5xx++;
    else
        s->stats.refused_4xx++;
    pthread_mutex_unlock(&s->mu);
}

int serve_sched_n_parallel(const serve_sched *s) { return s->o.n_parallel; }

void serve_sched_slots(serve_sched *s, serve_slot_info *out) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->o.n_parallel; i++) {
        const slot *sl = &s->slots[i];
        out[i] = (serve_slot_info){.busy = sl->r != NULL, .n_cached = sl->shown_cache};
        if (sl->r)
            out[i].request_id = sl->r->id, out[i].n_prompt = sl->r->n_prompt,
            out[i].n_gen = sl->r->n_gen;
    }
    pthread_mutex_unlock(&s->mu);
}

/* With the lock held: every request in the failed batch ends with the
 * error, and their sequences are emptied (a failed pass may have written
 * some of their cells). */
static void fail_batch_locked(serve_sched *s, size_t n, cleave_status st) {
    char msg[256];
    snprintf(msg, sizeof msg, "decoding failed: %s", cleave_last_error());
    for (int i = 0; i < s->o.n_parallel; i++) {
        slot *sl = &s->slots[i];
        bool in = false;
        for (size_t k = 0; k < n && !in; k++) in = s->sid[k] == i;
        if (!in || !sl->r) continue;
        cleave_kv_seq_rm(s->ctx, i, 0, -1);
        sl->n_cache = sl->n_done = sl->shown_cache = 0;
        end_locked(s, sl, SERVE_FINISH_ERROR, st == CLEAVE_ERR_CONTEXT_FULL ? 400 : 500, msg);
    }
}

static void *loop(void *arg) {
    serve_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        for (int i = 0; i < s->o.n_parallel; i++) /* clients that went away */
            if (s->slots[i].r && s->slots[i].r->cancelled) end_locked(s, &s->slots[i], SERVE_FINISH_STOP, 0, NULL);
        while (admit_locked(s)) {}
        size_t n_active, n = build_batch(s, &n_active);
        if (!n) {
            pthread_cond_wait(&s->wake, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        double t0 = now(), switch_s;
        follow_gate(s, n_active, &switch_s);
        double t1 = now();
        /* each generating slot's last row is drawn where the logits are
         * (only token ids cross); rows handed back are sampled here */
        for (size_t k = 0; k < n; k++) s->row_smp[k] = NULL;
        /* (a request that wants logprobs needs its row's logits here) */
        for (int i = 0; i < s->o.n_parallel; i++)
            if (s->slots[i].row >= 0)
                s->row_smp[s->slots[i].row] = s->slots[i].r->p.logprobs >= 0 ? NULL : s->slots[i].smp;
        cleave_status st = cleave_decode_batch_sample(s->ctx, s->tok, s->pos, s->sid, n, s->row_smp, s->row_tok);
        double t2 = now();
        if (!st) {
            for (size_t k = 0; k < n; k++) {
                slot *sl = &s->slots[s->sid[k]];
                sl->cache[s->pos[k]] = s->tok[k];
                sl->n_cache = (size_t)s->pos[k] + 1;
                if (sl->n_done < sl->r->n_prompt) sl->n_done++;
            }
            s->n_to_sample = 0;
            for (int i = 0; i < s->o.n_parallel; i++) {
                slot *sl = &s->slots[i];
                if (sl->row < 0) continue;
                int32_t t = s->row_tok[sl->row];
                if (t == CLEAVE_TOKEN_SAMPLE_ON_HOST || !s->row_smp[sl->row])
                    s->to_sample[s->n_to_sample++] = sl;
                else
                    sl->token = t, sl->sampled = CLEAVE_OK;
            }
            serve_pool_for(s->pool, s->n_to_sample, sample_one, s);
        }
        double t3 = now();
        uint64_t staged = 0;
        cleave_context_kv_staged(s->ctx, &staged); /* this thread decodes: the count is its own */
        pthread_mutex_lock(&s->mu);
        s->n_steps++, s->n_step_tokens += (long long)n;
        s->t_decode += t2 - t1, s->t_sample += t3 - t2;
        count_step_locked(s, n, n_active, t2 - t1, switch_s, staged);
        if (st) {
            fail_batch_locked(s, n, st);
            continue;
        }
        for (int i = 0; i < s->o.n_parallel; i++)
            if (s->slots[i].row >= 0 && s->slots[i].r) publish_locked(s, &s->slots[i]);
        news_locked(s);
        s->t_steps += now() - t0;
    }
    /* stopping: nothing more runs */
    for (int i = 0; i < s->o.n_parallel; i++)
        if (s->slots[i].r) end_locked(s, &s->slots[i], SERVE_FINISH_ERROR, 503, "the server is shutting down");
    while (s->q_len) {
        serve_req *r = s->queue[s->q_head];
        r->finish = SERVE_FINISH_ERROR, r->http_status = 503;
        snprintf(r->err, sizeof r->err, "the server is shutting down");
        release_locked(r);
        s->q_head = (s->q_head + 1) % (size_t)s->o.queue_max, s->q_len--;
    }
    s->stopping = true;
    news_locked(s);
    pthread_mutex_unlock(&s->mu);
    if (!s->o.quiet && (s->copies || s->copies_declined))
        fprintf(stderr,
                "cleave serve: n > 1: %lld copies of prompt cells (%.0f cells in %.3f s), %lld declined as "
                "dearer than processing the prompt (prefill %.0f tok/s)\n",
                s->copies, s->copied_cells, s->copy_seconds, s->copies_declined,
                s->stats.prefill_seconds > 0 ? s->stats.prefill_tokens / s->stats.prefill_seconds : 0.0);
    if (!s->o.quiet && s->n_steps)
        fprintf(stderr,
                "cleave serve: %lld steps of %.1f tokens on average: %.3f s in all, decoding %.1f%%, sampling %.1f%%, "
                "the rest (batching, switches, publishing) %.1f%%\n",
                s->n_steps, (double)s->n_step_tokens / (double)s->n_steps, s->t_steps,
                100 * s->t_decode / s->t_steps, 100 * s->t_sample / s->t_steps,
                100 * (s->t_steps - s->t_decode - s->t_sample) / s->t_steps);
    return NULL;
}

static void sched_free(serve_sched *s) {
    for (int i = 0; s->slots && i < s->o.n_parallel; i++) free(s->slots[i].cache);
    free(s->slots);
    free(s->queue);
    free(s->tok);
    free(s->pos);
    free(s->sid);
    free(s->in_prefill);
    free(s->row_smp);
    free(s->row_tok);
    free(s->to_sample);
    free(s->copy_buf);
    serve_pool_free(s->pool);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->news);
    free(s);
}

int serve_sched_start(cleave_model *m, cleave_context *ctx, const serve_sched_opts *o, serve_sched **out) {
    *out = NULL;
    uint32_t n_ctx = cleave_context_n_ctx(ctx);
    if (o->n_parallel < 1 || o->queue_max < 1 || o->n_batch < 1 || n_ctx / (uint32_t)o->n_parallel < 2) {
        fprintf(stderr, "cleave serve: -np %d slots of a %u-cell context leave under 2 cells each\n", o->n_parallel,
                n_ctx);
        return 1;
    }
    serve_sched *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->m = m, s->ctx = ctx, s->o = *o;
    s->slot_cells = n_ctx / (uint32_t)o->n_parallel;
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    s->n_vocab = d.n_vocab;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->news, NULL);
    size_t cap = (size_t)o->n_batch + (size_t)o->n_parallel; /* the budget, plus one token per generating slot */
    s->slots = calloc((size_t)o->n_parallel, sizeof *s->slots);
    s->queue = calloc((size_t)o->queue_max, sizeof *s->queue);
    s->tok = malloc(cap * sizeof *s->tok);
    s->pos = malloc(cap * sizeof *s->pos);
    s->sid = malloc(cap * sizeof *s->sid);
    s->in_prefill = malloc((size_t)o->n_parallel * sizeof *s->in_prefill);
    s->to_sample = malloc((size_t)o->n_parallel * sizeof *s->to_sample);
    s->row_smp = malloc(cap * sizeof *s->row_smp);
    s->row_tok = malloc(cap * sizeof *s->row_tok);
    if (!s->slots || !s->queue || !s->tok || !s->pos || !s->sid || !s->in_prefill || !s->to_sample || !s->row_smp ||
        !s->row_tok)
        goto oom_free;
    /* helpers for sampling: one per slot beyond the first, at most 7 and
     * half the cores (none: the loop samples alone) */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int helpers = o->n_parallel - 1 < 7 ? o->n_parallel - 1 : 7;
    if (cores > 0 && helpers > cores / 2) helpers = (int)(cores / 2);
    s->pool = serve_pool_new(helpers);
    for (int i = 0; i < o->n_parallel; i++)
        if (!(s->slots[i].cache = malloc(s->slot_cells * sizeof *s->slots[i].cache))) goto oom_free;
    s->switching = o->phased;
    s->gate = (cleave_psm_gate){cleave_context_split_mode(ctx), o->dwell, o->dwell};
    cleave_context_set_progress(ctx, NULL, NULL); /* steps, not one long prompt */
    if (pthread_create(&s->thread, NULL, loop, s)) {
        fprintf(stderr, "cleave serve: cannot start the step thread\n");
        sched_free(s);
        return 1;
    }
    s->started = true;
    *out = s;
    return 0;
oom_free:
    sched_free(s);
oom:
    fprintf(stderr, "cleave serve: out of memory for %d slots\n", o->n_parallel);
    return 1;
}

void serve_sched_stop(serve_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    if (s->started) pthread_join(s->thread, NULL);
    s->started = false;
}

void serve_sched_free(serve_sched *s) {
    if (!s) return;
    serve_sched_stop(s);
    sched_free(s);
}
