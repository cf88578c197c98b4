/* The sequence-state reader: any bytes restored into sequence 0 of a tiny
 * model's context (and its tokens read), which must stay usable. A state
 * ends with an xxh64 of the bytes before it, so most mutations stop at
 * the checksum: every other input is sealed with a correct one first, and
 * the parsing behind it is reached too. */
#if __has_include(<xxhash.h>)
#define XXH_INLINE_ALL
#include <xxhash.h>
#define FUZZ_SEAL 1
#endif

#include "fuzz_common.h"

static cleave_context *ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = fuzz_path("tiny.gguf");
    cleave_model *m = NULL;
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    if (cleave_generate_model("tiny", "llama", CLEAVE_TYPE_F16, 42, path, NULL, NULL) ||
        cleave_model_load(path, NULL, &m) || cleave_context_new(m, &cp, &ctx)) {
        fprintf(stderr, "fuzz_state: no tiny model: %s\n", cleave_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *sealed = NULL;
#ifdef FUZZ_SEAL
    if (size > 8 && (data[size - 1] & 1)) {
        if (!(sealed = malloc(size))) return 0;
        memcpy(sealed, data, size);
        const uint64_t sum = XXH64(sealed, size - 8, 0);
        memcpy(sealed + size - 8, &sum, 8);
        data = sealed;
    }
#endif
    int32_t ids[128];
    size_t n = 0;
    (void)cleave_state_tokens(ctx, data, size, ids, 128, &n);
    cleave_state_options lossy = {.allow_lossy = true};
    if (cleave_state_seq_set(ctx, 0, data, size, &lossy) == CLEAVE_OK) {
        int32_t tok = 1;
        (void)cleave_decode(ctx, &tok, 1, cleave_kv_seq_len(ctx, 0), 0, true);
    }
    cleave_kv_clear(ctx);
    free(sealed);
    return 0;
}
