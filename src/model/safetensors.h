/* Reads Hugging Face .safetensors files over a read-only mmap: an 8-byte
 * little-endian header size, a JSON header (dtype, shape, data_offsets per
 * tensor), then the data. Every offset and size is checked against the file
 * before a pointer is handed out. st_dir opens a checkpoint directory: one
 * model.safetensors, or the shards model.safetensors.index.json names. */
#ifndef CLEAVE_SAFETENSORS_H
#define CLEAVE_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    const char *name;           /* NUL-terminated copy */
    char dtype[16];             /* as in the header: "F32", "BF16", "I64", ... */
    bool supported;             /* dtype is F32, F16 or BF16 (then type is set) */
    cleave_type type;
    uint32_t n_dims;
    uint64_t shape[ST_MAX_DIMS]; /* torch order: shape[0] is the outermost (rows) */
    uint64_t n_elems;
    size_t nbytes;
    const void *data;           /* into the mapping; not necessarily aligned */
    const char *file;           /* path of the file that holds it */
} st_tensor;

typedef struct st_file st_file;

/* Maps and validates one .safetensors file. Dtypes other than F32/F16/BF16
 * are accepted in the header (so checkpoints with integer buffers open) but
 * st_check_float refuses them; unknown dtype names are refused here. */
cleave_status st_open(const char *path, st_file **out);
void st_close(st_file *f);
size_t st_n_tensors(const st_file *f);
const st_tensor *st_tensor_at(const st_file *f, size_t i);
const st_tensor *st_find(const st_file *f, const char *name); /* NULL if absent */

/* Tells the kernel a tensor's bytes are done with: its whole pages leave
 * this process's memory (they fault back in from the file if read again),
 * so streaming a checkpoint keeps a small footprint. */
void st_release(const st_tensor *t);

/* CLEAVE_ERR_UNSUPPORTED naming the tensor unless its dtype is F32/F16/BF16. */
cleave_status st_check_float(const st_tensor *t);

/* Reads and parses a small JSON file (config.json, the shard index) of at
 * most max_bytes; free *out with cJSON_Delete. */
struct cJSON;
cleave_status st_read_json(const char *path, size_t max_bytes, struct cJSON **out);

/* ---- checkpoint directories ---- */

typedef struct st_dir st_dir;

/* Opens dir/model.safetensors, or else every shard named by
 * dir/model.safetensors.index.json (its weight_map is checked: each named
 * tensor must be in its shard). */
cleave_status st_dir_open(const char *dir, st_dir **out);
void st_dir_close(st_dir *d);
/* All tensors of all files, file by file. */
size_t st_dir_n_tensors(const st_dir *d);
const st_tensor *st_dir_tensor_at(const st_dir *d, size_t i);
const st_tensor *st_dir_find(const st_dir *d, const char *name); /* NULL if absent */
size_t st_dir_n_files(const st_dir *d);

#endif
