/* GGUF reader and writer: round trips of every value and tensor kind, a
 * catalogue of corrupt files (built by patching a valid one) that must fail
 * cleanly with a message naming the file, injected allocation failures, and
 * the shared model and vocab files when present. */
#include <glob.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "model/gguf.h"
#include "quant/quant.h"
#include "testutil.h"

/* ---- byte helpers ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void b_put(bytes *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void b_uint(bytes *b, uint64_t v, size_t n) {
    uint8_t t[8];
    for (size_t i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    b_put(b, t, n);
}

static void b_str(bytes *b, const char *s) {
    b_uint(b, strlen(s), 8);
    b_put(b, s, strlen(s));
}

static void b_key(bytes *b, const char *key, uint32_t type) {
    b_str(b, key);
    b_uint(b, type, 4);
}

static void b_header(bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_put(b, "GGUF", 4);
    b_uint(b, version, 4);
    b_uint(b, n_tensors, 8);
    b_uint(b, n_kv, 8);
}

static void patch(uint8_t *p, size_t at, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) p[at + i] = (uint8_t)(v >> (8 * i));
}

static size_t find(const uint8_t *p, size_t n, const char *s) {
    size_t l = strlen(s);
    for (size_t i = 0; i + l <= n; i++)
        if (memcmp(p + i, s, l) == 0) return i;
    fprintf(stderr, "test bug: '%s' not found\n", s);
    abort();
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || (n && fwrite(p, 1, n, fp) != n) || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        abort();
    }
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) abort();
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(*n ? *n : 1);
    if (!p || fread(p, 1, *n, fp) != *n) abort();
    fclose(fp);
    return p;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Tensor bytes made by the fill callback: a pattern that depends on the
 * tensor and the position, so misplaced chunks show up. */
static uint8_t pattern(size_t ti, size_t pos) {
    return (uint8_t)((ti + 1) * 131 + pos * 7 + (pos >> 9));
}

typedef struct {
    size_t calls, max_chunk;
    int fail_at; /* fail on this call number (1-based); 0 = never */
} fill_stats;

static cleave_status fill_pattern(void *user, size_t ti, size_t at, void *dst, size_t n) {
    fill_stats *fs = user;
    fs->calls++;
    if (n > fs->max_chunk) fs->max_chunk = n;
    if (fs->fail_at && (int)fs->calls == fs->fail_at)
        return err_set(CLEAVE_ERR_OOM, "fill failed on purpose");
    uint8_t *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = pattern(ti, at + i);
    return CLEAVE_OK;
}

static bool pattern_ok(const gguf_tensor *t, size_t ti) {
    const uint8_t *d = t->data;
    for (size_t i = 0; i < t->nbytes; i++)
        if (d[i] != pattern(ti, i)) return false;
    return true;
}

typedef struct {
    size_t calls;
    float last;
    bool monotonic;
    size_t cancel_at; /* return false on this call; 0 = never */
} progress_stats;

static bool on_progress(float fraction, void *user) {
    progress_stats *ps = user;
    ps->calls++;
    if (fraction < ps->last || fraction < 0 || fraction > 1) ps->monotonic = false;
    ps->last = fraction;
    return ps->cancel_at == 0 || ps->calls != ps->cancel_at;
}

/* ---- 1. round trip through the writer ---- */

