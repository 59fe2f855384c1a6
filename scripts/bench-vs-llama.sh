#!/usr/bin/env bash
# glint bench against llama.cpp's llama-bench on this machine, side by side,
# the one way this project measures itself against llama.cpp on the cpu:
#
#   - pp512 and tg128 at depth 0 for every model;
#   - pp512 and tg32 at the depths in DEPTHS for the first model (prefill and
#     decode as the context fills: attention's share grows with depth);
#   - ROUNDS rounds, each running glint then llama.cpp on every model and
#     test, REPS repetitions a run (DEPTH_REPS for the depth rows, whose
#     every repetition fills the context again), so load from other
#     processes hits both alike; each run gives the median of its
#     repetitions, the table the median over the rounds and glint / llama.cpp;
#   - peak RSS of each engine (the largest of its runs, from wait4) and the
#     machine's CPU model and SIMD flags.
#
#   scripts/bench-vs-llama.sh [MODEL.gguf ...]
#   env: LLAMA_BENCH (default /tmp/oracle/llama.cpp/build/bin/llama-bench),
#        GLINT (default: target/release/glint under $CARGO_TARGET_DIR or ./target),
#        THREADS (2), ROUNDS (3), REPS (3), DEPTH_REPS (2),
#        DEPTHS ("4096,8192"; "" for none), OUT (bench_out),
#        LLAMA_ARGS (extra llama-bench flags, e.g. "--repack 0": on CPUs that
#        advertise AMX inside a VM, llama.cpp's AMX buffer type can segfault;
#        --repack 0 turns extra buffer types, AMX and CPU repacking, off).
# llama-bench runs with its own defaults otherwise (flash attention "auto").
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
export LLAMA_BENCH="${LLAMA_BENCH:-/tmp/oracle/llama.cpp/build/bin/llama-bench}"
export GLINT="${GLINT:-${CARGO_TARGET_DIR:-$here/target}/release/glint}"
export THREADS="${THREADS:-2}" ROUNDS="${ROUNDS:-3}" OUT="${OUT:-bench_out}"
export REPS="${REPS:-3}" DEPTH_REPS="${DEPTH_REPS:-2}"
export DEPTHS="${DEPTHS-4096,8192}" LLAMA_ARGS="${LLAMA_ARGS:-}"

if [[ ! -x "$LLAMA_BENCH" ]]; then
    echo "bench-vs-llama: llama-bench not found at $LLAMA_BENCH" >&2
    echo "  build it with: bash ../shared/oracle/build_oracle.sh /tmp/oracle" >&2
    echo "  (or set LLAMA_BENCH to an llama-bench binary)" >&2
    exit 1
fi
if [[ ! -x "$GLINT" ]]; then
    echo "bench-vs-llama: glint not found at $GLINT (cargo build --release, or set GLINT)" >&2
    exit 1
fi

if [[ $# -eq 0 ]]; then
    models_dir="${GLINT_MODELS:-$HOME/.cache/glint/models}"
    set -- "$models_dir/SmolLM2-135M-Instruct.Q4_1.gguf" "$models_dir/gemma-3-270m-q4_k_m.gguf"
fi
mkdir -p "$OUT"

exec python3 - "$@" <<'PY'
import json, os, shlex, statistics, subprocess, sys

env = os.environ
models = sys.argv[1:]
threads, rounds, out = env["THREADS"], int(env["ROUNDS"]), env["OUT"]
depths = [d for d in env["DEPTHS"].split(",") if d.strip()]

# (label, -p, -n, -d) per model: depth 0 for all, the depth rows for the first.
def tests(i):
    t = [("pp512", 512, 0, 0), ("tg128", 0, 128, 0)]
    if i == 0:
        for d in depths:
            t += [(f"pp512 @ d{d}", 512, 0, int(d)), (f"tg32 @ d{d}", 0, 32, int(d))]
    return t

def run(cmd, log):
    """Run cmd, its stdout (JSON) parsed; returns (rows, peak RSS in MiB)."""
    with open(log, "a") as err:
        err.write("$ " + shlex.join(cmd) + "\n")
        err.flush()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        data = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"bench-vs-llama: {cmd[0]} failed ({status}); see {log}")
    return json.loads(data), ru.ru_maxrss / 1024.0

def glint_ts(rows, p, n, d):
    for r in rows:
        if r["n_prompt"] == p and r["n_gen"] == n and r["n_depth"] == d:
            return r["tokens_per_second"]["median"]
    return None

def llama_ts(rows, p, n, d):
    for r in rows:
        if r["n_prompt"] == p and r["n_gen"] == n and r.get("n_depth", 0) == d:
            return statistics.median(r.get("samples_ts") or [r["avg_ts"]])
    return None

ts = {}   # (model, label, engine) -> [t/s per round]
rss = {"glint": 0.0, "llama.cpp": 0.0}
for rnd in range(rounds):
    for i, m in enumerate(models):
        stem = os.path.basename(m).removesuffix(".gguf")
        for label, p, n, d in tests(i):
            reps = env["DEPTH_REPS"] if d else env["REPS"]
            common = ["-m", m, "-p", str(p), "-n", str(n), "-d", str(d), "-t", threads, "-r", reps]
            g = [env["GLINT"], "bench", *common, "--backend", "cpu", "-o", "json"]
            l = [env["LLAMA_BENCH"], *common, *shlex.split(env["LLAMA_ARGS"]), "-o", "json"]
            for eng, cmd, pick in (("glint", g, glint_ts), ("llama.cpp", l, llama_ts)):
                print(f"bench-vs-llama: round {rnd + 1}/{rounds} {eng} {stem} {label}",
                      file=sys.stderr)
                rows, peak = run(cmd, os.path.join(out, f"{stem}.{eng}.log"))
                rss[eng] = max(rss[eng], peak)
                v = pick(rows, p, n, d)
                if v is None:
                    sys.exit(f"bench-vs-llama: no {label} row from {eng}")
                ts.setdefault((stem, label, eng), []).append(v)

flags = set()
cpu = "unknown cpu"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and cpu == "unknown cpu":
            cpu = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags |= set(line.split(":", 1)[1].split())
except OSError:
    pass
simd = [f for f in ("sse4_2", "avx", "f16c", "fma", "avx2", "avx_vnni", "avx512f", "avx512bw",
                    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8")
        if f in flags]

print("| model | test | glint t/s | llama.cpp t/s | glint / llama.cpp |")
print("| --- | --- | ---: | ---: | ---: |")
for i, m in enumerate(models):
    stem = os.path.basename(m).removesuffix(".gguf")
    for label, *_ in tests(i):
        g = statistics.median(ts[(stem, label, "glint")])
        l = statistics.median(ts[(stem, label, "llama.cpp")])
        print(f"| {stem} | {label} | {g:.2f} | {l:.2f} | {g / l:.2f} |")
print()
print(f"medians of {rounds} alternating rounds of {env['REPS']} repetitions "
      f"({env['DEPTH_REPS']} at depth), {threads} threads, glint --backend cpu; "
      f"llama-bench {env['LLAMA_ARGS'] or '(defaults)'}")
print(f"peak RSS: glint {rss['glint']:.0f} MiB, llama.cpp {rss['llama.cpp']:.0f} MiB")
print(f"cpu: {cpu}; {os.cpu_count()} logical cpus; flags: {' '.join(simd) or 'none of note'}")
PY
