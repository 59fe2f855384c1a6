#!/usr/bin/env bash
# glint bench against llama.cpp's llama-bench on this machine, side by side:
# pp512 and tg128, 2 threads, 3 repeats, cpu backend, the three real test models.
# The two run alternately (glint, llama.cpp, next model …) so load from other
# processes hits both alike; the table gives medians and glint / llama.cpp.
#
#   scripts/bench-vs-llama.sh [MODEL.gguf ...]
#   env: LLAMA_BENCH (default /tmp/oracle/llama.cpp/build/bin/llama-bench),
#        GLINT (default: target/release/glint under $CARGO_TARGET_DIR or ./target),
#        THREADS (2), REPS (3), OUT (bench_out),
#        LLAMA_ARGS (extra llama-bench flags, e.g. "--repack 0": on CPUs that
#        advertise AMX inside a VM, llama.cpp's AMX buffer type can segfault;
#        --repack 0 turns extra buffer types, AMX and CPU repacking, off)
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
LLAMA_BENCH="${LLAMA_BENCH:-/tmp/oracle/llama.cpp/build/bin/llama-bench}"
GLINT="${GLINT:-${CARGO_TARGET_DIR:-$here/target}/release/glint}"
THREADS="${THREADS:-2}"
REPS="${REPS:-3}"
OUT="${OUT:-bench_out}"

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
    set -- "$models_dir/SmolLM2-135M-Instruct.Q4_1.gguf" "$models_dir/gemma-3-270m-q4_k_m.gguf" \
        "$models_dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
fi

mkdir -p "$OUT"
for m in "$@"; do
    stem="$(basename "$m" .gguf)"
    echo "bench-vs-llama: glint bench $stem" >&2
    "$GLINT" bench -m "$m" -p 512 -n 128 -t "$THREADS" -r "$REPS" --backend cpu -o json \
        > "$OUT/$stem.glint.json"
    echo "bench-vs-llama: llama-bench $stem" >&2
    "$LLAMA_BENCH" -m "$m" -p 512 -n 128 -t "$THREADS" -r "$REPS" -fa 0 ${LLAMA_ARGS:-} -o json \
        > "$OUT/$stem.llama.json" 2> "$OUT/$stem.llama.log"
done

python3 - "$OUT" "$@" <<'PY'
import json, os, statistics, sys
out, models = sys.argv[1], sys.argv[2:]
print("| model | test | glint t/s | llama.cpp t/s | glint / llama.cpp |")
print("| --- | --- | ---: | ---: | ---: |")
for m in models:
    stem = os.path.basename(m)[: -len(".gguf")] if m.endswith(".gguf") else os.path.basename(m)
    g = json.load(open(os.path.join(out, stem + ".glint.json")))
    l = json.load(open(os.path.join(out, stem + ".llama.json")))
    for test, (np, ng) in (("pp512", (512, 0)), ("tg128", (0, 128))):
        gr = [r for r in g if r["n_prompt"] == np and r["n_gen"] == ng and r["n_depth"] == 0]
        lr = [r for r in l if r["n_prompt"] == np and r["n_gen"] == ng]
        if not gr or not lr:
            print(f"| {stem} | {test} | missing | missing | - |")
            continue
        gt = gr[0]["tokens_per_second"]["median"]
        lt = statistics.median(lr[0].get("samples_ts") or [lr[0]["avg_ts"]])
        print(f"| {stem} | {test} | {gt:.2f} | {lt:.2f} | {gt / lt:.2f} |")
print(f"\nmedians over the repeats; {os.environ.get('THREADS', '2')} threads; "
      "shared machine: other processes' load affects both sides.")
PY
