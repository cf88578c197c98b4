/* GGUF reading (writing is gguf_writer.c). The reader maps the file and checks every count,
 * length and offset against the file size before trusting it, so a corrupt or
 * hostile file fails with a message naming the file and the item instead of
 * crashing or allocating wildly. */
#include "gguf.h"
#include "gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "base/mem.h"
#include "quant/quant.h"

/* Every message starts with the file's path (or the writer's name). */
static cleave_status vferr(const char *path, cleave_status st, const char *fmt, va_list ap) {
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return err_set(st, "%s: %s", path, msg);
}

static cleave_status ferr(const char *path, cleave_status st, const char *fmt, ...)
    ERR_PRINTF(3, 4);
static cleave_status ferr(const char *path, cleave_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st = vferr(path, st, fmt, ap);
    va_end(ap);
    return st;
}

static size_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return (size_t)h;
}

cleave_status gguf_index_init(gguf_index *ix, size_t n) {
    size_t cap = 16;
    while (cap / 2 < n) {
        if (cap > SIZE_MAX / 4 / sizeof(gguf_slot))
            return err_set(CLEAVE_ERR_OOM, "too many names");
        cap *= 2;
    }
    ix->slots = mem_calloc(cap, sizeof *ix->slots, "gguf name index");
    if (!ix->slots) return CLEAVE_ERR_OOM;
    ix->mask = cap - 1;
    return CLEAVE_OK;
}

/* The slot holding name, or the empty slot where it would go (the table is
 * at most half full, so there always is one). */
static gguf_slot *index_slot(const gguf_index *ix, const char *name) {
    size_t i = name_hash(name) & ix->mask;
    while (ix->slots[i].name && strcmp(ix->slots[i].name, name) != 0) i = (i + 1) & ix->mask;
    return &ix->slots[i];
}

size_t gguf_index_find(const gguf_index *ix, const char *name) {
    const gguf_slot *s = ix->slots ? index_slot(ix, name) : NULL;
    return s && s->name ? s->idx : SIZE_MAX;
}

bool gguf_index_add(gguf_index *ix, const char *name, size_t idx) {
    gguf_slot *s = index_slot(ix, name);
    if (s->name) return false;
    *s = (gguf_slot){name, idx};
    return true;
}

cleave_status gguf_check_shape(const char *who, bool writer, const char *name, uint32_t type,
                                 const uint64_t *ne, uint32_t n_dims, uint64_t *n_elems,
                                 size_t *nbytes) {
    cleave_status fail = writer ? CLEAVE_ERR_INVALID_ARG : CLEAVE_ERR_FORMAT;
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0) return ferr(who, fail, "tensor '%s' has ne[%" PRIu32 "] = 0", name, d);
        if (n > (GGUF_MAX_ELEMS - 1) / ne[d])
            return ferr(who, fail,
                        "tensor '%s' has too many elements (ne[%" PRIu32 "] = %" PRIu64
                        ", limit 2^62 in all)",
                        name, d, ne[d]);
        n *= ne[d];
    }
    const char *tname;
    size_t be, bb;
    if (!quant_type_info(type, &tname, &be, &bb))
        return ferr(who, writer ? fail : CLEAVE_ERR_UNSUPPORTED,
                    "tensor '%s' has unknown type %" PRIu32, name, type);
    if (ne[0] % be)
        return ferr(who, fail,
                    "tensor '%s' of type %s has ne[0] = %" PRIu64
                    ", not a multiple of its block size %zu",
                    name, tname, ne[0], be);
    if (n / be > SIZE_MAX / bb) return ferr(who, fail, "tensor '%s' is too large", name);
    *n_elems = n;
    *nbytes = (size_t)(n / be) * bb;
    return CLEAVE_OK;
}

/* ---- reader ---- */

/* A format error in file f. */
static cleave_status bad(const gguf_file *f, const char *fmt, ...) ERR_PRINTF(2, 3);
static cleave_status bad(const gguf_file *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cleave_status st = vferr(f->path, CLEAVE_ERR_FORMAT, fmt, ap);
    va_end(ap);
    return st;
}

typedef struct {
    gguf_file *f;
    size_t pos;
    char what[160]; /* the item being read, for messages */
} rd;

static cleave_status rd_need(rd *r, size_t n) {
    if (n <= r->f->size - r->pos) return CLEAVE_OK;
    return bad(r->f, "truncated at byte %zu while reading %s", r->f->size, r->what);
}

static cleave_status rd_uint(rd *r, size_t n, uint64_t *v) {
    cleave_status st = rd_need(r, n);
    if (st) return st;
    *v = le_get(r->f->map + r->pos, n);
    r->pos += n;
    return CLEAVE_OK;
}

