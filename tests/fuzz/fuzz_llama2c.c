/* The llama2.c importer: the input is a checkpoint and a tokenizer, split
 * where its first 4 bytes say (little-endian, modulo the rest's size). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t at;
    if (!fuzz_split(&data, &size, &at)) return 0;
    const char *bin = fuzz_path("model.bin"), *tok = fuzz_path("tok.bin"), *out = fuzz_path("out.gguf");
    fuzz_spit(bin, data, at);
    fuzz_spit(tok, data + at, size - at);
    (void)cleave_convert_llama2c(bin, tok, out);
    return 0;
}
