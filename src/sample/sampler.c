/* Token sampling from logits: repetition/frequency/presence penalties, then
 * greedy argmax or top-k -> top-p -> min-p -> temperature -> a seeded draw,
 * in llama.cpp's default order. All buffers are allocated once in
 * cleave_sampler_new, so sampling a token never touches the heap. */
#include <float.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cleave.h"
#include "base/error.h"
#include "base/mem.h"
#include "sample/sample_math.h"
#include "sample/sample_rows.h"

/* History kept for penalties: penalty_last_n = -1 ("whole history") and any
 * larger window are clamped to this many tokens, so the ring has a fixed size;
 * penalties 64k tokens back make no practical difference. */
#define SAMPLER_HISTORY_CAP 65536

typedef struct {
    float logit;
    int32_t id;
    float w; /* unnormalized probability, where a step needs it */
} cand;

struct cleave_sampler {
    cleave_sampler_params p;
    uint32_t n_vocab;
    cand *cands;        /* n_vocab working candidates */
    uint32_t *counts;   /* occurrences of each token inside the window */
    uint8_t *seen;      /* scratch: token already penalized this call */
    int32_t *hist;      /* ring of the last `window` tokens */
    size_t window, hist_len, hist_head;
    uint64_t rng[4];    /* xoshiro256** state */
    uint64_t rng_saved[4]; /* before a row's uniform (sampler_row_abandon) */
};

/* ---- PRNG: xoshiro256** seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void rng_seed(uint64_t st[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) st[i] = splitmix64(&x);
}

static uint64_t rng_next(uint64_t st[4]) {
    uint64_t result = rotl(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t st[4]) { return (double)(rng_next(st) >> 11) * 0x1.0p-53; }

/* ---- parameters ---- */

cleave_sampler_params cleave_sampler_default_params(void) {
    cleave_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 0xC1EA7E; /* fixed so runs are reproducible unless a seed is given */
    return p;
}

static cleave_status validate(const cleave_sampler_params *p, uint32_t n_vocab) {
    if (n_vocab == 0 || n_vocab > (uint32_t)INT32_MAX)
        return err_set(CLEAVE_ERR_INVALID_ARG, "sampler: n_vocab must be in 1..%d, got %u",
                       INT32_MAX, n_vocab);
    if (isnan(p->temperature) || isinf(p->temperature))
        return err_set(CLEAVE_ERR_INVALID_ARG, "sampler: temperature must be finite");
    if (isnan(p->top_p) || p->top_p <= 0.0f)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "sampler: top_p must be in (0,1] (>= 1 turns it off), got %g",
                       (double)p->top_p);
    if (isnan(p->min_p) || p->min_p > 1.0f)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "sampler: min_p must be <= 1 (<= 0 turns it off), got %g",
                       (double)p->min_p);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "sampler: repeat_penalty must be a positive number (1 = off), got %g",
                       (double)p->repeat_penalty);
    if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "sampler: frequency and presence penalties must be finite");
    if (p->penalty_last_n < -1)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "sampler: penalty_last_n must be >= -1 (-1 = whole history), got %d",
                       (int)p->penalty_last_n);
    return CLEAVE_OK;
}

cleave_status cleave_sampler_new(const cleave_sampler_params *params, uint32_t n_vocab,
                                 cleave_sampler **out) {
    if (!out) return err_set(CLEAVE_ERR_INVALID_ARG, "sampler: out is NULL");
    *out = NULL;
    cleave_sampler_params p = params ? *params : cleave_sampler_default_params();
    cleave_status st = validate(&p, n_vocab);
    if (st != CLEAVE_OK) return st;

    cleave_sampler *s = mem_calloc(1, sizeof *s, "sampler");
    if (!s) return CLEAVE_ERR_OOM;
    s->p = p;
    s->n_vocab = n_vocab;
    if (p.penalty_last_n < 0 || p.penalty_last_n > SAMPLER_HISTORY_CAP)
        s->window = SAMPLER_HISTORY_CAP;
    else
        s->window = (size_t)p.penalty_last_n;
    s->cands = mem_alloc((size_t)n_vocab * sizeof *s->cands, "sampler candidates");
    s->counts = mem_calloc(n_vocab, sizeof *s->counts, "sampler token counts");
    s->seen = mem_calloc(n_vocab, 1, "sampler scratch");
    if (s->window) s->hist = mem_alloc(s->window * sizeof *s->hist, "sampler history");
    if (!s->cands || !s->counts || !s->seen || (s->window && !s->hist)) {
        cleave_sampler_free(s);
        return CLEAVE_ERR_OOM;
    }
    rng_seed(s->rng, p.seed);
    *out = s;
    return CLEAVE_OK;
}

