/* Bad model files and bad requests: each must fail with a clear message and
 * the right status, never crash. Corrupt files are made by patching bytes
 * of a valid generated model. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

typedef struct {
    unsigned char *data;
    size_t size;
} blob;

static blob load(const char *path) {
    blob b;
    b.data = tu_slurp(path, &b.size);
    return b;
}

static const char *save(const char *name, const unsigned char *data, size_t n) {
    const char *p = tu_tmp(name);
    tu_spit(p, data, n);
    return p;
}

/* Byte offset just past a tensor's name in the tensor-info table. */
static size_t tensor_info(const blob *b, const char *name) {
    size_t len = strlen(name);
    unsigned char key[8 + 64];
    uint64_t l = len;
    memcpy(key, &l, 8);
    memcpy(key + 8, name, len);
    unsigned char *hit = memmem(b->data, b->size, key, 8 + len);
    return hit ? (size_t)(hit - b->data) + 8 + len : 0;
}

/* Byte offset of a metadata key's value (past its name and type). */
static size_t key_value(const blob *b, const char *name) {
    size_t off = tensor_info(b, name); /* keys are GGUF strings as tensor names are */
    return off ? off + 4 : 0;
}

/* Loads a patched copy and checks status and that the message mentions `needle`. */
static void expect(const char *label, const blob *b, cleave_status want, const char *needle) {
    const char *p = save(label, b->data, b->size);
    cleave_model *m = NULL;
    cleave_status st = cleave_model_load(p, NULL, &m);
    const char *msg = cleave_last_error();
    fprintf(stderr, "%-22s -> %s: %s\n", label, cleave_status_name(st), msg);
    CHECK_MSG(st == want, "%s: got %s, want %s", label, cleave_status_name(st), cleave_status_name(want));
    CHECK_MSG(m == NULL, "%s: model returned on failure", label);
    CHECK_MSG(strstr(msg, needle) != NULL, "%s: message lacks '%s'", label, needle);
    cleave_model_free(m);
}

/* Mixtures of experts: an expert tensor missing or of the wrong shape,
 * expert counts out of range, gpt-oss without its sinks. */
static void expert_files(void) {
    const char *moe = tu_tiny_model("qwen3moe", CLEAVE_TYPE_F32), *oss = tu_tiny_model("gpt-oss", CLEAVE_TYPE_F32);
    if (!moe || !oss) return;
    blob b = load(moe);
    size_t at = tensor_info(&b, "blk.0.ffn_up_exps.weight");
    CHECK(at != 0);
    b.data[at - 8] = 'q'; /* ffn_up_exps -> ffn_up_expq */
    expect("missing-experts", &b, CLEAVE_ERR_FORMAT, "missing tensor 'blk.0.ffn_up_exps.weight'");
    b.data[at - 8] = 's';
    uint64_t ne2 = 7; /* 8 experts in the keys, 7 in the tensor */
    memcpy(b.data + at + 4 + 16, &ne2, 8);
    expect("expert-count-shape", &b, CLEAVE_ERR_FORMAT, "expected [64, 64, 8]");
    ne2 = 8;
    memcpy(b.data + at + 4 + 16, &ne2, 8);
    unsigned char *key = memmem(b.data, b.size, "qwen3moe.expert_used_count", 26);
    CHECK(key != NULL);
    uint32_t used = 9; /* more than the 8 experts */
    if (key) memcpy(key + 26 + 4, &used, 4);
    expect("experts-used-over", &b, CLEAVE_ERR_FORMAT, "9 experts used of 8");
    free(b.data);
    b = load(oss);
    at = tensor_info(&b, "blk.1.attn_sinks.weight");
    CHECK(at != 0);
    b.data[at - 8] = 'z'; /* attn_sinks -> attn_sinkz */
    expect("missing-sinks", &b, CLEAVE_ERR_FORMAT, "missing tensor 'blk.1.attn_sinks.weight'");
    free(b.data);
}

