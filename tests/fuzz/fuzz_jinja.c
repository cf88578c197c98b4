/* The Jinja interpreter on any template text: parsed, then rendered with
 * a small conversation under tight limits (output, steps, depth, memory)
 * so a runaway template ends in a limit error within the fuzzer's time. */
#include "fuzz_common.h"
#include "vocab/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const cleave_chat_message conv[] = {
        {"system", "Be brief."}, {"user", "Hi <b>\n"}, {"assistant", "Hello."}, {"user", "Bye"}};
    jinja_template *t = NULL;
    if (jinja_parse((const char *)data, size, &t)) return 0;
    jinja_render_args a = {
        .msgs = conv,
        .n_msgs = size % 5,
        .add_generation_prompt = size & 1,
        .bos_token = "<s>",
        .eos_token = "</s>",
        .fixed_time = true,
        .time = 1768480496,
        .limits = {
            .max_output = 1 << 16, .max_steps = 100000, .max_depth = 16, .max_memory = 16 << 20}};
    char *out = NULL;
    size_t n;
    if (!jinja_render(t, &a, &out, &n)) free(out);
    jinja_free(t);
    return 0;
}
