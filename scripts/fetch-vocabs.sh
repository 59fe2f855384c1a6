#!/usr/bin/env bash
# Fetch llama.cpp's vocab-only test GGUFs and their reference tokenizations
# (`ggml-vocab-*.gguf` with `.inp`/`.out`, the files llama.cpp's
# test-tokenizer-0 reads) into the model cache, for
# crates/glint-tokenizer/tests/llama_vocabs.rs.
#
#   scripts/fetch-vocabs.sh [DIR]
#
# DIR defaults to $GLINT_MODELS/llama-vocab, else ~/.cache/glint/models/llama-vocab.
# They come from the llama-cpp-python 0.3.36 source archive on PyPI (it vendors
# llama.cpp 0c1e57098 under vendor/llama.cpp/models/): the archive is pinned by
# its sha256, and the 49 files taken from it by scripts/llama-vocab.sha256.
# 78 MB in all, too much to commit. Does nothing when every file is already
# there with the right sum.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sums="$here/llama-vocab.sha256"
dir="${1:-${GLINT_MODELS:-$HOME/.cache/glint/models}/llama-vocab}"
sdist=llama_cpp_python-0.3.36.tar.gz
sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

mkdir -p "$dir"
if (cd "$dir" && sha256sum --quiet --check "$sums") >/dev/null 2>&1; then
    echo "fetch-vocabs: ok $dir (already there)" >&2
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-vocabs: pip download llama-cpp-python==0.3.36 (source archive, 77 MB)" >&2
# --no-binary: the source archive, which has the vendored tree (wheels do not).
python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
    -d "$tmp" "llama-cpp-python==0.3.36"
echo "$sdist_sha256  $tmp/$sdist" | sha256sum --quiet --check -
tar -xzf "$tmp/$sdist" -C "$dir" --strip-components=4 --wildcards \
    'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*'
(cd "$dir" && sha256sum --quiet --check "$sums")
echo "fetch-vocabs: ok $dir ($(wc -l < "$sums") files)" >&2