/* A FIFO (or a directory) where a file is read: the model, an importer's
 * input, a saved state, a rates file. Each is refused at once, naming
 * what it is: a FIFO opened for reading used to wait for a writer forever
 * (ctest's timeout then ended the test). */
static void not_files(const char *good) {
    const char *fifo = tu_tmp("not_a_file.fifo"), *dir = tu_tmp("not_a_file.dir");
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0 || (mkdir(dir, 0700) != 0 && errno != EEXIST)) {
        CHECK(!"a FIFO and a directory to read");
        return;
    }
    const char *paths[2] = {fifo, dir}, *kinds[2] = {"a FIFO", "a directory"};
    for (int i = 0; i < 2; i++) {
        cleave_model *m = NULL;
        cleave_status st = cleave_model_load(paths[i], NULL, &m);
        CHECK_MSG(st == CLEAVE_ERR_IO && strstr(cleave_last_error(), kinds[i]), "model from %s: %s %s", kinds[i],
                  cleave_status_name(st), cleave_last_error());
        cleave_model_free(m);
        st = cleave_convert_llama2c(paths[i], paths[i], tu_tmp("not_a_file.gguf"));
        CHECK_MSG(st == CLEAVE_ERR_IO && strstr(cleave_last_error(), kinds[i]), "llama2.c import from %s: %s %s",
                  kinds[i], cleave_status_name(st), cleave_last_error());
        cleave_psm_decision d;
        st = cleave_psm_decide(paths[i], 64, 8, 0.02, &d);
        CHECK_MSG(st == CLEAVE_ERR_IO && strstr(cleave_last_error(), kinds[i]), "rates from %s: %s %s", kinds[i],
                  cleave_status_name(st), cleave_last_error());
    }
    cleave_model *m = NULL;
    cleave_context *ctx = NULL;
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 1;
    if (!cleave_model_load(good, NULL, &m) && !cleave_context_new(m, &cp, &ctx)) {
        cleave_status st = cleave_state_seq_load_file(ctx, 0, fifo, NULL);
        CHECK_MSG(st == CLEAVE_ERR_IO && strstr(cleave_last_error(), "a FIFO"), "state from a FIFO: %s %s",
                  cleave_status_name(st), cleave_last_error());
    } else {
        CHECK(!"a context to restore into");
    }
    cleave_context_free(ctx);
    cleave_model_free(m);
    unlink(fifo);
    rmdir(dir);
}

/* Generating a model: bad requests refused by name, whole or as shapes
 * only, and nothing left at the output path. */
static void bad_generation(void) {
    const char *out = tu_tmp("gen-refused.gguf");
    unlink(out);
    CHECK(cleave_generate_model(NULL, NULL, CLEAVE_TYPE_F16, 1, out, NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_generate_model("tiny", NULL, CLEAVE_TYPE_F16, 1, NULL, NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_generate_model_shapes("3b", NULL, "f16", out) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "unknown preset '3b'") != NULL);
    CHECK(cleave_generate_model_shapes("tiny", NULL, "Q9_K_Z", out) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "unknown type 'Q9_K_Z'") != NULL);
    CHECK(cleave_generate_model_shapes("70b", "qwen3", "bf16", out) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "preset 70b is a llama model") != NULL);
    CHECK(cleave_generate_model_shapes("tiny", NULL, NULL, out) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_generate_model_shapes("tiny", NULL, "f16", NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_generate_model_shapes("tiny", NULL, "f16", "/nonexistent/dir/x.gguf") == CLEAVE_ERR_IO);
    CHECK(strstr(cleave_last_error(), "/nonexistent/dir/x.gguf") != NULL);
    CHECK(access(out, F_OK) != 0);
}

