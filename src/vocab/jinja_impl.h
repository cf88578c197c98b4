/* The Jinja interpreter's insides shared by its files (see jinja.h). */
#ifndef CLEAVE_JINJA_IMPL_H
#define CLEAVE_JINJA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cleave.h"
#include "vocab/jinja.h"

#if defined(__GNUC__)
#define ERR_PRINTF_J(a, b) __attribute__((format(printf, a, b)))
#else
#define ERR_PRINTF_J(a, b)
#endif

/* ---- arena: the parse tree's and a render's allocations, freed at once ---- */
typedef struct jarena_chunk jarena_chunk;
typedef struct jarena {
    jarena_chunk *head;
    size_t used, limit; /* limit 0: none */
    bool over;          /* an allocation was refused for the limit */
} jarena;
void *jarena_alloc(jarena *a, size_t n); /* zeroed; NULL with the error set */
void jarena_free(jarena *a);

typedef struct jstr {
    const char *p;
    size_t n;
} jstr;

/* ---- tokens ---- */
typedef enum {
    JT_TEXT,      /* template data between tags */
    JT_VAR_BEGIN, /* {{ */
    JT_VAR_END,
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING, /* s: the value, escapes decoded */
    JT_INT,
    JT_FLOAT,
    JT_OP, /* s: the operator's text */
    JT_EOF
} jtok_kind;

typedef struct jtok {
    jtok_kind kind;
    int line, col;
    jstr s;
    int64_t i;
    double f;
} jtok;

/* Cuts src into tokens (arena-allocated), trim/lstrip blocks applied. */
cleave_status jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *n_toks);

/* ---- the tree ---- */
typedef enum {
    /* statements */
    JN_TEXT,
    JN_OUTPUT,
    JN_IF,
    JN_FOR,
    JN_SET,
    JN_SET_BLOCK,
    JN_MACRO,
    JN_CALL_BLOCK,
    JN_FILTER_BLOCK,
    JN_BREAK,
    JN_CONTINUE,
    JN_BODY,
    /* expressions */
    JN_CONST,
    JN_NAME,
    JN_LIST,
    JN_TUPLE,
    JN_DICT,
    JN_ATTR,
    JN_ITEM,
    JN_SLICE,
    JN_BINOP,
    JN_NEG,
    JN_POS,
    JN_NOT,
    JN_AND,
    JN_OR,
    JN_COND,
    JN_CMP,
    JN_FILTER,
    JN_TEST,
    JN_CALL
} jnode_kind;

typedef enum {
    JOP_ADD,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN
} jop;

typedef struct jvalue jvalue;
typedef struct jnode jnode;

/* A value. Strings point into the template or an arena; containers and
 * callables live in the render's arena. */
typedef enum {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE,
    JV_DICT,
    JV_NAMESPACE,
    JV_MACRO,
    JV_BUILTIN,
    JV_METHOD,
    JV_LOOP
} jv_kind;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jmethod jmethod;
struct jframe;
typedef struct jloop jloop;

struct jvalue {
    jv_kind t;
    union {
        bool b;
        int64_t i;
        double f;
        jstr s;
        jlist *l;             /* JV_LIST, JV_TUPLE */
        jdict *d;             /* JV_DICT, JV_NAMESPACE */
        struct jmacro *macro; /* its definition and the scope it was defined in */
        int builtin;          /* a global function's id */
        jmethod *m;
        jloop *loop;
        const char *undef; /* JV_UNDEF: what is undefined, for the error message */
    } u;
};

struct jlist {
    jvalue *v;
    size_t n, cap;
    int view; /* a dict's items(), keys() or values() (1, 2, 3): Python prints them so */
};
struct jdict {
    jvalue *k, *v;
    size_t n, cap;
};
struct jmacro {
    const jnode *node;
    struct jframe *frame;
};
struct jmethod {
    jvalue self;
    jstr name;
};

struct jnode {
    jnode_kind kind;
    int line, col;
    jop op;
    bool flag;  /* JN_TEST: negated; JN_FOR: recursive; JN_SET: target is a namespace attribute */
    jstr s;     /* names: variable, attribute, filter, test, macro */
    jvalue val; /* JN_CONST */
    jnode *a, *b, *c, *d;
    jnode **l1; /* items, arguments, body */
    size_t n1;
    jnode **l2; /* dict values, keyword argument values, else body, macro defaults */
    size_t n2;
    jstr *names; /* keyword argument names, for targets, macro parameters */
    size_t n_names;
};

