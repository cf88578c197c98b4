/* Chat templates: each family's text for a conversation, the family named
 * by the markers of a model's tokenizer.chat_template, an unknown or
 * missing template refused naming the fallback, the markers taken as
 * control tokens only when special tokens are parsed, and a chat's BOS
 * once where the template writes one (cleave_tokenize_chat). */
#include <string.h>

#include "model/gguf.h"
#include "testutil.h"

static const cleave_chat_message conv[] = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Name a colour."}};

static void expect(const char *name, const char *want) {
    char buf[1024];
    size_t n = 0;
    CHECK_OK(cleave_chat_apply(name, conv, 4, true, buf, sizeof buf, &n));
    CHECK_MSG(n == strlen(want) && !memcmp(buf, want, n), "%s:\n%.*s", name, (int)n, buf);
    size_t need = 0;
    CHECK(cleave_chat_apply(name, conv, 4, true, buf, 3, &need) == CLEAVE_ERR_INVALID_ARG && need == n);
}

/* A vocabulary-only GGUF (two control tokens and the bytes, then with bos
 * a BOS <s> added as the metadata asks) with a template. */
static const char *vocab_with_bos(const char *tmpl, const char *file, bool bos) {
    const char *path = tu_tmp(file);
    static char bytes[256][8];
    const char *texts[260];
    float scores[260];
    int32_t types[260];
    uint32_t n_tok = bos ? 260 : 259;
    texts[0] = "<unk>", texts[1] = "<|im_start|>", texts[2] = "<|im_end|>";
    types[0] = 2, types[1] = 3, types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        texts[3 + b] = bytes[b], types[3 + b] = 6;
    }
    texts[259] = "<s>", types[259] = 3;
    for (int i = 0; i < 260; i++) scores[i] = 0;
    gguf_writer *w = NULL;
    cleave_status st = gguf_writer_new(&w);
    if (!st) st = gguf_set_str(w, "tokenizer.ggml.model", "llama");
    if (!st) st = gguf_set_arr_str(w, "tokenizer.ggml.tokens", texts, n_tok);
    if (!st) st = gguf_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, scores, n_tok);
    if (!st) st = gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, n_tok);
    if (!st) st = gguf_set_bool(w, "tokenizer.ggml.add_bos_token", bos);
    if (!st && bos) st = gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 259);
    if (!st && tmpl) st = gguf_set_str(w, "tokenizer.chat_template", tmpl);
    if (!st) st = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    CHECK_OK(st);
    return path;
}

static const char *vocab_with(const char *tmpl, const char *file) { return vocab_with_bos(tmpl, file, false); }

/* A template that writes {{ bos_token }} under a vocabulary that adds BOS:
 * one BOS, not two (unless BOS is forced); bos_token is the vocabulary's. */
static void check_chat_bos(void) {
    cleave_model_params mp = {NULL, NULL, true};
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(vocab_with_bos("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.content }}"
                                              "<|im_end|>{% endfor %}",
                                              "chat_bos.gguf", true),
                               &mp, &m));
    if (!m) return;
    cleave_chat_template *t = NULL;
    CHECK_OK(cleave_chat_template_load(m, NULL, NULL, &t));
    char text[128];
    size_t n = 0, k = 0;
    cleave_chat_message hi = {"user", "A"};
    CHECK_OK(cleave_chat_template_apply(t, &hi, 1, false, text, sizeof text, &n));
    CHECK_MSG(n == strlen("<s><|im_start|>A<|im_end|>") && !memcmp(text, "<s><|im_start|>A<|im_end|>", n),
              "the template's text: %.*s", (int)n, text);
    int32_t ids[32];
    size_t plain = 0;
    CHECK_OK(cleave_tokenize_prompt(m, text, n, CLEAVE_BOS_AUTO, true, ids, 32, &plain));
    CHECK_MSG(plain >= 4 && ids[0] == 259 && ids[1] == 259 && ids[2] == 1 && ids[plain - 1] == 2,
              "the plain prompt path keeps both: %zu [%d %d %d]", plain, ids[0], ids[1], ids[2]);
    CHECK_OK(cleave_tokenize_chat(m, text, n, CLEAVE_BOS_AUTO, ids, 32, &k));
    CHECK_MSG(k == plain - 1 && ids[0] == 259 && ids[1] == 1 && ids[k - 1] == 2, "one BOS: %zu tokens, [%d %d ...]",
              k, ids[0], ids[1]);
    CHECK_OK(cleave_tokenize_chat(m, text, n, CLEAVE_BOS_ALWAYS, ids, 32, &k));
    CHECK_MSG(k == plain, "--bos forces the second: %zu", k);
    cleave_chat_template_free(t);
    cleave_model_free(m);
}

