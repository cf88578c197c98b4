/* Minimal assertions for cleave's CTest tests: a failed check prints file,
 * line and message and the test exits 1; exit 77 marks a skip. */
#ifndef CLEAVE_TESTUTIL_H
#define CLEAVE_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

extern int tu_failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            tu_failures++;                                                           \
        }                                                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                         \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
            tu_failures++;                                                           \
        }                                                                            \
    } while (0)

/* Checks a cleave call returned CLEAVE_OK; prints cleave_last_error() if not. */
#define CHECK_OK(call)                                                                     \
    do {                                                                                   \
        cleave_status st_ = (call);                                                        \
        if (st_ != CLEAVE_OK) {                                                            \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,      \
                    cleave_status_name(st_), cleave_last_error());                         \
            tu_failures++;                                                                 \
        }                                                                                  \
    } while (0)

/* Ends main: prints a summary and returns the exit code. */
int tu_finish(const char *test_name);
/* Path under the shared data dir, or NULL (and a note) if it is absent. */
const char *tu_shared(const char *rel);
/* A fresh path under the test temp dir (directory created). */
const char *tu_tmp(const char *name);
/* Skips the whole test (exit 77) with a reason. */
void tu_skip(const char *why);


#include "cleave.h"
/* Generates (once per test run) a tiny random model of an architecture and
 * weight type into the test temp dir and returns its path, or NULL. */
const char *tu_tiny_model(const char *arch, cleave_type type);
/* The same for any `cleave gen` preset and seed. */
/* The k largest of n values, in descending order, ties to the lower
 * index: the experts a router's logits choose, by definition. */
void tu_top_k(const float *v, size_t n, size_t k, int32_t *ids);
const char *tu_gen_model(const char *preset, const char *arch, cleave_type type, uint64_t seed);
/* The same with per-tensor types as the quantizer picks them for a file
 * type such as "Q4_K_M" (cleave_generate_model_mix). */
const char *tu_gen_model_mix(const char *preset, const char *arch, const char *mix, uint64_t seed);
/* Converts stories260K to GGUF in the temp dir; NULL when the shared model
 * is absent. */
const char *tu_stories_model(void);
/* Reads a whole file into a malloc'd buffer, NUL-terminated past its n
 * bytes (NULL if unreadable). */
unsigned char *tu_slurp(const char *path, size_t *n);
/* llama.cpp's tokenizer cases for a vocabulary (VOCAB.inp: inputs
 * separated by "\n__ggml_vocab_test__\n"; VOCAB.out: a line of ids each),
 * read one by one. open fails (a failed check) when either file is
 * unreadable; next gives a case's text (inside the .inp, len bytes) and
 * expected ids (*n, at most cap), false at the end (a failed check when the
 * .out runs short). */
typedef struct tu_vocab_cases {
    char *inp, *out, *ip, *op;
} tu_vocab_cases;
bool tu_vocab_cases_open(tu_vocab_cases *c, const char *vocab_path);
bool tu_vocab_case_next(tu_vocab_cases *c, const char **text, size_t *len, int32_t *ids, size_t cap, size_t *n);
void tu_vocab_cases_close(tu_vocab_cases *c);
/* Writes n bytes to path. */
void tu_spit(const char *path, const unsigned char *data, size_t n);
/* max |a-b| / max |b| */
double tu_rel_err(const float *a, const float *b, size_t n);
/* The index of the largest of v[0..n) (the first of equals). */
int tu_argmax(const float *v, size_t n);
/* n weights (whole blocks) of a block type as random blocks: random quant
 * and sub-scale bytes, and every f16 scale (d, dmin, m) of magnitude in
 * [0.5, 1) * scale and random sign; *state is the random state (any
 * nonzero start). Kernels can be tested on these without a quantizer. */
void tu_random_blocks(cleave_type t, void *dst, size_t n, float scale, uint64_t *state);
/* Loads a model (a failed load is a failed check; NULL) and its vocabulary size. */
cleave_model *tu_load(const char *path, size_t *n_vocab);

#include "model/gguf.h"
/* Sets keys of its own in a rewritten file (src is the original). */
typedef cleave_status (*tu_gguf_edit)(gguf_writer *w, const gguf_file *src, void *user);
/* Writes a GGUF made from src to dst: src's keys when copy_keys, then
 * whatever edit (may be NULL) sets, then src's tensors [t0, t1) with their
 * data. A failure is a failed check (false). */
bool tu_gguf_rewrite(const char *src, const char *dst, bool copy_keys, size_t t0, size_t t1,
                     tu_gguf_edit edit, void *user);
#endif