static void test_round_trip(void) {
    const char *path = tu_tmp("round_trip.gguf");
    float f32_data[7] = {1.5f, -2.25f, 0.0f, 1e-30f, 3e30f, -0.0f, 42.0f};
    uint8_t q8[2 * 3 * 34];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 13 + 5);
    uint32_t u32s[] = {1, 2, 3, 0xffffffffu};
    float f32s[] = {1.5f, -2.0f, 0.0f};
    int32_t i32s[] = {-1, 0, 7, INT32_MIN};
    const char *strs[] = {"a", "", "\xc3\xbcn\xc3\xaf", "<0x0A>", "a longer token string"};

    gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_new(&w));
    if (!w) return;
    CHECK_OK(gguf_set_u32(w, "t.u32", 4000000000u));
    CHECK_OK(gguf_set_i32(w, "t.i32", -123456));
    CHECK_OK(gguf_set_u64(w, "t.u64", ((uint64_t)1 << 40) + 7));
    CHECK_OK(gguf_set_f32(w, "t.f32", 3.25f));
    CHECK_OK(gguf_set_bool(w, "t.bool", true));
    CHECK_OK(gguf_set_bool(w, "t.false", false));
    CHECK_OK(gguf_set_str(w, "t.str", "h\xc3\xa9llo w\xc3\xb6rld"));
    CHECK_OK(gguf_set_str(w, "t.empty", ""));
    CHECK_OK(gguf_set_u32(w, "t.replaced", 1));
    CHECK_OK(gguf_set_str(w, "t.replaced", "two"));
    CHECK_OK(gguf_set_arr(w, "t.arr_u32", GGUF_T_UINT32, u32s, 4));
    CHECK_OK(gguf_set_arr(w, "t.arr_f32", GGUF_T_FLOAT32, f32s, 3));
    CHECK_OK(gguf_set_arr(w, "t.arr_i32", GGUF_T_INT32, i32s, 4));
    CHECK_OK(gguf_set_arr(w, "t.arr_empty", GGUF_T_UINT32, NULL, 0));
    CHECK_OK(gguf_set_arr_str(w, "t.arr_str", strs, 5));
    CHECK(gguf_set_arr(w, "t.bad", GGUF_T_STRING, u32s, 1) == CLEAVE_ERR_INVALID_ARG);
    CHECK(gguf_set_u32(w, "", 1) == CLEAVE_ERR_INVALID_ARG);

    fill_stats fs = {0};
    size_t idx = 99;
    uint64_t ne_a[] = {7}, ne_b[] = {4, 3, 2}, ne_c[] = {64, 3};
    CHECK_OK(
        gguf_writer_add_tensor(w, "a.f32", CLEAVE_TYPE_F32, 1, ne_a, f32_data, NULL, NULL, &idx));
    CHECK(idx == 0);
    CHECK_OK(gguf_writer_add_tensor(w, "b.f16", CLEAVE_TYPE_F16, 3, ne_b, NULL, fill_pattern, &fs,
                                    &idx));
    CHECK(idx == 1);
    CHECK_OK(gguf_writer_add_tensor(w, "c.q8_0", CLEAVE_TYPE_Q8_0, 2, ne_c, q8, NULL, NULL, &idx));
    CHECK(idx == 2);
    /* 63 bytes is the longest name ggml allows */
    char long_name[64];
    memset(long_name, 'n', 63);
    long_name[63] = 0;
    CHECK_OK(
        gguf_writer_add_tensor(w, long_name, CLEAVE_TYPE_F32, 1, ne_a, f32_data, NULL, NULL, NULL));

    progress_stats ps = {.monotonic = true};
    CHECK_OK(gguf_writer_write(w, path, on_progress, &ps));
    gguf_writer_free(w);
    CHECK(ps.calls >= 1 && ps.monotonic && ps.last == 1.0f);
    CHECK(fs.calls == 1 && fs.max_chunk == 4 * 3 * 2 * 2);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!exists(tmp));

    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f));
    if (!f) return;
    CHECK(gguf_version(f) == 3);
    CHECK(gguf_alignment(f) == 32);
    CHECK(gguf_file_size(f) % 32 == 0);
    CHECK(strcmp(gguf_path(f), path) == 0);
    CHECK(gguf_n_kv(f) == 14);
    CHECK(gguf_find_key(f, "general.alignment") < 0);
    CHECK(gguf_find_key(f, "t.u32") == 0);
    CHECK(strcmp(gguf_kv_key(f, 0), "t.u32") == 0);
    CHECK(gguf_kv_key(f, 14) == NULL);
    CHECK(gguf_kv_type(f, 0) == GGUF_T_UINT32);
    CHECK(gguf_kv_type(f, (size_t)gguf_find_key(f, "t.arr_str")) == GGUF_T_ARRAY);

    uint32_t u32 = 0;
    uint64_t u64 = 0;
    int32_t i32 = 0;
    float f32 = 0;
    bool b = false;
    CHECK_OK(gguf_get_u32(f, "t.u32", &u32));
    CHECK(u32 == 4000000000u);
    CHECK_OK(gguf_get_u64(f, "t.u32", &u64));
    CHECK(u64 == 4000000000u);
    CHECK(gguf_get_i32(f, "t.u32", &i32) == CLEAVE_ERR_FORMAT);
    CHECK(strstr(cleave_last_error(), "t.u32") && strstr(cleave_last_error(), "does not fit"));
    CHECK_OK(gguf_get_i32(f, "t.i32", &i32));
    CHECK(i32 == -123456);
    CHECK(gguf_get_u32(f, "t.i32", &u32) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_u64(f, "t.i32", &u64) == CLEAVE_ERR_FORMAT);
    CHECK_OK(gguf_get_u64(f, "t.u64", &u64));
    CHECK(u64 == ((uint64_t)1 << 40) + 7);
    CHECK(gguf_get_u32(f, "t.u64", &u32) == CLEAVE_ERR_FORMAT);
    CHECK_OK(gguf_get_f32(f, "t.f32", &f32));
    CHECK(f32 == 3.25f);
    CHECK_OK(gguf_get_bool(f, "t.bool", &b));
    CHECK(b);
    CHECK_OK(gguf_get_bool(f, "t.false", &b));
    CHECK(!b);
    CHECK(gguf_get_bool(f, "t.u32", &b) == CLEAVE_ERR_FORMAT);

    const char *s = NULL;
    size_t len = 0;
    CHECK_OK(gguf_get_str(f, "t.str", &s, &len));
    CHECK(len == 13 && memcmp(s, "h\xc3\xa9llo w\xc3\xb6rld", 13) == 0);
    CHECK_OK(gguf_get_str(f, "t.empty", &s, &len));
    CHECK(len == 0);
    CHECK_OK(gguf_get_str(f, "t.replaced", &s, &len));
    CHECK(len == 3 && memcmp(s, "two", 3) == 0);
    /* wrong type and missing key name the file, the key and the types */
    CHECK(gguf_get_f32(f, "t.str", &f32) == CLEAVE_ERR_FORMAT);
    CHECK(starts_with(cleave_last_error(), path));
    CHECK(strstr(cleave_last_error(), "'t.str'") && strstr(cleave_last_error(), "string") &&
          strstr(cleave_last_error(), "float32"));
    CHECK(gguf_get_u32(f, "t.str", &u32) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_str(f, "t.u32", &s, &len) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_u32(f, "nope", &u32) == CLEAVE_ERR_FORMAT);
    CHECK(starts_with(cleave_last_error(), path) &&
          strstr(cleave_last_error(), "missing key 'nope'"));
    CHECK(gguf_find_key(f, "nope") == -1);

    enum gguf_vtype et = GGUF_T_BOOL;
    size_t n = 0;
    const void *data = NULL;
    CHECK_OK(gguf_get_arr(f, "t.arr_u32", &et, &n, &data));
    CHECK(et == GGUF_T_UINT32 && n == 4 && data && memcmp(data, u32s, sizeof u32s) == 0);
    CHECK_OK(gguf_get_arr(f, "t.arr_f32", &et, &n, &data));
    CHECK(et == GGUF_T_FLOAT32 && n == 3 && data && memcmp(data, f32s, sizeof f32s) == 0);
    CHECK_OK(gguf_get_arr(f, "t.arr_i32", &et, &n, &data));
    CHECK(et == GGUF_T_INT32 && n == 4 && data && memcmp(data, i32s, sizeof i32s) == 0);
    CHECK_OK(gguf_get_arr(f, "t.arr_empty", &et, &n, &data));
    CHECK(et == GGUF_T_UINT32 && n == 0);
    CHECK_OK(gguf_get_arr(f, "t.arr_str", &et, &n, &data));
    CHECK(et == GGUF_T_STRING && n == 5 && data == NULL);
    for (size_t i = 0; i < 5; i++) {
        CHECK_OK(gguf_get_arr_str(f, "t.arr_str", i, &s, &len));
        CHECK(len == strlen(strs[i]) && memcmp(s, strs[i], len) == 0);
    }
    CHECK(gguf_get_arr_str(f, "t.arr_str", 5, &s, &len) == CLEAVE_ERR_INVALID_ARG);
    CHECK(gguf_get_arr_str(f, "t.arr_u32", 0, &s, &len) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_arr(f, "t.u32", &et, &n, &data) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_u32(f, "t.arr_u32", &u32) == CLEAVE_ERR_FORMAT);
    CHECK(strstr(cleave_last_error(), "array of uint32"));

    CHECK(gguf_n_tensors(f) == 4);
    CHECK(gguf_tensor_at(f, 4) == NULL);
    CHECK(gguf_find_tensor(f, "nope") == NULL);
    const gguf_tensor *ta = gguf_find_tensor(f, "a.f32"), *tb = gguf_find_tensor(f, "b.f16"),
                      *tc = gguf_find_tensor(f, "c.q8_0"), *td = gguf_find_tensor(f, long_name);
    CHECK(ta && tb && tc && td);
    if (!ta || !tb || !tc || !td) {
        gguf_close(f);
        return;
    }
    CHECK(ta == gguf_tensor_at(f, 0) && tc == gguf_tensor_at(f, 2));
    CHECK(ta->type == CLEAVE_TYPE_F32 && ta->n_dims == 1 && ta->ne[0] == 7 && ta->ne[1] == 1 &&
          ta->ne[2] == 1 && ta->ne[3] == 1 && ta->n_elems == 7 && ta->nbytes == 28);
    CHECK(memcmp(ta->data, f32_data, sizeof f32_data) == 0);
    CHECK(tb->type == CLEAVE_TYPE_F16 && tb->n_dims == 3 && tb->ne[0] == 4 && tb->ne[1] == 3 &&
          tb->ne[2] == 2 && tb->ne[3] == 1 && tb->n_elems == 24 && tb->nbytes == 48);
    CHECK(pattern_ok(tb, 1));
    CHECK(tc->type == CLEAVE_TYPE_Q8_0 && tc->n_dims == 2 && tc->ne[0] == 64 && tc->ne[1] == 3 &&
          tc->n_elems == 192 && tc->nbytes == sizeof q8);
    CHECK(memcmp(tc->data, q8, sizeof q8) == 0);
    CHECK(strcmp(td->name, long_name) == 0);
    const gguf_tensor *ts[] = {ta, tb, tc, td};
    for (size_t i = 0; i < 4; i++) {
        CHECK(ts[i]->offset % 32 == 0);
        CHECK((const char *)ts[i]->data - (const char *)ta->data ==
              (ptrdiff_t)(ts[i]->offset - ta->offset));
        CHECK(ts[i]->offset + ts[i]->nbytes <= gguf_file_size(f));
    }
    CHECK(ta->offset < tb->offset && tb->offset < tc->offset && tc->offset < td->offset);
    gguf_close(f);
    gguf_close(NULL);
}

