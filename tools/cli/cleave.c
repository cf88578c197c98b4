/* cleave: the command line. Thin: parses flags and calls the library.
 * Subcommands live in tools/cli/cmd_*.c, their shared helpers in cli.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifndef CLEAVE_GIT_COMMIT
#define CLEAVE_GIT_COMMIT "unknown"
#endif
#ifndef CLEAVE_BUILT_IN
#define CLEAVE_BUILT_IN "cpu"
#endif
#define CLEAVE_VERSION "0.1.0"

static int version(void) {
    printf("cleave %s (commit %s)\nbuilt with: %s\n", CLEAVE_VERSION, CLEAVE_GIT_COMMIT,
           CLEAVE_BUILT_IN);
    return 0;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: cleave COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run      generate text:  cleave run -m MODEL.gguf -p PROMPT -n N\n"
            "  chat     a conversation in the model's chat template:  cleave chat -m MODEL.gguf\n"
            "           (the same as cleave run -cnv)\n"
            "  bench    llama-bench style speed test:  cleave bench -m MODEL.gguf -p 512 -n 128 -r 3\n"
            "  batched-bench  parallel sequences (llama-batched-bench): cleave batched-bench -m M -npl 1,2,4,8\n"
            "  convert  import a checkpoint:  cleave convert --from llama2c MODEL.bin TOK.bin -o OUT.gguf\n"
            "                                 cleave convert --from hf HF_DIR [--type bf16] -o OUT.gguf\n"
            "  gen      random-weight model of real shapes:  cleave gen --preset 1b --type f16 -o OUT.gguf\n"
            "  quantize llama.cpp file types:  cleave quantize IN.gguf OUT.gguf Q4_K_M [-t N]\n"
            "  info     describe a model:  cleave info MODEL.gguf\n"
            "  tokenize token ids of a text:  cleave tokenize -m MODEL.gguf -p TEXT [--ids]\n"
            "  logits   dump logits of token ids:  cleave logits -m MODEL.gguf --tokens 1,2,3 -o OUT.f32\n"
            "  bench-psm  whole requests, prefill and generation under their own split modes:\n"
            "           cleave bench-psm -m MODEL.gguf --devices cuda:0,cuda:1 -psm layer -sm tensor -p 58248\n"
            "  calibrate  split-mode rates for run --psm-policy auto:\n"
            "           cleave calibrate -m MODEL.gguf --devices cuda:0,cuda:1 -o rates.txt\n"
            "  serve    OpenAI-compatible HTTP server:  cleave serve -m MODEL.gguf --port 8080 -np 4 -c 16384\n"
            "\n"
            "  version  the version, the commit it was built from and what is built in\n"
            "\n"
            "Run 'cleave COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) return version();
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "batched-bench")) return cmd_batched_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen")) return cmd_gen(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "calibrate")) return cmd_calibrate(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-psm")) return cmd_bench_psm(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "usage: cleave COMMAND [flags]\nrun 'cleave --help' for the commands\n"
                    "cleave: unknown command '%s'\n", cmd);
    return 1;
}