static cleave_status rd_u32(rd *r, uint32_t *v) {
    uint64_t x = 0;
    cleave_status st = rd_uint(r, 4, &x);
    *v = (uint32_t)x;
    return st;
}

/* A length-prefixed string, checked to lie inside the file. */
static cleave_status rd_str(rd *r, size_t *pos, size_t *len) {
    uint64_t n;
    cleave_status st = rd_uint(r, 8, &n);
    if (st) return st;
    if (n > r->f->size - r->pos)
        return bad(r->f,
                   "truncated at byte %zu while reading %s (a string of %" PRIu64
                   " bytes at byte %zu)",
                   r->f->size, r->what, n, r->pos);
    *pos = r->pos;
    *len = (size_t)n;
    r->pos += (size_t)n;
    return CLEAVE_OK;
}

/* A string copied out as a C string; an embedded NUL would make two
 * different names compare equal, so it is rejected. */
static cleave_status rd_name(rd *r, size_t max, char **out) {
    size_t pos = 0, len = 0;
    cleave_status st = rd_str(r, &pos, &len);
    if (st) return st;
    if (len > max)
        return bad(r->f, "%s: name of %zu bytes exceeds the limit of %zu", r->what, len, max);
    if (memchr(r->f->map + pos, 0, len)) return bad(r->f, "%s: name contains a NUL byte", r->what);
    char *s = mem_strndup((const char *)r->f->map + pos, len, "gguf name");
    if (!s) return err_wrap(CLEAVE_ERR_OOM, "%s", r->f->path);
    *out = s;
    return CLEAVE_OK;
}

static cleave_status rd_value(rd *r, gguf_kv *kv) {
    if (kv->type == GGUF_T_STRING) return rd_str(r, &kv->pos, &kv->n);
    if (kv->type != GGUF_T_ARRAY) {
        size_t sz = vtype_size(kv->type);
        if (!sz) return bad(r->f, "%s has unknown value type %" PRIu32, r->what, kv->type);
        cleave_status st = rd_need(r, sz);
        kv->pos = r->pos;
        r->pos += sz;
        return st;
    }
    uint32_t et;
    uint64_t count;
    cleave_status st = rd_u32(r, &et);
    if (st) return st;
    if (et == GGUF_T_ARRAY)
        return bad(r->f, "%s is an array of arrays, which is not supported", r->what);
    if (et != GGUF_T_STRING && !vtype_size(et))
        return bad(r->f, "%s is an array of unknown type %" PRIu32, r->what, et);
    if ((st = rd_uint(r, 8, &count))) return st;
    /* a string element takes at least its 8-byte length */
    size_t esz = et == GGUF_T_STRING ? 8 : vtype_size(et);
    if (count > (r->f->size - r->pos) / esz)
        return bad(r->f,
                   "%s: array of %" PRIu64 " %s elements at byte %zu runs past the end of the "
                   "file (size %zu)",
                   r->what, count, vtype_name(et), r->pos, r->f->size);
    kv->elem_type = et;
    kv->n = (size_t)count;
    kv->pos = r->pos;
    if (et != GGUF_T_STRING) {
        r->pos += kv->n * esz;
        return CLEAVE_OK;
    }
    kv->str_pos = mem_alloc(kv->n * sizeof *kv->str_pos, "gguf string array offsets");
    if (!kv->str_pos) return err_wrap(CLEAVE_ERR_OOM, "%s", r->f->path);
    for (size_t i = 0; i < kv->n; i++) {
        size_t p, l;
        kv->str_pos[i] = r->pos;
        if ((st = rd_str(r, &p, &l))) return st;
    }
    return CLEAVE_OK;
}