/* general.alignment set by the user is written and honoured. */
static void test_alignment(void) {
    const char *path = tu_tmp("align64.gguf");
    gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_new(&w));
    if (!w) return;
    uint8_t data[3 * 2] = {1, 2, 3, 4, 5, 6};
    uint64_t ne[] = {3};
    CHECK_OK(gguf_set_u32(w, "general.alignment", 64));
    CHECK_OK(gguf_writer_add_tensor(w, "x", 24 /* i8 */, 1, ne, data, NULL, NULL, NULL));
    CHECK_OK(gguf_writer_add_tensor(w, "y", 25 /* i16 */, 1, ne, data, NULL, NULL, NULL));
    CHECK_OK(gguf_writer_write(w, path, NULL, NULL));
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f));
    if (f) {
        CHECK(gguf_alignment(f) == 64);
        CHECK(gguf_file_size(f) % 64 == 0);
        for (size_t i = 0; i < gguf_n_tensors(f); i++)
            CHECK(gguf_tensor_at(f, i)->offset % 64 == 0);
        CHECK(gguf_n_tensors(f) == 2 && gguf_tensor_at(f, 1)->nbytes == 6);
        CHECK(memcmp(gguf_tensor_at(f, 1)->data, data, 6) == 0);
        gguf_close(f);
    }
    /* a bad alignment is refused at write time and leaves nothing behind */
    const char *bad = tu_tmp("align3.gguf");
    unlink(bad);
    CHECK_OK(gguf_set_u32(w, "general.alignment", 3));
    CHECK(gguf_writer_write(w, bad, NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(!exists(bad));
    gguf_writer_free(w);
}

/* A tensor larger than one chunk is filled in pieces of at most 16 MiB. */
static void test_big_tensor(void) {
    const char *path = tu_tmp("big.gguf");
    gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_new(&w));
    if (!w) return;
    fill_stats fs = {0};
    uint64_t ne[] = {1024, 5 * 1024 + 3}; /* ~20 MiB of f32 */
    CHECK_OK(
        gguf_writer_add_tensor(w, "big", CLEAVE_TYPE_F32, 2, ne, NULL, fill_pattern, &fs, NULL));
    progress_stats ps = {.monotonic = true};
    CHECK_OK(gguf_writer_write(w, path, on_progress, &ps));
    CHECK(fs.calls == 2 && fs.max_chunk == (size_t)16 << 20);
    CHECK(ps.calls >= 2 && ps.monotonic && ps.last == 1.0f);

    /* cancelling from the progress callback stops the write; no file appears */
    const char *cpath = tu_tmp("cancelled.gguf");
    unlink(cpath);
    progress_stats cancel = {.monotonic = true, .cancel_at = 1};
    CHECK(gguf_writer_write(w, cpath, on_progress, &cancel) == CLEAVE_ERR_IO);
    CHECK(strstr(cleave_last_error(), "cancelled") != NULL);
    CHECK(!exists(cpath));
    /* a failing fill callback passes its status through */
    fs.calls = 0;
    fs.fail_at = 2;
    CHECK(gguf_writer_write(w, cpath, NULL, NULL) == CLEAVE_ERR_OOM);
    CHECK(strstr(cleave_last_error(), "fill failed on purpose") &&
          strstr(cleave_last_error(), "big"));
    CHECK(!exists(cpath));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", cpath);
    CHECK(!exists(tmp));
    /* an unwritable destination is an I/O error naming the reason */
    CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf", NULL, NULL) == CLEAVE_ERR_IO);
    CHECK(strstr(cleave_last_error(), "No such file") != NULL);
    gguf_writer_free(w);

    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f));
    if (f) {
        const gguf_tensor *t = gguf_find_tensor(f, "big");
        CHECK(t && t->nbytes == 1024 * (5 * 1024 + 3) * 4 && pattern_ok(t, 0));
        gguf_close(f);
    }
}