void cleave_sampler_free(cleave_sampler *s) {
    if (!s) return;
    free(s->cands);
    free(s->counts);
    free(s->seen);
    free(s->hist);
    free(s);
}

/* ---- history ---- */

/* Tokens outside [0, n_vocab) are ignored: they cannot be penalized, and the
 * void signature has no way to report them. */
void cleave_sampler_accept(cleave_sampler *s, int32_t token) {
    if (!s || s->window == 0 || token < 0 || (uint32_t)token >= s->n_vocab) return;
    if (s->hist_len == s->window) {
        int32_t old = s->hist[s->hist_head];
        s->counts[old]--;
        s->hist[s->hist_head] = token;
        s->hist_head = (s->hist_head + 1) % s->window;
    } else {
        s->hist[(s->hist_head + s->hist_len) % s->window] = token;
        s->hist_len++;
    }
    s->counts[token]++;
}

/* Forgets the history and restarts the random stream from the seed, so a
 * reset sampler repeats exactly what a fresh one would do. */
void cleave_sampler_reset(cleave_sampler *s) {
    if (!s) return;
    for (size_t i = 0; i < s->hist_len; i++) s->counts[s->hist[(s->hist_head + i) % s->window]] = 0;
    s->hist_len = 0;
    s->hist_head = 0;
    rng_seed(s->rng, s->p.seed);
}

/* ---- the chain ---- */

