/* Sampling a step's rows where the logits are (the GPU): one row per
 * sequence, its sampler's parameters, its penalty window as a list of
 * distinct tokens and counts, and the uniform its draw uses, taken from
 * the sampler's own random stream. The algorithm, defined by
 * sample_row_ref below (and run by the CUDA backend's `sample` op):
 *
 *   1. logits cleaned (NaN: -inf, +inf: FLT_MAX), the listed tokens
 *      penalized;
 *   2. temperature <= 0: the best (lowest id on ties);
 *   3. no truncation (top-k off or >= the live tokens, top-p >= 1, min-p
 *      <= 0): weights exp((l - max) / T) over the vocabulary, walked in id
 *      order until their running sum passes u times the total;
 *   4. else the live candidates ranked (logit, then id), the first top-k,
 *      then the shortest prefix whose weights at T = 1 reach top-p of the
 *      set's, then those within log(min-p) of the best, then weights at
 *      T walked best first as in 3.
 *
 * Exactly the host sampler's choice (cleave_sampler_sample), up to the
 * order its double sums are added in. A device sorts at most
 * SAMPLE_ROW_CAP candidates: a row whose ranked set can be longer (top-k
 * above the cap, top-p or min-p without top-k over a flat distribution),
 * or whose set ends among more equal logits than the cap (the last places
 * go by lowest id among them), is handed back, and the host samples it
 * from the logits. */
#ifndef CLEAVE_SAMPLE_ROWS_H
#define CLEAVE_SAMPLE_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SAMPLE_ROW_CAP 1024     /* candidates a device ranks in fast memory */
#define SAMPLE_ROW_MAX_PEN 1024 /* distinct penalized tokens a row carries */

typedef struct sample_row {
    float temperature, top_p, min_p;
    int32_t top_k;
    float repeat_penalty, frequency_penalty, presence_penalty;
    uint32_t n_pen;         /* penalized tokens: ids ascending, counts */
    const int32_t *pen_tok;
    const uint32_t *pen_cnt;
    double u;               /* the draw's uniform in [0, 1) */
} sample_row;

/* Outcome of a row. */
#define SAMPLE_ROW_OK 0
#define SAMPLE_ROW_HOST 1  /* the host must sample it (see above) */
#define SAMPLE_ROW_EMPTY 2 /* every logit is -inf or NaN */

/* The reference: row r of n_vocab logits -> *token, or one of the
 * outcomes above. scratch: n_vocab floats and ids (sample_row_scratch
 * bytes), so nothing is allocated per call. */
size_t sample_row_scratch(uint32_t n_vocab);
int sample_row_ref(const float *logits, uint32_t n_vocab, const sample_row *r, void *scratch,
                   int32_t *token);

/* The checks every device's `sample` op makes before it samples: logits,
 * rows, tokens and outcomes given, a vocabulary, rows ld >= n_vocab floats
 * apart, each row's penalty list within SAMPLE_ROW_MAX_PEN and given when
 * it is not empty. CLEAVE_ERR_INVALID_ARG with the reason, else OK. */
cleave_status sample_rows_check(const float *logits, size_t ld, size_t n_rows, uint32_t n_vocab,
                                const sample_row *rows, const int32_t *tokens, const int *outcomes);

/* Fills *row for the sampler's next token: its parameters, its penalty
 * window (into pen_tok / pen_cnt, room for SAMPLE_ROW_MAX_PEN; a larger
 * window makes the row SAMPLE_ROW_HOST: returns false) and u, drawn from
 * its stream only where the draw needs one. Nothing is recorded: after
 * the choice, sampler_row_commit(s, token) adds the token to the
 * history; sampler_row_abandon(s) puts the stream back, so a row the host
 * then samples with cleave_sampler_sample draws exactly as it would have. */
bool sampler_row_prepare(cleave_sampler *s, sample_row *row, int32_t *pen_tok, uint32_t *pen_cnt);
void sampler_row_commit(cleave_sampler *s, int32_t token);
void sampler_row_abandon(cleave_sampler *s);

#ifdef __cplusplus
}
#endif

#endif
