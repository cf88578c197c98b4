/* GGUF reading and writing. The reader maps the file and checks every count,
 * length and offset against the file size before trusting it, so a corrupt or
 * hostile file fails with a message naming the file and the item instead of
 * crashing or allocating wildly. The writer keeps metadata encoded in memory
 * and streams tensor data in bounded chunks. */
#include "gguf.h"

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
#include "base/mem.h"
#include "quant/quant.h"

#define GGUF_MAX_NAME 63                   /* ggml's tensor name limit, without the NUL */
#define GGUF_MAX_ELEMS ((uint64_t)1 << 62) /* element counts stay below this */
#define GGUF_CHUNK ((size_t)16 << 20)      /* writer: bytes per write / fill call */
#define GGUF_MIN_KV 13                     /* key length + type + 1-byte value */
#define GGUF_MIN_TENSOR 32                 /* name length + n_dims + ne[0] + type + offset */

/* ---- shared helpers ---- */

static const char *vtype_name(uint32_t t) {
    static const char *const names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                        "int32",  "float32", "bool",   "string", "array",
                                        "uint64", "int64",   "float64"};
    return t <= GGUF_T_FLOAT64 ? names[t] : "unknown";
}

/* Bytes of a fixed-size value type; 0 for string, array and unknown ids. */
static size_t vtype_size(uint32_t t) {
    static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t <= GGUF_T_FLOAT64 ? sizes[t] : 0;
}

/* Explicit byte order so header fields never depend on alignment or host. */
static uint64_t le_get(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = v << 8 | p[i];
    return v;
}

static uint8_t *le_put(uint8_t *p, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + n;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

static bool is_pow2(uint64_t a) { return a && !(a & (a - 1)); }

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

static size_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return (size_t)h;
}

static cleave_status index_init(gguf_index *ix, size_t n) {
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

static size_t index_find(const gguf_index *ix, const char *name) {
    const gguf_slot *s = ix->slots ? index_slot(ix, name) : NULL;
    return s && s->name ? s->idx : SIZE_MAX;
}

/* False when the name is already present. */
static bool index_add(gguf_index *ix, const char *name, size_t idx) {
    gguf_slot *s = index_slot(ix, name);
    if (s->name) return false;
    *s = (gguf_slot){name, idx};
    return true;
}

/* Checks a tensor's dims and type and sets n_elems and nbytes. Shared by the
 * reader (whose errors name the file) and the writer (whose errors are all
 * CLEAVE_ERR_INVALID_ARG: the caller passed them). */
static cleave_status check_shape(const char *who, bool writer, const char *name, uint32_t type,
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
    char *s = mem_alloc(len + 1, "gguf name");
    if (!s) return err_wrap(CLEAVE_ERR_OOM, "%s", r->f->path);
    memcpy(s, r->f->map + pos, len);
    s[len] = 0;
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
    if (!index_add(&f->tensor_index, name, i)) return bad(f, "duplicate tensor name '%s'", name);
    if ((st = rd_u32(r, &t->n_dims))) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return bad(f, "tensor '%s' has %" PRIu32 " dimensions (must be 1 to %d)", name, t->n_dims,
                   GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if ((st = rd_uint(r, 8, &t->ne[d]))) return st;
    if ((st = rd_u32(r, &t->type))) return st;
    if ((st =
             check_shape(f->path, false, name, t->type, t->ne, t->n_dims, &t->n_elems, &t->nbytes)))
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
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ferr(f->path, CLEAVE_ERR_IO, "cannot open: %s", strerror(errno));
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
    if ((st = index_init(&f->kv_index, f->n_kv))) return err_wrap(st, "%s", f->path);
    for (size_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        snprintf(r.what, sizeof r.what, "key %zu", i);
        if ((st = rd_name(&r, SIZE_MAX, &kv->key))) return st;
        snprintf(r.what, sizeof r.what, "key %zu ('%s')", i, kv->key);
        if (!index_add(&f->kv_index, kv->key, i)) return bad(f, "duplicate key '%s'", kv->key);
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
    if ((st = index_init(&f->tensor_index, f->n_tensors))) return err_wrap(st, "%s", f->path);
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
    size_t i = f && key ? index_find(&f->kv_index, key) : SIZE_MAX;
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
    size_t i = index_find(&f->kv_index, key);
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
    size_t i = f && name ? index_find(&f->tensor_index, name) : SIZE_MAX;
    return i == SIZE_MAX ? NULL : &f->tensors[i];
}

/* ---- writer ---- */

typedef struct {
    char *key;
    uint8_t *val; /* encoded as in the file: uint32 type, then the value */
    size_t val_len;
} gguf_wkv;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    size_t nbytes, offset; /* offset: from the data section, set at write time */
    const void *data;
    gguf_fill_fn fill;
    void *fill_user;
} gguf_wtensor;

struct gguf_writer {
    gguf_wkv *kv;
    size_t n_kv, cap_kv;
    gguf_wtensor *t;
    size_t n_t, cap_t;
};

static cleave_status grow(void **p, size_t *cap, size_t n, size_t elem, const char *what) {
    if (n < *cap) return CLEAVE_OK;
    size_t c = *cap ? *cap * 2 : 16;
    if (c > SIZE_MAX / elem) return err_set(CLEAVE_ERR_OOM, "too many %s", what);
    void *q = mem_realloc(*p, c * elem, what);
    if (!q) return CLEAVE_ERR_OOM;
    *p = q;
    *cap = c;
    return CLEAVE_OK;
}

cleave_status gguf_writer_new(gguf_writer **out) {
    if (!out) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_writer_new: NULL argument");
    *out = mem_calloc(1, sizeof **out, "gguf writer");
    return *out ? CLEAVE_OK : CLEAVE_ERR_OOM;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Stores an encoded value under key, taking ownership of val either way. */
static cleave_status set_raw(gguf_writer *w, const char *key, uint8_t *val, size_t len) {
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].val);
            w->kv[i].val = val;
            w->kv[i].val_len = len;
            return CLEAVE_OK;
        }
    }
    char *k = NULL;
    cleave_status st = grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv, "gguf keys");
    if (!st && !(k = mem_strdup(key, "gguf key"))) st = CLEAVE_ERR_OOM;
    if (st) {
        free(val);
        return st;
    }
    w->kv[w->n_kv++] = (gguf_wkv){k, val, len};
    return CLEAVE_OK;
}