/* Candidates are indexed by token id when this runs (before any filtering). */
static bool penalties_active(const cleave_sampler *s) {
    const cleave_sampler_params *p = &s->p;
    return s->hist_len != 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

static void apply_penalties(cleave_sampler *s) {
    const cleave_sampler_params *p = &s->p;
    if (!penalties_active(s)) return;
    for (size_t i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[(s->hist_head + i) % s->window];
        if (s->seen[t]) continue;
        s->seen[t] = 1;
        s->cands[t].logit = sample_penalize(s->cands[t].logit, s->counts[t], p->repeat_penalty,
                                            p->frequency_penalty, p->presence_penalty);
    }
    for (size_t i = 0; i < s->hist_len; i++) s->seen[s->hist[(s->hist_head + i) % s->window]] = 0;
}

/* a ranks before b: higher logit, then lower id (so ties are deterministic). */
static int ranks_before(const cand *a, const cand *b) {
    return sample_ranks_before(a->logit, a->id, b->logit, b->id);
}

/* Min-heap (worst candidate at the root) sift-down over h[0..n). */
static void sift_down(cand *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ranks_before(&h[w], &h[l])) w = l;
        if (r < n && ranks_before(&h[w], &h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Moves the best k of c[0..n) to the front (in no particular order), in
 * place and in O(n log k): a size-k min-heap keeps the best seen so far. */
static void keep_top(cand *c, size_t n, size_t k) {
    if (k == 0 || k >= n) return;
    for (size_t i = k / 2; i-- > 0;) sift_down(c, k, i);
    for (size_t i = k; i < n; i++) {
        if (ranks_before(&c[i], &c[0])) {
            cand t = c[0];
            c[0] = c[i];
            c[i] = t;
            sift_down(c, k, 0);
        }
    }
}

static float max_logit(const cand *c, size_t n) {
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit > m) m = c[i].logit;
    return m;
}

/* Sets c[i].w = exp((logit - max) / temp) and returns their sum. Dividing
 * (rather than multiplying by 1/temp) keeps a tiny temperature from making
 * 0 * inf; the sum is in double so 150k terms add up well. */
static double set_weights(cand *c, size_t n, float temp) {
    float max = max_logit(c, n);
    for (size_t i = 0; i < n; i++) c[i].w = sample_weight_exp((c[i].logit - max) / temp);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += c[i].w;
    return sum;
}

/* The length of the shortest best-ranked prefix of c[0..n) (weights in
 * w) whose mass reaches target (strict: exceeds it), found by a
 * quickselect on the cumulative mass in expected O(n), so a 150k vocab
 * is never fully sorted; its last candidate is left at c[len - 1]. If
 * rounding leaves the whole mass short, n (and c[n - 1] the worst). */
static size_t mass_prefix(cand *c, size_t n, double target, bool strict) {
    /* c[0..lo) rank above everything in [lo,hi), hold mass cum short of
     * the target; c[hi..n) rank below it all and are cut. */
    size_t lo = 0, hi = n;
    double cum = 0.0;
#define REACHED(m) (strict ? (m) > target : (m) >= target)
    while (hi - lo > 1) {
        /* median of three as pivot, parked at hi-1 */
        size_t a = lo, b = lo + (hi - lo) / 2, e = hi - 1, m;
        if (ranks_before(&c[a], &c[b]))
            m = ranks_before(&c[b], &c[e]) ? b : (ranks_before(&c[a], &c[e]) ? e : a);
        else
            m = ranks_before(&c[a], &c[e]) ? a : (ranks_before(&c[b], &c[e]) ? e : b);
        cand t = c[m];
        c[m] = c[e];
        c[e] = t;
        size_t split = lo;
        double above = 0.0;
        for (size_t i = lo; i < e; i++) {
            if (ranks_before(&c[i], &c[e])) {
                above += c[i].w;
                t = c[i];
                c[i] = c[split];
                c[split] = t;
                split++;
            }
        }
        t = c[split];
        c[split] = c[e];
        c[e] = t;
        if (REACHED(cum + above)) {
            hi = split; /* the cut is among the better ones (split > lo: above > 0) */
        } else {
            cum += above + c[split].w;
            if (REACHED(cum)) return split + 1;
            lo = split + 1;
        }
    }
#undef REACHED
    /* one candidate left is the cut; lo == hi only if rounding kept the
     * running mass just under the target */
    return hi > lo ? lo + 1 : lo;
}

/* Keeps the smallest set of best-ranked candidates whose probability (at
 * temperature 1: llama.cpp applies temperature later) reaches top_p,
 * moved to the front; returns its size. */
static size_t apply_top_p(cand *c, size_t n, float top_p) {
    return mass_prefix(c, n, (double)top_p * set_weights(c, n, 1.0f), false);
}

static size_t apply_min_p(cand *c, size_t n, float min_p) {
    float threshold = max_logit(c, n) + logf(min_p);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit >= threshold) c[kept++] = c[i];
    return kept;
}

/* Temperature alone (no truncation, no penalties: OpenAI's defaults): the
 * general path's draw, the same arithmetic in the same order, without
 * copying the vocabulary into candidates first; weights go to the
 * candidates' w. 0.4 ms for 128k entries, against 0.7-2.0 (libm's expf). */
static cleave_status sample_softmax(cleave_sampler *s, const float *logits, int32_t *token) {
    size_t n = s->n_vocab, last = n;
    float max = -INFINITY; /* NaN never compares above; +inf counts as FLT_MAX */
    for (size_t i = 0; i < n; i++) max = logits[i] > max ? logits[i] : max;
    if (max == -INFINITY) return err_set(CLEAVE_ERR_INVALID_ARG, "sampler: every logit is -inf or NaN");
    if (max == INFINITY) max = FLT_MAX;
    while (!(logits[last - 1] > -INFINITY)) last--; /* the last candidate */
    last--;
    /* the candidates' room as plain weights (three floats a candidate), so
     * this loop vectorizes; NaN and -inf weigh 0 (not candidates), which
     * leaves the sum and the walk below as the general path has them */
    float *w = (float *)s->cands, temp = s->p.temperature;
    for (size_t i = 0; i < n; i++) {
        float l = logits[i] == INFINITY ? FLT_MAX : logits[i];
        w[i] = sample_weight_exp((l - max) / temp);
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += w[i];
    double u = rng_uniform(s->rng) * sum, cum = 0.0;
    int32_t pick = (int32_t)last; /* if rounding leaves u above the total */
    for (size_t i = 0; i < n; i++) {
        cum += w[i];
        if (u < cum) {
            pick = (int32_t)i;
            break;
        }
    }
    cleave_sampler_accept(s, pick);
    *token = pick;
    return CLEAVE_OK;
}

cleave_status cleave_sampler_sample(cleave_sampler *s, const float *logits, int32_t *token) {
    if (!s || !logits || !token)
        return err_set(CLEAVE_ERR_INVALID_ARG, "sampler: NULL sampler, logits or token");
    const cleave_sampler_params *p = &s->p;
    if (p->temperature <= 0.0f && !penalties_active(s)) {
        /* greedy, nothing penalized: one pass over the logits, choosing as
         * the general path below does (NaN never wins, +inf counts as
         * FLT_MAX, the lower id wins a tie) without copying the vocabulary
         * into candidates: a tenth of the time for 128k entries */
        float top = -INFINITY; /* the largest value first (a loop the compiler vectorizes), then its first place */
        for (size_t i = 0; i < s->n_vocab; i++) top = logits[i] > top ? logits[i] : top;
        if (top == -INFINITY) return err_set(CLEAVE_ERR_INVALID_ARG, "sampler: every logit is -inf or NaN");
        size_t best = 0;
        if (top == INFINITY) top = FLT_MAX;
        while (!(logits[best] == top || (top == FLT_MAX && logits[best] == INFINITY))) best++;
        cleave_sampler_accept(s, (int32_t)best);
        *token = (int32_t)best;
        return CLEAVE_OK;
    }
    if (p->temperature > 0.0f && p->top_k <= 0 && p->top_p >= 1.0f && p->min_p <= 0.0f && !penalties_active(s))
        return sample_softmax(s, logits, token);
    cand *c = s->cands;
    size_t n = s->n_vocab;

    /* NaN counts as impossible; +inf is clamped so softmax stays finite. */
    for (size_t i = 0; i < n; i++) {
        c[i].logit = sample_clean(logits[i]);
        c[i].id = (int32_t)i;
    }
    apply_penalties(s);

    size_t live = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit != -INFINITY) c[live++] = c[i];
    n = live;
    if (n == 0)
        return err_set(CLEAVE_ERR_INVALID_ARG, "sampler: every logit is -inf or NaN");

    int32_t pick;
    if (p->temperature <= 0.0f) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (ranks_before(&c[i], &c[best])) best = i;
        pick = c[best].id;
    } else {
        if (p->top_k > 0 && (size_t)p->top_k < n) {
            keep_top(c, n, (size_t)p->top_k);
            n = (size_t)p->top_k;
        }
        if (p->top_p < 1.0f && n > 1) n = apply_top_p(c, n, p->top_p);
        if (p->min_p > 0.0f && n > 1) n = apply_min_p(c, n, p->min_p);
        double sum = set_weights(c, n, p->temperature);
        double u = rng_uniform(s->rng) * sum, cum = 0.0;
        /* a truncated set is walked best first (the order the batched,
         * device, sampler ranks it in, so both draw the same token from
         * the same uniform): the first candidate whose running mass
         * passes u; an untruncated one in id order, as it lies */
        bool cut = (p->top_k > 0 && (size_t)p->top_k < live) || p->top_p < 1.0f || p->min_p > 0.0f;
        if (cut) {
            pick = c[mass_prefix(c, n, u, true) - 1].id;
        } else {
            pick = c[n - 1].id; /* if rounding leaves u above the total */
            for (size_t i = 0; i < n; i++) {
                cum += c[i].w;
                if (u < cum) {
                    pick = c[i].id;
                    break;
                }
            }
        }
    }
    cleave_sampler_accept(s, pick);
    *token = pick;
    return CLEAVE_OK;
}