struct jinja_template {
    jarena arena;
    jnode *root; /* JN_BODY */
    char *src;
    size_t src_len;
};

cleave_status jinja_parse_tokens(jarena *a, const jtok *toks, size_t n_toks, jnode **root);

/* ---- values: Python semantics ---- */
typedef struct jbuf {
    char *p;
    size_t n, cap, limit;
} jbuf;
cleave_status jbuf_put(jbuf *b, const char *s, size_t n);
cleave_status jbuf_putc(jbuf *b, char c);

static inline jvalue jv_undef(const char *name) { return (jvalue){.t = JV_UNDEF, .u.undef = name}; }
static inline jvalue jv_none(void) { return (jvalue){.t = JV_NONE}; }
static inline jvalue jv_bool(bool b) { return (jvalue){.t = JV_BOOL, .u.b = b}; }
static inline jvalue jv_int(int64_t i) { return (jvalue){.t = JV_INT, .u.i = i}; }
static inline jvalue jv_float(double f) { return (jvalue){.t = JV_FLOAT, .u.f = f}; }
static inline jvalue jv_str(const char *p, size_t n) {
    return (jvalue){.t = JV_STR, .u.s = {p, n}};
}

bool jv_truthy(const jvalue *v);
bool jv_equal(const jvalue *a, const jvalue *b);
bool jv_is_number(const jvalue *v);
/* The code point at s (UTF-8; a bad byte reads as itself), its length in *len. */
uint32_t jv_utf8_next(const char *s, size_t n, size_t *len);
/* Python's str.isspace and str.isprintable for one code point (the common planes). */
bool jv_py_space(uint32_t cp);
bool jv_py_printable(uint32_t cp); /* int, float or bool as Python counts them */
double jv_as_double(const jvalue *v);
const char *jv_type_name(const jvalue *v);
/* str(v) as Python prints it (repr for the items inside containers). */
cleave_status jv_str_into(jbuf *b, const jvalue *v);
cleave_status jv_repr_into(jbuf *b, const jvalue *v);
void jv_float_repr(double f, char out[48]);
/* json.dumps(v, sort_keys=True, indent=indent) with jinja2's HTML-safe escapes. */
cleave_status jv_json_into(jbuf *b, const jvalue *v, int indent, int depth);

jlist *jlist_new(jarena *a, size_t cap);
cleave_status jlist_push(jarena *a, jlist *l, jvalue v);
jdict *jdict_new(jarena *a, size_t cap);
jvalue *jdict_get(const jdict *d, const jvalue *key);
jvalue *jdict_get_str(const jdict *d, const char *key, size_t n);
cleave_status jdict_set(jarena *a, jdict *d, jvalue key, jvalue val);
/* A copy of s in the arena. */
cleave_status jv_new_str(jarena *a, const char *s, size_t n, jvalue *out);

/* Three-way order of a and b (numbers, strings, sequences); false when Python refuses. */
bool jv_compare(const jvalue *a, const jvalue *b, int *order);

/* ---- rendering: what the evaluator and the builtins share ---- */
typedef struct jframe jframe;
struct jframe {
    jdict *vars;
    jframe *parent;
};

struct jloop {
    jlist *items;
    size_t index0;
    int depth;         /* 1 for the outer loop; recursive calls add one */
    const jnode *node; /* the for statement (recursive loops call it again) */
    jframe *frame;     /* where the loop runs */
};

typedef struct jctx {
    jarena arena;
    jbuf *out;
    const jinja_render_args *args;
    jinja_limits lim;
    uint64_t steps;
    int depth;
    jframe *root; /* the template's top level: globals plus its own sets */
    int jump;     /* 1: break, 2: continue, pending */
    jvalue hole;  /* a filter block's or block set's captured text */
    bool raised;  /* the error is the template's own raise_exception */
} jctx;

/* Global functions. */
/* JB_UNSUPPORTED: jinja2's lipsum, cycler and joiner: defined (a template may test that), refused
 * when called */
enum { JB_RANGE = 1, JB_NAMESPACE, JB_DICT, JB_RAISE, JB_STRFTIME, JB_UNSUPPORTED };

typedef struct jargs {
    const jvalue *pos;
    size_t n_pos;
    const jstr *kw_names;
    const jvalue *kw;
    size_t n_kw;
} jargs;

/* jinja_value.c, the services every part uses: an error at a node
 * ("line L: message"), the error of using an undefined value, a step. */
