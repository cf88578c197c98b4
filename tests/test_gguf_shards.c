/* Split GGUF models: a tiny model written as shards the way llama-gguf-split
 * lays them out (all metadata in the first, split.no/count/tensors.count in
 * every one, each shard its own tensors and data) loads from any shard's path
 * and gives bit-identical logits and greedy tokens to the unsplit file; a
 * missing shard, a wrong split.no or split.count, a tensor in two shards, a
 * wrong tensor count and a renamed shard are refused by name. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "model/model.h"
#include "testutil.h"

typedef struct {
    int no, count, n_tensors; /* the split.* values a shard is written with */
} split_keys;

static cleave_status set_split(gguf_writer *w, const gguf_file *src, void *user) {
    const split_keys *k = user;
    (void)src;
    cleave_status st = gguf_set_u16(w, "split.no", (uint16_t)k->no);
    if (!st) st = gguf_set_u16(w, "split.count", (uint16_t)k->count);
    if (!st) st = gguf_set_i32(w, "split.tensors.count", k->n_tensors);
    return st;
}

static const char *shard_path(const char *prefix, int no, int count) {
    static char buf[8][4096];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 4096, "%s-%05d-of-%05d.gguf", prefix, no + 1, count);
    return p;
}

/* Writes src as count shards under prefix, shard i holding tensors
 * [bounds[i], bounds[i + 1]). */
static void write_shards(const char *src, const char *prefix, const size_t *bounds, int count,
                         int n_tensors) {
    for (int i = 0; i < count; i++) {
        split_keys k = {i, count, n_tensors};
        tu_gguf_rewrite(src, shard_path(prefix, i, count), i == 0, bounds[i], bounds[i + 1],
                        set_split, &k);
    }
}

/* One shard rewritten with other split.* values or tensors. */
static void rewrite_shard(const char *src, const char *prefix, int i, int count, size_t t0,
                          size_t t1, split_keys k) {
    tu_gguf_rewrite(src, shard_path(prefix, i, count), i == 0, t0, t1, set_split, &k);
}

/* A path in the test's folder that stays valid (tu_tmp's are recycled). */
static const char *dir_path(const char *name) {
    static char buf[16][4096];
    static int slot;
    char *p = buf[slot++ % 16];
    snprintf(p, 4096, "%s", tu_tmp(name));
    return p;
}

enum { N_PROMPT = 8, N_GEN = 12 };

