/* The .safetensors reader: maps a file, parses its JSON header with cJSON
 * and checks every tensor's dtype, shape and byte range against the file, so
 * the converter can stream straight from the mapping. Directories with a
 * sharded index open every shard once. Builds without cJSON keep the API
 * and report CLEAVE_ERR_UNSUPPORTED. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/file.h"
#include "base/mem.h"

#ifdef CLEAVE_WITH_CJSON
#include <cjson/cJSON.h>

/* The safetensors format caps headers at 100 MB; anything larger is corrupt. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
/* Largest integer a JSON number (a double) holds exactly. */
#define ST_MAX_JSON_INT ((double)((uint64_t)1 << 53))

struct st_file {
    char *path;
    void *map;
    size_t size;
    st_tensor *t; /* sorted by name, for st_find */
    size_t n;
};

struct st_dir {
    st_file **files;
    size_t n_files;
    size_t n_tensors;
};

typedef struct {
    const char *name;
    size_t elem_bytes;
    bool supported;
    cleave_type type;
} st_dtype_row;

/* Every dtype the format defines with a whole-byte element, so headers of
 * checkpoints that carry integer buffers still validate. */
static const st_dtype_row st_dtypes[] = {
    {"F32", 4, true, CLEAVE_TYPE_F32},  {"F16", 2, true, CLEAVE_TYPE_F16},
    {"BF16", 2, true, CLEAVE_TYPE_BF16}, {"F64", 8, false, CLEAVE_TYPE_F32},
    {"I64", 8, false, CLEAVE_TYPE_F32}, {"I32", 4, false, CLEAVE_TYPE_F32},
    {"I16", 2, false, CLEAVE_TYPE_F32}, {"I8", 1, false, CLEAVE_TYPE_F32},
    {"U64", 8, false, CLEAVE_TYPE_F32}, {"U32", 4, false, CLEAVE_TYPE_F32},
    {"U16", 2, false, CLEAVE_TYPE_F32}, {"U8", 1, false, CLEAVE_TYPE_F32},
    {"BOOL", 1, false, CLEAVE_TYPE_F32}, {"F8_E4M3", 1, false, CLEAVE_TYPE_F32},
    {"F8_E5M2", 1, false, CLEAVE_TYPE_F32},
};

static const st_dtype_row *st_dtype_find(const char *name) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

static char *st_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = mem_alloc(a + b + 2, "path");
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

/* A JSON number that is a whole number a double holds exactly. */
static bool st_json_u64(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!(v >= 0 && v <= ST_MAX_JSON_INT) || v != (double)(uint64_t)v) return false;
    *out = (uint64_t)v;
    return true;
}

static int st_cmp_tensor(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int st_cmp_key(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const st_tensor *)elem)->name);
}

/* Fills one tensor entry from its header object. data_size is the bytes
 * after the header; data the start of them. */
static cleave_status st_parse_entry(const char *path, const cJSON *e, const char *data,
                                    uint64_t data_size, st_tensor *t) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return err_set(CLEAVE_ERR_FORMAT, "%s: header entry '%s' is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: tensor '%s' lacks a string dtype, a shape array or data_offsets", path,
                       name);
    const st_dtype_row *row = st_dtype_find(dt->valuestring);
    if (!row)
        return err_set(CLEAVE_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has dtype '%.32s', which cleave does not read (it "
                       "converts F32, F16 and BF16)",
                       path, name, dt->valuestring);
    snprintf(t->dtype, sizeof t->dtype, "%s", row->name);
    t->supported = row->supported;
    t->type = row->type;
    int nd = cJSON_GetArraySize(shape);
    if (nd > ST_MAX_DIMS)
        return err_set(CLEAVE_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most %d)",
                       path, name, nd, ST_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    t->n_elems = 1;
    int d = 0;
    for (const cJSON *s = shape->child; s; s = s->next, d++) {
        uint64_t v;
        if (!st_json_u64(s, &v))
            return err_set(CLEAVE_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a whole number",
                           path, name, d);
        t->shape[d] = v;
        if (v && t->n_elems > UINT64_MAX / v)
            return err_set(CLEAVE_ERR_FORMAT, "%s: tensor '%s': shape overflows", path, name);
        t->n_elems *= v;
    }
    uint64_t begin, end;
    if (cJSON_GetArraySize(offs) != 2 || !st_json_u64(offs->child, &begin) ||
        !st_json_u64(offs->child->next, &end))
        return err_set(CLEAVE_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end]", path,
                       name);
    if (t->n_elems > UINT64_MAX / row->elem_bytes)
        return err_set(CLEAVE_ERR_FORMAT, "%s: tensor '%s': size overflows", path, name);
    uint64_t want = t->n_elems * row->elem_bytes;
    if (begin > end || end > data_size)
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] lie outside the %llu data bytes "
                       "(truncated file?)",
                       path, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_size);
    if (end - begin != want)
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: tensor '%s': %llu data bytes, but %s of %llu elements need %llu", path,
                       name, (unsigned long long)(end - begin), row->name,
                       (unsigned long long)t->n_elems, (unsigned long long)want);
    t->nbytes = (size_t)want;
    t->data = data + begin;
    t->file = path;
    t->name = mem_strdup(name, "tensor name");
    return t->name ? CLEAVE_OK : CLEAVE_ERR_OOM;
}

