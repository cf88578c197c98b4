/* Sampler tests: greedy and top-k=1 pick the argmax, seeds make runs
 * reproducible, draws follow softmax(logits/T), top-p/min-p cut the tail,
 * penalties move the argmax, bad params and NaN logits fail cleanly. */
#include <float.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "cleave.h"
#include "base/error.h"
#include "testutil.h"

/* A sampler with every filter and penalty off; callers adjust fields. */
static cleave_sampler_params plain_params(void) {
    cleave_sampler_params p = cleave_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.penalty_last_n = 0;
    return p;
}

static cleave_sampler *make(const cleave_sampler_params *p, uint32_t n_vocab) {
    cleave_sampler *s = NULL;
    CHECK_OK(cleave_sampler_new(p, n_vocab, &s));
    return s;
}

static int32_t sample1(cleave_sampler *s, const float *logits) {
    int32_t t = -1;
    CHECK_OK(cleave_sampler_sample(s, logits, &t));
    return t;
}

static void test_defaults(void) {
    cleave_sampler_params p = cleave_sampler_default_params();
    CHECK(fabsf(p.temperature - 0.8f) < 1e-6f);
    CHECK(p.top_k == 40);
    CHECK(fabsf(p.top_p - 0.95f) < 1e-6f);
    CHECK(fabsf(p.min_p - 0.05f) < 1e-6f);
    CHECK(p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f);
    CHECK(p.penalty_last_n == 64);
    CHECK(p.seed == 0xC1EA7E);
    cleave_sampler *s = NULL;
    CHECK_OK(cleave_sampler_new(NULL, 10, &s)); /* NULL params = defaults */
    cleave_sampler_free(s);
    cleave_sampler_free(NULL);
}

static void test_greedy(void) {
    float logits[6] = {0.1f, 2.5f, -1.0f, 2.5f, 2.4f, -7.0f};
    cleave_sampler_params p = plain_params();
    p.temperature = 0.0f;
    cleave_sampler *s = make(&p, 6);
    for (int i = 0; i < 5; i++) CHECK(sample1(s, logits) == 1); /* tie 1/3: lowest id */
    cleave_sampler_free(s);

    p.temperature = -1.0f;
    s = make(&p, 6);
    logits[4] = 9.0f;
    CHECK(sample1(s, logits) == 4);
    cleave_sampler_free(s);

    /* top_k = 1 leaves only the argmax whatever the temperature */
    p = plain_params();
    p.top_k = 1;
    p.temperature = 5.0f;
    s = make(&p, 6);
    for (int i = 0; i < 200; i++) CHECK(sample1(s, logits) == 4);
    cleave_sampler_free(s);
}

static void fill_logits(float *l, size_t n, uint32_t salt) {
    for (size_t i = 0; i < n; i++) l[i] = (float)((i * 2654435761u + salt) % 1000) / 250.0f;
}

