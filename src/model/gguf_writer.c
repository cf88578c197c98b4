/* The GGUF writer: metadata and tensors collected in memory (tensor data
 * borrowed or produced by a fill callback), then written in one pass with
 * the alignment GGUF requires, in chunks with progress. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_internal.h"
#include "base/error.h"
#include "base/mem.h"

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
    bool shapes_only; /* the tensor data left a hole (gguf_writer_shapes_only) */
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
        gguf_check_shape("gguf writer", true, name, type, t.ne, n_dims, &n_elems, &t.nbytes);
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
    cleave_status st = gguf_index_init(&ix, w->n_t);
    if (st) return st;
    for (size_t i = 0; i < w->n_t; i++) {
        if (!gguf_index_add(&ix, w->t[i].name, i)) {
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

/* The rest of the file as a hole: its full length, zeros, no blocks
 * written (none taken where the file system keeps sparse files). */
static cleave_status out_hole(gguf_out *o) {
    if (fflush(o->fp) != 0) return err_set(CLEAVE_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
    if (ftruncate(fileno(o->fp), (off_t)o->total) != 0)
        return err_set(CLEAVE_ERR_IO, "%s: cannot extend to %zu bytes: %s", o->tmp, o->total, strerror(errno));
    o->written = o->total;
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
    if (w->shapes_only) {
        if (!st) st = out_hole(o);
    } else {
        for (size_t i = 0; !st && i < w->n_t; i++) {
            st = out_pad(o, data_start + w->t[i].offset);
            if (!st) st = out_tensor(o, &w->t[i], i, buf);
        }
    }
    if (!st) st = out_pad(o, o->total);
    if (!st && fflush(o->fp) != 0)
        st = err_set(CLEAVE_ERR_IO, "%s: write failed: %s", o->tmp, strerror(errno));
    if (!st && fsync(fileno(o->fp)) != 0)
        st = err_set(CLEAVE_ERR_IO, "%s: fsync failed: %s", o->tmp, strerror(errno));
    return st ? st : out_report(o);
}

void gguf_writer_shapes_only(gguf_writer *w) {
    if (w) w->shapes_only = true;
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