static cleave_status st_parse_header(st_file *f) {
    const char *path = f->path, *base = f->map;
    uint64_t hs;
    memcpy(&hs, base, 8); /* little-endian, as is every host cleave runs on */
    if (hs > f->size - 8)
        return err_set(CLEAVE_ERR_FORMAT,
                       "%s: header size %llu runs past the end of the file (%zu bytes)", path,
                       (unsigned long long)hs, f->size);
    if (hs < 2 || hs > ST_MAX_HEADER)
        return err_set(CLEAVE_ERR_FORMAT, "%s: implausible header size %llu", path,
                       (unsigned long long)hs);
    const char *json = base + 8, *json_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, (size_t)hs, &json_end, false);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= json && at <= json + hs ? (long)(at - json) : -1;
        return err_set(CLEAVE_ERR_FORMAT, "%s: header is not valid JSON (near byte %ld)", path,
                       off);
    }
    cleave_status st = CLEAVE_OK;
    /* The writer pads the header with spaces; nothing else may follow. */
    for (const char *p = json_end; p && p < json + hs; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != 0) {
            st = err_set(CLEAVE_ERR_FORMAT, "%s: trailing bytes after the JSON header", path);
            goto out;
        }
    if (!cJSON_IsObject(root)) {
        st = err_set(CLEAVE_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto out;
    }
    size_t n = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        n += strcmp(e->string, "__metadata__") != 0;
    f->t = mem_calloc(n ? n : 1, sizeof *f->t, "safetensors tensors");
    if (!f->t) {
        st = CLEAVE_ERR_OOM;
        goto out;
    }
    const char *data = json + hs;
    uint64_t data_size = f->size - 8 - hs;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if ((st = st_parse_entry(path, e, data, data_size, &f->t[f->n]))) goto out;
        f->n++;
    }
    qsort(f->t, f->n, sizeof *f->t, st_cmp_tensor);
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(f->t[i - 1].name, f->t[i].name) == 0) {
            st = err_set(CLEAVE_ERR_FORMAT, "%s: tensor '%s' appears twice", path, f->t[i].name);
            goto out;
        }
out:
    cJSON_Delete(root);
    return st;
}

cleave_status st_open(const char *path, st_file **out) {
    if (!path || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "safetensors: NULL argument");
    *out = NULL;
    st_file *f = mem_calloc(1, sizeof *f, "safetensors file");
    if (!f) return CLEAVE_ERR_OOM;
    cleave_status st = CLEAVE_OK;
    if (!(f->path = mem_strdup(path, "path"))) {
        st = CLEAVE_ERR_OOM;
        goto fail;
    }
    int fd;
    if ((st = file_open_read(path, &fd))) goto fail;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        st = err_set(CLEAVE_ERR_IO, "%s: not a readable regular file", path);
        goto fail;
    }
    if (sb.st_size < 8) {
        close(fd);
        st = err_set(CLEAVE_ERR_FORMAT, "%s: %lld bytes is too short for a safetensors file", path,
                     (long long)sb.st_size);
        goto fail;
    }
    f->size = (size_t)sb.st_size;
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        st = err_set(CLEAVE_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    if ((st = st_parse_header(f))) goto fail;
    *out = f;
    return CLEAVE_OK;
fail:
    st_close(f);
    return st;
}