cleave_status jctx_fail(jctx *c, const jnode *at, const char *fmt, ...) ERR_PRINTF_J(3, 4);
cleave_status jctx_undefined(jctx *c, const jnode *at, const jvalue *v);
cleave_status jctx_step(jctx *c, const jnode *at);
/* str(v) as a string value (v itself when it is one). */
cleave_status jctx_str(jctx *c, const jvalue *v, jvalue *out);
/* The items a for loop walks over v: list and tuple items, dict keys, characters. */
cleave_status jctx_iterate(jctx *c, const jnode *at, const jvalue *v, jlist **out);
/* jinja_access.c: obj.name as jinja2 resolves it (methods first, then
 * items); obj[key] (items first). */
cleave_status jctx_getattr(jctx *c, const jnode *at, const jvalue *obj, jstr name, jvalue *out);
cleave_status jctx_getitem(jctx *c, const jnode *at, const jvalue *obj, const jvalue *key,
                           jvalue *out);
cleave_status jctx_call(jctx *c, const jnode *at, const jvalue *callee, const jargs *a,
                        jvalue *out);

cleave_status jinja_filter(jctx *c, const jnode *at, jstr name, const jvalue *in, const jargs *a,
                           jvalue *out);
cleave_status jinja_test(jctx *c, const jnode *at, jstr name, const jvalue *in, const jargs *a,
                         bool *out);
cleave_status jinja_method(jctx *c, const jnode *at, const jvalue *self, jstr name, const jargs *a,
                           jvalue *out);
cleave_status jinja_builtin(jctx *c, const jnode *at, int id, const jargs *a, jvalue *out);
/* ---- what the builtins share ---- */
static inline bool jname_is(jstr s, const char *w) {
    size_t n = strlen(w);
    return s.n == n && !memcmp(s.p, w, n);
}
/* Argument idx by position, or by keyword name; NULL when absent. */
static inline const jvalue *jarg(const jargs *a, size_t idx, const char *name) {
    if (idx < a->n_pos) return &a->pos[idx];
    for (size_t k = 0; name && k < a->n_kw; k++)
        if (jname_is(a->kw_names[k], name)) return &a->kw[k];
    return NULL;
}
bool jarg_bool(const jvalue *v, bool def); /* an argument's truth, def when it is absent */
static inline bool py_ascii_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* Python's str operations (jinja_strings.c). */
cleave_status py_need_str(jctx *c, const jnode *at, const jvalue *v, const char *what);
cleave_status py_new_str(jctx *c, const char *p, size_t n, jvalue *out);
/* Whether Python whitespace starts at s.p[i] (its length in *len). */
bool py_space_at(jstr s, size_t i, size_t *len);
/* str.strip/lstrip/rstrip: chars a string, or NULL for whitespace. */
jvalue py_strip(jstr s, const jvalue *chars, bool left, bool right);
/* mode: 0 lower, 1 upper, 2 capitalize, 3 jinja2's title filter, 4 str.title (ASCII letters). */
cleave_status py_case(jctx *c, jstr s, int mode, jvalue *out);
cleave_status py_replace(jctx *c, jstr s, jstr old, jstr new_, int64_t count, jvalue *out);
/* str.split(sep, maxsplit): sep NULL or None splits on whitespace runs. */
cleave_status py_split(jctx *c, const jnode *at, jstr s, const jvalue *sep, int64_t maxsplit,
                       jvalue *out);
bool py_affix(jstr s, jstr x, bool end);
/* startswith/endswith with a string or a tuple of strings. */
cleave_status py_affix_test(jctx *c, const jnode *at, jstr s, const jvalue *x, bool end, bool *r);
int64_t py_find(jstr s, jstr x, bool last);
/* str.format with {} {0} {name} fields. */
cleave_status py_str_format(jctx *c, const jnode *at, jstr s, const jargs *a, jvalue *out);
/* str(item) of each, joined by sep. */
cleave_status py_join(jctx *c, const jnode *at, const jlist *items, jstr sep, jvalue *out);
/* A dict's (key, value) tuples (jinja_methods.c). */
cleave_status jinja_items(jctx *c, const jdict *d, jvalue *out);
/* Python's printf-style fmt % args (args a tuple, a dict for %(name)s, or one value). */
cleave_status jinja_percent_format(jctx *c, const jnode *at, jstr fmt, const jvalue *args,
                                   jvalue *out);
/* Whether self (str, list, dict) has a method of that name, as Python's attribute lookup finds it.
 */
bool jinja_has_method(const jvalue *self, jstr name);

#endif