static void test_seeds(void) {
    enum { N = 500, DRAWS = 300 };
    static float logits[N];
    fill_logits(logits, N, 7);
    cleave_sampler_params p = cleave_sampler_default_params();
    p.temperature = 1.5f;
    p.top_k = 100;
    p.top_p = 0.99f;
    p.min_p = 0.0f;
    int32_t a[DRAWS], b[DRAWS], c[DRAWS], d[DRAWS];
    cleave_sampler *s1 = make(&p, N), *s2 = make(&p, N);
    p.seed = 12345;
    cleave_sampler *s3 = make(&p, N);
    for (int i = 0; i < DRAWS; i++) {
        a[i] = sample1(s1, logits);
        b[i] = sample1(s2, logits);
        c[i] = sample1(s3, logits);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    /* reset restarts the stream: the same sequence again */
    cleave_sampler_reset(s1);
    for (int i = 0; i < DRAWS; i++) d[i] = sample1(s1, logits);
    CHECK(memcmp(a, d, sizeof a) == 0);
    cleave_sampler_free(s1);
    cleave_sampler_free(s2);
    cleave_sampler_free(s3);
}

static void test_distribution(void) {
    enum { N = 6, DRAWS = 20000 };
    const float logits[N] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f};
    const float temps[3] = {0.7f, 1.0f, 2.0f};
    for (int ti = 0; ti < 3; ti++) {
        cleave_sampler_params p = plain_params();
        p.temperature = temps[ti];
        p.seed = 99 + (uint64_t)ti;
        cleave_sampler *s = make(&p, N);
        int hits[N] = {0};
        for (int i = 0; i < DRAWS; i++) {
            int32_t t = sample1(s, logits);
            if (t >= 0 && t < N) hits[t]++;
        }
        double z = 0.0, want[N];
        for (int i = 0; i < N; i++) z += exp(logits[i] / temps[ti]);
        for (int i = 0; i < N; i++) {
            want[i] = exp(logits[i] / temps[ti]) / z;
            double got = (double)hits[i] / DRAWS;
            CHECK_MSG(fabs(got - want[i]) < 0.015, "T=%g token %d: got %.4f want %.4f",
                      (double)temps[ti], i, got, want[i]);
        }
        cleave_sampler_free(s);
    }
}

static void test_top_p(void) {
    /* probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps tokens 0 and 1 */
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    cleave_sampler_params p = plain_params();
    p.top_p = 0.75f;
    cleave_sampler *s = make(&p, 4);
    int hits[4] = {0};
    for (int i = 0; i < 4000; i++) hits[sample1(s, logits) & 3]++;
    CHECK(hits[2] == 0 && hits[3] == 0);
    CHECK(hits[0] > 2000 && hits[1] > 1200); /* renormalized: 0.625 / 0.375 */
    cleave_sampler_free(s);

    /* 1000 equal logits, top_p 0.5: ties rank by id, so ids 0..499 remain.
     * Needs more than the first guess of top tokens: exercises the growth. */
    enum { N = 1000 };
    static float flat[N];
    for (int i = 0; i < N; i++) flat[i] = 0.25f;
    p.top_p = 0.5f;
    s = make(&p, N);
    int32_t max_seen = -1;
    bool bad = false;
    for (int i = 0; i < 5000; i++) {
        int32_t t = sample1(s, flat);
        if (t < 0 || t >= 500) bad = true;
        if (t > max_seen) max_seen = t;
    }
    CHECK(!bad);
    CHECK(max_seen > 450);
    cleave_sampler_free(s);

    /* a long decreasing tail with top-k off: compare with a brute-force cut */
    enum { M = 5000 };
    static float tail[M];
    for (int i = 0; i < M; i++) tail[(i * 37) % M] = -0.01f * (float)i; /* shuffled ranks */
    double z = 0.0;
    for (int i = 0; i < M; i++) z += exp(-0.01 * i);
    int keep = 0;
    for (double cum = 0.0; keep < M;) {
        cum += exp(-0.01 * keep) / z;
        keep++;
        if (cum >= 0.9) break;
    }
    p.top_p = 0.9f;
    s = make(&p, M);
    bad = false;
    for (int i = 0; i < 3000; i++) {
        int32_t t = sample1(s, tail);
        int rank = -1;
        for (int r = 0; r < M; r++)
            if ((r * 37) % M == t) rank = r;
        if (rank < 0 || rank >= keep + 1) bad = true; /* +1: float rounding at the edge */
    }
    CHECK_MSG(!bad, "top-p kept a token past rank %d", keep);
    cleave_sampler_free(s);
}

