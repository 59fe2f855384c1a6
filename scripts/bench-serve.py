#!/usr/bin/env python3
"""Throughput of an OpenAI-compatible server under concurrent streaming clients.

    scripts/bench-serve.py URL [--clients 1,2,4,8] [--requests 3] [--max-tokens 64] [--json]
    scripts/bench-serve.py URL --fairness RUNS [--long-words 1800]

The Engine-and-serve issue's reference workload: each of N clients sends
`--requests` chat requests in turn (streamed, temperature 0, ignore_eos,
max_tokens tokens); aggregate = completion tokens / wall time, prefill
included. Also time to first token (p50, p99) and the worst gap between two
tokens of one stream, as a markdown table (or JSON lines with --json). Run
it against `glint serve` and `llama-server` started with the same model and
flags (see scripts/bench-serve.sh), one at a time.

--fairness: 3 clients stream 200-token completions (ignore_eos); once each
has 8 tokens, a 4th request brings a ~2,000-token prompt. Reported: its
prompt size and time to first token, the decoding clients' median gap
between tokens before it came, and their worst gap while it prefilled
(chunked prefill keeps that near one step; one unchunked step holds every
stream for the whole prompt).

Needs `httpx` (the CI venv has it).
"""
import argparse
import json
import statistics
import threading
import time

import httpx

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a refrigerator works.",
    "List some facts about the planet Mars.",
    "Describe a walk through a busy market.",
]


def one_request(client, url, prompt, max_tokens):
    """Stream one chat request: (completion tokens, ttft, worst gap, seconds)."""
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.monotonic()
    last = None
    ttft = None
    worst = 0.0
    n_tokens = 0
    with client.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                n_tokens = chunk["usage"].get("completion_tokens", n_tokens)
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                now = time.monotonic()
                if ttft is None:
                    ttft = now - t0
                elif last is not None:
                    worst = max(worst, now - last)
                last = now
    return n_tokens, ttft or 0.0, worst, time.monotonic() - t0


def run(url, n_clients, n_requests, max_tokens):
    results = []
    lock = threading.Lock()

    failures = []

    def client_loop(c):
        for k in range(n_requests):
            prompt = PROMPTS[(c + k) % len(PROMPTS)] + f" (client {c}, request {k})"
            # A connection per request: a server that closes idle keep-alive
            # connections must not turn into failed requests.
            try:
                with httpx.Client(headers={"Connection": "close"}) as client:
                    r = one_request(client, url, prompt, max_tokens)
            except httpx.HTTPError as e:
                with lock:
                    failures.append(str(e))
                continue
            with lock:
                results.append(r)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(c,)) for c in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    tokens = sum(r[0] for r in results)
    ttfts = sorted(r[1] for r in results)
    p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]
    return {
        "clients": n_clients,
        "requests": len(results),
        "failed": len(failures),
        "tokens": tokens,
        "wall_s": wall,
        "tok_per_s": tokens / wall,
        "ttft_p50_s": statistics.median(ttfts),
        "ttft_p99_s": p99,
        "worst_gap_s": max(r[2] for r in results),
    }


TABLE = [
    # (column, key, format)
    ("server", "server", "{}"),
    ("clients", "clients", "{}"),
    ("requests", "requests", "{}"),
    ("failed", "failed", "{}"),
    ("tok/s", "tok_per_s", "{:.1f}"),
    ("TTFT p50 ms", "ttft_p50_s", "ms"),
    ("TTFT p99 ms", "ttft_p99_s", "ms"),
    ("worst gap ms", "worst_gap_s", "ms"),
]


def table_row(cells):
    return "| " + " | ".join(cells) + " |"


def fmt(f, v):
    return f"{v * 1000:.0f}" if f == "ms" else f.format(v)


def stream_tokens(url, body, times, started=None):
    """Stream a completion, appending each text chunk's arrival time to
    `times`; `started` (an Event) is set after the first chunk. Returns the
    final usage (stream_options.include_usage)."""
    usage = None
    with httpx.Client() as client:
        with client.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    times.append(time.monotonic())
                    if started is not None:
                        started.set()
    return usage


