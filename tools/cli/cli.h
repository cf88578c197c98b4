/* Shared pieces of the cleave command line: flag parsing helpers and the
 * subcommands, each in its own file. */
#ifndef CLEAVE_CLI_H
#define CLEAVE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

/* Prints "cleave: <what>: <last error>" and returns the exit code 1. */
int cli_fail(const char *what, cleave_status st);
/* A command line a subcommand cannot take (an unknown flag, a flag without
 * its value, a missing -m): two lines of usage, "usage: cleave CMD
 * SYNOPSIS" and where the flags are, then the error as the last line, all
 * on stderr, so the error is what a terminal shows last rather than a
 * screen of help above it. Returns the exit code 1. */
int cli_usage_error(const char *cmd, const char *synopsis, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The subcommand whose flags are read from now on: a flag of the shared
 * parsers (cli_int, cli_placement_flag, ...) without its value is then
 * answered as cli_usage_error does. */
void cli_usage_for(const char *cmd, const char *synopsis);
/* The usual case of cli_usage_error: arg is no flag of cmd, or lacks its value. */
int cli_bad_option(const char *cmd, const char *synopsis, const char *arg);
/* A sampling seed as llama.cpp takes it: -1 (or no -s) draws one at
 * random; the seed used is printed on stderr ("seed: N") so a run can be
 * repeated with -s N. */
#define CLI_SEED_RANDOM (-1)
/* -e: the escapes of a C string (\n, \t, \r, \\, \", \' and \xHH)
 * replaced in place by what they stand for; an unknown one is kept. */
void cli_unescape(char *s);
uint64_t cli_resolve_seed(long long seed);
/* Parses a number flag value; prints an error and returns false if bad. */
bool cli_int(const char *flag, const char *v, long long lo, long long hi, long long *out);
bool cli_float(const char *flag, const char *v, float *out);
/* A number above 0 (a rate), said as cli_float says a bad one. */
bool cli_positive(const char *flag, const char *v, double *out);
/* Parses "1,2,3" into up to cap ints. */
bool cli_int_list(const char *flag, const char *v, int *out, size_t cap, size_t *n);
/* Where a model runs: the device flags shared by run, bench and logits. */
typedef struct cli_placement {
    const char *devices; /* NULL = CPU */
    cleave_split_mode mode;
    float shares[CLEAVE_MAX_DEVICES];
    size_t n_shares;
    size_t budgets[CLEAVE_MAX_DEVICES]; /* bytes */
    size_t n_budgets;
    long long main_device;
    int fit;             /* -1: default (on unless -ngl, or -ts for every phase), 0 off, 1 on */
    bool explicit_split; /* -ngl given */
    /* -psm M: prompts processed under M (a phase of its own when M or
     * -pts differ from -sm and -ts); -pts: its shares */
    bool has_psm;
    cleave_split_mode psm;
    float prefill_shares[CLEAVE_MAX_DEVICES];
    size_t n_prefill_shares;
    long long fit_ctx;
    long long kv_vram_cells; /* --kv-vram-cells: CLEAVE_KV_VRAM_ALL (default), _AUTO or a count */
} cli_placement;
/* Flags every benchmark shares: -t/--threads N, -b/--batch-size N,
 * -ub/--ubatch-size N, -ctk/-ctv TYPE. Same contract as cli_placement_flag. */
typedef struct cli_context_opts {
    long long threads, n_batch, n_ubatch;
    cleave_type kv_type, kv_type_v; /* -ctk, -ctv (CLEAVE_KV_TYPE_AS_K: -ctk's) */
} cli_context_opts;
/* Every thread, no micro-batches, an f16 cache for K and V, batches of n_batch. */
cli_context_opts cli_context_default(long long n_batch);
int cli_context_flag(const char *flag, const char *v, cli_context_opts *o);
/* The flags the benchmarks and calibrate share: -c/--ctx-size N (when
 * n_ctx is not NULL), cli_context_flag's and cli_placement_flag's. Same
 * contract: 1 taken with its value, 0 not one of them, -1 bad (said). */
int cli_bench_flag(const char *flag, const char *v, long long *n_ctx, cli_context_opts *cx,
                   cli_placement *pl);

/* A split mode by name (none, layer, tensor; "row" is tensor): 0, or -1
 * after a message naming the flag. */
int cli_split_mode(const char *flag, const char *value, cleave_split_mode *out);
/* "none", "layer" or "tensor". */
/* A whole file, NUL-terminated (len excludes the NUL); NULL when it
 * cannot be read (it is no regular file: a FIFO is refused, not waited
 * on) or memory runs out, cleave_last_error() saying which. */
char *cli_read_file(const char *path, size_t *len);
/* Initial placement: CPU, no split, fit by default. */
cli_placement cli_placement_default(void);
/* If flag is a placement flag (--device/--devices D, -ngl N, -sm MODE,
 * -ts A,B,..., -mg I, --vram-budget MiB[,MiB...], --fit on|off,
 * --fit-ctx N, --kv-vram-cells N|auto|all) parses its value:
 * returns 1 (the value is used), 0 (not a placement flag), or -1 after
 * printing why the value is bad. */
int cli_placement_flag(const char *flag, const char *v, cli_placement *p);
void cli_placement_apply(const cli_placement *p, cleave_context_params *cp);
/* -psm/--prefill-split-mode M and -pts/--prefill-tensor-split L (run,
 * serve, info); same contract as cli_placement_flag. */
int cli_phase_flag(const char *flag, const char *v, cli_placement *p);
/* Whether the phases get placements of their own: -psm with another mode
 * than -sm. */
bool cli_phased(const cli_placement *p);
/* The phase flags make sense together (-pts needs a -psm of another mode
 * than -sm); else a usage error for cmd (returns false). */
bool cli_phase_check(const cli_placement *p, const char *cmd, const char *synopsis);
/* Context parameters from the benchmarks' flags and a placement. */
cleave_context_params cli_context_params(const cli_context_opts *cx, const cli_placement *pl, uint32_t n_ctx);
/* Per device on stderr: the plan's bytes (weights, KV, compute), and with
 * peak, what the allocator has seen at most. */
void cli_memory_report(const cleave_context *ctx, bool peak);
#define CLI_PLACEMENT_HELP                                                                     \
    "  --device(s) D           cpu (default), cuda:N, cpu:N (N virtual CPU devices) or a\n" \
    "                          list: cuda:0,cuda:1\n"                                           \
    "  -ngl, --n-gpu-layers N  N > 0: cuda:0 (the CPU, with a warning, where there is no GPU);\n" \
    "                          0: the CPU\n"                                                     \
    "  -sm, --split-mode M     none (default), layer or tensor: how a model spreads over\n"  \
    "                          several devices\n"                                              \
    "  -ts, --tensor-split L   per-device shares, e.g. 3,1, of the -sm mode (with -psm: of the\n" \
    "                          generation phase; default: fitted to the devices' memory)\n"      \
    "  -mg, --main-gpu I       the device index for -sm none (default 0)\n"                   \
    "  --vram-budget L         per-device memory limits in MiB, e.g. 4096,2048, to emulate\n" \
    "                          smaller cards (GPUs default to their free memory)\n"          \
    "  --fit on|off            shrink the context until every device fits with 5%% to spare,\n" \
    "                          shares from the devices' memory for each phase without -ts/-pts\n" \
    "                          (default on unless -ngl, or every phase has its shares)\n"      \
    "  --fit-ctx N             the smallest context fit may choose (default 512)\n"          \
    "  --kv-vram-cells N|auto  tiered KV cache: cells [0, N) of every layer in device memory,\n" \
    "                          the rest in pinned host memory (auto: the most that fits)\n"
/* A context of two phases whose switch to generation cannot happen: a
 * warning on stderr, made when the context is, saying why, what would
 * let it, and that the run stays in the prefill mode; then false (the
 * caller does not try the switch). */
bool cli_phase_warning(const cleave_context *ctx);
/* A progress bar on stderr. */
bool cli_progress(float fraction, void *label);
double cli_now(void);
/* Loads a model and makes a context; on failure prints why, frees both and
 * returns the exit code (0 on success). */
int cli_open(const char *path, const cleave_context_params *cp, cleave_model **m,
             cleave_context **ctx);
/* The context part of cli_open, for a model already loaded (not freed on
 * failure). */
int cli_new_context(cleave_model *m, const cleave_context_params *cp, cleave_context **ctx);

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv); /* cleave run -cnv */
int cmd_bench(int argc, char **argv);
int cmd_batched_bench(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_bench_psm(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

#endif
