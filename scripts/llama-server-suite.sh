#!/usr/bin/env bash
# llama.cpp's own server test suite (tools/server/tests, pytest) against
# llama-server and against `glint serve`, on the same local model.
#
#   scripts/llama-server-suite.sh [test_file.py ...]
#
# Environment:
#   LLAMA_CPP_DIR   a llama.cpp tree with tools/server/tests (default:
#                   /tmp/oracle/llama.cpp, what ../shared/oracle/build_oracle.sh makes)
#   LLAMA_SERVER    llama-server binary (default: $LLAMA_CPP_DIR/build/bin/llama-server;
#                   "none" runs glint only)
#   GLINT           glint binary (default: target/release/glint, built if absent)
#   MODEL           the GGUF both servers load (default: SmolLM2, from scripts/fetch-models.sh)
#   SUITE_VENV      python venv for the suite (default: ~/.cache/glint/suite-venv)
#   OUT             where logs and junit files go (default: target/llama-server-suite)
#   REPORT_ONLY=1   print the table of the last run in $OUT, run nothing
#   FETCH=1         no llama.cpp tree: take the suite (tools/server/tests and
#                   models/templates) from the llama-cpp-python 0.3.36 sdist on
#                   PyPI (llama.cpp 0c1e57098, the oracle's tree), unbuilt
#   REFERENCE=FILE  with LLAMA_SERVER=none: the tests llama-server passed (one
#                   `file::test` a line, e.g. fixtures/llama-server-suite/
#                   llama-server-passing.txt) stand in for its run
#   GAPS=FILE       `file::test  # why` lines: tests glint is known to fail
#                   though llama-server passes them; listed, not counted
#   ONLY_REFERENCE=1  with REFERENCE: run only the test functions that have a
#                   case in it (pytest -k), skipping files with none; the
#                   rest cannot count, and some generate thousands of tokens
#                   (test_tool_call's DeepSeek-R1 cases, n_predict 8192),
#                   which on a slow 2-core machine ran into the per-file
#                   timeout and lost the file's results
#
# The suite downloads its models from Hugging Face (--hf-repo, --hf-file,
# --model-url, -hf; --offline after the first start). A stand-in in front of
# each binary drops those flags and passes `-m $MODEL` instead: nothing else
# of the command line changes. The suite's session fixture also starts one
# server of every preset once, only to fill its download cache; a small
# pytest plugin makes that a no-op (there is nothing to download), so a
# preset for a feature a server refuses at startup (glint: --reranking) fails
# only the tests that use it. Tests that expect the suite's own tiny models'
# words fail on both servers; what counts is that every test that passes on
# llama-server passes on glint.
#
# Prints, per test file, passed/failed/skipped on each server, then every
# test that passes on llama-server and not on glint. Exit status: 0 when
# there is none such, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
LLAMA_CPP_DIR=${LLAMA_CPP_DIR:-/tmp/oracle/llama.cpp}
TESTS=$LLAMA_CPP_DIR/tools/server/tests
LLAMA_SERVER=${LLAMA_SERVER:-$LLAMA_CPP_DIR/build/bin/llama-server}
SUITE_VENV=${SUITE_VENV:-$HOME/.cache/glint/suite-venv}
OUT=${OUT:-$ROOT/target/llama-server-suite}
if [ ! -d "$TESTS/unit" ] && [ "${FETCH:-}" = 1 ]; then
    LLAMA_CPP_DIR=${SUITE_CACHE:-$HOME/.cache/glint/llama-server-suite}/llama.cpp
    TESTS=$LLAMA_CPP_DIR/tools/server/tests
    if [ ! -d "$TESTS/unit" ]; then
        tmp=$(mktemp -d)
        python3 -m pip download -q --no-deps --no-binary llama-cpp-python -d "$tmp" llama-cpp-python==0.3.36
        tar -xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp" \
            llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/tests \
            llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates
        mkdir -p "$(dirname "$LLAMA_CPP_DIR")"
        rm -rf "$LLAMA_CPP_DIR"
        mv "$tmp"/llama_cpp_python-0.3.36/vendor/llama.cpp "$LLAMA_CPP_DIR"
        rm -rf "$tmp"
    fi
    LLAMA_SERVER=none
fi
[ -d "$TESTS/unit" ] || { echo "no llama.cpp server tests under $TESTS (set LLAMA_CPP_DIR, or FETCH=1)" >&2; exit 2; }

if [ -z "${MODEL:-}" ]; then
    models=${GLINT_MODELS:-$HOME/.cache/glint/models}
    MODEL=$models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$MODEL" ] || bash scripts/fetch-models.sh "$models" smollm2 >&2
fi
[ -f "$MODEL" ] || { echo "model $MODEL not found (run scripts/fetch-models.sh)" >&2; exit 2; }

if [ -z "${GLINT:-}" ] && [ "${REPORT_ONLY:-}" != 1 ]; then
    GLINT=${CARGO_TARGET_DIR:-$ROOT/target}/release/glint
    cargo build --release --locked --bin glint >&2
fi

if [ ! -x "$SUITE_VENV/bin/pytest" ]; then
    python3 -m venv "$SUITE_VENV"
    "$SUITE_VENV/bin/pip" install -q -r "$TESTS/requirements.txt"
fi

mkdir -p "$OUT"
cat > "$OUT/glint_suite_plugin.py" <<'PY'
"""Loaded with -p: the suite's model prefetch (ServerPreset.load_all) has
nothing to fetch once the stand-in passes a local model."""
import utils

