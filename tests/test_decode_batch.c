/* cleave_decode_batch: three sequences' prompts interleaved in one call
 * (several passes of n_batch 8), then one token of each in one pass, give
 * each sequence's logits as decoding it alone does; only each sequence's
 * last token keeps logits; bad batches are refused and change nothing;
 * cleave_kv_seq_rm forgets one sequence's positions and no other's.
 * Also under the layer and tensor splits on virtual CPU devices, and with
 * sequence regions (the same logits; a sequence holds its region's cells
 * and no more). */
#include <string.h>

#include "testutil.h"

#define N_SEQ 3

static cleave_context *ctx(cleave_model *m, const char *devices, cleave_split_mode mode, uint32_t regions) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 8;
    cp.seq_regions = regions;
    cp.n_ubatch = regions && mode == CLEAVE_SPLIT_LAYER ? 4 : 0; /* micro-batches: windows at an offset */
    cp.n_threads = 1;
    cp.kv_type = CLEAVE_TYPE_F32;
    cp.devices = devices;
    cp.split_mode = mode;
    cleave_context *c = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &c));
    return c;
}

static void check_model(const char *path, const char *devices, cleave_split_mode mode, uint32_t regions) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    const int len[N_SEQ] = {7, 12, 5};
    int32_t prompt[N_SEQ][12];
    for (int s = 0; s < N_SEQ; s++)
        for (int i = 0; i < len[s]; i++) prompt[s][i] = (int32_t)((s * 131 + i * 17 + 3) % nv);
    const int32_t next[N_SEQ] = {5, 9, 2};

    /* each sequence alone: its prompt's last logits, then one more token's */
    float *alone = calloc(2 * N_SEQ * nv, sizeof(float));
    for (int s = 0; s < N_SEQ && alone; s++) {
        cleave_context *c = ctx(m, NULL, CLEAVE_SPLIT_NONE, 0);
        if (!c) continue;
        CHECK_OK(cleave_decode(c, prompt[s], (size_t)len[s], 0, 0, false));
        memcpy(alone + (2 * s) * nv, cleave_get_logits(c, -1), nv * sizeof(float));
        CHECK_OK(cleave_decode(c, &next[s], 1, len[s], 0, false));
        memcpy(alone + (2 * s + 1) * nv, cleave_get_logits(c, -1), nv * sizeof(float));
        cleave_context_free(c);
    }

    /* all together, interleaved: token i of every sequence in turn */
    cleave_context *c = ctx(m, devices, mode, regions);
    if (c && alone) {
        int32_t tok[32], pos[32], seq[32], last[N_SEQ];
        size_t n = 0;
        for (int i = 0; i < 12; i++)
            for (int s = 0; s < N_SEQ; s++)
                if (i < len[s]) {
                    tok[n] = prompt[s][i], pos[n] = i, seq[n] = s + 1;
                    last[s] = (int32_t)n++;
                }
        CHECK_OK(cleave_decode_batch(c, tok, pos, seq, n));
        for (int s = 0; s < N_SEQ; s++) {
            const float *l = cleave_get_logits(c, last[s]);
            CHECK_MSG(l && tu_rel_err(l, alone + (2 * s) * nv, nv) < 1e-5,
                      "%s: sequence %d prompt logits differ (%g)", path, s,
                      l ? tu_rel_err(l, alone + (2 * s) * nv, nv) : 1.0);
        }
        CHECK(cleave_get_logits(c, 0) == NULL); /* not a sequence's last token */
        for (int s = 0; s < N_SEQ; s++) tok[s] = next[s], pos[s] = len[s], seq[s] = s + 1;
        CHECK_OK(cleave_decode_batch(c, tok, pos, seq, N_SEQ));
        for (int s = 0; s < N_SEQ; s++) {
            const float *l = cleave_get_logits(c, s);
            CHECK_MSG(l && tu_rel_err(l, alone + (2 * s + 1) * nv, nv) < 1e-5,
                      "%s: sequence %d step logits differ", path, s);
        }
        /* refusals change nothing */
        int32_t used = cleave_kv_seq_len(c, 1);
        int32_t big[64] = {0}, bpos[64], bseq[64];
        for (int i = 0; i < 64; i++) bpos[i] = 100 + i, bseq[i] = 7;
        CHECK(cleave_decode_batch(c, big, bpos, bseq, 64) == CLEAVE_ERR_CONTEXT_FULL);
        CHECK(cleave_kv_seq_len(c, 1) == used && cleave_kv_seq_len(c, 7) == 0);
        CHECK(cleave_decode_batch(c, big, bpos, bseq, 0) == CLEAVE_ERR_INVALID_ARG);
        CHECK(cleave_decode_batch(c, NULL, bpos, bseq, 1) == CLEAVE_ERR_INVALID_ARG);
        big[0] = (int32_t)nv;
        CHECK(cleave_decode_batch(c, big, bpos, bseq, 1) == CLEAVE_ERR_INVALID_ARG);
        big[0] = 0, bpos[0] = -1;
        CHECK(cleave_decode_batch(c, big, bpos, bseq, 1) == CLEAVE_ERR_INVALID_ARG);
        /* seq_rm drops one sequence's step and nothing else: that step
         * taken again gives the same logits */
        int32_t other = cleave_kv_seq_len(c, 1);
        CHECK_OK(cleave_kv_seq_rm(c, 2, len[1], -1));
        CHECK(cleave_kv_seq_len(c, 2) == len[1] && cleave_kv_seq_len(c, 1) == other);
        CHECK_OK(cleave_decode(c, &next[1], 1, len[1], 2, false));
        const float *l = cleave_get_logits(c, -1);
        CHECK_MSG(l && tu_rel_err(l, alone + 3 * nv, nv) < 1e-5, "%s: the step after seq_rm differs", path);
        CHECK(cleave_kv_seq_rm(c, 2, 5, 3) == CLEAVE_ERR_INVALID_ARG);
        CHECK(cleave_kv_seq_rm(c, -1, 0, -1) == CLEAVE_ERR_INVALID_ARG);
        CHECK(cleave_kv_seq_len(c, 2) == len[1] + 1);
        if (regions) { /* sequence 0 holds 64 / regions cells, however many are free */
            int32_t fill[32] = {0};
            uint32_t per = 64 / regions;
            CHECK(cleave_decode(c, fill, per + 1, 0, 0, false) == CLEAVE_ERR_CONTEXT_FULL);
            CHECK(cleave_kv_seq_len(c, 0) == 0);
            CHECK_OK(cleave_decode(c, fill, per, 0, 0, false));
            CHECK(cleave_decode(c, fill, 1, (int32_t)per, 0, false) == CLEAVE_ERR_CONTEXT_FULL);
        }
    }
    cleave_context_free(c);
    free(alone);
    cleave_model_free(m);
}