static cleave_status rd_tensor(rd *r, size_t i) {
    gguf_file *f = r->f;
    gguf_tensor *t = &f->tensors[i];
    char *name = NULL;
    snprintf(r->what, sizeof r->what, "tensor %zu", i);
    cleave_status st = rd_name(r, GGUF_MAX_NAME, &name);
    if (st) return st;
    t->name = name;
    snprintf(r->what, sizeof r->what, "tensor %zu ('%s')", i, name);
    if (!gguf_index_add(&f->tensor_index, name, i)) return bad(f, "duplicate tensor name '%s'", name);
    if ((st = rd_u32(r, &t->n_dims))) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return bad(f, "tensor '%s' has %" PRIu32 " dimensions (must be 1 to %d)", name, t->n_dims,
                   GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if ((st = rd_uint(r, 8, &t->ne[d]))) return st;
    if ((st = rd_u32(r, &t->type))) return st;
    if ((st =
             gguf_check_shape(f->path, false, name, t->type, t->ne, t->n_dims, &t->n_elems, &t->nbytes)))
        return st;
    uint64_t off;
    if ((st = rd_uint(r, 8, &off))) return st;
    if (off % f->alignment)
        return bad(f, "tensor '%s' data offset %" PRIu64 " is not a multiple of the alignment %zu",
                   name, off, f->alignment);
    if (off > f->size)
        return bad(f, "tensor '%s' data offset %" PRIu64 " is past the end of the file (size %zu)",
                   name, off, f->size);
    t->offset = (size_t)off; /* relative until the data section start is known */
    return CLEAVE_OK;
}

static cleave_status map_file(gguf_file *f) {
    int fd;
    cleave_status opened = file_open_read(f->path, &fd); /* a FIFO or device: refused, not waited on */
    if (opened) return opened;
    struct stat sb;
    cleave_status st = CLEAVE_OK;
    if (fstat(fd, &sb) != 0)
        st = ferr(f->path, CLEAVE_ERR_IO, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = ferr(f->path, CLEAVE_ERR_IO, "not a regular file");
    else if (sb.st_size <= 0)
        st = bad(f, "empty file");
    else if ((uint64_t)sb.st_size > SIZE_MAX / 2)
        st = ferr(f->path, CLEAVE_ERR_UNSUPPORTED, "file too large to map");
    void *m = st ? MAP_FAILED : mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (!st && m == MAP_FAILED)
        st = ferr(f->path, CLEAVE_ERR_IO, "cannot map the file: %s", strerror(errno));
    close(fd); /* the mapping keeps the file alive */
    if (st) return st;
    f->map = m;
    f->size = (size_t)sb.st_size;
    return CLEAVE_OK;
}

static cleave_status parse(gguf_file *f) {
    rd r = {.f = f};
    const uint8_t *m = f->map;
    if (f->size >= 4 && memcmp(m, "GGUF", 4) != 0)
        return bad(f, "not a GGUF file (magic %02x %02x %02x %02x, expected 47 47 55 46)", m[0],
                   m[1], m[2], m[3]);
    if (f->size < 24) return bad(f, "file is only %zu bytes, too short for a GGUF header", f->size);
    uint64_t nk, nt;
    snprintf(r.what, sizeof r.what, "the header");
    r.pos = 4;
    cleave_status st = rd_u32(&r, &f->version);
    if (!st && f->version != 2 && f->version != 3)
        return ferr(f->path, CLEAVE_ERR_UNSUPPORTED,
                    "GGUF version %" PRIu32 " is not supported (only versions 2 and 3)",
                    f->version);
    if (!st) st = rd_uint(&r, 8, &nt);
    if (!st) st = rd_uint(&r, 8, &nk);
    if (st) return st;
    /* counts are bounded by the bytes left, so no allocation exceeds the file's scale */
    if (nk > (f->size - r.pos) / GGUF_MIN_KV)
        return bad(f, "n_kv %" PRIu64 " cannot fit in a file of %zu bytes (truncated or corrupt)",
                   nk, f->size);
    f->kv = mem_calloc((size_t)nk, sizeof *f->kv, "gguf key/values");
    if (!f->kv) return err_wrap(CLEAVE_ERR_OOM, "%s", f->path);
    f->n_kv = (size_t)nk;
    if ((st = gguf_index_init(&f->kv_index, f->n_kv))) return err_wrap(st, "%s", f->path);
    for (size_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        snprintf(r.what, sizeof r.what, "key %zu", i);
        if ((st = rd_name(&r, SIZE_MAX, &kv->key))) return st;
        snprintf(r.what, sizeof r.what, "key %zu ('%s')", i, kv->key);
        if (!gguf_index_add(&f->kv_index, kv->key, i)) return bad(f, "duplicate key '%s'", kv->key);
        if ((st = rd_u32(&r, &kv->type))) return st;
        if ((st = rd_value(&r, kv))) return st;
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (gguf_find_key(f, "general.alignment") >= 0) {
        uint32_t a;
        if ((st = gguf_get_u32(f, "general.alignment", &a))) return st;
        if (!is_pow2(a))
            return bad(f, "general.alignment %" PRIu32 " is not a nonzero power of two", a);
        f->alignment = a;
    }

    snprintf(r.what, sizeof r.what, "the tensor count");
    if (nt > (f->size - r.pos) / GGUF_MIN_TENSOR)
        return bad(f,
                   "n_tensors %" PRIu64 " cannot fit in a file of %zu bytes (truncated or corrupt)",
                   nt, f->size);
    f->tensors = mem_calloc((size_t)nt, sizeof *f->tensors, "gguf tensors");
    if (!f->tensors) return err_wrap(CLEAVE_ERR_OOM, "%s", f->path);
    f->n_tensors = (size_t)nt;
    if ((st = gguf_index_init(&f->tensor_index, f->n_tensors))) return err_wrap(st, "%s", f->path);
    for (size_t i = 0; i < f->n_tensors; i++)
        if ((st = rd_tensor(&r, i))) return st;

    f->data_start = align_up(r.pos, f->alignment);
    for (size_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        size_t rel = t->offset, a = f->data_start + rel;
        if (f->data_start > f->size || rel > f->size - f->data_start || t->nbytes > f->size - a) {
            size_t b = t->nbytes > SIZE_MAX - a ? SIZE_MAX : a + t->nbytes;
            return bad(f, "tensor '%s' data [%zu, %zu) extends past end of file (size %zu)",
                       t->name, a, b, f->size);
        }
        t->offset = a;
        t->data = f->map + a;
    }
    return CLEAVE_OK;
}

cleave_status gguf_open(const char *path, gguf_file **out) {
    if (!path || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_open: NULL argument");
    *out = NULL;
    gguf_file *f = mem_calloc(1, sizeof *f, "gguf file");
    if (!f) return err_wrap(CLEAVE_ERR_OOM, "%s", path);
    f->path = mem_strdup(path, "gguf path");
    if (!f->path) {
        free(f);
        return err_wrap(CLEAVE_ERR_OOM, "%s", path);
    }
    cleave_status st = map_file(f);
    if (!st) st = parse(f);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return CLEAVE_OK;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->size);
    for (size_t i = 0; f->kv && i < f->n_kv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].str_pos);
    }
    for (size_t i = 0; f->tensors && i < f->n_tensors; i++) free((void *)f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    free(f->kv_index.slots);
    free(f->tensor_index.slots);
    free(f->path);
    free(f);
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
size_t gguf_alignment(const gguf_file *f) { return f->alignment; }
size_t gguf_file_size(const gguf_file *f) { return f->size; }
const char *gguf_path(const gguf_file *f) { return f->path; }
size_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
const char *gguf_kv_key(const gguf_file *f, size_t i) { return i < f->n_kv ? f->kv[i].key : NULL; }

enum gguf_vtype gguf_kv_type(const gguf_file *f, size_t i) {
    return i < f->n_kv ? (enum gguf_vtype)f->kv[i].type : GGUF_T_UINT8;
}

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    size_t i = f && key ? gguf_index_find(&f->kv_index, key) : SIZE_MAX;
    return i == SIZE_MAX ? -1 : (int64_t)i;
}

#define INT_TYPES                                                                                  \
    (1u << GGUF_T_UINT8 | 1u << GGUF_T_INT8 | 1u << GGUF_T_UINT16 | 1u << GGUF_T_INT16 |           \
     1u << GGUF_T_UINT32 | 1u << GGUF_T_INT32 | 1u << GGUF_T_UINT64 | 1u << GGUF_T_INT64)
#define SIGNED_TYPES                                                                               \
    (1u << GGUF_T_INT8 | 1u << GGUF_T_INT16 | 1u << GGUF_T_INT32 | 1u << GGUF_T_INT64)

/* The entry for key if its type is one of the bits in types. */
static cleave_status kv_get(const gguf_file *f, const char *key, unsigned types,
                            const char *expected, const gguf_kv **out) {
    if (!f || !key) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf getter: NULL argument");
    size_t i = gguf_index_find(&f->kv_index, key);
    if (i == SIZE_MAX) return bad(f, "missing key '%s'", key);
    const gguf_kv *kv = *out = &f->kv[i];
    if (types >> kv->type & 1) return CLEAVE_OK;
    if (kv->type == GGUF_T_ARRAY)
        return bad(f, "key '%s' is an array of %s, expected %s", key, vtype_name(kv->elem_type),
                   expected);
    return bad(f, "key '%s' has type %s, expected %s", key, vtype_name(kv->type), expected);
}

/* Any integer value, range-checked against [lo, hi]; *neg tells whether the
 * value is in *s (negative) or in *u. */
static cleave_status get_int(const gguf_file *f, const char *key, const char *target, int64_t lo,
                             uint64_t hi, bool *neg, int64_t *s, uint64_t *u) {
    const gguf_kv *kv;
    cleave_status st = kv_get(f, key, INT_TYPES, "an integer", &kv);
    if (st) return st;
    size_t n = vtype_size(kv->type);
    uint64_t raw = le_get(f->map + kv->pos, n);
    *neg = (SIGNED_TYPES >> kv->type & 1) && (raw >> (8 * n - 1) & 1);
    if (*neg) {
        if (n < 8) raw |= ~(uint64_t)0 << (8 * n); /* sign-extend */
        memcpy(s, &raw, sizeof *s);
        if (*s >= lo) return CLEAVE_OK;
        return bad(f, "key '%s' value %" PRId64 " does not fit %s", key, *s, target);
    }
    *u = raw;
    if (raw <= hi) return CLEAVE_OK;
    return bad(f, "key '%s' value %" PRIu64 " does not fit %s", key, raw, target);
}

cleave_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    bool neg = false;
    int64_t s = 0;
    uint64_t u = 0;
    cleave_status st = get_int(f, key, "uint32", 0, UINT32_MAX, &neg, &s, &u);
    if (!st) *out = (uint32_t)u;
    return st;
}

cleave_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    bool neg = false;
    int64_t s = 0;
    uint64_t u = 0;
    cleave_status st = get_int(f, key, "uint64", 0, UINT64_MAX, &neg, &s, &u);
    if (!st) *out = u;
    return st;
}