utils.ServerPreset.load_all = staticmethod(lambda: None)
PY
# stand-in NAME BIN...: a script that runs BIN... with the suite's flags,
# its model-download flags swapped for -m $MODEL.
standin() {
    local f=$OUT/standin-$1
    shift
    {
        echo '#!/usr/bin/env bash'
        echo 'args=()'
        echo 'while [ $# -gt 0 ]; do'
        echo '  case "$1" in'
        echo '    --hf-repo|-hf|-hfr|--hf-file|-hff|--model-url|-mu|--model|-m) shift 2 ;;'
        echo '    --offline) shift ;;'
        echo '    *) args+=("$1"); shift ;;'
        echo '  esac'
        echo 'done'
        printf 'exec'
        printf ' %q' "$@"
        printf ' -m %q "${args[@]}"\n' "$MODEL"
    } > "$f"
    chmod +x "$f"
    echo "$f"
}

if [ $# -gt 0 ]; then
    files=("$@")
else
    files=(test_basic.py test_completion.py test_chat_completion.py test_ctx_shift.py
        test_ignore_eos.py test_metrics.py test_security.py test_slot_save.py
        test_tokenize.py test_kv_keep_only_active.py test_stream.py test_embedding.py
        test_compat_oai_responses.py test_infill.py test_template.py test_tool_call.py)
fi

servers=(glint)
declare -A bin
bin[glint]=$(standin glint "$GLINT" serve)
if [ "$LLAMA_SERVER" != none ]; then
    servers=(llama-server glint)
    bin[llama-server]=$(standin llama-server "$LLAMA_SERVER")
fi

for s in "${servers[@]}"; do
    [ "${REPORT_ONLY:-}" = 1 ] && break
    for f in "${files[@]}"; do
        name=${f%.py}
        select=()
        if [ "${ONLY_REFERENCE:-}" = 1 ] && [ -n "${REFERENCE:-}" ]; then
            # The reference's test functions of this file, as `-k "a or b"`.
            k=$({ grep "^$name::" "$REFERENCE" || true; } | sed 's/^[^:]*:://; s/\[.*//' | sort -u |
                paste -sd' ' | sed 's/ / or /g')
            if [ -z "$k" ]; then
                echo "== $s $f: no test of it in $REFERENCE, not run" >&2
                rm -f "$OUT/$s-$name.xml"
                continue
            fi
            select=(-k "$k")
        fi
        echo "== $s $f" >&2
        # Each file alone, one worker: the tests start servers on one port.
        (cd "$TESTS" && LLAMA_SERVER_BIN_PATH=${bin[$s]} LLAMA_CACHE=$OUT/cache \
            PYTHONPATH=$OUT:$TESTS timeout 1800 "$SUITE_VENV/bin/pytest" -q -p no:cacheprovider \
            -p glint_suite_plugin "unit/$f" "${select[@]}" \
            --junitxml="$OUT/$s-$name.xml" > "$OUT/$s-$name.log" 2>&1) || true
    done
done

"$SUITE_VENV/bin/python" - "$OUT" "${servers[*]}" "${REFERENCE:-}" "${GAPS:-}" "${files[@]}" <<'EOF'
import sys, xml.etree.ElementTree as ET
out, servers, reference, gaps_file, files = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5:]

def outcomes(server, name):
    """test name -> passed | failed | skipped, from pytest's junit file."""
    try:
        root = ET.parse(f"{out}/{server}-{name}.xml").getroot()
    except (OSError, ET.ParseError):
        return None
    r = {}
    for case in root.iter("testcase"):
        tags = {c.tag for c in case}
        r[case.get("name")] = ("failed" if tags & {"failure", "error"}
                               else "skipped" if "skipped" in tags else "passed")
    return r

ref_passing = None
if reference and "llama-server" not in servers:
    ref_passing = {l.strip() for l in open(reference) if l.strip() and not l.startswith("#")}
gaps = {}
if gaps_file:
    for l in open(gaps_file):
        if l.strip() and not l.startswith("#"):
            t, _, why = l.partition("  #")
            gaps[t.strip()] = why.strip()

print(f"{'file':34}" + "".join(f"{s + ' pass/fail/skip':>30}" for s in servers)
      + (f"{'llama-server (recorded) pass':>30}" if ref_passing is not None else ""))
missing, total = [], {s: [0, 0, 0] for s in servers}
for f in files:
    name = f[:-3]
    res = {s: outcomes(s, name) for s in servers}
    cells = []
    for s in servers:
        r = res[s]
        if r is None:
            cells.append(f"{'no result':>30}")
            continue
        c = [sum(v == k for v in r.values()) for k in ("passed", "failed", "skipped")]
        total[s] = [a + b for a, b in zip(total[s], c)]
        cells.append(f"{'%d/%d/%d' % tuple(c):>30}")
    ours = res.get("glint") or {}
    if ref_passing is not None:
        ref = {t.split("::", 1)[1] for t in ref_passing if t.split("::", 1)[0] == name}
        cells.append(f"{len(ref):>30}")
    else:
        r = res.get("llama-server") or {}
        ref = {t for t, v in r.items() if v == "passed"}
    missing += [f"{name}::{t}" for t in sorted(ref) if ours.get(t) != "passed"]
    print(f"{name:34}" + "".join(cells))
n_ref = sum(1 for t in (ref_passing or []) if t.split("::", 1)[0] + ".py" in files)
print(f"{'total':34}" + "".join(f"{'%d/%d/%d' % tuple(total[s]):>30}" for s in servers)
      + (f"{n_ref:>30}" if ref_passing is not None else ""))
if "llama-server" in servers or ref_passing is not None:
    known = [m for m in missing if m in gaps]
    new = [m for m in missing if m not in gaps]
    print(f"\npassing on llama-server, not on glint: {len(missing)} ({len(known)} known gaps)")
    for m in known:
        print(f"  known: {m}  # {gaps[m]}")
    for m in new:
        print(f"  {m}")
    sys.exit(1 if new else 0)
EOF
