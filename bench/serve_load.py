#!/usr/bin/env python3
"""Load test of `cleave serve`: C clients at once, each sending requests one
after another (a prompt of P token ids, G tokens generated greedily or at --temp,
streamed), for a
fixed number of requests per client. Prints one Markdown row per
concurrency: requests, generated tokens per second over the wall clock,
time to first token and time per output token (mean and p90), the prompt
tokens the server found in its cache.

Standard library only.

  python3 bench/serve_load.py --url http://127.0.0.1:8080 -c 1,4,8,16 -p 512 -g 128 -r 4
"""
import argparse
import json
import random
import statistics
import threading
import time
import urllib.request


def one_request(url, prompt_ids, gen, temp):
    body = json.dumps({"prompt": prompt_ids, "max_tokens": gen, "temperature": temp, "stream": True, "ignore_eos": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    usage = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(ev["error"]["message"])
            if ev.get("usage"):
                usage = ev["usage"]
            elif first is None and ev["choices"] and ev["choices"][0].get("text"):
                first = time.perf_counter()
    t1 = time.perf_counter()
    n = usage["completion_tokens"]
    ttft = (first or t1) - t0
    tpot = (t1 - (first or t1)) / (n - 1) if n > 1 else 0.0
    return ttft, tpot, n, usage["prompt_tokens_details"]["cached_tokens"]


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.9 * len(xs)))]


def run(url, conc, prompt_len, gen, reps, vocab, seed, temp):
    rng = random.Random(seed)
    # every request its own prompt, so nothing comes from a cache
    prompts = [[rng.randrange(3, vocab) for _ in range(prompt_len)] for _ in range(conc * reps)]
    results, errors = [], []
    lock = threading.Lock()

    def client(c):
        for k in range(reps):
            try:
                res = one_request(url, prompts[c * reps + k], gen, temp)
                with lock:
                    results.append(res)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(conc)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        print(f"| {conc} | errors: {len(errors)}: {errors[0]} |")
        return
    gen_tokens = sum(r[2] for r in results)
    ttft = [r[0] * 1e3 for r in results]
    tpot = [r[1] * 1e3 for r in results]
    print(f"| {conc} | {len(results)} | {gen_tokens / wall:.1f} | {(gen_tokens + prompt_len * len(results)) / wall:.0f} | "
          f"{statistics.mean(ttft):.1f} / {p90(ttft):.1f} | {statistics.mean(tpot):.2f} / {p90(tpot):.2f} | "
          f"{sum(r[3] for r in results)} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("-c", default="1,4,8", help="concurrencies, comma-separated")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens")
    ap.add_argument("-g", type=int, default=128, help="generated tokens")
    ap.add_argument("-r", type=int, default=4, help="requests per client")
    ap.add_argument("--vocab", type=int, default=0, help="token ids below this (default: from /v1/models)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--temp", type=float, default=0.0, help="temperature (0: greedy)")
    a = ap.parse_args()
    vocab = a.vocab
    if not vocab:
        with urllib.request.urlopen(a.url + "/v1/models") as r:
            vocab = json.load(r)["data"][0]["meta"]["n_vocab"]
    how = "greedy" if a.temp <= 0 else f"temperature {a.temp}"
    print(f"prompt {a.p} tokens, {a.g} generated ({how}, streamed), {a.r} requests per client\n")
    print("| clients | requests | generated tok/s | all tok/s | TTFT ms mean / p90 | TPOT ms mean / p90 | cached |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in [int(x) for x in a.c.split(",")]:
        run(a.url, c, a.p, a.g, a.r, vocab, a.seed + c, a.temp)


if __name__ == "__main__":
    main()
