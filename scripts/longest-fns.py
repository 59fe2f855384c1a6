#!/usr/bin/env python3
"""The longest Rust functions of the tree, outside tests.

    scripts/longest-fns.py [N] [PATH ...]     N defaults to 10, PATH to src crates benches examples

A function's length is the lines from its `fn` line to its closing brace,
found by counting braces outside strings, chars and comments. Files under a
`tests/` folder and `#[cfg(test)] mod` blocks are left out.
"""
import os
import re
import sys

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def strip(line, state):
    """The line's code with strings, chars and comments blanked; state carries block comments."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state["block"]:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out)
            state["block"] = False
            i = j + 2
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        if c == '"':
            j = i + 1
            while j < n and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            continue
        if c == "'" and re.match(r"'(\\.|[^\\'])'", line[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", line[i:]).group(0))
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    state = {"block": False}
    code = [strip(l, state) for l in lines]
    found, skip_until = [], -1
    for i, l in enumerate(lines):
        if i <= skip_until:
            continue
        if re.match(r"\s*#\[cfg\(test\)\]", l):
            # skip the next item (a test module) by brace matching
            depth, started = 0, False
            for j in range(i + 1, len(code)):
                depth += code[j].count("{") - code[j].count("}")
                started = started or "{" in code[j]
                if started and depth <= 0:
                    skip_until = j
                    break
            continue
        m = FN.match(code[i])
        if not m:
            continue
        depth, started = 0, False
        for j in range(i, len(code)):
            if not started and ";" in code[j] and "{" not in code[j]:
                break  # a declaration without a body
            depth += code[j].count("{") - code[j].count("}")
            started = started or "{" in code[j]
            if started and depth <= 0:
                found.append((j - i + 1, f"{path}:{i + 1}", m.group(7)))
                break
    return found


def main():
    args = sys.argv[1:]
    n = int(args.pop(0)) if args and args[0].isdigit() else 10
    roots = args or ["src", "crates", "benches", "examples"]
    allf = []
    for root in roots:
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if x not in ("tests", "target", ".git")]
            for f in files:
                if f.endswith(".rs") and f != "tests.rs":
                    allf += functions(os.path.join(d, f))
    for length, where, name in sorted(allf, reverse=True)[:n]:
        print(f"{length:5} {name:32} {where}")


if __name__ == "__main__":
    main()
