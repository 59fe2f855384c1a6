#!/usr/bin/env bash
# The GPU issue's device checks as one short script: the command,
# then each wgpu switch against the default on the same binary, so one run
# on a lent GPU answers what lavapipe cannot (its milliseconds say nothing
# about a GPU). Meant for a 10-minute command: each bench is short, and
# a failing one is reported and skipped, not fatal.
#
#   scripts/gpu-ab.sh [GLINT] [KERNELS]
#
# GLINT: the glint binary (default target/release/glint); KERNELS: the
# `kernels` bench binary (`cargo bench --bench kernels --no-run` prints its
# path; skipped if absent). Output: markdown tables on stdout, one section
# a comparison, each led by the command that made it.
#
# The switches compared (each the default's opposite; README, "Speed"):
#   GLINT_ATTN_TILE=0         prefill attention a workgroup a token, not tiles
#   GLINT_ATTN_TILE=all       decode attention by tiles of one token too
#   GLINT_WGPU_NO_IMMEDIATES  params from the uniform arena, not immediates
#   GLINT_MATVEC_WG_ROWS=1    a matvec row a workgroup, not a subgroup
#   GLINT_MATVEC_ROWS=1|4     a subgroup's matvec rows at once, not 2
#   GLINT_MATMUL_TILE=64|128  the prefill matmul's tiles always 64 (4 x 4
#                             a thread) or 128 (8 x 8), not by the shape
#   GLINT_HOST_MASKS=1        masks built on the host and uploaded, not
#                             built on the device from its copy of the cells
#   GLINT_CHAIN=0             each greedy token read back before the next
#                             step is recorded, not chained on the device
#   GLINT_INT8=1              integer dots in the matvecs (dot4I8Packed on
#                             x quantized as ggml's cpu does), not f32
#   GLINT_MATVEC_SCALED=0     the float matvec multiplies every Q4_0, Q5_0,
#                             Q8_0, Q3_K and Q6_K weight by its scale, not each
#                             group of 4's dot once
# and the load-time tune (GLINT_TUNE=1, on by default on a GPU), which
# picks GLINT_MATVEC_ROWS by timing 1, 2 and 4: off everywhere else here,
# so each switch is held against the fixed defaults.
set -u -o pipefail
GLINT=${1:-target/release/glint}
KERNELS=${2:-}
export WGPU_BACKEND=${WGPU_BACKEND:-vulkan}
export GLINT_TUNE=0

run() {
    echo
    echo "### $*"
    echo
    env "$@" 2>&1 | grep -v '^glint bench: \[' || echo "(failed: $*)"
}

B="$GLINT bench --backend wgpu -o md"
run "$GLINT" devices
# The command, with the step's work counted, as a user gets it
# (tuned at load: the tune's table comes first).
run GLINT_TUNE=1 $B --synthetic llama2-7b:q4_0 -p 512 -n 128 -r 2 --counters
# The tune on the K-quants, and at four sequences: what it keeps, and tg
# with it (against the defaults' below).
run GLINT_TUNE=1 $B --synthetic llama3-8b:q4_k -p 0 -n 128 -r 2 -npl 1,4
# The host's time per step (the "host time per decode step" line) of a
# 7B's structure, its ~200 dispatches with a 50th of its weights: with
# steps chained, a 7B's tg is bound by the longer of this and the
# device's time, so this says whether the host or the GPU sets the pace.
run $B --synthetic llama2-7b-narrow:q4_0 -p 0 -n 128 -r 3 -npl 1,4
# Prefill at depth: tiles against a workgroup a token (SmolLM2's heads
# take tiles of 10 tokens, a 7B's 16; Gemma 3's keep `main`).
for m in smollm2-135m:q4_1 llama2-7b:q4_0; do
    run $B --synthetic $m -p 512 -n 0 -d 4096 -r 1
    run GLINT_ATTN_TILE=0 $B --synthetic $m -p 512 -n 0 -d 4096 -r 1
