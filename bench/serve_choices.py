"""n > 1 against a running `cleave serve`: for prompts of 512, 2048 and 8000
token ids, one choice, then four choices of a prompt no slot holds (16
tokens each, greedy, ignore_eos), and the same prompt alone again. Prints a
JSON line per length: the seconds of the one-choice and four-choice
requests, the four's timings (prompt_n: tokens every choice processed;
prompt_copied_n: cells the later choices copied), and whether the four
greedy texts equal the one's.

usage: serve_choices.py PORT   (bench/RESULTS.md: the server's command lines)
"""
import json
import sys
import time
import urllib.request

port = int(sys.argv[1])


def post(body):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read().decode())
    return out, time.time() - t


for P in (512, 2048, 8000):
    ids = [(i * 7919) % 30000 + 100 for i in range(P)]
    _, t1 = post({"prompt": ids, "max_tokens": 16, "temperature": 0, "ignore_eos": True})
    fresh = [x + 1 for x in ids]  # a prompt no slot holds: the first choice processes it all
    four, t4 = post({"prompt": fresh, "n": 4, "max_tokens": 16, "temperature": 0, "ignore_eos": True})
    one, _ = post({"prompt": fresh, "max_tokens": 16, "temperature": 0, "ignore_eos": True})
    same = all(c["text"] == one["choices"][0]["text"] for c in four["choices"])
    print(json.dumps({"prompt": P, "n1_s": round(t1, 3), "n4_s": round(t4, 3), "n4_timings": four["timings"],
                      "n4_equal_n1": same}))
