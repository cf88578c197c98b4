/* The KV cell table alone (src/kv/cells.c, no device): first-fit cells,
 * the used prefix, refusals that change nothing, the changes a storage
 * has yet to upload, sequence regions and their windows, removal by
 * position, and the cells of a sequence in position order. */
#include <stdlib.h>
#include <string.h>

#include "kv/cells.h"
#include "testutil.h"

static void test_pool(void) {
    kv_cells t;
    CHECK(kv_cells_init(&t, 0) == CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(kv_cells_init(&t, 8));
    int32_t cells[8];
    uint32_t lo, hi;
    kv_cells_dirty(&t, &lo, &hi);
    CHECK(hi <= lo); /* a clear table has nothing to upload */
    CHECK_OK(kv_cells_alloc(&t, 5, 0, 0, cells));
    CHECK(cells[0] == 0 && cells[4] == 4 && kv_cells_hi(&t) == 5 && kv_cells_used(&t) == 5);
    /* only the new cells' entries are to be uploaded, once */
    kv_cells_dirty(&t, &lo, &hi);
    CHECK(lo == 0 && hi == 5);
    kv_cells_mark_clean(&t);
    CHECK(kv_cells_seq_next_pos(&t, 0) == 5);
    CHECK(kv_cells_alloc(&t, 4, 1, 0, cells) == CLEAVE_ERR_CONTEXT_FULL);
    CHECK(kv_cells_used(&t) == 5 && kv_cells_hi(&t) == 5); /* unchanged by the refusal */
    kv_cells_dirty(&t, &lo, &hi);
    CHECK(hi <= lo);
    CHECK_OK(kv_cells_alloc(&t, 3, 1, 0, cells));
    CHECK(kv_cells_seq_next_pos(&t, 1) == 3 && kv_cells_hi(&t) == 8 && kv_cells_room(&t, 2) == 0);
    kv_cells_dirty(&t, &lo, &hi);
    CHECK(lo == 5 && hi == 8);
    kv_cells_release(&t, cells, 3);
    CHECK(kv_cells_hi(&t) == 5 && kv_cells_used(&t) == 5 && kv_cells_seq_next_pos(&t, 1) == 0);
    /* removal by position: a hole is reused first-fit */
    kv_cells_seq_remove(&t, 0, 1, 3);
    CHECK(kv_cells_used(&t) == 3 && kv_cells_pos(&t, 1) == -1 && kv_cells_pos(&t, 3) == 3);
    CHECK_OK(kv_cells_alloc(&t, 1, 2, 7, cells));
    CHECK(cells[0] == 1 && kv_cells_seq(&t, 1) == 2 && kv_cells_pos(&t, 1) == 7);
    /* a sequence's cells in position order */
    CHECK_OK(kv_cells_alloc(&t, 2, 0, 1, cells)); /* positions 1, 2 land in cells 2 and 5 */
    int32_t *of;
    uint32_t n;
    CHECK_OK(kv_cells_of_seq(&t, 0, &of, &n));
    CHECK(n == 5 && of[0] == 0 && of[1] == 2 && of[2] == 5 && of[3] == 3 && of[4] == 4);
    free(of);
    kv_cells_seq_remove(&t, 0, 0, -1);
    CHECK(kv_cells_used(&t) == 1 && kv_cells_hi(&t) == 2);
    kv_cells_mark_all_dirty(&t);
    kv_cells_dirty(&t, &lo, &hi);
    CHECK(lo == 0 && hi == 8);
    kv_cells_clear(&t);
    CHECK(kv_cells_hi(&t) == 0 && kv_cells_used(&t) == 0);
    kv_cells_free(&t);
}

static void test_regions(void) {
    kv_cells t;
    CHECK_OK(kv_cells_init(&t, 16));
    CHECK(kv_cells_set_regions(&t, 17) == CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(kv_cells_set_regions(&t, 3)); /* regions of 5 cells, the shared rest [15, 16) */
    int32_t cells[16];
    uint32_t lo, hi;
    CHECK(kv_cells_room(&t, 1) == 5 && kv_cells_room(&t, 7) == 1);
    CHECK_OK(kv_cells_alloc(&t, 2, 1, 0, cells));
    CHECK(cells[0] == 5 && cells[1] == 6);
    kv_cells_window(&t, 1, &lo, &hi);
    CHECK(lo == 5 && hi == 7);
    kv_cells_window(&t, 0, &lo, &hi);
    CHECK(lo == 0 && hi == 0); /* an empty region */
    CHECK(kv_cells_set_regions(&t, 2) == CLEAVE_ERR_INVALID_ARG); /* not on a cache in use */
    /* a region holds its cells and no more, whatever is free elsewhere */
    CHECK(kv_cells_alloc(&t, 4, 1, 2, cells) == CLEAVE_ERR_CONTEXT_FULL);
    CHECK(kv_cells_used(&t) == 2);
    CHECK_OK(kv_cells_alloc(&t, 1, 9, 0, cells)); /* a sequence without a region: the rest */
    CHECK(cells[0] == 15 && kv_cells_hi(&t) == 16);
    kv_cells_window(&t, 9, &lo, &hi);
    CHECK(lo == 15 && hi == 16);
    int32_t last = 6;
    kv_cells_release(&t, &last, 1);
    kv_cells_window(&t, 1, &lo, &hi);
    CHECK(lo == 5 && hi == 6 && kv_cells_room(&t, 1) == 4);
    kv_cells_clear(&t);
    kv_cells_window(&t, 1, &lo, &hi);
    CHECK(hi == lo && kv_cells_room(&t, 2) == 5);
    CHECK_OK(kv_cells_set_regions(&t, 0)); /* one pool again */
    CHECK(kv_cells_room(&t, 2) == 16);
    kv_cells_free(&t);
}

int main(void) {
    test_pool();
    test_regions();
    return tu_finish("test_kv_cells");
}