/* More regions than cells is refused with a message, not a crash. */
static void check_bad_regions(const char *path) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 64;
    cp.seq_regions = 65;
    cleave_context *c = NULL;
    CHECK(cleave_context_new(m, &cp, &c) == CLEAVE_ERR_INVALID_ARG && c == NULL);
    CHECK(strstr(cleave_last_error(), "regions") != NULL);
    cleave_model_free(m);
}

/* The contract both decode calls share: a call the cache cannot take is
 * refused before its first pass and changes nothing, however many passes
 * of n_batch it would have run, with or without regions; one that fits
 * exactly runs. n_ctx 64, n_batch 8, 2 regions of 32 cells. */
static void check_refusal_changes_nothing(const char *path, const char *devices, cleave_split_mode mode) {
    size_t nv;
    cleave_model *m = tu_load(path, &nv);
    if (!m) return;
    for (uint32_t regions = 0; regions <= 2; regions += 2) {
        cleave_context *c = ctx(m, devices, mode, regions);
        int32_t tok[68], pos[68], seq[68]; /* room for a batch one past the context */
        for (int i = 0; i < 68; i++) tok[i] = (int32_t)((i * 7 + 1) % nv), pos[i] = i, seq[i] = 0;
        uint32_t room = regions ? 32 : 64; /* sequence 0's cells */
        /* 40 tokens of sequence 0 in one batch (5 passes): too many for its region */
        if (regions) {
            CHECK(cleave_decode_batch(c, tok, pos, seq, 40) == CLEAVE_ERR_CONTEXT_FULL);
            CHECK(cleave_kv_seq_len(c, 0) == 0);
            CHECK(cleave_decode(c, tok, 40, 0, 0, false) == CLEAVE_ERR_CONTEXT_FULL);
            CHECK(cleave_kv_seq_len(c, 0) == 0);
        }
        /* 65 tokens: too many for any layout */
        int32_t t65[65];
        for (int i = 0; i < 65; i++) t65[i] = tok[i % 64];
        CHECK(cleave_decode(c, t65, 65, 0, 0, true) == CLEAVE_ERR_CONTEXT_FULL);
        CHECK(cleave_kv_seq_len(c, 0) == 0 && cleave_get_logits(c, -1) == NULL);
        /* a neighbour that fits: exactly the room, in passes of 8 */
        CHECK_OK(cleave_decode(c, tok, room - 3, 0, 0, false));
        CHECK(cleave_kv_seq_len(c, 0) == (int32_t)room - 3 && cleave_get_logits(c, -1) != NULL);
        /* a later batch one token over: refused, the 29 or 61 cached stay */
        CHECK(cleave_decode_batch(c, tok, pos + room - 3, seq, 4) == CLEAVE_ERR_CONTEXT_FULL);
        CHECK(cleave_kv_seq_len(c, 0) == (int32_t)room - 3);
        /* a batch mixing a sequence that fits with one that does not is refused whole */
        if (regions) {
            int32_t r = (int32_t)room;
            int32_t mt[7] = {1, 2, 3, 4, 5, 6, 7}, mp[7] = {0, 1, 2, r - 3, r - 2, r - 1, r}, ms[7] = {1, 1, 1, 0, 0, 0, 0};
            CHECK(cleave_decode_batch(c, mt, mp, ms, 7) == CLEAVE_ERR_CONTEXT_FULL);
            CHECK(cleave_kv_seq_len(c, 1) == 0 && cleave_kv_seq_len(c, 0) == (int32_t)room - 3);
        }
        CHECK_OK(cleave_decode_batch(c, tok, pos + room - 3, seq, 3)); /* the last cells */
        CHECK(cleave_kv_seq_len(c, 0) == (int32_t)room);
        cleave_context_free(c);
    }
    cleave_model_free(m);
}

