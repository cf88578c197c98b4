/* A Jinja template's life: its text normalized as jinja2 reads it (\r\n
 * and \r become \n, one trailing newline dropped), lexed and parsed once
 * into a read-only tree, freed at once. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "vocab/jinja_impl.h"

cleave_status jinja_parse(const char *src, size_t n, jinja_template **out) {
    if (!out || (!src && n))
        return err_set(CLEAVE_ERR_INVALID_ARG, "jinja_parse: arguments required");
    *out = NULL;
    if (n > JINJA_MAX_SOURCE)
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "the template is %zu bytes, more than the %u allowed", n, JINJA_MAX_SOURCE);
    jinja_template *t = mem_calloc(1, sizeof *t, "jinja template");
    if (!t) return CLEAVE_ERR_OOM;
    t->src = mem_alloc(n + 1, "jinja template text");
    if (!t->src) {
        free(t);
        return CLEAVE_ERR_OOM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            t->src[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            t->src[k++] = src[i];
        }
    }
    if (k && t->src[k - 1] == '\n') k--;
    t->src[k] = 0;
    t->src_len = k;
    jtok *toks;
    size_t n_toks;
    cleave_status st = jinja_lex(&t->arena, t->src, k, &toks, &n_toks);
    if (!st) st = jinja_parse_tokens(&t->arena, toks, n_toks, &t->root);
    if (st) {
        jinja_free(t);
        return st;
    }
    *out = t;
    return CLEAVE_OK;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t->src);
    free(t);
}
