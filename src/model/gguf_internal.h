/* What the GGUF reader (gguf.c) and writer (gguf_writer.c) share and
 * nothing else sees: limits, the value-type and byte-order helpers, the
 * name index, the parsed file's layout and the tensor shape check. */
#ifndef CLEAVE_GGUF_INTERNAL_H
#define CLEAVE_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

#define GGUF_MAX_NAME 63                   /* ggml's tensor name limit, without the NUL */
#define GGUF_MAX_ELEMS ((uint64_t)1 << 62) /* element counts stay below this */
#define GGUF_CHUNK ((size_t)16 << 20)      /* writer: bytes per write / fill call */
#define GGUF_MIN_KV 13                     /* key length + type + 1-byte value */
#define GGUF_MIN_TENSOR 32                 /* name length + n_dims + ne[0] + type + offset */


static inline const char *vtype_name(uint32_t t) {
    static const char *const names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                        "int32",  "float32", "bool",   "string", "array",
                                        "uint64", "int64",   "float64"};
    return t <= GGUF_T_FLOAT64 ? names[t] : "unknown";
}

/* Bytes of a fixed-size value type; 0 for string, array and unknown ids. */
static inline size_t vtype_size(uint32_t t) {
    static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t <= GGUF_T_FLOAT64 ? sizes[t] : 0;
}

/* Explicit byte order so header fields never depend on alignment or host. */
static inline uint64_t le_get(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = v << 8 | p[i];
    return v;
}

static inline uint8_t *le_put(uint8_t *p, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + n;
}

static inline size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

static inline bool is_pow2(uint64_t a) { return a && !(a & (a - 1)); }

/* Open-addressing name -> index table: a hostile file may hold millions of
 * keys or tensors, so duplicate checks and lookups must not be quadratic. */
typedef struct {
    const char *name;
    size_t idx;
} gguf_slot;

typedef struct {
    gguf_slot *slots;
    size_t mask;
} gguf_index;

cleave_status gguf_index_init(gguf_index *ix, size_t n);
/* The index of name, or SIZE_MAX. */
size_t gguf_index_find(const gguf_index *ix, const char *name);
/* False when the name is already present. */
bool gguf_index_add(gguf_index *ix, const char *name, size_t idx);

typedef struct {
    char *key;
    uint32_t type;      /* enum gguf_vtype */
    uint32_t elem_type; /* arrays only */
    size_t pos;         /* file offset of the scalar, string bytes or array elements */
    size_t n;           /* string length or array count */
    size_t *str_pos;    /* string arrays: file offset of each element's length field */
} gguf_kv;

struct gguf_file {
    char *path;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    size_t alignment, data_start;
    size_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    gguf_index kv_index, tensor_index;
};

/* Checks a tensor's dims and type and sets n_elems and nbytes. Shared by the
 * reader (whose errors name the file) and the writer (whose errors are all
 * CLEAVE_ERR_INVALID_ARG: the caller passed them). */
cleave_status gguf_check_shape(const char *who, bool writer, const char *name, uint32_t type,
                               const uint64_t *ne, uint32_t n_dims, uint64_t *n_elems, size_t *nbytes);

#endif
