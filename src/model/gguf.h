/* GGUF v2/v3: a bounds-checked reader over a read-only mmap, and a writer
 * that streams tensor data so multi-GB files never sit in memory. */
#ifndef CLEAVE_GGUF_H
#define CLEAVE_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

enum gguf_vtype {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5, GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12,
};

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef struct gguf_tensor {
    const char *name;    /* NUL-terminated copy */
    uint32_t type;       /* ggml type id (may be one cleave cannot compute with) */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] = elements per row; unused dims are 1 */
    uint64_t n_elems;
    size_t offset;       /* from the start of the file */
    size_t nbytes;
    const void *data;    /* into the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Maps and validates the whole header: magic, version (2 or 3), counts,
 * every string/array length, tensor dims (no overflow), types, offsets
 * aligned and inside the file. Errors name the file and the offending item. */
cleave_status gguf_open(const char *path, gguf_file **out);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
size_t gguf_alignment(const gguf_file *f);
size_t gguf_file_size(const gguf_file *f);
const char *gguf_path(const gguf_file *f);

/* Key/value metadata. Index is -1 when absent. */
size_t gguf_n_kv(const gguf_file *f);
const char *gguf_kv_key(const gguf_file *f, size_t i);
enum gguf_vtype gguf_kv_type(const gguf_file *f, size_t i);
int64_t gguf_find_key(const gguf_file *f, const char *key);

/* Typed getters. A missing key gives CLEAVE_ERR_FORMAT naming the key; so
 * does a wrong type. Integer getters accept any integer type whose value
 * fits; float getters accept float32/float64. */
cleave_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
cleave_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
cleave_status gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
cleave_status gguf_get_f32(const gguf_file *f, const char *key, float *out);
cleave_status gguf_get_bool(const gguf_file *f, const char *key, bool *out);
/* String value: pointer into the mapping, NOT NUL-terminated. */
cleave_status gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len);
/* Array: element type and count. For numeric arrays *data points at the raw
 * little-endian elements in the mapping (possibly unaligned: memcpy out). */
cleave_status gguf_get_arr(const gguf_file *f, const char *key, enum gguf_vtype *elem_type,
                           size_t *n, const void **data);
/* i-th string of a string array (precomputed offsets, O(1)). */
cleave_status gguf_get_arr_str(const gguf_file *f, const char *key, size_t i, const char **s,
                               size_t *len);

/* Tensors. */
size_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */

/* ---- writer ---- */

typedef struct gguf_writer gguf_writer;
/* Produces a tensor's bytes at write time, in chunks: fill dst with n bytes
 * starting at byte offset `at` of the tensor. */
typedef cleave_status (*gguf_fill_fn)(void *user, size_t tensor_index, size_t at, void *dst,
                                      size_t n);

cleave_status gguf_writer_new(gguf_writer **out);
void gguf_writer_free(gguf_writer *w);
/* Setting a key twice replaces the value. Strings are copied. */
cleave_status gguf_set_u32(gguf_writer *w, const char *key, uint32_t v);
cleave_status gguf_set_u16(gguf_writer *w, const char *key, uint16_t v);
cleave_status gguf_set_i32(gguf_writer *w, const char *key, int32_t v);
cleave_status gguf_set_u64(gguf_writer *w, const char *key, uint64_t v);
cleave_status gguf_set_f32(gguf_writer *w, const char *key, float v);
cleave_status gguf_set_bool(gguf_writer *w, const char *key, bool v);
cleave_status gguf_set_str(gguf_writer *w, const char *key, const char *v);
/* Numeric array of n elements of elem_type, copied. */
cleave_status gguf_set_arr(gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                           const void *data, size_t n);
/* Array of n strings (each NUL-terminated), copied. */
cleave_status gguf_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                               size_t n);
/* Copies the i-th key of a file, value and type unchanged (what a tool
 * that rewrites or splits a file keeps). */
cleave_status gguf_copy_kv(gguf_writer *w, const gguf_file *f, size_t i);
/* Adds a tensor. Either data (nbytes of it, borrowed until write) or fill
 * must be given. ne[0] is the row length. Returns the tensor's index. */
cleave_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                                     uint32_t n_dims, const uint64_t *ne, const void *data,
                                     gguf_fill_fn fill, void *fill_user, size_t *index);
/* The next write leaves every tensor's data a hole of zeros (the file
 * its full length, sparse where the file system allows): a file of a
 * model's shapes for planning, whose tensors are not read. */
void gguf_writer_shapes_only(gguf_writer *w);
/* Writes version 3 with general.alignment (default 32) to path, atomically
 * (temp file + rename). progress may be NULL. */
cleave_status gguf_writer_write(gguf_writer *w, const char *path, cleave_progress_fn progress,
                                void *progress_user);

#endif