/* ---- rows for the batched (device) sampler: sample_rows.h ---- */

static int u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

bool sampler_row_prepare(cleave_sampler *s, sample_row *row, int32_t *pen_tok, uint32_t *pen_cnt) {
    const cleave_sampler_params *p = &s->p;
    memset(row, 0, sizeof *row);
    row->temperature = p->temperature;
    row->top_k = p->top_k;
    row->top_p = p->top_p;
    row->min_p = p->min_p;
    row->repeat_penalty = p->repeat_penalty;
    row->frequency_penalty = p->frequency_penalty;
    row->presence_penalty = p->presence_penalty;
    row->pen_tok = pen_tok;
    row->pen_cnt = pen_cnt;
    memcpy(s->rng_saved, s->rng, sizeof s->rng);
    bool fits = true;
    if (penalties_active(s)) {
        /* the window's distinct tokens with their counts, ids ascending
         * (packed as id << 32 | count to sort them together) */
        uint64_t keys[SAMPLE_ROW_MAX_PEN];
        uint32_t n = 0;
        for (size_t i = 0; i < s->hist_len; i++) {
            int32_t t = s->hist[(s->hist_head + i) % s->window];
            if (s->seen[t]) continue;
            s->seen[t] = 1;
            if (n < SAMPLE_ROW_MAX_PEN)
                keys[n++] = (uint64_t)(uint32_t)t << 32 | s->counts[t];
            else
                fits = false;
        }
        for (size_t i = 0; i < s->hist_len; i++) s->seen[s->hist[(s->hist_head + i) % s->window]] = 0;
        qsort(keys, n, sizeof keys[0], u64_cmp);
        for (uint32_t i = 0; i < n; i++) pen_tok[i] = (int32_t)(keys[i] >> 32), pen_cnt[i] = (uint32_t)keys[i];
        row->n_pen = n;
    }
    /* the host draws one uniform for every temperature draw, none for greedy */
    if (p->temperature > 0.0f) row->u = rng_uniform(s->rng);
    return fits;
}

void sampler_row_commit(cleave_sampler *s, int32_t token) { cleave_sampler_accept(s, token); }

void sampler_row_abandon(cleave_sampler *s) { memcpy(s->rng, s->rng_saved, sizeof s->rng); }