def fairness(url, n_decoding, max_tokens, long_words, warm_tokens):
    """`n_decoding` clients stream long generations; once each has
    `warm_tokens` tokens, one more request brings a long prompt. What the
    decoding clients see meanwhile: their worst gap between two tokens,
    against their median gap before the long prompt came."""
    decoding = [[] for _ in range(n_decoding)]
    threads = []
    for i, times in enumerate(decoding):
        body = {
            "prompt": f"Story {i}: once upon a time, in a town by the sea,",
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        t = threading.Thread(target=stream_tokens, args=(url, body, times))
        t.start()
        threads.append(t)
    while min(len(t) for t in decoding) < warm_tokens:
        if not all(t.is_alive() for t in threads):
            raise SystemExit("a decoding client ended before its first tokens")
        time.sleep(0.005)
    # A fresh prefix each time, so no cache from an earlier run helps.
    nonce = f"{time.time_ns()} "
    words = ("the quick brown fox jumps over the lazy dog " * (long_words // 9 + 1)).split()
    long_body = {
        "prompt": nonce + " ".join(words[:long_words]),
        "max_tokens": 1,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    long_times = []
    t_send = time.monotonic()
    usage = stream_tokens(url, long_body, long_times)
    t_first = long_times[0] if long_times else time.monotonic()
    for t in threads:
        t.join()
    before, during, worst = [], 0.0, 0.0
    for times in decoding:
        for a, b in zip(times, times[1:]):
            gap = b - a
            worst = max(worst, gap)
            if b <= t_send:
                before.append(gap)
            # A gap that overlaps the long prompt's prefill.
            if b > t_send and a < t_first:
                during = max(during, gap)
    return {
        "long_prompt_tokens": (usage or {}).get("prompt_tokens"),
        "long_ttft_s": t_first - t_send,
        "median_gap_before_s": statistics.median(before) if before else 0.0,
        "worst_gap_during_s": during,
        "worst_gap_s": worst,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    ap.add_argument(
        "--fairness",
        type=int,
        default=0,
        metavar="RUNS",
        help="instead: RUNS of 3 clients decoding 200 tokens while a ~2,000-token prompt arrives",
    )
    ap.add_argument("--long-words", type=int, default=1800, help="fairness: words in the long prompt")
    a = ap.parse_args()
    # one untimed request: pipelines, caches, page faults
    with httpx.Client() as c:
        one_request(c, a.url, "Hello.", 4)
    if a.fairness:
        runs = []
        for _ in range(a.fairness):
            r = fairness(a.url, 3, 200, a.long_words, 8)
            r["server"] = a.label
            runs.append(r)
            if a.json:
                print(json.dumps(r), flush=True)
        if not a.json:
            cols = ["server", "long prompt tokens", "its TTFT ms", "median gap before ms",
                    "worst gap during its prefill ms", "worst gap ms"]
            keys = ["long_ttft_s", "median_gap_before_s", "worst_gap_during_s", "worst_gap_s"]
            print(table_row(cols))
            print(table_row(["---"] * len(cols)))
            for r in runs:
                print(table_row([r["server"], str(r["long_prompt_tokens"])]
                                + [fmt("ms", r[k]) for k in keys]))
            med = [statistics.median(r[k] for r in runs) for k in keys]
            print(table_row([f"{a.label} median of {len(runs)}", ""] + [fmt("ms", m) for m in med]),
                  flush=True)
        return
    if not a.json:
        print(table_row([c for c, _, _ in TABLE]))
        print(table_row(["---"] * len(TABLE)), flush=True)
    for n in [int(x) for x in a.clients.split(",")]:
        r = run(a.url, n, a.requests, a.max_tokens)
        r["server"] = a.label
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            print(table_row([fmt(f, r[k]) for _, k, f in TABLE]), flush=True)


if __name__ == "__main__":
    main()