static void test_writer_rejects(void) {
    gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_new(&w));
    if (!w) return;
    uint8_t data[256] = {0};
    uint64_t ne33[] = {33}, ne32[] = {32}, ne0[] = {4, 0};
    char name64[65];
    memset(name64, 'x', 64);
    name64[64] = 0;
    CHECK(gguf_writer_add_tensor(w, "q", CLEAVE_TYPE_Q8_0, 1, ne33, data, NULL, NULL, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "block") != NULL);
    CHECK(gguf_writer_add_tensor(w, "u", 42, 1, ne32, data, NULL, NULL, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(gguf_writer_add_tensor(w, "z", 0, 2, ne0, data, NULL, NULL, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(gguf_writer_add_tensor(w, "d", 0, 5, ne32, data, NULL, NULL, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(gguf_writer_add_tensor(w, "d", 0, 0, ne32, data, NULL, NULL, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(gguf_writer_add_tensor(w, name64, 0, 1, ne32, data, NULL, NULL, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(gguf_writer_add_tensor(w, "n", 0, 1, ne32, NULL, NULL, NULL, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    /* duplicates are caught when writing */
    CHECK_OK(gguf_writer_add_tensor(w, "dup", 0, 1, ne32, data, NULL, NULL, NULL));
    CHECK_OK(gguf_writer_add_tensor(w, "dup", 0, 1, ne32, data, NULL, NULL, NULL));
    const char *path = tu_tmp("dup.gguf");
    unlink(path);
    CHECK(gguf_writer_write(w, path, NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(strstr(cleave_last_error(), "duplicate") != NULL);
    CHECK(!exists(path));
    gguf_writer_free(w);
    gguf_writer_free(NULL);
}

/* ---- every scalar type, emitted raw (the writer has no setter for some) ---- */

static void test_all_types(void) {
    const char *path = tu_tmp("all_types.gguf");
    bytes b = {0};
    b_header(&b, 2, 0, 16);
    b_key(&b, "u8", GGUF_T_UINT8), b_uint(&b, 200, 1);
    b_key(&b, "i8", GGUF_T_INT8), b_uint(&b, (uint8_t)-5, 1);
    b_key(&b, "u16", GGUF_T_UINT16), b_uint(&b, 60000, 2);
    b_key(&b, "i16", GGUF_T_INT16), b_uint(&b, (uint16_t)-30000, 2);
    b_key(&b, "u32", GGUF_T_UINT32), b_uint(&b, 123456789, 4);
    b_key(&b, "i32", GGUF_T_INT32), b_uint(&b, (uint32_t)INT32_MIN, 4);
    float fv = -1.75f;
    uint32_t fbits;
    memcpy(&fbits, &fv, 4);
    b_key(&b, "f32", GGUF_T_FLOAT32), b_uint(&b, fbits, 4);
    b_key(&b, "bool", GGUF_T_BOOL), b_uint(&b, 1, 1);
    b_key(&b, "str", GGUF_T_STRING), b_str(&b, "value");
    b_key(&b, "u64", GGUF_T_UINT64), b_uint(&b, (uint64_t)1 << 63, 8);
    b_key(&b, "i64", GGUF_T_INT64), b_uint(&b, (uint64_t) - ((int64_t)1 << 40), 8);
    b_key(&b, "i64s", GGUF_T_INT64), b_uint(&b, (uint64_t)-7, 8);
    double dv = 0.5, dbig = 1e300;
    uint64_t dbits;
    memcpy(&dbits, &dv, 8);
    b_key(&b, "f64", GGUF_T_FLOAT64), b_uint(&b, dbits, 8);
    memcpy(&dbits, &dbig, 8);
    b_key(&b, "f64big", GGUF_T_FLOAT64), b_uint(&b, dbits, 8);
    b_key(&b, "arr_i16", GGUF_T_ARRAY), b_uint(&b, GGUF_T_INT16, 4), b_uint(&b, 3, 8);
    b_uint(&b, 1, 2), b_uint(&b, 2, 2), b_uint(&b, 0xffff, 2);
    b_key(&b, "arr_str0", GGUF_T_ARRAY), b_uint(&b, GGUF_T_STRING, 4), b_uint(&b, 0, 8);
    write_file(path, b.p, b.n);
    free(b.p);

    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f));
    if (!f) return;
    static const enum gguf_vtype types[] = {
        GGUF_T_UINT8,   GGUF_T_INT8,    GGUF_T_UINT16, GGUF_T_INT16,  GGUF_T_UINT32, GGUF_T_INT32,
        GGUF_T_FLOAT32, GGUF_T_BOOL,    GGUF_T_STRING, GGUF_T_UINT64, GGUF_T_INT64,  GGUF_T_INT64,
        GGUF_T_FLOAT64, GGUF_T_FLOAT64, GGUF_T_ARRAY,  GGUF_T_ARRAY};
    CHECK(gguf_version(f) == 2 && gguf_n_kv(f) == 16 && gguf_n_tensors(f) == 0);
    for (size_t i = 0; i < 16; i++) CHECK(gguf_kv_type(f, i) == types[i]);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f32;
    bool bv;
    CHECK_OK(gguf_get_u32(f, "u8", &u32));
    CHECK(u32 == 200);
    CHECK_OK(gguf_get_i32(f, "i8", &i32));
    CHECK(i32 == -5);
    CHECK(gguf_get_u32(f, "i8", &u32) == CLEAVE_ERR_FORMAT);
    CHECK(strstr(cleave_last_error(), "-5") != NULL);
    CHECK_OK(gguf_get_u32(f, "u16", &u32));
    CHECK(u32 == 60000);
    CHECK_OK(gguf_get_i32(f, "i16", &i32));
    CHECK(i32 == -30000);
    CHECK_OK(gguf_get_u64(f, "u32", &u64));
    CHECK(u64 == 123456789);
    CHECK_OK(gguf_get_i32(f, "i32", &i32));
    CHECK(i32 == INT32_MIN);
    CHECK_OK(gguf_get_u64(f, "u64", &u64));
    CHECK(u64 == (uint64_t)1 << 63);
    CHECK(gguf_get_i32(f, "u64", &i32) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_u32(f, "i64", &u32) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_i32(f, "i64", &i32) == CLEAVE_ERR_FORMAT);
    CHECK_OK(gguf_get_i32(f, "i64s", &i32));
    CHECK(i32 == -7);
    CHECK_OK(gguf_get_f32(f, "f32", &f32));
    CHECK(f32 == -1.75f);
    CHECK_OK(gguf_get_f32(f, "f64", &f32));
    CHECK(f32 == 0.5f);
    CHECK(gguf_get_f32(f, "f64big", &f32) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_f32(f, "u8", &f32) == CLEAVE_ERR_FORMAT);
    CHECK(gguf_get_u32(f, "f32", &u32) == CLEAVE_ERR_FORMAT);
    CHECK_OK(gguf_get_bool(f, "bool", &bv));
    CHECK(bv);
    CHECK(gguf_get_bool(f, "u8", &bv) == CLEAVE_ERR_FORMAT);
    enum gguf_vtype et;
    size_t n;
    const void *data;
    CHECK_OK(gguf_get_arr(f, "arr_i16", &et, &n, &data));
    CHECK(et == GGUF_T_INT16 && n == 3);
    int16_t i16s[3];
    memcpy(i16s, data, sizeof i16s);
    CHECK(i16s[0] == 1 && i16s[1] == 2 && i16s[2] == -1);
    CHECK_OK(gguf_get_arr(f, "arr_str0", &et, &n, &data));
    CHECK(et == GGUF_T_STRING && n == 0);
    gguf_close(f);
}

/* ---- 2. corrupt files ---- */

static int n_bad;

/* Writes the bytes and expects gguf_open to fail with st (or any error when
 * st is CLEAVE_OK) and a message that names the file and contains want. */
static void expect_fail(const uint8_t *p, size_t n, cleave_status st, const char *want, int line) {
    char name[64];
    snprintf(name, sizeof name, "bad%d.gguf", n_bad++);
    const char *path = tu_tmp(name);
    write_file(path, p, n);
    gguf_file *f = (gguf_file *)&n_bad; /* must be reset to NULL */
    cleave_status got = gguf_open(path, &f);
    const char *msg = cleave_last_error();
    bool ok = got != CLEAVE_OK && (st == CLEAVE_OK || got == st) && f == NULL &&
              starts_with(msg, path) && strlen(msg) > strlen(path) + 2 &&
              (!want || strstr(msg, want));
    CHECK_MSG(ok, "line %d: got %s, message '%s', wanted %s with '%s'", line,
              cleave_status_name(got), msg, cleave_status_name(st), want ? want : "");
    if (got == CLEAVE_OK && f != (gguf_file *)&n_bad) gguf_close(f);
    if (getenv("GGUF_TEST_VERBOSE")) fprintf(stderr, "line %d: %s\n", line, msg);
    unlink(path);
}

#define EXPECT_FAIL(p, n, st, want) expect_fail(p, n, st, want, __LINE__)

/* A small valid file whose fields the corruption tests patch. */
static uint8_t *make_base(size_t *n, size_t *data_start) {
    const char *path = tu_tmp("base.gguf");
    gguf_writer *w = NULL;
    if (gguf_writer_new(&w)) abort();
    static float fa[8], fc[8];
    static uint8_t qb[2 * 34];
    uint64_t ne_a[] = {8}, ne_b[] = {32, 2}, ne_c[] = {2, 2, 2};
    CHECK_OK(gguf_set_str(w, "general.architecture", "test"));
    CHECK_OK(gguf_set_u32(w, "general.alignment", 32));
    CHECK_OK(gguf_set_u32(w, "k.a", 1));
    CHECK_OK(gguf_set_u32(w, "k.b", 2));
    CHECK_OK(gguf_writer_add_tensor(w, "tensor.alpha", 0, 1, ne_a, fa, NULL, NULL, NULL));
    CHECK_OK(gguf_writer_add_tensor(w, "tensor.beta", 8, 2, ne_b, qb, NULL, NULL, NULL));
    CHECK_OK(gguf_writer_add_tensor(w, "tensor.gamma", 0, 3, ne_c, fc, NULL, NULL, NULL));
    CHECK_OK(gguf_writer_write(w, path, NULL, NULL));
    gguf_writer_free(w);
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f));
    if (!f) abort();
    *data_start = gguf_tensor_at(f, 0)->offset;
    gguf_close(f);
    return read_file(path, n);
}

/* Offsets of a tensor's fields in the header, found by its name. */
typedef struct {
    size_t n_dims, ne, type, offset;
} tfields;

static tfields tensor_fields(const uint8_t *p, size_t n, const char *name) {
    size_t at = find(p, n, name) + strlen(name);
    uint32_t nd = p[at];
    return (tfields){at, at + 4, at + 4 + 8 * nd, at + 8 + 8 * nd};
}

static uint64_t get_u64(const uint8_t *p, size_t at) {
    uint64_t v = 0;
    for (size_t i = 8; i-- > 0;) v = v << 8 | p[at + i];
    return v;
}

static void test_corrupt(void) {
    size_t n, data_start;
    uint8_t *base = make_base(&n, &data_start), *p = malloc(n);
    if (!p) abort();
#define RESET() memcpy(p, base, n)
    tfields ta = tensor_fields(base, n, "tensor.alpha"), tb = tensor_fields(base, n, "tensor.beta"),
            tc = tensor_fields(base, n, "tensor.gamma");
    size_t align_val = find(base, n, "general.alignment") + 17 + 4;
    size_t arch_val = find(base, n, "general.architecture") + 20 + 4;
    size_t ka = find(base, n, "k.a"), kb = find(base, n, "k.b");

    /* sanity: the unpatched copy opens */
    RESET();
    const char *ok_path = tu_tmp("base_copy.gguf");
    write_file(ok_path, p, n);
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(ok_path, &f));
    gguf_close(f);

    RESET(), p[0] = 'X';
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "not a GGUF file");
    RESET(), patch(p, 4, 1, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_UNSUPPORTED, "version 1");
    RESET(), patch(p, 4, 4, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_UNSUPPORTED, "version 4");

    /* every truncation up to the start of the data fails cleanly */
    for (size_t cut = 0; cut <= data_start; cut++) EXPECT_FAIL(base, cut, CLEAVE_ERR_FORMAT, NULL);
    EXPECT_FAIL(base, 0, CLEAVE_ERR_FORMAT, "empty");
    EXPECT_FAIL(base, 10, CLEAVE_ERR_FORMAT, "too short");
    EXPECT_FAIL(base, 135, CLEAVE_ERR_FORMAT, "truncated at byte 135 while reading key 3 ('k.b')");
    EXPECT_FAIL(base, data_start, CLEAVE_ERR_FORMAT, "extends past end of file");

    RESET(), patch(p, tc.offset, get_u64(p, tc.offset) + 32, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "tensor 'tensor.gamma' data [");
    RESET(), patch(p, tc.offset, (uint64_t)1 << 40, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "past the end");
    RESET(), patch(p, ta.ne, (uint64_t)1 << 40, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "extends past end of file");
    RESET();
    for (int d = 0; d < 3; d++) patch(p, tc.ne + 8 * d, (uint64_t)1 << 40, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "too many elements");
    RESET(), patch(p, tb.ne, (uint64_t)1 << 40, 8), patch(p, tb.ne + 8, (uint64_t)1 << 40, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "too many elements");
    RESET(), patch(p, tc.ne + 8, 0, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "ne[1] = 0");
    RESET(), patch(p, tc.n_dims, 5, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "dimensions");
    RESET(), patch(p, ta.n_dims, 0, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "dimensions");
    RESET(), patch(p, tb.ne, 33, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "block size");

    RESET(), patch(p, 8, (uint64_t)1 << 60, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "n_tensors");
    RESET(), patch(p, 16, (uint64_t)1 << 60, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "n_kv");
    RESET(), patch(p, 8, 4, 8); /* one more tensor than present */
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, NULL);
    RESET(), patch(p, 24, (uint64_t)1 << 63, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "key 0");
    RESET(), patch(p, arch_val, (uint64_t)1 << 63, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "general.architecture");
    RESET(), patch(p, ka - 8, UINT64_MAX, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "a string of 18446744073709551615 bytes");

    RESET(), patch(p, tb.type, 42, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_UNSUPPORTED, "tensor 'tensor.beta' has unknown type 42");
    RESET(), patch(p, tb.offset, get_u64(p, tb.offset) + 1, 8);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "not a multiple of the alignment");
    RESET(), memcpy(p + find(p, n, "tensor.gamma"), "tensor.alpha", 12);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "duplicate tensor name 'tensor.alpha'");
    RESET(), p[kb + 2] = 'a';
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "duplicate key 'k.a'");
    RESET(), p[kb + 1] = 0;
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "NUL");
    RESET(), patch(p, ka + 3, 13, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "unknown value type 13");
    RESET(), patch(p, align_val, 0, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "power of two");
    RESET(), patch(p, align_val, 3, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "power of two");
    RESET(), patch(p, align_val - 4, GGUF_T_FLOAT32, 4);
    EXPECT_FAIL(p, n, CLEAVE_ERR_FORMAT, "general.alignment");

    /* raw-built files for what the writer cannot produce */
    bytes b = {0};
    b_header(&b, 3, 0, 1);
    b_key(&b, "nested", GGUF_T_ARRAY), b_uint(&b, GGUF_T_ARRAY, 4), b_uint(&b, 1, 8);
    b_uint(&b, GGUF_T_UINT8, 4), b_uint(&b, 1, 8), b_uint(&b, 7, 1);
    EXPECT_FAIL(b.p, b.n, CLEAVE_ERR_FORMAT, "array of arrays");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "big", GGUF_T_ARRAY), b_uint(&b, GGUF_T_UINT32, 4), b_uint(&b, (uint64_t)1 << 62, 8);
    b_uint(&b, 0, 8);
    EXPECT_FAIL(b.p, b.n, CLEAVE_ERR_FORMAT, "array of");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "strs", GGUF_T_ARRAY), b_uint(&b, GGUF_T_STRING, 4), b_uint(&b, 2, 8);
    b_str(&b, "one"), b_uint(&b, 1000, 8), b_put(&b, "two", 3);
    EXPECT_FAIL(b.p, b.n, CLEAVE_ERR_FORMAT, "'strs'");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "arr_of_13", GGUF_T_ARRAY), b_uint(&b, 13, 4), b_uint(&b, 0, 8);
    EXPECT_FAIL(b.p, b.n, CLEAVE_ERR_FORMAT, "unknown type 13");
    b.n = 0;
    b_header(&b, 3, 1, 0);
    char name64[65];
    memset(name64, 'n', 64);
    name64[64] = 0;
    b_str(&b, name64);
    b_uint(&b, 1, 4), b_uint(&b, 1, 8), b_uint(&b, 0, 4), b_uint(&b, 0, 8);
    b_put(&b, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 32);
    EXPECT_FAIL(b.p, b.n, CLEAVE_ERR_FORMAT, "limit of 63");
    free(b.p);

    /* not files, or not there */
    gguf_file *g = NULL;
    CHECK(gguf_open(tu_tmp("does-not-exist.gguf"), &g) == CLEAVE_ERR_IO && g == NULL);
    CHECK(strstr(cleave_last_error(), "does-not-exist.gguf") != NULL);
    CHECK(gguf_open(CLEAVE_TEST_TMP, &g) == CLEAVE_ERR_IO && g == NULL);
    CHECK(gguf_open(NULL, &g) == CLEAVE_ERR_INVALID_ARG);
    free(p);
    free(base);