done
# The prefill matmul's tiles: 64 (the old kernel) against the default
# (128 where both sides pass 64) and 128 everywhere; a 7B and a small
# model (SmolLM2's 576 rows take 5 tiles of 128).
for m in llama2-7b:q4_0 smollm2-135m:q4_1; do
    run GLINT_MATMUL_TILE=64 $B --synthetic $m -p 512 -n 0 -r 2
    run $B --synthetic $m -p 512 -n 0 -r 2
    run GLINT_MATMUL_TILE=128 $B --synthetic $m -p 128,512 -n 0 -r 2
done
# Masks uploaded (9.4 MB for a 512-token batch at depth 4096) against
# built from the cells on the device.
run GLINT_HOST_MASKS=1 $B --synthetic smollm2-135m:q4_1 -p 512 -n 32 -d 4096 -r 1
run $B --synthetic smollm2-135m:q4_1 -p 512 -n 32 -d 4096 -r 1
# Decode attention (a quarter to a third of a small model's step on an
# H200): tiles of one token against `main`, with the per-kernel profile.
for m in smollm2-135m:q4_1 gemma3-270m:q4_k; do
    run $B --synthetic $m -p 0 -n 128 -r 2 -d 0,4096
    run GLINT_ATTN_TILE=all $B --synthetic $m -p 0 -n 128 -r 2 -d 0,4096
    run $B --synthetic $m -p 0 -n 32 -r 1 --profile
    run GLINT_ATTN_TILE=all $B --synthetic $m -p 0 -n 32 -r 1 --profile
done
# Params as immediates against the uniform arena, and subgroup rows
# against workgroup rows, on the 7B's decode.
run GLINT_WGPU_NO_IMMEDIATES=1 $B --synthetic llama2-7b:q4_0 -p 0 -n 128 -r 2
run GLINT_MATVEC_WG_ROWS=1 $B --synthetic llama2-7b:q4_0 -p 0 -n 128 -r 2
# Rows a subgroup takes at once (x read once for them): 1 and 4 against
# the default 2, at one sequence and four.
run GLINT_MATVEC_ROWS=1 $B --synthetic llama2-7b:q4_0 -p 0 -n 128 -r 2 -npl 1,4
run $B --synthetic llama2-7b:q4_0 -p 0 -n 128 -r 2 -npl 1,4
run GLINT_MATVEC_ROWS=4 $B --synthetic llama2-7b:q4_0 -p 0 -n 128 -r 2 -npl 1,4
# Every weight scaled against each group of 4's dot scaled once (Q4_0:
# one multiply a weight fewer); the default's run is the rows' default
# above (no GLINT_MATVEC_ROWS).
run GLINT_MATVEC_SCALED=0 $B --synthetic llama2-7b:q4_0 -p 0 -n 128 -r 2 -npl 1,4
# Greedy steps chained on the device against each token read first: the
# small models, where the host's time a step is most of it; one sequence
# and four (a server's greedy slots chain together).
for m in smollm2-135m:q4_1 gemma3-270m:q4_k llama2-7b:q4_0; do
    run $B --synthetic $m -p 0 -n 128 -r 2 -npl 1,4
    run GLINT_CHAIN=0 $B --synthetic $m -p 0 -n 128 -r 2 -npl 1,4
done
# Integer dots against f32 in the matvecs: the 32-element formats and
# the K-quants, one sequence and four (the goal is tg at >= 85%
# of the copy bandwidth: the int8 path is the one most likely to get
# there where the float dots are bound by the instructions, not the bytes).
for m in llama2-7b:q4_0 llama3-8b:q4_k gemma3-270m:q4_k; do
    run $B --synthetic $m -p 0 -n 128 -r 2 -npl 1,4 --counters
    run GLINT_INT8=1 $B --synthetic $m -p 0 -n 128 -r 2 -npl 1,4 --counters
done
if [ -n "$KERNELS" ] && [ -x "$KERNELS" ]; then
    run "$KERNELS" --bench --quick --backend wgpu --types Q4_0,Q4_1,Q5_0,Q8_0,Q4_K,Q6_K --matvec 4096x28672
    run GLINT_MATVEC_ROWS=1 "$KERNELS" --bench --quick --backend wgpu --types Q4_0,Q4_K --matvec 4096x28672
    run GLINT_MATVEC_SCALED=0 "$KERNELS" --bench --quick --backend wgpu --types Q4_0,Q8_0,Q6_K --matvec 4096x28672
fi
