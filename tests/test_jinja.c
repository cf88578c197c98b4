/* The Jinja interpreter (src/vocab/jinja_*.c) case by case: each
 * statement, expression, filter, test and method chat templates use,
 * jinja2's whitespace control (trim_blocks, lstrip_blocks, "-" and "+"),
 * errors (syntax errors with line and column, unknown filters, the
 * template's raise_exception, include refused), the limits (steps,
 * output, recursion) stopping runaway templates, and the public
 * cleave_chat_template_* API with and without a model. The expected texts
 * are what Python's jinja2 3.1 renders (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, loopcontrols) for the same conversation. */
#include <pthread.h>
#include <string.h>

#include "model/gguf.h"
#include "testutil.h"
#include "vocab/jinja.h"

static const cleave_chat_message conv[] = {
    {"system", "Be brief."}, {"user", "Hi <you> & 'me'"}, {"assistant", "Hello."}};

/* 2026-01-15 12:34:56 UTC */
#define FIXED_TIME 1768480496

static const struct {
    const char *tpl, *want;
} cases[] = {
    {"plain text", "plain text"},
    {"a{# comment #}b", "ab"},
    {"{{ 'x' }}{{ \"y\" }}", "xy"},
    {"{{ 1 }} {{ 1.5 }} {{ 2.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 0.00001 }} {{ -3 }}",
     "1 1.5 2.0 1e+20 0.0001 1e-05 -3"},
    {"{{ none }} {{ true }} {{ False }} {{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': 1} }} {{ "
     "(1,) }} {{ (1, 'b') }}",
     "None True False [1, 'a', None, True] {'k': 'v', 'n': 1} (1,) (1, 'b')"},
    {"{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\"] }} {{ 'a\\nb\\tc\\\\' }} {{ '\\u00e9\\x41' }}",
     "it's [\"it's\", 'q\"'] a\nb\tc\\ \303\251A"},
    {"{{ undefined_thing }}|{{ messages[9] }}|{{ messages[0].nope }}", "||"},
    {"a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc"},
    {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
    {"a\n  {{- 'x' -}}\n  b", "axb"},
    {"  {# c #}\nx", "x"},
    {"a {%+ if true %}b{% endif %}", "a b"},
    {"{% if true +%}\nx{% endif %}", "\nx"},
    {"x\n{% raw %}{{ y }}{% endraw %}\nz", "x\n{{ y }}z"},
    {"line1\n    {% for m in messages %}\n    {{ m.role }}\n    {% endfor %}\nend\n",
     "line1\n    system\n    user\n    assistant\nend"},
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / "
     "2 }} {{ 2 ** 10 }} {{ 'ab' * 3 }}",
     "7 9 3 -4 1 2 3.5 1024 ababab"},
    /* precedence and associativity of the arithmetic levels (from jinja2 3.1) */
    {"{{ 'a' ~ 2 * 3 ~ 'b' }} {{ 2 ** 3 * 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }} {{ 20 // 3 % 4 }} "
     "{{ [1] + [2] * 2 }}",
     "a6b 16 5 64 2 [1, 2, 2]"},
    {"{{ 'a' ~ 1 ~ none ~ true }} {{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ 3 > 2 > 1 }} {{ 1 == 1.0 "
     "}} {{ 'a' < 'b' }}",
     "a1NoneTrue ab [1, 2, 3] True True True"},
    {"{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ not 0 }} {{ "
     "0 or 'x' }} {{ 1 and 'y' }}",
     "True True True True True x y"},
    {"{{ 'yes' if messages else 'no' }} {{ 'a' if false }}|", "yes |"},
    {"{{ 'hello'[1:] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][1:3] }} {{ [1,2,3][-1] }} {{ 'hello'[-2:] "
     "}} {{ [1,2,3,4,5][::2] }}",
     "ello olleh [2, 3] 3 lo [1, 3, 5]"},
    {"{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex "
     "}}/{{ loop.first }}/{{ loop.last }} {% endfor %}",
     "1/0/3/3/True/False 2/1/3/2/False/False 3/2/3/1/False/True "},
    {"{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ "
     "loop.nextitem.role if loop.nextitem is defined else '-' }} {% endfor %}",
     "->user system>assistant user>- "},
    {"{% for m in messages if m.role != 'system' %}{{ m.role }}:{{ loop.length }} {% endfor %}",
     "user:2 assistant:2 "},
    {"{% for x in [] %}x{% else %}empty{% endfor %}", "empty"},
    {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;"},
    {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% "
     "endif %}{{ x }}{% endfor %}",
     "0134"},
    {"{% for x in 'ab' %}{{ loop.cycle('o', 'e') }}{{ x }}{% endfor %}", "oaeb"},
    {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", "1"},
    {"{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ "
     "ns.n }}",
     "3"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}", "12"},
    {"{% set t %}in {{ 'block' }}{% endset %}[{{ t }}]", "[in block]"},
    {"{% set t | upper %}shout{% endset %}{{ t }}", "SHOUT"},
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ "
     "greet('B', punct='?') }} {{ greet(name='C') }}",
     "Hi A! Hi B? Hi C!"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
     "321"},
    {"{% filter upper %}up {{ 'here' }}{% endfilter %}", "UP HERE"},
    {"{% if false %}a{% elif messages | length > 2 %}b{% else %}c{% endif %}", "b"},
    {"{{ x is defined }} {{ messages is defined }} {{ none is none }} {{ 'a' is string }} {{ 1 is "
     "number }} {{ {} is mapping }} {{ [] is iterable }} {{ 'x' is sequence }} {{ true is boolean "
     "}} {{ 1 is integer }} {{ 1.0 is float }}",
     "False True True True True True True True True True True"},
    {"{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ 1 is eq "
     "2 }} {{ x is undefined }} {{ true is true }} {{ 0 is false }} {{ 'ab' is lower }} {{ 1 is "
     "not none }}",
     "True True True True False True True False True True"},
    {"{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ [1,2] | length }}|{{ 'h\303\251llo' | "
     "length }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'hello world-x' | title }}|{{ 'hELLO' | "
     "capitalize }}",
     "x|a|2|5|ABC|abc|Hello World-X|Hello"},
    {"{{ 'aaa' | replace('a', 'b') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ [1, 2, 3] | join(', ') "
     "}}|{{ [1,2] | first }}|{{ [1,2] | last }}|{{ x | default('d') }}|{{ '' | default('e', true) "
     "}}|{{ none | d('n') }}",
     "bbb|bba|1, 2, 3|1|2|d|e|None"},
    {"{{ {'b': 1, 'a': [1, 2.5, none, true], 'c': 'x<y>&\\'z\"'} | tojson }}",
     "{\"a\": [1, 2.5, null, true], \"b\": 1, \"c\": \"x\\u003cy\\u003e\\u0026\\u0027z\\\"\"}"},
    {"{{ {'b': {'z': 1, 'y': []}, 'a': {}} | tojson(indent=2) }}",
     "{\n  \"a\": {},\n  \"b\": {\n    \"y\": [],\n    \"z\": 1\n  }\n}"},
    {"{{ '\303\251\360\237\231\202\\n' | tojson }}", "\"\\u00e9\\ud83d\\ude42\\n\""},
    {"{{ 42 | string }}{{ '7' | int + 1 }}{{ 'x' | int }}{{ '2.5' | float }}{{ 3 | float }}{{ 'ab' "
     "| list }}",
     "42802.53.0['a', 'b']"},
    {"{{ {'a': 1, 'b': 2} | items | list }} {{ {'b': 1, 'A': 2} | dictsort }}",
     "[('a', 1), ('b', 2)] [('A', 2), ('b', 1)]"},
    {"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ "
     "messages | rejectattr('role', 'in', ['user', 'system']) | map(attribute='role') | join }}",
     "[\"Hi <you> & 'me'\"] assistant"},
    {"{{ [1, 0, 2, none] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ ['a', "
     "'b'] | map('upper') | join }}",
     "[1, 2] [2, 4] AB"},
    {"{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(4, first=true) }}",
     "a\n  b\n\n  c|    a\n    b"},
    {"{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ "
     "[1, 2, 1, 3] | unique | list }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2] | sum "
     "}} {{ -3 | abs }}",
     "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] [1, 2, 3] 1 3 3 3"},
    {"{{ [1, 2] | reverse | list }} {{ 'abc' | reverse }} {{ messages | map(attribute='nope', "
     "default='z') | list }}",
     "[2, 1] cba ['z', 'z', 'z']"},
    {"{% set x = 0 %}{% for i in [1,2,3] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}",
     "123|0"},
    {"{% for i in [1] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}{% macro n() %}{{ "
     "i }}{% endmacro %}{% for i in [2] %}[{{ n() }}]{% endfor %}",
     "1[]"},
    {"{% macro m() %}{{ late }}{% endmacro %}{% set late = 'L' %}{{ m() }}", "L"},
    {"{% for m in messages %}{% if m.role == 'user' %}{% set found = true %}{% endif %}{% endfor "
     "%}{{ found }}",
     ""},
    {"{{ ['\302\240', '\343\200\200', '\303\251', '\001', \"it's\"] }} {{ {'a': 1}.items() }} {{ "
     "{'a': 1}.keys() }} {{ {'a': 1}.values() }}",
     "['\\xa0', '\\u3000', '\303\251', '\\x01', \"it's\"] dict_items([('a', 1)]) dict_keys(['a']) "
     "dict_values([1])"},
    {"{{ 10 / 4 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 2.5e-7 }} {{ 123456789012345678.0 }} {{ "
     "-0.0 }} {{ 7.0 // 2 }} {{ -7.5 % 2 }} {{ 5 % -3 }}",
     "2.5 1000.0 0.30000000000000004 0.3333333333333333 2.5e-07 1.2345678901234568e+17 -0.0 3.0 "
     "0.5 -1"},
    {"[{{ '\343\200\200 a\302\240b \342\200\203'.strip() }}][{{ '\343\200\200x\343\200\200' | trim "
     "}}][{{ 'a\302\240b\343\200\200c'.split() }}]",
     "[a\302\240b][x][['a', 'b', 'c']]"},
    {"{{ 'a\\nb\\n' | indent }}|{{ 'a\\n\\nb' | indent(2, true, true) }}|{{ '' | "
     "indent(first=true) }}|",
     "a\n    b\n|  a\n  \n  b|    |"},
    {"{{ '%s-%d-%05.2f-%x-%r' | format('a', 3.9, 2.5, 255, 'q') }} {{ '%s and %s' % ('x', 1) }} {{ "
     "'%(a)s' % {'a': 'named'} }} {{ '100%%' % () }}",
     "a-3-02.50-ff-'q' x and 1 named 100%"},
    {"[{{ 'x' | center(6) }}][{{ 'ab' | center(5) }}] {{ 'Hello big World' | wordcount }} {{ "
     "messages | first | attr('role') }}|{{ messages | first | attr('items') is defined }}",
     "[  x   ][  ab ] 3 |True"},
    {"{{ x | first }}|{{ x | last }}|{{ x is sequence }}|{{ none | selectattr('a') | list }}|{{ "
     "none | map('upper') | list }}",
     "||True|[]|[]"},
    {"{{ 0.1 | round }} {{ 2.5 | round }} {{ 2.675 | round(2) }} {{ 3 | round }} {{ 2.1 | round(0, "
     "'ceil') }} {{ 'a<b&\"' | e }} {{ [1, 2, 3] | batch(2) | list }}",
     "0.0 2.0 2.67 3 3.0 a&lt;b&amp;&#34; [[1, 2], [3]]"},
    {"{{ true is sameas true }} {{ none is sameas none }} {{ 1 is sameas 1 }} {{ lipsum is defined "
     "}} {{ tools is defined }} [{{ strftime_now('%Z%z') }}]",
     "True True True True False []"},
    {"{% macro box(title) %}[{{ title }}:{{ caller() }}]{% endmacro %}{% call box('t') %}inside {{ "
     "messages | length }}{% endcall %}",
     "[t:inside 3]"},
    {"{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% endmacro %}{% "
     "call(item, i) each(['a', 'b']) %}{{ i }}={{ item }};{% endcall %}",
     "1=a;2=b;"},
    {"{{ '\303\277\303\251 \303\237 stra\303\237e \304\263 \316\221\316\222\316\223 "
     "\317\203\317\202 \320\260\320\261\320\262 \320\201\320\226 \357\274\241\357\274\242 \305\211 "
     "\304\260' | upper }}|{{ '\303\200\303\211 \304\262\316\243\316\221\316\222 "
     "\320\220\320\221\320\222 \320\201 \304\260 \305\270 \357\274\241\357\274\242' | lower }}|{{ "
     "'\303\251lan vital \303\237tra\303\237e \303\274nd-\303\266lkerung' | title }}|{{ "
     "'\303\251lan VITAL' | capitalize }}|{{ '\303\251lan vital-\303\251 it\\'s 3rd "
     "\303\261u'.title() }}",
     "\305\270\303\211 SS STRASSE \304\262 \316\221\316\222\316\223 \316\243\316\243 "
     "\320\220\320\221\320\222 \320\201\320\226 \357\274\241\357\274\242 \312\274N "
     "\304\260|\303\240\303\251 \304\263\317\203\316\261\316\262 \320\260\320\261\320\262 \321\221 "
     "i\314\207 \303\277 \357\275\201\357\275\202|\303\211lan Vital SStra\303\237e "
     "\303\234nd-\303\226lkerung|\303\211lan vital|\303\211lan Vital-\303\211 It'S 3Rd \303\221u"},
    {"{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ "
     "'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}",
     "a b|axx|xxa|['a', 'b', '', 'c']|['a', 'b']|['a', 'b,c']"},
    {"{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'aXa'.replace('a', "
     "'b') }} {{ 'ab'.upper() }} {{ 'hello world'.title() }} {{ 'hello'.find('l') }} {{ "
     "'hello'.count('l') }} {{ '{}-{}'.format(1, 'x') }} {{ '-'.join(['a', 'b']) }}",
     "True True bXb AB Hello World 2 2 1-x a-b"},
    {"{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }} {{ {'a': 1, 'b': "
     "2}.keys() | list }} {{ {'a': 1}.values() | list }} {{ messages[1]['content'] }} {{ "
     "messages[0].content }}",
     "1 None 2 ['a', 'b'] [1] Hi <you> & 'me' Be brief."},
    {"{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ strftime_now('%Y-%m-%d %H:%M "
     "%B %d') }}",
     "<s>|</s>|True|2026-01-15 12:34 January 15"},
};

static const struct {
    const char *tpl, *error;
} errors[] = {
    {"{{ raise_exception('custom failure') }}", "custom failure"},
    {"{{ 1 | nosuchfilter }}", "no filter named 'nosuchfilter'"},
    {"{{ 1 is nosuchtest }}", "no test named"},
    {"{% include 'x.jinja' %}", "not allowed"},
    {"{% import 'x.jinja' as y %}", "not allowed"},
    {"{% extends 'x.jinja' %}", "not allowed"},
    {"a\n{% if %}", "line 2, column"},
    {"a\n b {{ 1 +  }}", "line 2, column"},
    {"{% for x in y %}", "endfor"},
    {"{{ 'unterminated }}", "unterminated string"},
    {"{% endif %}", "unexpected 'endif'"},
    {"{{ x.y }}", "undefined"},
    {"{{ 1 + 'a' }}", "unsupported operand"},
    {"{{ [].append(1) }}", "unsafe"},
    {"{{ 1 / 0 }}", "division by zero"},
    {"{{ none | list }}", "not iterable"},
    {"{% set x = 1 %}{% set x.y = 2 %}", "non-namespace"},
    {"{# open comment", "comment"},
    {"{{ cycler() }}", "not supported"},
    {"{{ '%d' % 'x' }}", "real number is required"},
    {"{{ '%s %s' % ('x',) }}", "not enough arguments"},
    {"{{ messages[0].items() | tojson }}", "not JSON serializable"},
    {"{{ 'abc'[::,1] }}", "a slice cannot be one of several subscripts"},
    {"{{ [1, 2][0, 1:] }}", "a slice cannot be one of several subscripts"},
};

static cleave_status render(const char *tpl, jinja_limits lim, char **out, size_t *n) {
    jinja_template *t = NULL;
    cleave_status st = jinja_parse(tpl, strlen(tpl), &t);
    if (st) return st;
    jinja_render_args a = {.msgs = conv,
                           .n_msgs = 3,
                           .add_generation_prompt = true,
                           .bos_token = "<s>",
                           .eos_token = "</s>",
                           .fixed_time = true,
                           .time = FIXED_TIME,
                           .limits = lim};
    st = jinja_render(t, &a, out, n);
    jinja_free(t);
    return st;
}

static void language_cases(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        size_t n = 0;
        cleave_status st = render(cases[i].tpl, jinja_default_limits(), &out, &n);
        CHECK_MSG(!st, "%s: %s", cases[i].tpl, cleave_last_error());
        if (!st)
            CHECK_MSG(n == strlen(cases[i].want) && !memcmp(out, cases[i].want, n),
                      "%s:\n got  [%.*s]\n want [%s]", cases[i].tpl, (int)n, out, cases[i].want);
        free(out);
    }
}