int main(void) {
    const char *stories = tu_stories_model();
    if (stories) check_model(stories, NULL, CLEAVE_SPLIT_NONE, 0);
    if (stories) check_model(stories, NULL, CLEAVE_SPLIT_NONE, 4); /* sequence regions: the same logits */
    const char *archs[] = {"llama", "qwen2", "qwen3"};
    for (int a = 0; a < 3; a++) {
        const char *p = tu_tiny_model(archs[a], CLEAVE_TYPE_F32);
        if (!p) continue;
        check_model(p, NULL, CLEAVE_SPLIT_NONE, 0);
        check_model(p, "cpu:2", CLEAVE_SPLIT_LAYER, 0);
        check_model(p, "cpu:3", CLEAVE_SPLIT_TENSOR, 0);
        check_model(p, "cpu:2", CLEAVE_SPLIT_LAYER, 4);
        check_model(p, "cpu:3", CLEAVE_SPLIT_TENSOR, 4);
        if (a == 0) check_bad_regions(p);
        if (a == 0) check_refusal_changes_nothing(p, NULL, CLEAVE_SPLIT_NONE);
        if (a == 0) check_refusal_changes_nothing(p, "cpu:2", CLEAVE_SPLIT_LAYER);
    }
    return tu_finish("test_decode_batch");
}
