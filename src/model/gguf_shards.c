/* Split GGUF models: finds a shard's siblings by llama-gguf-split's naming
 * (PREFIX-%05d-of-%05d.gguf, numbered from 1), checks that the set is whole
 * and consistent, and merges the tensor tables. The single-file parser in
 * gguf.c stays unaware of splits; a tensor keeps the data pointer its own
 * shard's mapping gave it. */
#include "gguf_shards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"

#define SPLIT_MAX 65535 /* split.count is a u16 */

struct gguf_shards {
    gguf_file **files; /* [n_files], in split.no order */
    size_t n_files;
    const gguf_tensor **tensors; /* [n_tensors]: shard 0's, then shard 1's, ... */
    size_t n_tensors;
};

/* llama-gguf-split's name for shard no (0-based) of count. */
static cleave_status shard_name(const char *prefix, size_t no, size_t count, char **out) {
    size_t n = strlen(prefix) + 32;
    char *s = mem_alloc(n, "shard path");
    if (!s) return CLEAVE_ERR_OOM;
    snprintf(s, n, "%s-%05zu-of-%05zu.gguf", prefix, no + 1, count);
    *out = s;
    return CLEAVE_OK;
}

/* split.count (1 when absent: an ordinary file) and split.no of f. */
static cleave_status split_keys(const gguf_file *f, size_t *count, size_t *no) {
    uint32_t c = 1, k = 0;
    cleave_status st = CLEAVE_OK;
    if (gguf_find_key(f, "split.count") >= 0) st = gguf_get_u32(f, "split.count", &c);
    if (st) return st;
    if (c > SPLIT_MAX)
        return err_set(CLEAVE_ERR_FORMAT, "%s: split.count %u exceeds %d", gguf_path(f), c,
                       SPLIT_MAX);
    *count = c ? c : 1; /* 0 is what a writer that never split leaves */
    *no = 0;
    if (*count == 1) return CLEAVE_OK;
    if (gguf_find_key(f, "split.no") < 0)
        return err_set(CLEAVE_ERR_FORMAT, "%s: split.count is %u but split.no is missing",
                       gguf_path(f), c);
    if ((st = gguf_get_u32(f, "split.no", &k))) return st;
    if (k >= c)
        return err_set(CLEAVE_ERR_FORMAT, "%s: split.no %u is not below split.count %u",
                       gguf_path(f), k, c);
    *no = k;
    return CLEAVE_OK;
}

/* The path less its "-NNNNN-of-MMMMM.gguf", which must name shard no of count. */
static cleave_status split_prefix(const char *path, size_t no, size_t count, char **out) {
    char suffix[40];
    snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu.gguf", no + 1, count);
    size_t n = strlen(path), sn = strlen(suffix);
    if (n <= sn || strcmp(path + n - sn, suffix) != 0)
        return err_set(
            CLEAVE_ERR_FORMAT,
            "%s: split.no %zu and split.count %zu make it shard %zu of %zu, but its name does "
            "not end in '%s', so its siblings cannot be found",
            path, no, count, no + 1, count, suffix);
    char *p = mem_alloc(n - sn + 1, "shard prefix");
    if (!p) return CLEAVE_ERR_OOM;
    memcpy(p, path, n - sn);
    p[n - sn] = 0;
    *out = p;
    return CLEAVE_OK;
}

/* Opens shard i of count and checks it says so. */
static cleave_status open_sibling(const char *prefix, size_t i, size_t count, gguf_file **out) {
    char *name = NULL;
    cleave_status st = shard_name(prefix, i, count, &name);
    if (st) return st;
    st = gguf_open(name, out);
    if (st == CLEAVE_ERR_IO && access(name, F_OK) != 0)
        st = err_set(CLEAVE_ERR_IO, "shard %zu of %zu '%s' is missing", i + 1, count, name);
    else if (st)
        err_wrap(st, "shard %zu of %zu", i + 1, count);
    size_t c = 0, no = 0;
    if (!st && !(st = split_keys(*out, &c, &no)) && (c != count || no != i))
        st = err_set(CLEAVE_ERR_FORMAT,
                     "%s: expected shard %zu of %zu (split.no %zu, split.count %zu) but it says "
                     "split.no %zu, "
                     "split.count %zu",
                     name, i + 1, count, i, count, no, c);
    free(name);
    return st;
}