static void error_cases(void) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        char *out = NULL;
        size_t n = 0;
        cleave_status st = render(errors[i].tpl, jinja_default_limits(), &out, &n);
        CHECK_MSG(st == CLEAVE_ERR_INVALID_ARG && strstr(cleave_last_error(), errors[i].error),
                  "%s: status %d, message '%s', wanted one with '%s'", errors[i].tpl, (int)st,
                  cleave_last_error(), errors[i].error);
        CHECK(!out);
        free(out);
    }
    /* raise_exception's message is the template's own, whole */
    char *out = NULL;
    size_t n;
    CHECK(render("{{ raise_exception('Conversation roles must alternate') }}",
                 jinja_default_limits(), &out, &n) == CLEAVE_ERR_INVALID_ARG);
    CHECK(!strcmp(cleave_last_error(), "Conversation roles must alternate"));
}

static void expect_limit(const char *tpl, jinja_limits lim, const char *what) {
    char *out = NULL;
    size_t n = 0;
    cleave_status st = render(tpl, lim, &out, &n);
    CHECK_MSG(st == CLEAVE_ERR_INVALID_ARG && strstr(cleave_last_error(), what),
              "%s: status %d '%s'", tpl, (int)st, cleave_last_error());
    free(out);
}

static void limits(void) {
    jinja_limits lim = jinja_default_limits();
    expect_limit("{% for i in range(100000000) %}x{% endfor %}", lim, "limit");
    expect_limit(
        "{% set r = range(4000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", lim,
        "steps");
    expect_limit("{% set r = range(3000) %}{% for i in r %}{% for j in r %}{{ 'xxxxxxxxxxxxx' }}{% "
                 "endfor %}{% endfor %}",
                 lim, "output");
    jinja_limits small_memory = lim;
    small_memory.max_memory = 4 << 20;
    expect_limit("{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ i "
                 "%}{% endfor %}",
                 small_memory, "memory");
    expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", lim, "nested deeper");
    expect_limit("{{ 'x' * 100000000 }}", lim, "output limit");
    jinja_limits tight = {
        .max_output = 100, .max_steps = 1000, .max_depth = 4, .max_memory = 1 << 20};
    expect_limit("{% for i in range(500) %}{{ i }}{% endfor %}", tight, "limit");
    expect_limit("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(10) }}",
                 tight, "nested");
    /* within the tight limits the same macro renders */
    char *out = NULL;
    size_t n = 0;
    CHECK_OK(
        render("{% macro f(n) %}{% if n %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
               tight, &out, &n));
    CHECK(out && !strcmp(out, "321"));
    free(out);
    /* expressions nested beyond the parser's bound are refused, not a stack overflow */
    static char deep[20001];
    for (int i = 0; i < 10000; i++)
        deep[i] = '(';
    memcpy(deep + 10000, "{{ 1 }}", 8);
    char tpl[20100];
    snprintf(tpl, sizeof tpl, "{{ %.*s1 }}", 5000, deep);
    jinja_template *t = NULL;
    CHECK(jinja_parse(tpl, strlen(tpl), &t) == CLEAVE_ERR_INVALID_ARG && !t);
    /* a template larger than JINJA_MAX_SOURCE is refused before it is read */
    size_t big_n = JINJA_MAX_SOURCE + 1;
    char *big = malloc(big_n);
    if (big) {
        memset(big, 'x', big_n);
        CHECK(jinja_parse(big, big_n, &t) == CLEAVE_ERR_INVALID_ARG && !t);
        CHECK(strstr(cleave_last_error(), "bytes"));
        free(big);
    }
}