static cleave_status check_key(const gguf_writer *w, const char *key) {
    if (!w || !key || !*key) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_set: NULL or empty key");
    return CLEAVE_OK;
}

static cleave_status set_scalar(gguf_writer *w, const char *key, uint32_t type, uint64_t bits) {
    cleave_status st = check_key(w, key);
    if (st) return st;
    size_t n = vtype_size(type);
    uint8_t *v = mem_alloc(4 + n, "gguf value");
    if (!v) return CLEAVE_ERR_OOM;
    le_put(le_put(v, type, 4), bits, n);
    return set_raw(w, key, v, 4 + n);
}

cleave_status gguf_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, GGUF_T_UINT32, v);
}

cleave_status gguf_set_u16(gguf_writer *w, const char *key, uint16_t v) {
    return set_scalar(w, key, GGUF_T_UINT16, v);
}

cleave_status gguf_set_i32(gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, GGUF_T_INT32, (uint32_t)v);
}

cleave_status gguf_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, GGUF_T_UINT64, v);
}

cleave_status gguf_set_f32(gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return set_scalar(w, key, GGUF_T_FLOAT32, bits);
}

cleave_status gguf_set_bool(gguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, GGUF_T_BOOL, v ? 1 : 0);
}

cleave_status gguf_set_str(gguf_writer *w, const char *key, const char *v) {
    cleave_status st = check_key(w, key);
    if (st) return st;
    if (!v) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_set_str '%s': NULL value", key);
    size_t n = strlen(v);
    uint8_t *buf = mem_alloc(12 + n, "gguf string value");
    if (!buf) return CLEAVE_ERR_OOM;
    memcpy(le_put(le_put(buf, GGUF_T_STRING, 4), n, 8), v, n);
    return set_raw(w, key, buf, 12 + n);
}

