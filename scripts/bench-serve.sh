#!/usr/bin/env bash
# glint serve and llama-server, same model, threads and flags, taken in turn,
# under scripts/bench-serve.py's workload (the Engine-and-serve issue's:
# --parallel 4 --ctx-size 4096 --threads 2; N clients x 3 streamed chat
# requests of 64 tokens, temperature 0, ignore_eos).
#
#   scripts/bench-serve.sh [MODEL] [LLAMA_SERVER]
#
# Then the fairness runs (scripts/bench-serve.py --fairness): 3 streams
# decoding while a ~2,000-token prompt arrives, against glint serve with the
# default chunked prefill (--prefill-per-step 512) and with none
# (--prefill-per-step 2048 -b 2048: the whole prompt in one step); each
# slot gets 2048 cells (-np 4 -c 8192) so the prompt fits; llama-server
# (-b 2048) for reference. MODE=throughput or
# MODE=fairness runs one half only; RUNS (3) fairness runs per server.
#
# MODEL defaults to SmolLM2 in the model cache; LLAMA_SERVER to the oracle
# build's (../shared/oracle/build_oracle.sh puts it in /tmp/oracle). glint is
# the test-profile build (`cargo build --profile test --bin glint`), or $GLINT.
# Needs python3 with httpx (the CI venv, ~/.cache/glint/venv, has it).
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-${GLINT_MODELS:-$HOME/.cache/glint/models}/SmolLM2-135M-Instruct.Q4_1.gguf}"
llama="${2:-/tmp/oracle/llama.cpp/build/bin/llama-server}"
glint="${GLINT:-${CARGO_TARGET_DIR:-target}/debug/glint}"
py="${PYTHON:-$HOME/.cache/glint/venv/bin/python}"
flags=(--parallel 4 --ctx-size 4096 --threads 2)

wait_up() {
    for _ in $(seq 600); do
        "$py" -c "import httpx,sys; sys.exit(httpx.get('$1/health').status_code != 200)" 2>/dev/null && return 0
        sleep 0.2
    done
    echo "server at $1 did not come up" >&2
    return 1
}

mode="${MODE:-all}"
runs="${RUNS:-3}"

bench() { # LABEL PORT BENCH-ARGS -- CMD...
    local label=$1 port=$2
    shift 2
    local args=()
    while [ "$1" != "--" ]; do args+=("$1"); shift; done
    shift
    "$@" >"/tmp/bench-serve-$label.log" 2>&1 &
    local pid=$!
    wait_up "http://127.0.0.1:$port" || { kill $pid; return 1; }
    "$py" scripts/bench-serve.py "http://127.0.0.1:$port" --label "$label" "${args[@]}" || true
    kill $pid; wait $pid 2>/dev/null || true
}

if [ "$mode" != fairness ]; then
    bench glint 8181 -- "$glint" serve -m "$model" --port 8181 --backend cpu "${flags[@]}"
    bench llama-server 8182 -- "$llama" -m "$model" --port 8182 --no-repack -fa off "${flags[@]}"
fi
if [ "$mode" != throughput ]; then
    fair=(--parallel 4 --ctx-size 8192 --threads 2)
    bench glint-chunk512 8183 --fairness "$runs" -- \
        "$glint" serve -m "$model" --port 8183 --backend cpu "${fair[@]}" --prefill-per-step 512
    bench glint-unchunked 8184 --fairness "$runs" -- \
        "$glint" serve -m "$model" --port 8184 --backend cpu "${fair[@]}" --prefill-per-step 2048 -b 2048
    # For reference: llama-server puts up to -b prompt tokens in a step.
    bench llama-server-b2048 8185 --fairness "$runs" -- \
        "$llama" -m "$model" --port 8185 --no-repack -fa off "${fair[@]}" -b 2048
fi
