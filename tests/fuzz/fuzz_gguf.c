/* The GGUF reader and model loader: any bytes as a model file; what loads
 * is also given a context and one decoded token. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path("model.gguf");
    fuzz_spit(path, data, size);
    cleave_model *m = NULL;
    if (cleave_model_load(path, NULL, &m) == CLEAVE_OK) {
        cleave_context_params cp = cleave_context_default_params();
        cp.n_ctx = 8;
        cp.n_threads = 1;
        cleave_context *ctx = NULL;
        if (cleave_context_new(m, &cp, &ctx) == CLEAVE_OK) {
            int32_t tok = 1;
            (void)cleave_decode(ctx, &tok, 1, 0, 0, true);
            cleave_context_free(ctx);
        }
        cleave_model_free(m);
    }
    return 0;
}
