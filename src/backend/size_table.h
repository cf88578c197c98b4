/* A map from the pointers a device handed out to their sizes, kept in host
 * memory so a free needs no trip to the device to learn how many bytes it
 * gives back. Open addressing with linear probing; not thread-safe (the
 * device's lock guards it). */
#ifndef CLEAVE_BE_SIZE_TABLE_H
#define CLEAVE_BE_SIZE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleave.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct be_size_table {
    uintptr_t *keys; /* 0: empty slot (NULL is never stored) */
    size_t *sizes;
    size_t cap, n; /* cap: 0 or a power of two */
} be_size_table;

/* Records p (not NULL, not yet present) with its size; CLEAVE_ERR_OOM,
 * with the table unchanged, when it cannot grow. */
cleave_status be_size_table_put(be_size_table *t, const void *p, size_t bytes);
/* Removes p and gives its size; false (nothing changed) when absent. */
bool be_size_table_take(be_size_table *t, const void *p, size_t *bytes);
void be_size_table_free(be_size_table *t);

#ifdef __cplusplus
}
#endif
#endif