#undef RESET
}

/* ---- injected allocation failures: every one must be OOM without leaks ---- */

static cleave_status build_and_write(const char *path) {
    gguf_writer *w = NULL;
    const char *strs[] = {"x", "y"};
    uint32_t arr[] = {1, 2};
    float data[32] = {0};
    uint64_t ne[] = {32};
    fill_stats fs = {0};
    cleave_status st = gguf_writer_new(&w);
    if (st) return st;
    if (!st) st = gguf_set_str(w, "s", "v");
    if (!st) st = gguf_set_u32(w, "u", 1);
    if (!st) st = gguf_set_u32(w, "u", 2);
    if (!st) st = gguf_set_arr(w, "a", GGUF_T_UINT32, arr, 2);
    if (!st) st = gguf_set_arr_str(w, "as", strs, 2);
    if (!st) st = gguf_writer_add_tensor(w, "t0", 0, 1, ne, data, NULL, NULL, NULL);
    if (!st) st = gguf_writer_add_tensor(w, "t1", 0, 1, ne, NULL, fill_pattern, &fs, NULL);
    if (!st) st = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    return st;
}

static void test_oom(void) {
    const char *path = tu_tmp("oom.gguf");
    int fails = 0;
    for (long k = 1; k < 1000; k++) {
        unlink(path);
        err_fail_alloc_countdown = k;
        cleave_status st = build_and_write(path);
        bool reached = err_fail_alloc_countdown == 0;
        err_fail_alloc_countdown = 0;
        if (!reached) {
            CHECK_OK(st);
            break;
        }
        fails++;
        CHECK_MSG(st == CLEAVE_ERR_OOM, "write with allocation %ld failing: %s", k,
                  cleave_status_name(st));
        CHECK(!exists(path));
    }
    CHECK(fails > 5);
    fails = 0;
    for (long k = 1; k < 1000; k++) {
        gguf_file *f = NULL;
        err_fail_alloc_countdown = k;
        cleave_status st = gguf_open(path, &f);
        bool reached = err_fail_alloc_countdown == 0;
        err_fail_alloc_countdown = 0;
        if (!reached) {
            CHECK_OK(st);
            gguf_close(f);
            break;
        }
        fails++;
        CHECK_MSG(st == CLEAVE_ERR_OOM && f == NULL, "open with allocation %ld failing: %s", k,
                  cleave_status_name(st));
        CHECK(starts_with(cleave_last_error(), path));
    }
    CHECK(fails > 5);
}