cleave_status gguf_set_arr(gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                           const void *data, size_t n) {
    cleave_status st = check_key(w, key);
    if (st) return st;
    size_t esz = vtype_size(elem_type);
    if (!esz)
        return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_set_arr '%s': element type %s is not numeric",
                       key, vtype_name(elem_type));
    if (n && !data) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_set_arr '%s': NULL data", key);
    if (n > (SIZE_MAX - 16) / esz)
        return err_set(CLEAVE_ERR_OOM, "gguf_set_arr '%s': too large", key);
    uint8_t *buf = mem_alloc(16 + n * esz, "gguf array value");
    if (!buf) return CLEAVE_ERR_OOM;
    uint8_t *p = le_put(le_put(le_put(buf, GGUF_T_ARRAY, 4), elem_type, 4), n, 8);
    /* cleave runs only on little-endian hosts (tensor data is used in place),
     * so host elements are already in file order */
    if (n) memcpy(p, data, n * esz);
    return set_raw(w, key, buf, 16 + n * esz);
}

cleave_status gguf_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, size_t n) {
    cleave_status st = check_key(w, key);
    if (st) return st;
    if (n && !strs)
        return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_set_arr_str '%s': NULL array", key);
    size_t total = 16;
    for (size_t i = 0; i < n; i++) {
        if (!strs[i])
            return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_set_arr_str '%s': string %zu is NULL", key,
                           i);
        size_t l = strlen(strs[i]);
        if (l > SIZE_MAX - 8 - total)
            return err_set(CLEAVE_ERR_OOM, "gguf_set_arr_str '%s': too large", key);
        total += 8 + l;
    }
    uint8_t *buf = mem_alloc(total, "gguf string array value");
    if (!buf) return CLEAVE_ERR_OOM;
    uint8_t *p = le_put(le_put(le_put(buf, GGUF_T_ARRAY, 4), GGUF_T_STRING, 4), n, 8);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(strs[i]);
        p = le_put(p, l, 8);
        memcpy(p, strs[i], l);
        p += l;
    }
    return set_raw(w, key, buf, total);
}

/* The value's bytes are copied as the file holds them (the reader checked
 * every length), so any type, nested strings included, round-trips. */
cleave_status gguf_copy_kv(gguf_writer *w, const gguf_file *f, size_t i) {
    if (!f || i >= f->n_kv) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_copy_kv: no key %zu", i);
    cleave_status st = check_key(w, f->kv[i].key);
    if (st) return st;
    const gguf_kv *kv = &f->kv[i];
    size_t begin = kv->pos, end = kv->pos + vtype_size(kv->type);
    if (kv->type == GGUF_T_STRING) {
        begin = kv->pos - 8, end = kv->pos + kv->n; /* with the length field */
    } else if (kv->type == GGUF_T_ARRAY) {
        begin = kv->pos - 12; /* element type and count */
        if (kv->elem_type != GGUF_T_STRING)
            end = kv->pos + kv->n * vtype_size(kv->elem_type);
        else if (kv->n)
            end = kv->str_pos[kv->n - 1] + 8 + (size_t)le_get(f->map + kv->str_pos[kv->n - 1], 8);
        else
            end = kv->pos;
    }
    uint8_t *v = mem_alloc(4 + end - begin, "gguf value");
    if (!v) return CLEAVE_ERR_OOM;
    memcpy(le_put(v, kv->type, 4), f->map + begin, end - begin);
    return set_raw(w, kv->key, v, 4 + end - begin);
}

