/* The Hugging Face importer: the input is config.json and
 * model.safetensors, split where its first 4 bytes say (little-endian,
 * modulo the rest's size), in a directory of their own. */
#include <sys/stat.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t at;
    if (!fuzz_split(&data, &size, &at)) return 0;
    static char dir[512];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s", fuzz_path("hf"));
        if (mkdir(dir, 0700) != 0) abort();
    }
    char config[600], tensors[600];
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(tensors, sizeof tensors, "%s/model.safetensors", dir);
    fuzz_spit(config, data, at);
    fuzz_spit(tensors, data + at, size - at);
    (void)cleave_convert_hf(dir, CLEAVE_TYPE_F32, fuzz_path("out.gguf"), NULL, NULL);
    return 0;
}
