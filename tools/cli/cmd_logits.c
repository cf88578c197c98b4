/* `cleave logits`: runs a list of token ids through the model in one batch
 * and writes every position's logits (float32, little-endian, n_tokens rows
 * of n_vocab) to a file, so other programs (reference checks, GPU vs CPU
 * comparisons) can compare them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define LOGITS_SYNOPSIS "-m MODEL --tokens ID,ID,... -o OUT.f32 [flags]"

static void usage(FILE *out) {
    fprintf(out,
            "usage: cleave logits " LOGITS_SYNOPSIS "\n"
            "  every position's logits (float32, little-endian, one row of n_vocab per token)\n"
            "  -m, --model PATH        GGUF model\n"
            "  --tokens L              the token ids, e.g. 1,450,4996\n"
            "  -o, --output PATH       where the logits go\n"
            "  -ctk T, -ctv T          K and V cache types (default f32: exact, for comparisons)\n"
            "  -t, --threads N         CPU threads of each CPU device\n"
            "  -b, --batch-size N      tokens per forward pass (default: all of them)\n"
            "  -ub, --ubatch-size N    layer split: a pipeline of N-token micro-batches\n" CLI_PLACEMENT_HELP);
}

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *tokens = NULL;
    cli_context_opts cx = cli_context_default(0);
    cx.kv_type = CLEAVE_TYPE_F32; /* logits for comparisons: an exact cache */
    cli_placement place = cli_placement_default();
    place.fit = 0;
    cli_usage_for("logits", LOGITS_SYNOPSIS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int pr;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = v, i++;
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) out = v, i++;
        else if (!strcmp(a, "--tokens") && v) tokens = v, i++;
        else if ((pr = cli_context_flag(a, v, &cx)) != 0 || (pr = cli_placement_flag(a, v, &place)) != 0) {
            if (pr < 0) return 1;
            i++;
        } else {
            return cli_bad_option("logits", LOGITS_SYNOPSIS, a);
        }
    }
    if (!model || !out || !tokens)
        return cli_usage_error("logits", LOGITS_SYNOPSIS,
                               "-m MODEL, --tokens and -o OUT are required");
    size_t cap = strlen(tokens) / 2 + 2, n = 0;
    int *ids = malloc(cap * sizeof *ids);
    int32_t *toks = malloc(cap * sizeof *toks);
    if (!ids || !toks || !cli_int_list("--tokens", tokens, ids, cap, &n)) {
        free(ids), free(toks);
        return 1;
    }
    for (size_t i = 0; i < n; i++) toks[i] = ids[i];
    cleave_context_params cp = cli_context_params(&cx, &place, (uint32_t)(n < 16 ? 16 : n));
    if (!cx.n_batch) cp.n_batch = cp.n_ctx;
    cleave_model *m;
    cleave_context *ctx;
    int rc = cli_open(model, &cp, &m, &ctx);
    if (rc) goto done;
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    cleave_status st = cleave_decode(ctx, toks, n, 0, 0, true);
    if (st) {
        rc = cli_fail("decode", st);
    } else {
        FILE *f = fopen(out, "wb");
        for (size_t i = 0; f && i < n; i++)
            if (fwrite(cleave_get_logits(ctx, (int32_t)i), sizeof(float), d.n_vocab, f) != d.n_vocab)
                break;
        if (!f || fclose(f) != 0) {
            fprintf(stderr, "cleave logits: cannot write %s\n", out);
            rc = 1;
        }
    }
    cleave_context_free(ctx);
    cleave_model_free(m);
done:
    free(ids);
    free(toks);
    return rc;
}
