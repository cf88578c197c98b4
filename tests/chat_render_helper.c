/* Renders a chat template for tests/chat_templates.py, which compares the
 * bytes with Python's jinja2:
 *   chat_render_helper TEMPLATE.jinja CONVERSATION ADD_GENERATION_PROMPT(0|1) UNIX_TIME BOS EOS
 * CONVERSATION has one message a line, "role<TAB>content", content with
 * \n and \\ escaped. The rendered text goes to stdout; a template error
 * is exit status 3 with the message on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "vocab/jinja.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (p && n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n > 0 ? n : 0] = 0;
    *len = n > 0 ? (size_t)n : 0;
    return p;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: chat_render_helper TEMPLATE CONVERSATION ADD_GEN TIME BOS EOS\n");
        return 2;
    }
    size_t tlen, clen;
    char *tpl = slurp(argv[1], &tlen), *conv = slurp(argv[2], &clen);
    if (!tpl || !conv) {
        fprintf(stderr, "chat_render_helper: cannot read the inputs\n");
        return 2;
    }
    cleave_chat_message msgs[64];
    size_t n = 0;
    for (char *line = conv; line && *line && n < 64;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        char *tab = strchr(line, '\t');
        if (tab) {
            *tab = 0;
            char *o = tab + 1;
            for (char *i = tab + 1; *i; i++) {
                if (*i == '\\' && i[1] == 'n')
                    *o++ = '\n', i++;
                else if (*i == '\\' && i[1] == '\\')
                    *o++ = '\\', i++;
                else
                    *o++ = *i;
            }
            *o = 0;
            msgs[n].role = line, msgs[n].content = tab + 1;
            n++;
        }
        line = end ? end + 1 : NULL;
    }
    jinja_template *t;
    if (jinja_parse(tpl, tlen, &t)) {
        fprintf(stderr, "%s\n", cleave_last_error());
        return 3;
    }
    jinja_render_args a = {.msgs = msgs,
                           .n_msgs = n,
                           .add_generation_prompt = atoi(argv[3]) != 0,
                           .bos_token = argv[5],
                           .eos_token = argv[6],
                           .fixed_time = true,
                           .time = atoll(argv[4]),
                           .limits = jinja_default_limits()};
    char *out;
    size_t len;
    int rc = 0;
    if (jinja_render(t, &a, &out, &len)) {
        fprintf(stderr, "%s\n", cleave_last_error());
        rc = 3;
    } else {
        fwrite(out, 1, len, stdout);
        free(out);
    }
    jinja_free(t);
    free(tpl);
    free(conv);
    return rc;
}