/* A vocabulary-only GGUF (<s>, </s>, the chatml markers and the bytes) with a template or none. */
static const char *vocab_with(const char *tmpl, const char *file) {
    const char *path = tu_tmp(file);
    static char bytes[256][8];
    const char *texts[261];
    float scores[261];
    int32_t types[261];
    texts[0] = "<unk>", texts[1] = "<s>", texts[2] = "</s>", texts[3] = "<|im_start|>",
    texts[4] = "<|im_end|>";
    types[0] = 2, types[1] = 3, types[2] = 3, types[3] = 3, types[4] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        texts[5 + b] = bytes[b], types[5 + b] = 6;
    }
    for (int i = 0; i < 261; i++)
        scores[i] = 0;
    gguf_writer *w = NULL;
    cleave_status st = gguf_writer_new(&w);
    if (!st) st = gguf_set_str(w, "tokenizer.ggml.model", "llama");
    if (!st) st = gguf_set_arr_str(w, "tokenizer.ggml.tokens", texts, 261);
    if (!st) st = gguf_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, scores, 261);
    if (!st) st = gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, 261);
    if (!st) st = gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!st) st = gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!st && tmpl) st = gguf_set_str(w, "tokenizer.chat_template", tmpl);
    if (!st) st = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    CHECK_OK(st);
    return path;
}

