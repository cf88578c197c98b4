/* The pointer-to-size map of size_table.h: linear probing at most half
 * full, and deletion by shifting the rest of a run back, so there are no
 * tombstones and a lookup stops at the first empty slot. */
#include "size_table.h"

#include <stdlib.h>

#include "base/mem.h"

/* Device pointers are at least 256-byte aligned: the low bits carry
 * nothing, the multiply spreads the rest over the table. */
static size_t slot_of(uintptr_t key, size_t cap) {
    return (size_t)(((uint64_t)(key >> 8) * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static void insert(uintptr_t *keys, size_t *sizes, size_t cap, uintptr_t key, size_t bytes) {
    size_t i = slot_of(key, cap);
    while (keys[i])
        i = (i + 1) & (cap - 1);
    keys[i] = key;
    sizes[i] = bytes;
}

static cleave_status grow(be_size_table *t) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    uintptr_t *keys = mem_calloc(cap, sizeof *keys, "allocation sizes");
    size_t *sizes = keys ? mem_calloc(cap, sizeof *sizes, "allocation sizes") : NULL;
    if (!sizes) {
        free(keys);
        return CLEAVE_ERR_OOM;
    }
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i]) insert(keys, sizes, cap, t->keys[i], t->sizes[i]);
    free(t->keys);
    free(t->sizes);
    t->keys = keys, t->sizes = sizes, t->cap = cap;
    return CLEAVE_OK;
}

cleave_status be_size_table_put(be_size_table *t, const void *p, size_t bytes) {
    if ((t->n + 1) * 2 > t->cap) {
        cleave_status st = grow(t);
        if (st != CLEAVE_OK) return st;
    }
    insert(t->keys, t->sizes, t->cap, (uintptr_t)p, bytes);
    t->n++;
    return CLEAVE_OK;
}

bool be_size_table_take(be_size_table *t, const void *p, size_t *bytes) {
    uintptr_t key = (uintptr_t)p;
    if (!t->cap || !key) return false;
    size_t mask = t->cap - 1, i = slot_of(key, t->cap);
    while (t->keys[i] != key) {
        if (!t->keys[i]) return false;
        i = (i + 1) & mask;
    }
    *bytes = t->sizes[i];
    t->n--;
    /* Shift back every later entry of the run that may sit at i: one whose
     * home slot is not cyclically within (i, j]. */
    for (size_t j = (i + 1) & mask; t->keys[j]; j = (j + 1) & mask) {
        size_t home = slot_of(t->keys[j], t->cap);
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        t->keys[i] = t->keys[j];
        t->sizes[i] = t->sizes[j];
        i = j;
    }
    t->keys[i] = 0;
    return true;
}

void be_size_table_free(be_size_table *t) {
    free(t->keys);
    free(t->sizes);
    t->keys = NULL, t->sizes = NULL, t->cap = t->n = 0;
}
