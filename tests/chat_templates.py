#!/usr/bin/env python3
"""cleave's Jinja interpreter against Python's jinja2 on real models' chat
templates: every SHARED/templates/*.jinja rendered with a few
conversations, with and without the generation prompt, set up as Hugging
Face transformers renders them (ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension and the
{% generation %} tag, raise_exception and strftime_now as globals). The
bytes must be identical; where jinja2 raises, cleave must fail too.

usage: chat_templates.py HELPER TMPDIR  (SHARED from CLEAVE_SHARED_DIR; 77 when absent)
"""
import datetime
import os
import subprocess
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

# A fixed clock for strftime_now, given to cleave too: 2026-01-15 12:34:56 UTC.
FIXED_TIME = 1768480496
BOS, EOS = "<s>", "</s>"

CONVERSATIONS = {
    "user": [("user", "Hello! What is 2 + 2?")],
    "system_user": [("system", "You are a helpful assistant.\nAnswer briefly."),
                    ("user", "Name three colours, 'quoted' & <tagged>.")],
    "multi_turn": [("user", "Hi there"), ("assistant", "Hello! How can I help?"),
                   ("user", "Tell me a joke about \"cats\".")],
    # beyond the three above: a turn that ends with the assistant (with the
    # reasoning block many templates cut off), text with non-ASCII, tabs,
    # backslashes and edge whitespace, and a conversation without a user turn
    "assistant_last": [("system", "Think first."), ("user", "2+2?"),
                       ("assistant", "<think>\nSimple sum.\n</think>\n\n4"),
                       ("user", "And 3+3?"), ("assistant", "  6  ")],
    "unicode": [("user", "  Grüße 👋\tc:\\path {{ not jinja }} {% raw %}\n\n")],
    "system_only": [("system", "Only a system prompt.")],
    # a tool's answer between turns, and an empty message
    "tool_turn": [("user", "Weather in Paris?"), ("assistant", "Let me check."),
                  ("tool", "{\"temperature\": 21}"), ("user", "")],
}

# Templates whose rendering may differ, each with the reason (an empty list
# means cleave matches jinja2 on every template and conversation).
KNOWN_DIFFERENCES = {
}


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    # naive, as transformers' datetime.now() is (%Z and %z print nothing)
    return datetime.datetime.fromtimestamp(FIXED_TIME, datetime.timezone.utc).replace(tzinfo=None).strftime(fmt)


def reference(env, source, messages, add_generation_prompt):
    try:
        template = env.from_string(source)  # the environment caches the compiled template
        return template.render(messages=[{"role": r, "content": c} for r, c in messages],
                               add_generation_prompt=add_generation_prompt,
                               bos_token=BOS, eos_token=EOS).encode()
    except Exception as e:  # jinja2's errors and the template's raise_exception alike
        return ("error", "%s: %s" % (type(e).__name__, e))


def cleave(helper, tmp, path, messages, add_generation_prompt):
    conv = os.path.join(tmp, "conversation.txt")
    with open(conv, "w", encoding="utf-8") as f:
        for role, content in messages:
            f.write("%s\t%s\n" % (role, content.replace("\\", "\\\\").replace("\n", "\\n")))
    p = subprocess.run([helper, path, conv, "1" if add_generation_prompt else "0", str(FIXED_TIME), BOS, EOS],
                       capture_output=True, timeout=60)
    if p.returncode == 3:
        return ("error", p.stderr.decode(errors="replace").strip())
    if p.returncode != 0:
        return ("crash", "exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()))
    return p.stdout


def first_difference(a, b):
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    helper, tmp = sys.argv[1], sys.argv[2]
    shared = os.environ.get("CLEAVE_SHARED_DIR", "")
    tdir = os.path.join(shared, "templates")
    if not shared or not os.path.isdir(tdir):
        print("SKIP: no templates at %r (CLEAVE_SHARED_DIR)" % tdir)
        return 77
    os.makedirs(tmp, exist_ok=True)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, GenerationTag])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    names = sorted(f for f in os.listdir(tdir) if f.endswith(".jinja"))
    only = os.environ.get("CHAT_TEMPLATES_ONLY")
    if only:
        names = [n for n in names if only in n]
    total = identical = both_errors = 0
    failed, known = [], []
    for name in names:
        path = os.path.join(tdir, name)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        bad = []
        for conv_name, messages in CONVERSATIONS.items():
            for gen in (False, True):
                total += 1
                want = reference(env, source, messages, gen)
                got = cleave(helper, tmp, path, messages, gen)
                if isinstance(want, tuple) and isinstance(got, tuple) and got[0] == "error":
                    identical += 1
                    both_errors += 1
                    continue
                if want == got:
                    identical += 1
                    continue
                what = "%s, add_generation_prompt=%s" % (conv_name, gen)
                if isinstance(want, tuple) or isinstance(got, tuple):
                    bad.append("%s: jinja2 %r, cleave %r" % (what, want if isinstance(want, tuple) else "renders",
                                                              got if isinstance(got, tuple) else "renders"))
                else:
                    i = first_difference(want, got)
                    bad.append("%s: first difference at byte %d: jinja2 %r, cleave %r" %
                               (what, i, want[max(0, i - 40):i + 40], got[max(0, i - 40):i + 40]))
        if bad:
            (known if name in KNOWN_DIFFERENCES else failed).append((name, bad))
    for name, bad in known:
        print("known difference: %s (%s)" % (name, KNOWN_DIFFERENCES[name]))
    for name, bad in failed:
        print("FAIL: %s" % name)
        for b in bad[:3]:
            print("   ", b)
    print("%d templates x %d conversations: identical %d of %d (%d of them errors in both)%s" %
          (len(names), 2 * len(CONVERSATIONS), identical, total, both_errors,
           ", %d templates listed as known differences" % len(known) if known else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
