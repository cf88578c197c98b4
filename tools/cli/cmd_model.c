/* Model-file subcommands: `convert` (llama2.c or Hugging Face -> GGUF) and
 * `gen` (random weights of real shapes); `info` is cmd_info.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CONVERT_SYNOPSIS "--from llama2c|hf INPUT... -o OUT.gguf"
#define GEN_SYNOPSIS "--preset PRESET [--arch ARCH] [--type TYPE] [--seed N] [--shapes-only] -o OUT.gguf"

static void convert_usage(FILE *out) {
    fprintf(out,
            "usage: cleave convert --from llama2c MODEL.bin TOKENIZER.bin -o OUT.gguf\n"
            "       cleave convert --from hf CHECKPOINT_DIR -o OUT.gguf [--type f32|f16|bf16]\n"
            "  --from hf reads a transformers directory (config.json + *.safetensors) of\n"
            "  Llama/Mistral, Qwen2 or Qwen3; --type sets the weight type (default: as stored).\n"
            "  Its vocabulary is synthetic (BPE tokenizers are not supported yet): drive the\n"
            "  model with token ids (cleave logits --tokens), not text.\n");
}

int cmd_convert(int argc, char **argv) {
    const char *from = NULL, *out = NULL, *type_name = NULL, *pos[2] = {NULL, NULL};
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--from") && v) from = v, i++;
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) out = v, i++;
        else if (!strcmp(a, "--type") && v) type_name = v, i++;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            convert_usage(stdout);
            return 0;
        } else if (a[0] != '-' && n_pos < 2) pos[n_pos++] = a;
        else return cli_bad_option("convert", CONVERT_SYNOPSIS, a);
    }
    bool hf = from && !strcmp(from, "hf") && n_pos == 1,
         l2c = from && !strcmp(from, "llama2c") && n_pos == 2 && !type_name;
    if (!out || !(hf || l2c))
        return cli_usage_error("convert", CONVERT_SYNOPSIS,
                               "needs -o OUT and --from llama2c MODEL.bin TOKENIZER.bin or "
                               "--from hf DIR");
    cleave_status st;
    if (l2c) {
        st = cleave_convert_llama2c(pos[0], pos[1], out);
    } else {
        cleave_type type = CLEAVE_CONVERT_KEEP_TYPE;
        if (type_name && (cleave_type_from_name(type_name, &type) || type == CLEAVE_TYPE_Q8_0)) {
            fprintf(stderr, "cleave convert: --type '%s': use f32, f16 or bf16\n", type_name);
            return 1;
        }
        st = cleave_convert_hf(pos[0], type, out, cli_progress, (void *)"converting");
        if (!st)
            fprintf(stderr, "cleave: note: %s has a synthetic vocabulary (the checkpoint's BPE "
                            "tokenizer is not imported): use token ids, not text\n",
                    out);
    }
    if (st) return cli_fail("convert", st);
    fprintf(stderr, "cleave: wrote %s\n", out);
    return 0;
}

static void gen_usage(FILE *out) {
    fprintf(out,
            "usage: cleave gen " GEN_SYNOPSIS "\n"
            "  PRESET: tiny or small (test shapes, with --arch llama|qwen2|qwen3|qwen3moe|mixtral|\n"
            "  gpt-oss; small: llama, qwen3moe or gpt-oss), tiny8 (8 layers, 8 kv heads: splits over\n"
            "  8 devices), 1b, 8b, 32b, 70b (dense real shapes),\n"
            "  qwen3-30b-a3b, mixtral-8x7b, gpt-oss-20b, gpt-oss-120b (mixtures of experts)\n"
            "  TYPE: a weight type for every matrix (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,\n"
            "  q5_1, q2_K..q6_K, iq4_nl, iq4_xs, mxfp4; default f16) or a llama.cpp file type whose\n"
            "  per-tensor choices cleave quantize makes (Q4_K_M, Q5_K_S, Q3_K_L, ...)\n"
            "  --seed N: the weights' random seed (default 1)\n"
            "  --shapes-only: the weights left a hole of zeros, taking no disk space (a sparse\n"
            "  file): for cleave info's placement preview of shapes larger than the disk\n");
}

int cmd_gen(int argc, char **argv) {
    const char *preset = NULL, *arch = NULL, *out = NULL, *type_name = "f16";
    long long seed = 1;
    bool shapes_only = false;
    cli_usage_for("gen", GEN_SYNOPSIS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gen_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--preset") && v) preset = v, i++;
        else if (!strcmp(a, "--arch") && v) arch = v, i++;
        else if (!strcmp(a, "--shapes-only")) shapes_only = true;
        else if (!strcmp(a, "--type") && v) type_name = v, i++;
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) out = v, i++;
        else if (!strcmp(a, "--seed")) {
            if (!cli_int(a, v, 0, INT64_MAX, &seed)) return 1;
            i++;
        } else {
            return cli_bad_option("gen", GEN_SYNOPSIS, a);
        }
    }
    if (!preset || !out)
        return cli_usage_error("gen", GEN_SYNOPSIS, "--preset and -o OUT are required");
    cleave_status st = shapes_only ? cleave_generate_model_shapes(preset, arch, type_name, out)
                                   : cleave_generate_model_mix(preset, arch, type_name, (uint64_t)seed, out,
                                                               cli_progress, (void *)"writing");
    if (st) return cli_fail("gen", st);
    fprintf(stderr, "cleave: wrote %s\n", out);
    return 0;
}