void st_close(st_file *f) {
    if (!f) return;
    for (size_t i = 0; f->t && i < f->n; i++) free((char *)f->t[i].name);
    free(f->t);
    if (f->map) munmap(f->map, f->size);
    free(f->path);
    free(f);
}

size_t st_n_tensors(const st_file *f) { return f ? f->n : 0; }

const st_tensor *st_tensor_at(const st_file *f, size_t i) {
    return f && i < f->n ? &f->t[i] : NULL;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    if (!f || !name || !f->n) return NULL;
    return bsearch(name, f->t, f->n, sizeof *f->t, st_cmp_key);
}

cleave_status st_read_json(const char *path, size_t max_bytes, struct cJSON **out) {
    *out = NULL;
    FILE *fp;
    cleave_status st = file_fopen_read(path, &fp);
    if (st) return st;
    char *buf = NULL;
    long size = -1;
    if (fseek(fp, 0, SEEK_END) == 0) size = ftell(fp);
    if (size < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        st = err_set(CLEAVE_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    } else if ((unsigned long)size > max_bytes) {
        st = err_set(CLEAVE_ERR_FORMAT, "%s: %ld bytes is too large for a JSON file here", path,
                     size);
    } else if (!(buf = mem_alloc((size_t)size + 1, "JSON text"))) {
        st = CLEAVE_ERR_OOM;
    } else if (fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        st = err_set(CLEAVE_ERR_IO, "%s: short read", path);
    } else {
        buf[size] = 0;
        *out = cJSON_ParseWithLength(buf, (size_t)size);
        if (!*out) {
            const char *at = cJSON_GetErrorPtr();
            long off = at && at >= buf && at <= buf + size ? (long)(at - buf) : -1;
            st = err_set(CLEAVE_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", path, off);
        }
    }
    free(buf);
    fclose(fp);
    return st;
}

/* Shard file names come from a file: only plain names in the directory. */
static bool st_plain_name(const char *s) {
    return s[0] && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/');
}

static cleave_status st_dir_add(st_dir *d, const char *path) {
    st_file **files = mem_realloc(d->files, (d->n_files + 1) * sizeof *files, "shard list");
    if (!files) return CLEAVE_ERR_OOM;
    d->files = files;
    st_file *f;
    cleave_status st = st_open(path, &f);
    if (st) return st;
    d->files[d->n_files++] = f;
    d->n_tensors += f->n;
    return CLEAVE_OK;
}

static cleave_status st_dir_open_index(st_dir *d, const char *dir, const char *index_path) {
    cJSON *idx;
    cleave_status st = st_read_json(index_path, (size_t)64 << 20, &idx);
    if (st) return st;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    if (!cJSON_IsObject(map) || !map->child) {
        st = err_set(CLEAVE_ERR_FORMAT, "%s: no weight_map object", index_path);
        goto out;
    }
    for (const cJSON *e = map->child; e && !st; e = e->next) {
        if (!cJSON_IsString(e) || !st_plain_name(e->valuestring)) {
            st = err_set(CLEAVE_ERR_FORMAT, "%s: weight_map['%s'] is not a file name in %s",
                         index_path, e->string, dir);
            break;
        }
        bool seen = false;
        for (const cJSON *p = map->child; p != e && !seen; p = p->next)
            seen = strcmp(p->valuestring, e->valuestring) == 0;
        if (seen) continue;
        char *path = st_join(dir, e->valuestring);
        st = path ? st_dir_add(d, path) : CLEAVE_ERR_OOM;
        free(path);
    }
    /* Each listed tensor must really be in the shard the index names. */
    for (const cJSON *e = map->child; e && !st; e = e->next) {
        const st_tensor *t = NULL;
        for (size_t i = 0; i < d->n_files && !t; i++) {
            const char *base = strrchr(d->files[i]->path, '/') + 1;
            if (strcmp(base, e->valuestring) == 0) t = st_find(d->files[i], e->string);
        }
        if (!t)
            st = err_set(CLEAVE_ERR_FORMAT, "%s: names tensor '%s' in %s, which does not hold it",
                         index_path, e->string, e->valuestring);
    }
out:
    cJSON_Delete(idx);
    return st;
}

cleave_status st_dir_open(const char *dir, st_dir **out) {
    if (!dir || !out) return err_set(CLEAVE_ERR_INVALID_ARG, "safetensors: NULL argument");
    *out = NULL;
    st_dir *d = mem_calloc(1, sizeof *d, "checkpoint");
    if (!d) return CLEAVE_ERR_OOM;
    char *single = st_join(dir, "model.safetensors");
    char *index = st_join(dir, "model.safetensors.index.json");
    cleave_status st = CLEAVE_OK;
    if (!single || !index) st = CLEAVE_ERR_OOM;
    else if (access(single, F_OK) == 0) st = st_dir_add(d, single);
    else if (access(index, F_OK) == 0) st = st_dir_open_index(d, dir, index);
    else
        st = err_set(CLEAVE_ERR_IO,
                     "%s: no model.safetensors or model.safetensors.index.json (only safetensors "
                     "checkpoints are read, not pytorch_model.bin)",
                     dir);
    free(single);
    free(index);
    if (st) {
        st_dir_close(d);
        return st;
    }
    *out = d;
    return CLEAVE_OK;
}

void st_dir_close(st_dir *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_files; i++) st_close(d->files[i]);
    free(d->files);
    free(d);
}

size_t st_dir_n_tensors(const st_dir *d) { return d ? d->n_tensors : 0; }
size_t st_dir_n_files(const st_dir *d) { return d ? d->n_files : 0; }

const st_tensor *st_dir_tensor_at(const st_dir *d, size_t i) {
    for (size_t k = 0; d && k < d->n_files; k++) {
        if (i < d->files[k]->n) return &d->files[k]->t[i];
        i -= d->files[k]->n;
    }
    return NULL;
}

const st_tensor *st_dir_find(const st_dir *d, const char *name) {
    for (size_t k = 0; d && k < d->n_files; k++) {
        const st_tensor *t = st_find(d->files[k], name);
        if (t) return t;
    }
    return NULL;
}

#else /* no cJSON: the API exists and says why it cannot work */

static cleave_status st_no_json(void) {
    return err_set(CLEAVE_ERR_UNSUPPORTED,
                   "this build has no JSON library (install libcjson-dev and rebuild)");
}

cleave_status st_open(const char *path, st_file **out) {
    if (out) *out = NULL;
    return st_no_json();
}
void st_close(st_file *f) { (void)f; }
size_t st_n_tensors(const st_file *f) { return 0; }
const st_tensor *st_tensor_at(const st_file *f, size_t i) { return NULL; }
const st_tensor *st_find(const st_file *f, const char *name) { return NULL; }
cleave_status st_read_json(const char *path, size_t max_bytes, struct cJSON **out) {
    if (out) *out = NULL;
    return st_no_json();
}
cleave_status st_dir_open(const char *dir, st_dir **out) {
    if (out) *out = NULL;
    return st_no_json();
}
void st_dir_close(st_dir *d) { (void)d; }
size_t st_dir_n_tensors(const st_dir *d) { return 0; }
size_t st_dir_n_files(const st_dir *d) { return 0; }
const st_tensor *st_dir_tensor_at(const st_dir *d, size_t i) { return NULL; }
const st_tensor *st_dir_find(const st_dir *d, const char *name) { return NULL; }

#endif

void st_release(const st_tensor *t) {
    long page = sysconf(_SC_PAGESIZE);
    if (!t || !t->data || page <= 0) return;
    /* only pages wholly inside the tensor: its neighbours may still be needed */
    uintptr_t lo = ((uintptr_t)t->data + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->nbytes) & ~((uintptr_t)page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

cleave_status st_check_float(const st_tensor *t) {
    if (t->supported) return CLEAVE_OK;
    return err_set(CLEAVE_ERR_UNSUPPORTED,
                   "%s: tensor '%s' has dtype %s; cleave converts F32, F16 and BF16", t->file,
                   t->name, t->dtype);
}