cleave_status gguf_get_i32(const gguf_file *f, const char *key, int32_t *out) {
    bool neg = false;
    int64_t s = 0;
    uint64_t u = 0;
    cleave_status st = get_int(f, key, "int32", INT32_MIN, INT32_MAX, &neg, &s, &u);
    if (!st) *out = neg ? (int32_t)s : (int32_t)u;
    return st;
}

cleave_status gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv;
    cleave_status st =
        kv_get(f, key, 1u << GGUF_T_FLOAT32 | 1u << GGUF_T_FLOAT64, "float32 or float64", &kv);
    if (st) return st;
    if (kv->type == GGUF_T_FLOAT32) {
        uint32_t b = (uint32_t)le_get(f->map + kv->pos, 4);
        memcpy(out, &b, 4);
        return CLEAVE_OK;
    }
    uint64_t bits = le_get(f->map + kv->pos, 8);
    double d;
    memcpy(&d, &bits, 8);
    /* converting an out-of-range double to float is undefined behaviour */
    if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX))
        return bad(f, "key '%s' value %g does not fit float32", key, d);
    *out = (float)d;
    return CLEAVE_OK;
}

cleave_status gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv;
    cleave_status st = kv_get(f, key, 1u << GGUF_T_BOOL, "bool", &kv);
    if (!st) *out = f->map[kv->pos] != 0;
    return st;
}

