/* `cleave run -np N`: several sequences of one prompt in one context, each
 * step one batch of every active sequence's work (a whole prompt for a
 * sequence that arrives, one token for each that generates). With -psm
 * the context's split mode follows the phase of the step through the gate
 * (cleave_psm_gate_step): a step of prompts alone runs under -psm, a step
 * of generated tokens alone under -sm, a mixed step in whatever mode the
 * context is in, and no mode is left within --np-dwell steps of entering
 * it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

typedef struct {
    cleave_sampler *smp;
    char *text;
    size_t len, cap;
    int32_t last, pos;
    long long generated;
    bool started, done;
} seq_state;

static bool append(seq_state *s, const char *p, size_t n) {
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->cap ? s->cap * 2 : 256) + n;
        char *t = realloc(s->text, cap);
        if (!t) return false;
        s->text = t, s->cap = cap;
    }
    memcpy(s->text + s->len, p, n);
    s->len += n;
    s->text[s->len] = '\0';
    return true;
}

/* The sequence's next token: `drawn` where the device drew it, else from
 * the logits of its last one in the batch (row `row`); appended to its
 * text, or the end of the sequence. */
static int next_token(cleave_model *m, cleave_context *ctx, seq_state *s, int32_t row, int32_t drawn,
                      long long limit) {
    int32_t tok = drawn;
    if (drawn == CLEAVE_TOKEN_SAMPLE_ON_HOST) {
        cleave_status st = cleave_sampler_sample(s->smp, cleave_get_logits(ctx, row), &tok);
        if (st) return cli_fail("sampling", st); /* sampling recorded tok for the penalties */
    }
    if (cleave_token_is_eog(m, tok)) {
        s->done = true;
        return 0;
    }
    char piece[256];
    size_t n;
    if (cleave_token_to_piece(m, s->last, tok, piece, sizeof piece, &n) == CLEAVE_OK && !append(s, piece, n)) {
        fprintf(stderr, "cleave run: out of memory for the generated text\n");
        return 1;
    }
    s->last = tok;
    if (++s->generated >= limit) s->done = true;
    return 0;
}