/* One table over every shard; a name in two shards is refused, since which
 * copy the model used would depend on the lookup order. */
static cleave_status merge(gguf_shards *s) {
    size_t total = 0;
    for (size_t i = 0; i < s->n_files; i++)
        total += gguf_n_tensors(s->files[i]);
    s->tensors = mem_calloc(total ? total : 1, sizeof *s->tensors, "shard tensor table");
    if (!s->tensors) return CLEAVE_ERR_OOM;
    for (size_t i = 0; i < s->n_files; i++) {
        for (size_t j = 0; j < gguf_n_tensors(s->files[i]); j++) {
            const gguf_tensor *t = gguf_tensor_at(s->files[i], j);
            for (size_t k = 0; k < i; k++)
                if (gguf_find_tensor(s->files[k], t->name))
                    return err_set(CLEAVE_ERR_FORMAT, "tensor '%s' is in two shards: '%s' and '%s'",
                                   t->name, gguf_path(s->files[k]), gguf_path(s->files[i]));
            s->tensors[s->n_tensors++] = t;
        }
    }
    const gguf_file *f0 = s->files[0];
    if (s->n_files > 1 && gguf_find_key(f0, "split.tensors.count") >= 0) {
        int32_t want = 0;
        cleave_status st = gguf_get_i32(f0, "split.tensors.count", &want);
        if (st) return st;
        if (want < 0 || (size_t)want != total)
            return err_set(CLEAVE_ERR_FORMAT,
                           "%s: split.tensors.count is %d but the %zu shards hold %zu tensors",
                           gguf_path(f0), want, s->n_files, total);
    }
    return CLEAVE_OK;
}

cleave_status gguf_shards_open(const char *path, gguf_shards **out) {
    if (!path || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_shards_open: NULL argument");
    *out = NULL;
    gguf_shards *s = mem_calloc(1, sizeof *s, "gguf shards");
    if (!s) return CLEAVE_ERR_OOM;
    gguf_file *given = NULL;
    char *prefix = NULL;
    size_t count = 1, no = 0;
    cleave_status st = gguf_open(path, &given);
    if (!st) st = split_keys(given, &count, &no);
    if (!st && count > 1) st = split_prefix(path, no, count, &prefix);
    if (!st && !(s->files = mem_calloc(count, sizeof *s->files, "gguf shard files")))
        st = CLEAVE_ERR_OOM;
    if (st) {
        gguf_close(given);
        free(prefix);
        free(s);
        return st;
    }
    s->n_files = count;
    s->files[no] = given;
    for (size_t i = 0; !st && i < count; i++)
        if (i != no) st = open_sibling(prefix, i, count, &s->files[i]);
    free(prefix);
    if (!st) st = merge(s);
    if (st) {
        gguf_shards_close(s);
        return st;
    }
    *out = s;
    return CLEAVE_OK;
}

void gguf_shards_close(gguf_shards *s) {
    if (!s) return;
    for (size_t i = 0; s->files && i < s->n_files; i++)
        gguf_close(s->files[i]);
    free(s->files);
    free(s->tensors);
    free(s);
}

size_t gguf_shards_count(const gguf_shards *s) { return s->n_files; }

const gguf_file *gguf_shards_file(const gguf_shards *s, size_t i) {
    return i < s->n_files ? s->files[i] : NULL;
}

size_t gguf_shards_size(const gguf_shards *s) {
    size_t n = 0;
    for (size_t i = 0; i < s->n_files; i++)
        n += gguf_file_size(s->files[i]);
    return n;
}

size_t gguf_shards_n_tensors(const gguf_shards *s) { return s->n_tensors; }

const gguf_tensor *gguf_shards_tensor_at(const gguf_shards *s, size_t i) {
    return i < s->n_tensors ? s->tensors[i] : NULL;
}

const gguf_tensor *gguf_shards_find_tensor(const gguf_shards *s, const char *name) {
    for (size_t i = 0; s && name && i < s->n_files; i++) {
        const gguf_tensor *t = gguf_find_tensor(s->files[i], name);
        if (t) return t;
    }
    return NULL;
}
