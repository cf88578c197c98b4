/* The batched sampling algorithm (sample_rows.h) against the host sampler:
 * two samplers with one seed in lock step over many steps, one sampling
 * with cleave_sampler_sample, the other through sampler_row_prepare, the
 * reference sample_row_ref and sampler_row_commit (the path a device's
 * choices take), on fixed logits of several shapes: every parameter
 * combination, penalties, ties, -inf and NaN entries, and rows the device
 * hands back to the host. The choices must be the same token every time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cleave.h"
#include "sample/sample_rows.h"
#include "testutil.h"

static uint64_t rng_state = 0x5eed;
static double urand01(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

/* logits of a shape: 0 peaked (a few clear winners), 1 flat (long
 * tail), 2 ties and holes (-inf, NaN, +inf), 3 coarse (quantized values) */
static void make_logits(float *l, uint32_t n, int shape) {
    for (uint32_t i = 0; i < n; i++) {
        double g = urand01();
        switch (shape) {
        case 0: l[i] = (float)(-8.0 * g); if (i % 97 == 5) l[i] += 9.0f; break;
        case 1: l[i] = (float)(0.3 * g); break;
        case 2:
            l[i] = (float)(4.0 * g);
            if (i % 13 == 0) l[i] = -INFINITY;
            if (i % 29 == 0) l[i] = NAN;
            if (i % 31 == 0) l[i] = 3.5f;
            break;
        default: l[i] = (float)floor(8.0 * g) * 0.5f; break;
        }
    }
    if (shape == 2 && n > 40) l[n - 7] = INFINITY;
}

typedef struct {
    uint64_t ok, host, empty;
} tally;

static void lockstep(const cleave_sampler_params *p, uint32_t n, int shape, int steps, tally *t) {
    cleave_sampler *a = NULL, *b = NULL;
    CHECK_OK(cleave_sampler_new(p, n, &a));
    CHECK_OK(cleave_sampler_new(p, n, &b));
    if (!a || !b) return;
    float *l = malloc((size_t)n * sizeof *l);
    void *scratch = malloc(sample_row_scratch(n));
    int32_t pen_tok[SAMPLE_ROW_MAX_PEN];
    uint32_t pen_cnt[SAMPLE_ROW_MAX_PEN];
    /* a shared prompt in both histories, so penalties act from step 0 */
    for (int i = 0; i < 12; i++) {
        cleave_sampler_accept(a, (int32_t)(i * 7 % n));
        cleave_sampler_accept(b, (int32_t)(i * 7 % n));
    }
    for (int s = 0; s < steps; s++) {
        make_logits(l, n, shape);
        int32_t ta = -1, tb = -1;
        cleave_status sa = cleave_sampler_sample(a, l, &ta);
        sample_row row;
        bool fits = sampler_row_prepare(b, &row, pen_tok, pen_cnt);
        int out = fits ? sample_row_ref(l, n, &row, scratch, &tb) : SAMPLE_ROW_HOST;
        if (out == SAMPLE_ROW_OK) {
            sampler_row_commit(b, tb);
            t->ok++;
        } else if (out == SAMPLE_ROW_HOST) {
            sampler_row_abandon(b);
            CHECK_OK(cleave_sampler_sample(b, l, &tb));
            t->host++;
        } else {
            sampler_row_abandon(b);
            t->empty++;
            CHECK_MSG(sa != CLEAVE_OK, "host sampled %d from a row the reference calls empty", ta);
            continue;
        }
        CHECK_MSG(sa == CLEAVE_OK && ta == tb,
                  "shape %d step %d (T %g k %d p %g min-p %g rep %g): host %d, rows %d%s", shape, s,
                  (double)p->temperature, p->top_k, (double)p->top_p, (double)p->min_p,
                  (double)p->repeat_penalty, ta, tb, out == SAMPLE_ROW_HOST ? " (via host)" : "");
    }
    free(l);
    free(scratch);
    cleave_sampler_free(a);
    cleave_sampler_free(b);
}

int main(void) {
    static const float temps[] = {0.0f, 0.7f, 1.0f, 1.8f};
    static const int32_t ks[] = {0, 1, 40, 2000};
    static const float ps[] = {1.0f, 0.95f, 0.5f};
    static const float mps[] = {0.0f, 0.05f};
    static const uint32_t vocabs[] = {37, 5000};
    tally t = {0};
    uint64_t seed = 1;
    for (int vi = 0; vi < 2; vi++)
        for (int ti = 0; ti < 4; ti++)
            for (int ki = 0; ki < 4; ki++)
                for (int pi = 0; pi < 3; pi++)
                    for (int mi = 0; mi < 2; mi++)
                        for (int pen = 0; pen < 2; pen++) {
                            cleave_sampler_params p = cleave_sampler_default_params();
                            p.temperature = temps[ti];
                            p.top_k = ks[ki];
                            p.top_p = ps[pi];
                            p.min_p = mps[mi];
                            p.penalty_last_n = pen ? 64 : 0;
                            p.repeat_penalty = pen ? 1.3f : 1.0f;
                            p.frequency_penalty = pen ? 0.2f : 0.0f;
                            p.presence_penalty = pen ? 0.1f : 0.0f;
                            p.seed = seed++;
                            for (int shape = 0; shape < 4; shape++) lockstep(&p, vocabs[vi], shape, 6, &t);
                        }
    /* a window of more distinct tokens than a row carries: handed back */
    cleave_sampler_params p = cleave_sampler_default_params();
    p.penalty_last_n = -1;
    p.repeat_penalty = 1.1f;
    cleave_sampler *s = NULL;
    CHECK_OK(cleave_sampler_new(&p, 4000, &s));
    for (int i = 0; i < SAMPLE_ROW_MAX_PEN + 10; i++) cleave_sampler_accept(s, i);
    int32_t pen_tok[SAMPLE_ROW_MAX_PEN];
    uint32_t pen_cnt[SAMPLE_ROW_MAX_PEN];
    sample_row row;
    CHECK(!sampler_row_prepare(s, &row, pen_tok, pen_cnt));
    sampler_row_abandon(s);
    cleave_sampler_free(s);
    printf("rows sampled by the reference %llu, handed to the host %llu, empty %llu\n",
           (unsigned long long)t.ok, (unsigned long long)t.host, (unsigned long long)t.empty);
    CHECK(t.ok > 5 * t.host); /* the device path is the common one (top-k 2000 > the cap: host) */
    return tu_finish("test_sample_rows");
}
