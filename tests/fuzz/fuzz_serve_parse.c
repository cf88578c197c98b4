/* The server's request parser: any bytes as a completion (first byte even)
 * or chat (odd) body, and through the NUL scan and the stop-string release
 * of a generated text. */
#include "fuzz_common.h"
#include "serve/serve.h"

/* The built-in chatml template chats render through (made once). */
static const cleave_chat_template *chatml(void) {
    static cleave_chat_template *t;
    if (!t && cleave_chat_template_load(NULL, "chatml", NULL, &t)) t = NULL;
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const bool chat = data[0] & 1;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    serve_defaults d = {16, -1, chatml(), 512};
    serve_params p;
    char err[256], field[32];
    const char *param;
    if (serve_parse(body, len, chat, &d, &p, err, sizeof err, &param) == 0) {
        for (size_t i = 0; i < p.n_prompts; i++)
            if (p.prompts[i].text) {
                bool found;
                (void)serve_text_release(p.prompts[i].text, strlen(p.prompts[i].text), 0, p.stop, p.n_stop, false,
                                         &found);
            }
        serve_params copy;
        if (serve_params_clone(&copy, &p)) serve_params_free(&copy);
        serve_params_free(&p);
    }
    (void)serve_json_nul_field(body, len, field, sizeof field);
    return 0;
}