cleave_status gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len) {
    const gguf_kv *kv;
    cleave_status st = kv_get(f, key, 1u << GGUF_T_STRING, "string", &kv);
    if (st) return st;
    if (s) *s = (const char *)f->map + kv->pos;
    if (len) *len = kv->n;
    return CLEAVE_OK;
}

cleave_status gguf_get_arr(const gguf_file *f, const char *key, enum gguf_vtype *elem_type,
                           size_t *n, const void **data) {
    const gguf_kv *kv;
    cleave_status st = kv_get(f, key, 1u << GGUF_T_ARRAY, "an array", &kv);
    if (st) return st;
    if (elem_type) *elem_type = (enum gguf_vtype)kv->elem_type;
    if (n) *n = kv->n;
    /* string elements are variable-length: gguf_get_arr_str reads them */
    if (data) *data = kv->elem_type == GGUF_T_STRING ? NULL : f->map + kv->pos;
    return CLEAVE_OK;
}

cleave_status gguf_get_arr_str(const gguf_file *f, const char *key, size_t i, const char **s,
                               size_t *len) {
    const gguf_kv *kv;
    cleave_status st = kv_get(f, key, 1u << GGUF_T_ARRAY, "an array of string", &kv);
    if (!st && kv->elem_type != GGUF_T_STRING)
        st = bad(f, "key '%s' is an array of %s, expected strings", key, vtype_name(kv->elem_type));
    if (!st && i >= kv->n)
        st = ferr(f->path, CLEAVE_ERR_INVALID_ARG, "key '%s': index %zu out of range (%zu strings)",
                  key, i, kv->n);
    if (st) return st;
    size_t p = kv->str_pos[i];
    if (s) *s = (const char *)f->map + p + 8;
    if (len) *len = (size_t)le_get(f->map + p, 8);
    return CLEAVE_OK;
}

size_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i) {
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    size_t i = f && name ? gguf_index_find(&f->tensor_index, name) : SIZE_MAX;
    return i == SIZE_MAX ? NULL : &f->tensors[i];
}