static void detect(const char *tmpl, const char *want) {
    cleave_model_params mp = {NULL, NULL, true};
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(vocab_with(tmpl, "chat.gguf"), &mp, &m));
    const char *name = NULL;
    cleave_status st = m ? cleave_chat_template_of(m, &name) : CLEAVE_ERR_INTERNAL;
    if (want) CHECK_MSG(!st && name && !strcmp(name, want), "'%s' -> %s", tmpl, name ? name : cleave_last_error());
    else CHECK_MSG(st == CLEAVE_ERR_UNSUPPORTED && strstr(cleave_last_error(), "fallback chatml"), "'%s'", tmpl);
    cleave_model_free(m);
}

int main(void) {
    expect("llama3", "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nName a colour.<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect("chatml", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                     "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n"
                     "<|im_start|>assistant\n");
    expect("qwen3", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n"
                    "<|im_start|>assistant\n");
    expect("qwen3-nothink", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n"
                            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    expect("gpt-oss", "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hi<|end|>"
                      "<|start|>assistant<|message|>Hello.<|return|><|start|>user<|message|>Name a colour.<|end|>"
                      "<|start|>assistant");
    expect("llama2", "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello. </s>[INST] Name a colour. [/INST]");
    expect("mistral", "[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Name a colour. [/INST]");
    size_t n;
    char buf[64];
    CHECK(cleave_chat_apply("zephyr", conv, 4, true, buf, sizeof buf, &n) == CLEAVE_ERR_UNSUPPORTED);
    cleave_chat_message bad = {"user", NULL};
    CHECK(cleave_chat_apply("chatml", &bad, 1, true, buf, sizeof buf, &n) == CLEAVE_ERR_INVALID_ARG);

    detect("{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}", "llama3");
    detect("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}", "chatml");
    detect("{%- if enable_thinking %}<|im_start|>assistant\n<think>\n{% endif %}", "qwen3");
    detect("<|start|>{{ m.role }}<|channel|>final<|message|>{{ m.content }}<|end|>", "gpt-oss");
    detect("{{ bos_token }}[INST] <<SYS>>\n{{ system }}\n<</SYS>>\n\n{{ user }} [/INST]", "llama2");
    detect("{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", "mistral");
    detect("{% for m in messages %}<|user|>{{ m.content }}{% endfor %}", NULL);
    detect(NULL, NULL);

    /* the markers: control tokens when parsed, text otherwise */
    cleave_model_params mp = {NULL, NULL, true};
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(vocab_with(NULL, "chat2.gguf"), &mp, &m));
    int32_t t[64];
    if (m) {
        CHECK_OK(cleave_tokenize_ex(m, "<|im_start|>", 12, false, true, t, 64, &n));
        CHECK(n == 1 && t[0] == 1);
        CHECK_OK(cleave_tokenize_ex(m, "<|im_start|>", 12, false, false, t, 64, &n));
        CHECK(n > 1);
        cleave_context *ctx = NULL;
        CHECK(cleave_context_new(m, NULL, &ctx) == CLEAVE_ERR_INVALID_ARG && !ctx); /* a vocabulary alone */
    }
    cleave_model_free(m);
    check_chat_bos();
    return tu_finish("test_chat");
}