/* Logits of every prompt token, then greedy tokens; false when it fails. */
static bool run(const char *path, float *logits, int32_t *gen, size_t n_vocab) {
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    if (!m) return false;
    cleave_context_params cp = cleave_context_default_params();
    cp.kv_type = CLEAVE_TYPE_F32;
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cleave_context *ctx = NULL;
    CHECK_OK(cleave_context_new(m, &cp, &ctx));
    bool ok = ctx != NULL;
    int32_t toks[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        toks[i] = (int32_t)((i * 37 + 5) % n_vocab);
    if (ok) CHECK_OK(cleave_decode(ctx, toks, N_PROMPT, 0, 0, true));
    for (int i = 0; ok && i < N_PROMPT; i++) {
        const float *l = cleave_get_logits(ctx, i);
        ok = l != NULL;
        if (ok) memcpy(logits + (size_t)i * n_vocab, l, n_vocab * sizeof *l);
    }
    for (int i = 0; ok && i < N_GEN; i++) {
        const float *l = cleave_get_logits(ctx, -1);
        gen[i] = tu_argmax(l, n_vocab);
        ok = cleave_decode(ctx, &gen[i], 1, N_PROMPT + i, 0, false) == CLEAVE_OK;
    }
    CHECK_MSG(ok, "%s: running failed: %s", path, cleave_last_error());
    cleave_context_free(ctx);
    cleave_model_free(m);
    return ok;
}

/* The split model equals the unsplit one bit for bit. */
static void check_same(const char *label, const char *path, const float *ref_logits,
                       const int32_t *ref_gen, size_t n_vocab) {
    float *logits = calloc((size_t)N_PROMPT * n_vocab, sizeof *logits);
    int32_t gen[N_GEN] = {0};
    if (run(path, logits, gen, n_vocab)) {
        CHECK_MSG(memcmp(logits, ref_logits, (size_t)N_PROMPT * n_vocab * sizeof *logits) == 0,
                  "%s: logits differ from the unsplit file", label);
        CHECK_MSG(memcmp(gen, ref_gen, sizeof gen) == 0, "%s: greedy tokens differ", label);
    }
    free(logits);
}

/* Every tensor of the split model is the unsplit file's, byte for byte,
 * found in the shard the bounds put it in. */
static void check_tensors(const char *path, const char *whole, const size_t *bounds, int count) {
    struct cleave_model *m = NULL, *w = NULL;
    CHECK_OK(cleave_model_load(path, NULL, &m));
    CHECK_OK(cleave_model_load(whole, NULL, &w));
    if (!m || !w) goto out;
    CHECK(gguf_shards_count(m->shards) == (size_t)count);
    CHECK(gguf_shards_n_tensors(m->shards) == gguf_shards_n_tensors(w->shards));
    for (size_t i = 0; i < gguf_shards_n_tensors(w->shards); i++) {
        const gguf_tensor *a = gguf_shards_tensor_at(w->shards, i);
        const gguf_tensor *b = gguf_shards_find_tensor(m->shards, a->name);
        if (!b) {
            CHECK_MSG(0, "tensor '%s' missing from the shards", a->name);
            continue;
        }
        int k = 0;
        while (k + 1 < count && i >= bounds[k + 1])
            k++;
        CHECK_MSG(b == gguf_find_tensor(gguf_shards_file(m->shards, (size_t)k), a->name),
                  "tensor '%s' is not in shard %d", a->name, k + 1);
        CHECK_MSG(b->nbytes == a->nbytes && memcmp(a->data, b->data, a->nbytes) == 0,
                  "tensor '%s' differs", a->name);
    }
out:
    cleave_model_free(m);
    cleave_model_free(w);
}

/* Loading fails with st and a message holding every needle. */
static void expect_fail(const char *label, const char *path, cleave_status want, const char *n1,
                        const char *n2) {
    cleave_model *m = NULL;
    cleave_status st = cleave_model_load(path, NULL, &m);
    const char *msg = cleave_last_error();
    fprintf(stderr, "%-18s -> %s: %s\n", label, cleave_status_name(st), msg);
    CHECK_MSG(st == want, "%s: got %s, want %s", label, cleave_status_name(st),
              cleave_status_name(want));
    CHECK_MSG(m == NULL, "%s: model returned on failure", label);
    CHECK_MSG(strstr(msg, n1) != NULL, "%s: message lacks '%s'", label, n1);
    CHECK_MSG(!n2 || strstr(msg, n2) != NULL, "%s: message lacks '%s'", label, n2);
    cleave_model_free(m);
}

static void check_info(const char *path) {
    const char *out = tu_tmp("info.txt");
    FILE *f = fopen(out, "w");
    if (!f) return;
    CHECK_OK(cleave_print_info(path, 64, f));
    fclose(f);
    size_t n;
    char *text = (char *)tu_slurp(out, &n);
    CHECK_MSG(text && strstr(text, "in 3 shards") && strstr(text, "blk.1.ffn_down.weight"),
              "info on a shard does not show the merged model:\n%s", text ? text : "(none)");
    free(text);
}

/* Each allocation of a sharded load failing in turn: an out-of-memory
 * status every time (the sanitizer build checks nothing leaks), then a load. */
static void check_alloc_failures(const char *path) {
    int seen = 0;
    for (long k = 1; k < 10000; k++) {
        err_clear();
        err_fail_alloc_countdown = k;
        cleave_model *m = NULL;
        cleave_status st = cleave_model_load(path, NULL, &m);
        bool injected = err_fail_alloc_countdown == 0;
        err_fail_alloc_countdown = 0;
        cleave_model_free(m);
        if (!injected) {
            CHECK_OK(st);
            break;
        }
        seen++;
        CHECK_MSG(st == CLEAVE_ERR_OOM && strstr(cleave_last_error(), "out of memory"),
                  "allocation %ld: got %s (%s)", k, cleave_status_name(st), cleave_last_error());
    }
    CHECK(seen > 5);
}

int main(void) {
    const char *whole = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    if (!whole) return tu_finish("test_gguf_shards");
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(whole, &f));
    if (!f) return tu_finish("test_gguf_shards");
    int nt = (int)gguf_n_tensors(f);
    gguf_close(f);
    size_t n_vocab = 0;
    cleave_model *m = tu_load(whole, &n_vocab);
    cleave_model_free(m);
    if (!m) return tu_finish("test_gguf_shards");
    float *ref = calloc((size_t)N_PROMPT * n_vocab, sizeof *ref);
    int32_t ref_gen[N_GEN];
    if (!run(whole, ref, ref_gen, n_vocab)) return tu_finish("test_gguf_shards");

    /* three shards of uneven size, loaded from the first and from the last */
    const char *p3 = dir_path("three");
    size_t b3[] = {0, 5, 12, (size_t)nt};
    write_shards(whole, p3, b3, 3, nt);
    check_same("3 shards, first", shard_path(p3, 0, 3), ref, ref_gen, n_vocab);
    check_same("3 shards, last", shard_path(p3, 2, 3), ref, ref_gen, n_vocab);
    check_tensors(shard_path(p3, 1, 3), whole, b3, 3);
    check_info(shard_path(p3, 0, 3));
    check_alloc_failures(shard_path(p3, 1, 3));

    /* the first shard holding metadata alone (--no-tensor-first-split) */
    const char *p2 = dir_path("meta-first");
    size_t b2[] = {0, 0, (size_t)nt};
    write_shards(whole, p2, b2, 2, nt);
    check_same("2 shards, metadata first", shard_path(p2, 0, 2), ref, ref_gen, n_vocab);
    check_tensors(shard_path(p2, 0, 2), whole, b2, 2);

    /* a shard missing */
    const char *pm = dir_path("missing");
    write_shards(whole, pm, b3, 3, nt);
    unlink(shard_path(pm, 1, 3));
    expect_fail("missing shard", shard_path(pm, 0, 3), CLEAVE_ERR_IO, "shard 2 of 3", "is missing");

    /* the third shard says it is the second */
    const char *pn = dir_path("wrong-no");
    write_shards(whole, pn, b3, 3, nt);
    rewrite_shard(whole, pn, 2, 3, b3[2], b3[3], (split_keys){1, 3, nt});
    expect_fail("wrong split.no", shard_path(pn, 0, 3), CLEAVE_ERR_FORMAT, "expected shard 3 of 3",
                "split.no 1");

    /* the second shard counts four */
    const char *pc = dir_path("wrong-count");
    write_shards(whole, pc, b3, 3, nt);
    rewrite_shard(whole, pc, 1, 3, b3[1], b3[2], (split_keys){1, 4, nt});
    expect_fail("wrong split.count", shard_path(pc, 0, 3), CLEAVE_ERR_FORMAT,
                "expected shard 2 of 3", "split.count 4");

    /* a tensor in two shards */
    const char *pd = dir_path("duplicate");
    write_shards(whole, pd, b3, 3, nt);
    rewrite_shard(whole, pd, 1, 3, b3[1] - 1, b3[2], (split_keys){1, 3, nt});
    expect_fail("duplicate tensor", shard_path(pd, 0, 3), CLEAVE_ERR_FORMAT, "is in two shards",
                NULL);

    /* split.tensors.count disagrees with the shards (one tensor left out) */
    const char *pt = dir_path("short");
    write_shards(whole, pt, b3, 3, nt);
    rewrite_shard(whole, pt, 2, 3, b3[2], b3[3] - 1, (split_keys){2, 3, nt});
    expect_fail("tensor count", shard_path(pt, 0, 3), CLEAVE_ERR_FORMAT, "split.tensors.count",
                NULL);

    /* a shard renamed: its siblings cannot be found */
    const char *renamed = tu_tmp("renamed.gguf");
    size_t n;
    unsigned char *bytes = tu_slurp(shard_path(p3, 0, 3), &n);
    if (bytes) tu_spit(renamed, bytes, n);
    free(bytes);
    expect_fail("renamed shard", renamed, CLEAVE_ERR_FORMAT, "-00001-of-00003.gguf", NULL);

    free(ref);
    return tu_finish("test_gguf_shards");
}