static void test_min_p(void) {
    /* p = 0.6, 0.3, 0.06, 0.04; min_p 0.2 -> threshold 0.12 keeps 0 and 1 */
    const float logits[4] = {logf(0.6f), logf(0.3f), logf(0.06f), logf(0.04f)};
    cleave_sampler_params p = plain_params();
    p.min_p = 0.2f;
    cleave_sampler *s = make(&p, 4);
    int hits[4] = {0};
    for (int i = 0; i < 4000; i++) hits[sample1(s, logits) & 3]++;
    CHECK(hits[2] == 0 && hits[3] == 0 && hits[0] > 0 && hits[1] > 0);
    cleave_sampler_free(s);
    /* min_p 0.08 -> threshold 0.048 keeps token 2 (0.06) but not 3 (0.04) */
    p.min_p = 0.08f;
    s = make(&p, 4);
    memset(hits, 0, sizeof hits);
    for (int i = 0; i < 4000; i++) hits[sample1(s, logits) & 3]++;
    CHECK(hits[2] > 0 && hits[3] == 0);
    cleave_sampler_free(s);
}

static void test_penalties(void) {
    cleave_sampler_params p = plain_params();
    p.temperature = 0.0f;
    p.penalty_last_n = 64;

    float l3[3] = {2.0f, 1.9f, 0.5f};
    const float l3_copy[3] = {2.0f, 1.9f, 0.5f};
    p.repeat_penalty = 1.1f; /* 2.0 / 1.1 = 1.82 < 1.9 */
    cleave_sampler *s = make(&p, 3);
    CHECK(sample1(s, l3) == 0);       /* records 0 */
    CHECK(sample1(s, l3) == 1);       /* 0 is penalized now */
    CHECK(memcmp(l3, l3_copy, sizeof l3) == 0); /* caller's logits untouched */
    cleave_sampler_reset(s);
    CHECK(sample1(s, l3) == 0);
    cleave_sampler_free(s);

    /* negative logits are multiplied: -1.0 * 1.1 = -1.1 < -1.05 */
    float neg[2] = {-1.0f, -1.05f};
    s = make(&p, 2);
    cleave_sampler_accept(s, 0);
    CHECK(sample1(s, neg) == 1);
    cleave_sampler_free(s);

    /* frequency: count * 0.3 */
    float l2[2] = {2.0f, 1.5f};
    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.3f;
    s = make(&p, 2);
    cleave_sampler_accept(s, 0);
    CHECK(sample1(s, l2) == 0); /* 1.7 > 1.5; records a second 0 */
    CHECK(sample1(s, l2) == 1); /* 1.4 < 1.5 */
    cleave_sampler_free(s);

    /* presence: once, whatever the count */
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.6f;
    s = make(&p, 2);
    cleave_sampler_accept(s, 0);
    CHECK(sample1(s, l2) == 1);
    cleave_sampler_free(s);
    p.presence_penalty = 0.4f; /* 1.6 > 1.5 however often 0 occurred */
    s = make(&p, 2);
    for (int i = 0; i < 10; i++) cleave_sampler_accept(s, 0);
    CHECK(sample1(s, l2) == 0);
    cleave_sampler_free(s);

    /* the window: with penalty_last_n = 2, a token 3 back no longer counts */
    p.presence_penalty = 0.0f;
    p.repeat_penalty = 2.0f;
    p.penalty_last_n = 2;
    float l4[4] = {2.0f, 1.5f, 0.0f, 0.0f};
    s = make(&p, 4);
    cleave_sampler_accept(s, 0);
    CHECK(sample1(s, l4) == 1);
    cleave_sampler_accept(s, 2);
    cleave_sampler_accept(s, 3);
    CHECK(sample1(s, l4) == 0);
    cleave_sampler_accept(s, -5);  /* out of range: ignored */
    cleave_sampler_accept(s, 999);
    cleave_sampler_free(s);

    /* penalty_last_n = 0: no penalties at all */
    p.penalty_last_n = 0;
    s = make(&p, 4);
    cleave_sampler_accept(s, 0);
    CHECK(sample1(s, l4) == 0);
    cleave_sampler_free(s);

    /* -1: whole history (capped), so an early token still counts */
    p.penalty_last_n = -1;
    s = make(&p, 4);
    cleave_sampler_accept(s, 0);
    for (int i = 0; i < 1000; i++) cleave_sampler_accept(s, 3);
    CHECK(sample1(s, l4) == 1);
    cleave_sampler_free(s);
}