/* Loads a vocabulary with tmpl, renders conv with add_generation_prompt and checks the text and
 * description. */
static void with_model(const char *tmpl, const char *want, const char *describe, bool has_source) {
    cleave_model_params mp = {NULL, NULL, true};
    cleave_model *m = NULL;
    CHECK_OK(cleave_model_load(vocab_with(tmpl, "jinja.gguf"), &mp, &m));
    if (!m) return;
    cleave_chat_template *t = NULL;
    CHECK_OK(cleave_chat_template_load(m, NULL, NULL, &t));
    if (t) {
        char buf[512];
        size_t n = 0, need = 0;
        CHECK_OK(cleave_chat_template_apply(t, conv, 3, true, buf, sizeof buf, &n));
        CHECK_MSG(n == strlen(want) && !memcmp(buf, want, n), "got [%.*s] want [%s]", (int)n, buf,
                  want);
        CHECK(cleave_chat_template_apply(t, conv, 3, true, buf, 2, &need) ==
                  CLEAVE_ERR_INVALID_ARG &&
              need == n);
        CHECK_MSG(strstr(cleave_chat_template_describe(t), describe), "%s",
                  cleave_chat_template_describe(t));
        CHECK((cleave_chat_template_source(t) != NULL) == has_source);
        if (has_source) CHECK(!strcmp(cleave_chat_template_source(t), tmpl));
    }
    cleave_chat_template_free(t);
    cleave_model_free(m);
}