/* ---- 3. shared real files ---- */

static void check_vocab(gguf_file *f) {
    const char *s;
    size_t len, n;
    enum gguf_vtype et;
    CHECK_OK(gguf_get_str(f, "general.architecture", &s, &len));
    CHECK_OK(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, NULL));
    CHECK(et == GGUF_T_STRING && n > 0);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len) != CLEAVE_OK) {
            CHECK_OK(gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len));
            break;
        }
        total += len;
    }
    CHECK(total > 0);
}

static void test_shared(void) {
    const char *model = tu_shared("models/llama-2-tiny-random.gguf");
    if (model) {
        gguf_file *f = NULL;
        CHECK_OK(gguf_open(model, &f));
        if (f) {
            check_vocab(f);
            CHECK(gguf_n_tensors(f) > 0);
            const char *s;
            size_t len;
            CHECK_OK(gguf_get_str(f, "general.architecture", &s, &len));
            CHECK(len == 5 && memcmp(s, "llama", 5) == 0);
            uint32_t n_embd = 0;
            CHECK_OK(gguf_get_u32(f, "llama.embedding_length", &n_embd));
            CHECK(n_embd > 0);
            const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
            CHECK(emb && emb->ne[0] == n_embd);
            for (size_t i = 0; i < gguf_n_tensors(f); i++) {
                const gguf_tensor *t = gguf_tensor_at(f, i);
                CHECK(t->offset + t->nbytes <= gguf_file_size(f));
                CHECK(gguf_find_tensor(f, t->name) == t);
            }
            gguf_close(f);
        }
    }
    glob_t g;
    int n_vocab = 0;
    if (glob(CLEAVE_SHARED_DIR "/vocab/ggml-vocab-*.gguf", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            gguf_file *f = NULL;
            CHECK_OK(gguf_open(g.gl_pathv[i], &f));
            if (!f) continue;
            check_vocab(f);
            n_vocab++;
            gguf_close(f);
        }
        globfree(&g);
    }
    fprintf(stderr, "note: checked %d shared model(s) and %d shared vocab file(s)\n", model ? 1 : 0,
            n_vocab);
}

int main(void) {
    test_round_trip();
    test_alignment();
    test_big_tensor();
    test_writer_rejects();
    test_all_types();
    test_corrupt();
    test_oom();
    test_shared();
    return tu_finish("test_gguf");
}