static void expect_invalid(cleave_sampler_params p, uint32_t n_vocab, const char *what) {
    cleave_sampler *s = (cleave_sampler *)&p; /* must be reset to NULL */
    err_clear();
    cleave_status st = cleave_sampler_new(&p, n_vocab, &s);
    CHECK_MSG(st == CLEAVE_ERR_INVALID_ARG, "%s accepted", what);
    CHECK_MSG(s == NULL, "%s left *out set", what);
    CHECK_MSG(cleave_last_error()[0] != 0, "%s: no message", what);
    if (st == CLEAVE_OK) cleave_sampler_free(s);
}

static void test_invalid(void) {
    cleave_sampler_params p = cleave_sampler_default_params();
    expect_invalid(p, 0, "n_vocab 0");
    cleave_sampler_params q = p;
    q.top_p = 0.0f;
    expect_invalid(q, 10, "top_p 0");
    q = p;
    q.top_p = NAN;
    expect_invalid(q, 10, "top_p NaN");
    q = p;
    q.temperature = NAN;
    expect_invalid(q, 10, "temperature NaN");
    q = p;
    q.repeat_penalty = 0.0f;
    expect_invalid(q, 10, "repeat_penalty 0");
    q = p;
    q.repeat_penalty = -1.0f;
    expect_invalid(q, 10, "repeat_penalty -1");
    q = p;
    q.frequency_penalty = INFINITY;
    expect_invalid(q, 10, "frequency_penalty inf");
    q = p;
    q.penalty_last_n = -2;
    expect_invalid(q, 10, "penalty_last_n -2");
    q = p;
    q.min_p = 1.5f;
    expect_invalid(q, 10, "min_p 1.5");
    CHECK(cleave_sampler_new(&p, 10, NULL) == CLEAVE_ERR_INVALID_ARG);
    /* top_p above 1 and negative min_p / top_k just mean "off" */
    q = p;
    q.top_p = 1.5f;
    q.min_p = -1.0f;
    q.top_k = -3;
    cleave_sampler *s = make(&q, 10);
    int32_t t;
    CHECK(cleave_sampler_sample(s, NULL, &t) == CLEAVE_ERR_INVALID_ARG);
    cleave_sampler_free(s);
}

static void test_nan(void) {
    cleave_sampler_params p = plain_params();
    p.temperature = 0.0f;
    float l[3] = {NAN, 1.0f, NAN};
    cleave_sampler *g = make(&p, 3);
    CHECK(sample1(g, l) == 1);
    p.temperature = 1.0f;
    cleave_sampler *s = make(&p, 3);
    for (int i = 0; i < 100; i++) CHECK(sample1(s, l) == 1);

    float bad[3] = {NAN, -INFINITY, NAN};
    int32_t t = 42;
    CHECK(cleave_sampler_sample(g, bad, &t) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_sampler_sample(s, bad, &t) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "-inf") != NULL);

    /* +inf wins without poisoning the softmax */
    float inf[3] = {0.0f, INFINITY, 5.0f};
    for (int i = 0; i < 50; i++) CHECK(sample1(s, inf) == 1);
    CHECK(sample1(g, inf) == 1);
    cleave_sampler_free(g);
    cleave_sampler_free(s);

    /* a temperature so small that 1/T overflows still acts like greedy */
    p.temperature = 1e-40f;
    s = make(&p, 3);
    float l3[3] = {0.0f, 0.5f, 0.49f};
    for (int i = 0; i < 50; i++) CHECK(sample1(s, l3) == 1);
    cleave_sampler_free(s);
}

