/* `cleave quantize IN.gguf OUT.gguf TYPE [-t N] [--pure]`: llama-quantize's
 * command line over cleave_quantize_model, with a progress bar and a
 * summary of sizes and bits per weight. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define QUANTIZE_SYNOPSIS "IN.gguf OUT.gguf TYPE [-t N] [--pure]"

static void quantize_usage(FILE *out) {
    fprintf(out,
            "usage: cleave quantize IN.gguf OUT.gguf TYPE [-t N] [--pure]\n"
            "  IN holds f32, f16 or bf16 weights (q8_0 is requantized, losing precision).\n"
            "  TYPE is a llama.cpp file type: %s.\n"
            "  Each tensor gets llama.cpp's type for it (Q4_K_M: output.weight and some\n"
            "  attn_v/ffn_down layers in Q6_K, other matrices Q4_K; norms are copied).\n"
            "  -t N     threads (default: every core)\n"
            "  --pure   every quantized tensor in TYPE's base type\n",
            cleave_quantize_type_names());
}

static void print_note(const char *line, void *user) {
    (void)user;
    fprintf(stderr, "\ncleave: %s\n", line);
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    cleave_quantize_params p = cleave_quantize_default_params();
    cli_usage_for("quantize", QUANTIZE_SYNOPSIS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            long long n;
            if (!cli_int(a, v, 1, 4096, &n)) return 1;
            p.n_threads = (int)n;
            i++;
        } else if (!strcmp(a, "--pure")) {
            p.pure = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            quantize_usage(stdout);
            return 0;
        } else if (a[0] != '-' && n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            return cli_bad_option("quantize", QUANTIZE_SYNOPSIS, a);
        }
    }
    if (n_pos != 3)
        return cli_usage_error("quantize", QUANTIZE_SYNOPSIS, "IN, OUT and TYPE are required");
    p.type = pos[2];
    p.progress = cli_progress;
    p.progress_user = (void *)"quantizing";
    p.note = print_note;
    cleave_quantize_stats s;
    double t0 = cli_now();
    cleave_status st = cleave_quantize_model(pos[0], pos[1], &p, &s);
    if (st) return cli_fail("quantize", st);
    double mib = 1024.0 * 1024.0;
    fprintf(stderr,
            "cleave: wrote %s: %llu tensors (%llu converted, %llu with a fallback type), "
            "%.2f MiB -> %.2f MiB, %.2f -> %.2f bits per weight, %.1f s\n",
            pos[1], (unsigned long long)s.n_tensors, (unsigned long long)s.n_converted,
            (unsigned long long)s.n_fallback, (double)s.bytes_in / mib, (double)s.bytes_out / mib,
            s.n_weights ? 8.0 * (double)s.bytes_in / (double)s.n_weights : 0.0,
            s.n_weights ? 8.0 * (double)s.bytes_out / (double)s.n_weights : 0.0, cli_now() - t0);
    return 0;
}
