#!/usr/bin/env python3
"""Throughput of an OpenAI-compatible server under concurrent streaming clients.

    scripts/bench-serve.py URL [--clients 1,2,4,8] [--requests 3] [--max-tokens 64]

The Engine-and-serve issue's reference workload: each of N clients sends
`--requests` chat requests in turn (streamed, temperature 0, ignore_eos,
max_tokens tokens); aggregate = completion tokens / wall time, prefill
included. Also time to first token (p50, p99) and the worst gap between two
tokens of one stream. Run it against `glint serve` and `llama-server` started
with the same model and flags (see scripts/bench-serve.sh), one at a time.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    # one untimed request: pipelines, caches, page faults
    with httpx.Client() as c:
        one_request(c, a.url, "Hello.", 4)
    for n in [int(x) for x in a.clients.split(",")]:
        r = run(a.url, n, a.requests, a.max_tokens)
        r["server"] = a.label
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
