"""cleave serve driven by the official openai Python client, as its users
drive it: completions and chats, streamed and whole (a stream's deltas add
up to the greedy answer), models.list and models.retrieve, and the errors
the client maps to its exceptions (404 model_not_found -> NotFoundError,
400 -> BadRequestError naming the field, context_length_exceeded), n > 1
and prompt lists (choices by index), logprobs of completions and chats.

usage: test_openai.py PORT MODEL_ID   (tests/cli_serve_openai.sh starts the server)
"""
import sys

import openai

port, model = int(sys.argv[1]), sys.argv[2]
client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="unused", max_retries=0, timeout=120)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# ---- completions -------------------------------------------------------------
whole = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=0)
text = whole.choices[0].text
check(whole.object == "text_completion" and text, "a completion's text: %r" % whole)
check(whole.choices[0].finish_reason in ("stop", "length"), "finish_reason %r" % whole.choices[0].finish_reason)
check(whole.usage.completion_tokens >= 1 and whole.usage.total_tokens ==
      whole.usage.prompt_tokens + whole.usage.completion_tokens, "usage %r" % whole.usage)
again = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=0)
check(again.choices[0].text == text, "greedy twice: %r, %r" % (text, again.choices[0].text))

streamed, finish = "", None
for chunk in client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=0,
                                       stream=True):
    for c in chunk.choices:
        streamed += c.text or ""
        finish = c.finish_reason or finish
check(streamed == text, "a streamed completion: %r, whole %r" % (streamed, text))
check(finish == whole.choices[0].finish_reason, "a stream's finish_reason %r" % finish)

# ---- chats (the server has --chat-template chatml) ----------------------------
messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell a story."}]
chat = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0)
answer = chat.choices[0].message.content
check(chat.object == "chat.completion" and chat.choices[0].message.role == "assistant" and answer,
      "a chat's answer: %r" % chat)
deltas, usage = [], None
for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True}):
    for c in chunk.choices:
        if c.delta.content:
            deltas.append(c.delta.content)
    usage = chunk.usage or usage
check("".join(deltas) == answer, "a streamed chat: %r, whole %r" % ("".join(deltas), answer))
check(usage is not None and usage.completion_tokens == chat.usage.completion_tokens,
      "a streamed chat's usage: %r" % usage)
# fields that change nothing pass
chat2 = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0, user="u",
                                       store=False, metadata={"k": "v"})
check(chat2.choices[0].message.content == answer, "user/store/metadata changed the answer")

# ---- models --------------------------------------------------------------------
ids = [m.id for m in client.models.list()]
check(ids == [model], "models.list: %r" % ids)
check(client.models.retrieve(model).id == model, "models.retrieve")

# ---- errors --------------------------------------------------------------------
try:
    client.models.retrieve("no-such-model")
    check(False, "models.retrieve of an unknown id did not raise")
except openai.NotFoundError as e:
    check(e.code == "model_not_found", "models.retrieve's error code %r" % e.code)
try:
    client.completions.create(model="no-such-model", prompt="Once", max_tokens=2)
    check(False, "an unknown model did not raise")
except openai.NotFoundError as e:
    check(e.code == "model_not_found", "an unknown model's code %r" % e.code)
for field, value in (("mirostat", 2), ("grammar", "root ::= \"a\""), ("typical_p", 0.5)):
    try:
        client.completions.create(model=model, prompt="Once", max_tokens=2, extra_body={field: value})
        check(False, "%s did not raise" % field)
    except openai.BadRequestError as e:
        check(e.param == field and field in e.message, "%s: param %r, %s" % (field, e.param, e.message))
try:
    client.chat.completions.create(model=model, messages=messages, max_tokens=2,
                                   tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    check(False, "tools did not raise")
except openai.BadRequestError as e:
    check(e.param == "tools", "tools: param %r" % e.param)
try:
    client.completions.create(model=model, prompt="Once", max_tokens=100000)
    check(False, "max_tokens past the context did not raise")
except openai.BadRequestError as e:
    check(e.code == "context_length_exceeded" and "maximum context length" in e.message,
          "context_length_exceeded: %r %s" % (e.code, e.message))

# ---- n > 1, prompt lists, logprobs --------------------------------------------
many = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=0, n=3)
check(sorted(c.index for c in many.choices) == [0, 1, 2] and all(c.text == text for c in many.choices),
      "n=3 greedy: %r" % [(c.index, c.text) for c in many.choices])
check(many.usage.prompt_tokens == whole.usage.prompt_tokens, "n=3 counts the prompt once: %r" % many.usage)
two = client.completions.create(model=model, prompt=["Once upon a time", "Lily"], max_tokens=12, temperature=0)
check([c.index for c in two.choices] == [0, 1] and two.choices[0].text == text, "a prompt list: %r" % two)
seeded = [client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=1.2, n=2,
                                         seed=11) for _ in range(2)]
got = [[c.message.content for c in sorted(r.choices, key=lambda c: c.index)] for r in seeded]
check(got[0] == got[1] and got[0][0] != got[0][1], "n=2 with a seed: %r" % got)
lp = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=0, logprobs=2)
lps = lp.choices[0].logprobs
check(lps is not None and "".join(lps.tokens) == lp.choices[0].text and len(lps.token_logprobs) == len(lps.tokens)
      and all(v <= 0 for v in lps.token_logprobs) and all(len(t) <= 2 for t in lps.top_logprobs),
      "completions' logprobs: %r" % lps)
clp = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0, logprobs=True,
                                     top_logprobs=3)
content = clp.choices[0].logprobs.content
check(content and "".join(e.token for e in content) == clp.choices[0].message.content and
      all(len(e.top_logprobs) == 3 and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-5 for e in content),
      "chat logprobs (greedy: the chosen is the likeliest): %r" % content[:2])
streamed_lp, pieces = [], {}
for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0, n=2,
                                            logprobs=True, stream=True):
    for c in chunk.choices:
        pieces[c.index] = pieces.get(c.index, "") + (c.delta.content or "")
        if c.logprobs and c.logprobs.content and c.index == 0:
            streamed_lp += [e.logprob for e in c.logprobs.content]
check(pieces == {0: answer, 1: answer}, "a streamed chat of n=2: %r" % pieces)
check(len(streamed_lp) == len(content) and all(abs(a - b.logprob) < 1e-5 for a, b in zip(streamed_lp, content)),
      "a stream's logprobs %r, whole %r" % (streamed_lp[:3], [e.logprob for e in content][:3]))

if failures:
    print("test_openai: %d check(s) failed" % len(failures))
    sys.exit(1)
print("test_openai: all checks passed")