int main(void) {
    bad_generation();
    expert_files();
    const char *good = tu_tiny_model("llama", CLEAVE_TYPE_F32);
    if (!good) return tu_finish("test_model_errors");
    not_files(good);
    blob b = load(good);
    CHECK(b.size > 1000);
    unsigned char *orig = malloc(b.size);
    memcpy(orig, b.data, b.size);
#define RESET() memcpy(b.data, orig, b.size)

    cleave_model *m = NULL;
    CHECK(cleave_model_load("/nonexistent/model.gguf", NULL, &m) == CLEAVE_ERR_IO);
    CHECK(strstr(cleave_last_error(), "/nonexistent/model.gguf") != NULL);

    b.data[0] = 'X';
    expect("wrong-magic", &b, CLEAVE_ERR_FORMAT, "magic");
    RESET();
    uint32_t v = 1;
    memcpy(b.data + 4, &v, 4);
    expect("version-1", &b, CLEAVE_ERR_UNSUPPORTED, "version");
    v = 99;
    memcpy(b.data + 4, &v, 4);
    expect("version-99", &b, CLEAVE_ERR_UNSUPPORTED, "version");
    RESET();

    blob t = b;
    t.size = 200;
    expect("truncated-header", &t, CLEAVE_ERR_FORMAT, "truncated");
    t.size = b.size - 100;
    expect("truncated-data", &t, CLEAVE_ERR_FORMAT, "past end of file");

    size_t at = tensor_info(&b, "token_embd.weight");
    CHECK(at != 0);
    uint64_t huge = 1ull << 40;
    memcpy(b.data + at + 4 + 8, &huge, 8); /* ne[1] */
    expect("absurd-dims", &b, CLEAVE_ERR_FORMAT, "token_embd.weight");
    RESET();

    unsigned char *arch = memmem(b.data, b.size, "general.architecture", 20);
    CHECK(arch != NULL);
    memcpy(arch + 20 + 4 + 8, "gpt9x", 5); /* value "llama" -> "gpt9x" */
    expect("unknown-arch", &b, CLEAVE_ERR_UNSUPPORTED, "gpt9x");
    RESET();

    at = tensor_info(&b, "blk.1.ffn_up.weight");
    CHECK(at != 0);
    b.data[at - 8] = 'q'; /* blk.1.ffn_up -> blk.1.ffn_uq */
    expect("missing-tensor", &b, CLEAVE_ERR_FORMAT, "blk.1.ffn_up.weight");
    RESET();

    at = tensor_info(&b, "blk.0.attn_q.weight");
    uint64_t ne0 = 32;
    memcpy(b.data + at + 4, &ne0, 8);
    expect("wrong-shape", &b, CLEAVE_ERR_FORMAT, "blk.0.attn_q.weight");
    RESET();

    at = tensor_info(&b, "blk.0.attn_k.weight");
    uint32_t q8_1 = 9, n_dims; /* a ggml type cleave does not run */
    memcpy(&n_dims, b.data + at, 4);
    memcpy(b.data + at + 4 + 8 * n_dims, &q8_1, 4);
    expect("unsupported-type", &b, CLEAVE_ERR_UNSUPPORTED, "'blk.0.attn_k.weight' has type q8_1");
    RESET();

    /* Non-finite float hyperparameters are refused by name (inf ran as garbage) */
    const float inf = INFINITY, nan_v = NAN;
    at = key_value(&b, "llama.rope.freq_base");
    CHECK(at != 0);
    memcpy(b.data + at, &inf, 4);
    expect("rope-base-inf", &b, CLEAVE_ERR_FORMAT, "llama.rope.freq_base is inf, not a finite number");
    RESET();
    at = key_value(&b, "llama.attention.layer_norm_rms_epsilon");
    CHECK(at != 0);
    memcpy(b.data + at, &nan_v, 4);
    expect("norm-eps-nan", &b, CLEAVE_ERR_FORMAT, "layer_norm_rms_epsilon is nan");
    RESET();
    /* context_length 0: it loads, and a context without a size says why
     * there is no default (it said "the smallest context (0) must be 1..0") */
    at = key_value(&b, "llama.context_length");
    CHECK(at != 0);
    memset(b.data + at, 0, 4);
    const char *ctx0 = save("context-length-0", b.data, b.size);
    RESET();
    CHECK_OK(cleave_model_load(ctx0, NULL, &m));
    if (m) {
        cleave_context *c0 = NULL;
        CHECK(cleave_context_new(m, NULL, &c0) == CLEAVE_ERR_INVALID_ARG);
        CHECK_MSG(strstr(cleave_last_error(), "llama.context_length is 0") && strstr(cleave_last_error(), "-c N"),
                  "context_length 0: %s", cleave_last_error());
        cleave_context_params c0p = cleave_context_default_params();
        c0p.n_ctx = 16; /* a size given: it runs */
        CHECK_OK(cleave_context_new(m, &c0p, &c0));
        cleave_context_free(c0);
        cleave_model_free(m);
        m = NULL;
    }

    /* A tokenizer cleave cannot run (BPE for now): the model still loads and
     * runs on token ids; text in or out is a clear error. */
    unsigned char *tm = memmem(b.data, b.size, "tokenizer.ggml.model", 20);
    CHECK(tm != NULL);
    memcpy(tm + 20 + 4 + 8, "bpe42", 5);
    const char *bpe = save("bpe-tokenizer", b.data, b.size);
    RESET();
    CHECK_OK(cleave_model_load(bpe, NULL, &m));
    if (m) {
        int32_t ids[4];
        size_t n_ids;
        CHECK(cleave_tokenize(m, "hi", 2, true, ids, 4, &n_ids) == CLEAVE_ERR_UNSUPPORTED);
        CHECK(strstr(cleave_last_error(), "bpe42") != NULL);
        cleave_context *c2 = NULL;
        CHECK_OK(cleave_context_new(m, NULL, &c2));
        int32_t one = 5;
        CHECK_OK(cleave_decode(c2, &one, 1, 0, 0, false));
        cleave_context_free(c2);
        cleave_model_free(m);
        m = NULL;
    }

    /* A prompt longer than the context: refused, cache untouched, usable. */
    CHECK_OK(cleave_model_load(good, NULL, &m));
    cleave_context *ctx = NULL;
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 16;
    CHECK_OK(cleave_context_new(m, &cp, &ctx));
    int32_t toks[17] = {1};
    for (int i = 1; i < 17; i++) toks[i] = 300 + i;
    CHECK(cleave_decode(ctx, toks, 17, 0, 0, false) == CLEAVE_ERR_CONTEXT_FULL);
    CHECK(strstr(cleave_last_error(), "context") != NULL);
    CHECK(cleave_kv_seq_len(ctx, 0) == 0);
    CHECK_OK(cleave_decode(ctx, toks, 16, 0, 0, false));
    CHECK(cleave_decode(ctx, toks, 1, 16, 0, false) == CLEAVE_ERR_CONTEXT_FULL);
    /* out-of-vocabulary token ids and nonsense arguments */
    cleave_kv_clear(ctx);
    int32_t bad = 1 << 30;
    CHECK(cleave_decode(ctx, &bad, 1, 0, 0, false) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_decode(ctx, toks, 0, 0, 0, false) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_decode(ctx, toks, 1, -1, 0, false) == CLEAVE_ERR_INVALID_ARG);
    cleave_context_free(ctx);

    /* An unsupported KV type is a clear error, and so are q4_0 and q8_0
     * for a head size (16 here) that splits their blocks across heads. */
    cp.kv_type = CLEAVE_TYPE_Q4_K; /* a weight type, not a cache type */
    CHECK(cleave_context_new(m, &cp, &ctx) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(strstr(cleave_last_error(), "KV cache type q4_K") != NULL);
    cp.kv_type = CLEAVE_TYPE_Q4_0;
    CHECK(cleave_context_new(m, &cp, &ctx) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(strstr(cleave_last_error(), "head size") != NULL);
    cp.kv_type = CLEAVE_TYPE_Q8_0;
    CHECK(cleave_context_new(m, &cp, &ctx) == CLEAVE_ERR_UNSUPPORTED);
    CHECK(strstr(cleave_last_error(), "head size") != NULL);
    cleave_model_free(m);

    free(orig);
    free(b.data);
    return tu_finish("test_model_errors");
}
