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
/* Parses a number flag value; prints an error and returns false if bad. */
bool cli_int(const char *flag, const char *v, long long lo, long long hi, long long *out);
bool cli_float(const char *flag, const char *v, float *out);
/* Parses "1,2,3" into up to cap ints. */
bool cli_int_list(const char *flag, const char *v, int *out, size_t cap, size_t *n);
/* Parses --device / -ngl into a device string (NULL = CPU). Returns false
 * and prints why on a bad value. */
bool cli_device_flag(const char *flag, const char *v, const char **device);
/* A progress bar on stderr. */
bool cli_progress(float fraction, void *label);
double cli_now(void);
/* Loads a model and makes a context; on failure prints why, frees both and
 * returns the exit code (0 on success). */
int cli_open(const char *path, const cleave_context_params *cp, cleave_model **m,
             cleave_context **ctx);

int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);

#endif