int run_parallel(cleave_model *m, cleave_context *ctx, const run_opts *o, const char *text,
                 size_t text_len, const int32_t *prompt, size_t n_prompt) {
    size_t n_seq = (size_t)o->n_parallel;
    uint32_t n_ctx = cleave_context_n_ctx(ctx);
    long long room = (long long)(n_ctx / n_seq) - (long long)n_prompt;
    long long limit = o->n_predict < 0 ? room : o->n_predict;
    if (limit < 1 || (long long)n_seq * ((long long)n_prompt + limit) > (long long)n_ctx) {
        fprintf(stderr,
                "cleave run: -np %zu needs %zu x (%zu prompt + %lld generated) cells; the context holds %u; "
                "use a larger -c or a smaller -n\n",
                n_seq, n_seq, n_prompt, limit < 1 ? 1 : limit, n_ctx);
        return 1;
    }
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    seq_state *seqs = calloc(n_seq, sizeof *seqs);
    size_t cap = n_seq * (n_prompt + 1);
    int32_t *tok = malloc(cap * sizeof *tok), *pos = malloc(cap * sizeof *pos), *sid = malloc(cap * sizeof *sid);
    int32_t *row = malloc(n_seq * sizeof *row), *drawn = malloc(cap * sizeof *drawn);
    cleave_sampler **row_smp = malloc(cap * sizeof *row_smp); /* each row's sampler, for the device */
    bool *in_prefill = malloc(n_seq * sizeof *in_prefill);
    int rc = 1;
    if (!seqs || !tok || !pos || !sid || !row || !in_prefill || !drawn || !row_smp) {
        fprintf(stderr, "cleave run: out of memory for %zu sequences\n", n_seq);
        goto out;
    }
    for (size_t i = 0; i < n_seq; i++) {
        cleave_sampler_params sp = o->sp;
        sp.seed += i;
        cleave_status st = cleave_sampler_new(&sp, d.n_vocab, &seqs[i].smp);
        if (st) {
            rc = cli_fail("sampler", st);
            goto out;
        }
        for (size_t k = 0; k < n_prompt; k++) cleave_sampler_accept(seqs[i].smp, prompt[k]);
    }
    cleave_context_set_progress(ctx, NULL, NULL); /* steps, not one long prompt */
    bool switching = cli_phased(&o->place);
    cleave_psm_gate gate = {cleave_context_split_mode(ctx), (uint32_t)o->np_dwell, (uint32_t)o->np_dwell};
    long long n_switches = 0, prompt_tokens = 0, gen_tokens = 0;
    double t0 = cli_now();
    for (long long step = 0;; step++) {
        size_t n = 0, n_active = 0;
        for (size_t i = 0; i < n_seq; i++) {
            seq_state *s = &seqs[i];
            row[i] = -1;
            if (s->done) continue;
            if (!s->started && step >= (long long)i * o->np_stagger) { /* its prompt arrives */
                for (size_t k = 0; k < n_prompt; k++)
                    tok[n] = prompt[k], pos[n] = (int32_t)k, sid[n] = (int32_t)i, n++;
                s->started = true, s->pos = (int32_t)n_prompt, s->last = prompt[n_prompt - 1];
                in_prefill[n_active++] = true;
                prompt_tokens += (long long)n_prompt;
            } else if (s->started) {
                tok[n] = s->last, pos[n] = s->pos++, sid[n] = (int32_t)i, n++;
                in_prefill[n_active++] = false;
            } else {
                continue;
            }
            row[i] = (int32_t)(n - 1);
        }
        bool waiting = false;
        for (size_t i = 0; i < n_seq; i++) waiting |= !seqs[i].started;
        if (!n && !waiting) break;
        if (!n) continue; /* the next prompt has not arrived yet */
        if (switching) {
            cleave_split_mode want =
                cleave_psm_gate_step(&gate, in_prefill, n_active, o->place.psm, o->place.mode);
            if (want != cleave_context_split_mode(ctx)) {
                cleave_phase phase = want == o->place.psm ? CLEAVE_PHASE_PREFILL : CLEAVE_PHASE_GENERATE;
                cleave_status st = cleave_context_set_phase(ctx, phase);
                if (st) { /* the sequences go on where they are */
                    fprintf(stderr, "cleave: warning: %s\n", cleave_last_error());
                    switching = false;
                } else {
                    n_switches++;
                    fprintf(stderr, "cleave: step %lld: switched to the %s split (%zu active)\n", step,
                            cleave_split_mode_name(want), n_active);
                }
            }
        }
        for (size_t k = 0; k < n; k++) row_smp[k] = NULL;
        for (size_t i = 0; i < n_seq; i++)
            if (row[i] >= 0) row_smp[row[i]] = seqs[i].smp;
        cleave_status st = cleave_decode_batch_sample(ctx, tok, pos, sid, n, row_smp, drawn);
        if (st) {
            rc = cli_fail("decoding", st);
            goto out;
        }
        for (size_t i = 0; i < n_seq; i++)
            if (row[i] >= 0 && (rc = next_token(m, ctx, &seqs[i], row[i], drawn[row[i]], limit))) goto out;
    }
    double t = cli_now() - t0;
    for (size_t i = 0; i < n_seq; i++) gen_tokens += seqs[i].generated;
    for (size_t i = 0; i < n_seq; i++) {
        printf("[sequence %zu]\n", i);
        fwrite(text, 1, text_len, stdout);
        if (seqs[i].text) fputs(seqs[i].text, stdout);
        printf("\n");
    }
    fflush(stdout);
    fprintf(stderr, "\n%zu sequences: %lld prompt + %lld generated tokens in %.2f ms (%.2f tok/s), %lld switches\n",
            n_seq, prompt_tokens, gen_tokens, t * 1e3, (prompt_tokens + gen_tokens) / (t > 0 ? t : 1e-9),
            n_switches);
    rc = 0;
out:
    for (size_t i = 0; seqs && i < n_seq; i++) {
        cleave_sampler_free(seqs[i].smp);
        free(seqs[i].text);
    }
    free(seqs);
    free(tok);
    free(pos);
    free(sid);
    free(row);
    free(drawn);
    free(row_smp);
    free(in_prefill);
    return rc;
}