static void public_api(void) {
    /* the model's own template, with its BOS and EOS texts */
    with_model("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token "
               "}}{% endfor %}"
               "{% if add_generation_prompt %}[assistant]{% endif %}",
               "<s>[system]Be brief.</s>[user]Hi <you> & 'me'</s>[assistant]Hello.</s>[assistant]",
               "Jinja", true);
    /* none: chatml, as llama.cpp falls back */
    with_model(
        NULL,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi <you> & 'me'<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>assistant\n",
        "the model has none", false);
    /* a template that does not parse but names a family by its markers */
    with_model(
        "{% for m in messages %}<|im_start|>{{ m.role }\n{% endfor",
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi <you> & 'me'<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>assistant\n",
        "did not parse: line 1, column", false);
    /* one that does not parse and names none: the parse error */
    {
        cleave_model_params mp = {NULL, NULL, true};
        cleave_model *m = NULL;
        CHECK_OK(cleave_model_load(vocab_with("{% if %}", "jinja.gguf"), &mp, &m));
        cleave_chat_template *t = (cleave_chat_template *)1;
        CHECK(m && cleave_chat_template_load(m, NULL, NULL, &t) == CLEAVE_ERR_INVALID_ARG && !t);
        CHECK(strstr(cleave_last_error(), "line 1, column"));
        /* a family by name, and a Jinja text, on the model (its BOS) */
        CHECK_OK(cleave_chat_template_load(m, "llama3", NULL, &t));
        CHECK(t && !cleave_chat_template_source(t) &&
              strstr(cleave_chat_template_describe(t), "llama3"));
        cleave_chat_template_free(t);
        t = NULL;
        CHECK_OK(cleave_chat_template_load(m, NULL, "{{ bos_token }}{{ messages | length }}", &t));
        char buf[64];
        size_t n = 0;
        CHECK_OK(cleave_chat_template_apply(t, conv, 3, false, buf, sizeof buf, &n));
        CHECK(n == 4 && !memcmp(buf, "<s>3", 4));
        cleave_chat_template_free(t);
        cleave_model_free(m);
    }
    /* no model: a Jinja text (bos/eos "") or a family */
    cleave_chat_template *t = NULL;
    CHECK_OK(
        cleave_chat_template_load(NULL, NULL, "[{{ bos_token }}]{{ messages[0].content }}", &t));
    char buf[64];
    size_t n = 0;
    CHECK_OK(cleave_chat_template_apply(t, conv, 1, false, buf, sizeof buf, &n));
    CHECK(n == 11 && !memcmp(buf, "[]Be brief.", 11));
    /* a render's error is the template's message */
    cleave_chat_template_free(t);
    t = NULL;
    CHECK_OK(cleave_chat_template_load(NULL, NULL, "{{ raise_exception('no system role') }}", &t));
    CHECK(cleave_chat_template_apply(t, conv, 1, false, buf, sizeof buf, &n) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(!strcmp(cleave_last_error(), "no system role"));
    cleave_chat_template_free(t);
    t = NULL;
    CHECK_OK(cleave_chat_template_load(NULL, "chatml", NULL, &t));
    CHECK_OK(cleave_chat_template_apply(t, conv + 1, 1, false, buf, sizeof buf, &n));
    const char *chatml = "<|im_start|>user\nHi <you> & 'me'<|im_end|>\n";
    CHECK(n == strlen(chatml) && !memcmp(buf, chatml, n));
    cleave_chat_template_free(t);
    /* NULL and garbage arguments */
    t = (cleave_chat_template *)1;
    CHECK(cleave_chat_template_load(NULL, NULL, NULL, &t) == CLEAVE_ERR_INVALID_ARG && !t);
    CHECK(cleave_chat_template_load(NULL, "chatml", NULL, NULL) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_chat_template_load(NULL, "no-such-family", NULL, &t) != CLEAVE_OK && !t);
    CHECK(cleave_chat_template_load(NULL, "chatml", "{{ 1 }}", &t) == CLEAVE_ERR_INVALID_ARG && !t);
    CHECK(cleave_chat_template_load(NULL, NULL, "{% if %}", &t) == CLEAVE_ERR_INVALID_ARG && !t);
    CHECK(cleave_chat_template_load(NULL, NULL, "\xff\xfe{{ \x01 }}", &t) ==
              CLEAVE_ERR_INVALID_ARG &&
          !t);
    cleave_chat_template_free(NULL);
    CHECK(cleave_chat_template_describe(NULL) != NULL);
    CHECK(cleave_chat_template_source(NULL) == NULL);
    CHECK(cleave_chat_template_apply(NULL, conv, 1, false, buf, sizeof buf, &n) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK_OK(cleave_chat_template_load(NULL, NULL, "{{ messages[0].content }}", &t));
    CHECK(cleave_chat_template_apply(t, NULL, 1, false, buf, sizeof buf, &n) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_chat_template_apply(t, conv, 1, false, NULL, 5, &n) == CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_chat_template_apply(t, conv, 1, false, buf, sizeof buf, NULL) ==
          CLEAVE_ERR_INVALID_ARG);
    const cleave_chat_message bad[] = {{"user", NULL}};
    CHECK(cleave_chat_template_apply(t, bad, 1, false, buf, sizeof buf, &n) ==
          CLEAVE_ERR_INVALID_ARG);
    CHECK(cleave_chat_template_apply(t, conv, 0, false, NULL, 0, &n) ==
          CLEAVE_ERR_INVALID_ARG); /* messages[0] */
    cleave_chat_template_free(t);
    t = NULL;
    CHECK_OK(cleave_chat_template_load(NULL, NULL, "{% for m in messages %}x{% endfor %}", &t));
    CHECK_OK(cleave_chat_template_apply(t, NULL, 0, false, NULL, 0, &n));
    CHECK(n == 0);
    cleave_chat_template_free(t);
    jinja_template *jt = (jinja_template *)1;
    CHECK(jinja_parse(NULL, 3, &jt) == CLEAVE_ERR_INVALID_ARG);
    CHECK(jinja_parse("x", 1, NULL) == CLEAVE_ERR_INVALID_ARG);
    char *out;
    CHECK(jinja_render(NULL, NULL, &out, &n) == CLEAVE_ERR_INVALID_ARG);
    jinja_free(NULL);
}

/* One template rendering on several threads at once gives each the same text. */
static const cleave_chat_template *shared_template;
static char reference[1024];
static size_t reference_n;

static void *render_many(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        char buf[1024];
        size_t n = 0;
        if (cleave_chat_template_apply(shared_template, conv, 3, true, buf, sizeof buf, &n) ||
            n != reference_n || memcmp(buf, reference, n))
            return (void *)1;
    }
    return NULL;
}

static void threads(void) {
    cleave_chat_template *t = NULL;
    CHECK_OK(cleave_chat_template_load(
        NULL, NULL,
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ loop.index }}:{{ m.role | upper }}={{ m.content | tojson }};{% endfor %}{{ ns.n }}"
        "{% macro f(k) %}{% if k %}{{ k }}{{ f(k - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
        &t));
    if (!t) return;
    CHECK_OK(
        cleave_chat_template_apply(t, conv, 3, true, reference, sizeof reference, &reference_n));
    shared_template = t;
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&th[i], NULL, render_many, NULL) == 0);
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        CHECK(pthread_join(th[i], &r) == 0 && r == NULL);
    }
    cleave_chat_template_free(t);
}

int main(void) {
    language_cases();
    error_cases();
    limits();
    public_api();
    threads();
    return tu_finish("test_jinja");
}
