/* `cleave tokenize`: a text's token ids, as llama.cpp's llama-tokenize
 * gives them, from a model or a vocabulary-only GGUF. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: cleave tokenize -m MODEL.gguf (-p TEXT | -f FILE) [options]\n"
            "  -m, --model PATH        a model or a vocabulary-only GGUF\n"
            "  -p, --prompt TEXT       the text\n"
            "  -f, --file PATH         read the text from a file\n"
            "  --ids                   only the ids, space-separated on one line\n"
            "  --no-special            add no BOS/EOS (by default they follow the vocabulary's metadata)\n"
            "  --no-parse-special      control tokens written in the text stay text\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool ids_only = false, add_special = true, parse_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = v, i++;
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && v) text = v, i++;
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && v) file = v, i++;
        else if (!strcmp(a, "--ids")) ids_only = true;
        else if (!strcmp(a, "--no-special")) add_special = false;
        else if (!strcmp(a, "--no-parse-special")) parse_special = false;
        else {
            return cli_bad_option("tokenize", "-m MODEL (-p TEXT | -f FILE) [flags]", a);
        }
    }
    if (!model || (!text == !file)) {
        return cli_usage_error("tokenize", "-m MODEL (-p TEXT | -f FILE) [flags]",
                               "-m MODEL and one of -p TEXT or -f FILE are required");
    }
    size_t len = text ? strlen(text) : 0;
    char *buf = NULL;
    if (file && !(buf = cli_read_file(file, &len))) {
        fprintf(stderr, "cleave tokenize: cannot read the file: %s\n", cleave_last_error());
        return 1;
    }
    if (file) text = buf;
    cleave_model_params mp = {NULL, NULL, true};
    cleave_model *m = NULL;
    cleave_status st = cleave_model_load(model, &mp, &m);
    int rc = 1;
    int32_t *toks = NULL;
    size_t n = 0;
    double t0 = cli_now();
    if (st) {
        rc = cli_fail("loading the vocabulary", st);
    } else if ((st = cleave_tokenize_ex(m, text, len, add_special, parse_special, NULL, 0, &n)) &&
               !(st == CLEAVE_ERR_INVALID_ARG && n)) {
        rc = cli_fail("tokenizing", st); /* a size query fails only for want of room */
    } else if (!(toks = malloc((n + 1) * sizeof *toks))) {
        fprintf(stderr, "cleave tokenize: out of memory for %zu tokens\n", n);
    } else if ((st = cleave_tokenize_ex(m, text, len, add_special, parse_special, toks, n + 1, &n))) {
        rc = cli_fail("tokenizing", st);
    } else {
        double ms = (cli_now() - t0) * 1e3;
        for (size_t i = 0; i < n; i++) {
            if (ids_only) {
                printf(i ? " %d" : "%d", toks[i]);
                continue;
            }
            char piece[512];
            size_t k = 0;
            if (cleave_token_to_piece(m, i ? toks[i - 1] : -1, toks[i], piece, sizeof piece, &k)) k = 0;
            printf("%6d -> '%.*s'\n", toks[i], (int)k, piece);
        }
        if (ids_only) printf("\n");
        fprintf(stderr, "cleave tokenize: %zu bytes -> %zu tokens in %.1f ms\n", len, n, ms);
        rc = 0;
    }
    free(toks);
    free(buf);
    cleave_model_free(m);
    return rc;
}