static void test_oom(void) {
    cleave_sampler_params p = cleave_sampler_default_params();
    for (long k = 1; k <= 8; k++) {
        cleave_sampler *s = NULL;
        err_fail_alloc_countdown = k;
        cleave_status st = cleave_sampler_new(&p, 1000, &s);
        err_fail_alloc_countdown = 0;
        CHECK(st == CLEAVE_OK || st == CLEAVE_ERR_OOM);
        CHECK((st == CLEAVE_OK) == (s != NULL));
        cleave_sampler_free(s);
    }
}

/* A 152k vocab with defaults and with only top-p: must stay cheap per token. */
static void test_big_vocab(void) {
    enum { N = 152064, DRAWS = 50 };
    float *l = malloc(N * sizeof *l);
    CHECK(l != NULL);
    if (!l) return;
    fill_logits(l, N, 3);
    cleave_sampler_params p = cleave_sampler_default_params();
    cleave_sampler *s = make(&p, N);
    p.top_k = 0;
    cleave_sampler *s2 = make(&p, N);
    cleave_sampler *ss[2] = {s, s2};
    for (int k = 0; k < 2; k++) {
        clock_t t0 = clock();
        for (int i = 0; i < DRAWS; i++) {
            int32_t a = sample1(ss[k], l);
            CHECK(a >= 0 && a < N);
        }
        double ms = (double)(clock() - t0) * 1000.0 / CLOCKS_PER_SEC / DRAWS;
        fprintf(stderr, "152k vocab, %s: %.3f ms per token\n",
                k ? "top-p only" : "default params", ms);
    }
    cleave_sampler_free(s);
    cleave_sampler_free(s2);
    free(l);
}

/* The one-pass paths (greedy, and temperature alone) choose what the
 * general path would: greedy against a plain first-maximum scan, the
 * temperature draw against the same seed through the general path
 * (top_k = the vocabulary size truncates nothing but takes it), over
 * logits with ties, NaN, -inf and +inf. */
static void test_fast_paths(void) {
    enum { N = 4096 };
    static float l[N];
    uint64_t x = 7;
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < N; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            l[i] = (float)((x >> 40) % 64) / 8.0f; /* many ties */
            if ((x >> 20) % 97 == 0) l[i] = NAN;
            if ((x >> 24) % 89 == 0) l[i] = -INFINITY;
        }
        if (round % 4 == 1) l[(round * 131) % N] = INFINITY;
        if (round % 4 == 2) l[(round * 131) % N] = INFINITY, l[(round * 71) % N] = FLT_MAX;
        int want = -1;
        float top = -INFINITY;
        for (int i = 0; i < N; i++) {
            float v = l[i] == INFINITY ? FLT_MAX : l[i];
            if (v > top) top = v, want = i;
        }
        cleave_sampler_params g = plain_params();
        g.temperature = 0.0f;
        cleave_sampler *sg = make(&g, N);
        CHECK_MSG(sample1(sg, l) == want, "round %d: greedy %d, want %d", round, sample1(sg, l), want);
        cleave_sampler_free(sg);
        cleave_sampler_params a = plain_params(), b = plain_params();
        a.temperature = b.temperature = 0.5f + 0.1f * (float)(round % 10);
        a.seed = b.seed = (uint64_t)round;
        b.top_k = N;
        cleave_sampler *sa = make(&a, N), *sb = make(&b, N);
        for (int k = 0; k < 50; k++) {
            int32_t ta = sample1(sa, l), tb = sample1(sb, l);
            CHECK_MSG(ta == tb, "round %d draw %d: %d one-pass, %d general", round, k, ta, tb);
        }
        cleave_sampler_free(sa);
        cleave_sampler_free(sb);
    }
}

int main(void) {
    test_defaults();
    test_greedy();
    test_seeds();
    test_distribution();
    test_top_p();
    test_min_p();
    test_penalties();
    test_invalid();
    test_nan();
    test_oom();
    test_big_vocab();
    test_fast_paths();
    return tu_finish("test_sampler");
}