cleave_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                                     uint32_t n_dims, const uint64_t *ne, const void *data,
                                     gguf_fill_fn fill, void *fill_user, size_t *index) {
    if (!w || !name || !ne || (!data && !fill))
        return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_writer_add_tensor: NULL argument");
    size_t len = strlen(name);
    if (len > GGUF_MAX_NAME)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tensor name '%s' is %zu bytes (limit %d)", name,
                       len, GGUF_MAX_NAME);
    gguf_wtensor t = {
        .type = type, .n_dims = n_dims, .data = data, .fill = fill, .fill_user = fill_user};
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return err_set(CLEAVE_ERR_INVALID_ARG, "tensor '%s' has %" PRIu32 " dimensions (1 to %d)",
                       name, n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    uint64_t n_elems;
    cleave_status st =
        check_shape("gguf writer", true, name, type, t.ne, n_dims, &n_elems, &t.nbytes);
    if (st) return st;
    st = grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t, "gguf tensors");
    if (st) return st;
    if (!(t.name = mem_strdup(name, "gguf tensor name"))) return CLEAVE_ERR_OOM;
    if (index) *index = w->n_t;
    w->t[w->n_t++] = t;
    return CLEAVE_OK;
}

typedef struct {
    FILE *fp;
    const char *path, *tmp;
    size_t written, total, reported;
    cleave_progress_fn progress;
    void *user;
} gguf_out;

static cleave_status out_report(gguf_out *o) {
    o->reported = o->written;
    if (o->progress && !o->progress((float)((double)o->written / (double)o->total), o->user))
        return err_set(CLEAVE_ERR_IO, "%s: cancelled", o->path);
    return CLEAVE_OK;
}

static cleave_status out_write(gguf_out *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->fp) != n)
        return err_set(CLEAVE_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
    o->written += n;
    return o->written - o->reported >= GGUF_CHUNK ? out_report(o) : CLEAVE_OK;
}

static cleave_status out_uint(gguf_out *o, uint64_t v, size_t n) {
    uint8_t b[8];
    le_put(b, v, n);
    return out_write(o, b, n);
}

static cleave_status out_str(gguf_out *o, const char *s) {
    size_t n = strlen(s);
    cleave_status st = out_uint(o, n, 8);
    return st ? st : out_write(o, s, n);
}

static cleave_status out_pad(gguf_out *o, size_t to) {
    static const uint8_t zeros[256];
    cleave_status st = CLEAVE_OK;
    while (!st && o->written < to) {
        size_t n = to - o->written < sizeof zeros ? to - o->written : sizeof zeros;
        st = out_write(o, zeros, n);
    }
    return st;
}

static cleave_status out_tensor(gguf_out *o, const gguf_wtensor *t, size_t i, uint8_t *buf) {
    cleave_status st = CLEAVE_OK;
    for (size_t at = 0; !st && at < t->nbytes; at += GGUF_CHUNK) {
        size_t n = t->nbytes - at < GGUF_CHUNK ? t->nbytes - at : GGUF_CHUNK;
        if (t->data) {
            st = out_write(o, (const uint8_t *)t->data + at, n);
        } else if ((st = t->fill(t->fill_user, i, at, buf, n))) {
            return err_wrap(st, "%s: filling tensor '%s'", o->path, t->name);
        } else {
            st = out_write(o, buf, n);
        }
    }
    return st;
}

/* Alignment from a user-set general.alignment, else the default. */
static cleave_status writer_alignment(const gguf_writer *w, size_t *align) {
    *align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        uint64_t a = w->kv[i].val_len == 8 ? le_get(w->kv[i].val + 4, 4) : 0;
        if (le_get(w->kv[i].val, 4) != GGUF_T_UINT32 || !is_pow2(a))
            return err_set(CLEAVE_ERR_INVALID_ARG,
                           "general.alignment must be a uint32 nonzero power of two");
        *align = (size_t)a;
    }
    return CLEAVE_OK;
}

/* Sets each tensor's data offset; returns the header size and data size. */
static cleave_status writer_layout(gguf_writer *w, size_t align, size_t *header, size_t *data) {
    gguf_index ix = {0};
    cleave_status st = index_init(&ix, w->n_t);
    if (st) return st;
    for (size_t i = 0; i < w->n_t; i++) {
        if (!index_add(&ix, w->t[i].name, i)) {
            free(ix.slots);
            return err_set(CLEAVE_ERR_INVALID_ARG, "duplicate tensor name '%s'", w->t[i].name);
        }
    }
    free(ix.slots);
    /* every piece is bounded by memory already held, except tensor sizes */
    size_t h = 24, off = 0;
    for (size_t i = 0; i < w->n_kv; i++) h += 8 + strlen(w->kv[i].key) + w->kv[i].val_len;
    for (size_t i = 0; i < w->n_t; i++) {
        h += 8 + strlen(w->t[i].name) + 4 + 8 * (size_t)w->t[i].n_dims + 4 + 8;
        off = align_up(off, align);
        w->t[i].offset = off;
        if (w->t[i].nbytes > SIZE_MAX / 2 - off)
            return err_set(CLEAVE_ERR_INVALID_ARG, "tensors add up to more than a file can hold");
        off += w->t[i].nbytes;
    }
    *header = h;
    *data = align_up(off, align);
    return CLEAVE_OK;
}

static cleave_status writer_emit(gguf_writer *w, gguf_out *o, size_t data_start, uint8_t *buf) {
    cleave_status st = out_write(o, "GGUF", 4);
    if (!st) st = out_uint(o, 3, 4);
    if (!st) st = out_uint(o, w->n_t, 8);
    if (!st) st = out_uint(o, w->n_kv, 8);
    for (size_t i = 0; !st && i < w->n_kv; i++) {
        st = out_str(o, w->kv[i].key);
        if (!st) st = out_write(o, w->kv[i].val, w->kv[i].val_len);
    }
    for (size_t i = 0; !st && i < w->n_t; i++) {
        const gguf_wtensor *t = &w->t[i];
        st = out_str(o, t->name);
        if (!st) st = out_uint(o, t->n_dims, 4);
        for (uint32_t d = 0; !st && d < t->n_dims; d++) st = out_uint(o, t->ne[d], 8);
        if (!st) st = out_uint(o, t->type, 4);
        if (!st) st = out_uint(o, t->offset, 8);
    }
    for (size_t i = 0; !st && i < w->n_t; i++) {
        st = out_pad(o, data_start + w->t[i].offset);
        if (!st) st = out_tensor(o, &w->t[i], i, buf);
    }
    if (!st) st = out_pad(o, o->total);
    if (!st && fflush(o->fp) != 0)
        st = err_set(CLEAVE_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
    if (!st && fsync(fileno(o->fp)) != 0)
        st = err_set(CLEAVE_ERR_IO, "%s: fsync failed: %s", o->tmp, strerror(errno));
    return st ? st : out_report(o);
}

cleave_status gguf_writer_write(gguf_writer *w, const char *path, cleave_progress_fn progress,
                                void *progress_user) {
    if (!w || !path) return err_set(CLEAVE_ERR_INVALID_ARG, "gguf_writer_write: NULL argument");
    size_t align = GGUF_DEFAULT_ALIGNMENT, header = 0, data = 0;
    cleave_status st = writer_alignment(w, &align);
    if (!st) st = writer_layout(w, align, &header, &data);
    if (st) return err_wrap(st, "%s", path);
    size_t data_start = align_up(header, align);

    size_t buf_len = 0;
    for (size_t i = 0; i < w->n_t; i++)
        if (!w->t[i].data && w->t[i].nbytes > buf_len) buf_len = w->t[i].nbytes;
    if (buf_len > GGUF_CHUNK) buf_len = GGUF_CHUNK;
    size_t plen = strlen(path);
    char *tmp = mem_alloc(plen + 5, "gguf temp path");
    uint8_t *buf = buf_len ? mem_alloc(buf_len, "gguf write buffer") : NULL;
    if (!tmp || (buf_len && !buf)) {
        free(tmp);
        free(buf);
        return err_wrap(CLEAVE_ERR_OOM, "%s", path);
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    gguf_out o = {.path = path,
                  .tmp = tmp,
                  .total = data_start + data,
                  .progress = progress,
                  .user = progress_user};
    o.fp = fopen(tmp, "wb");
    if (!o.fp) {
        st = err_set(CLEAVE_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        st = writer_emit(w, &o, data_start, buf);
        if (fclose(o.fp) != 0 && !st)
            st = err_set(CLEAVE_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        if (!st && rename(tmp, path) != 0)
            st = err_set(CLEAVE_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        if (st) unlink(tmp);
    }
    free(tmp);
    free(buf);
    return st;
}
