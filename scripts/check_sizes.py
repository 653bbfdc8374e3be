#!/usr/bin/python3
"""Keeps files and functions small, and every test enabled (house style, habit 7).

Rules, and whether a breach fails the check:
  tests/: no test source (.cc, .h, .cu, .cuh, .py) over 800 lines          fails
  tests/: no disabled gtest (a suite or test name starting DISABLED_)       fails
  src/, device/, python/: no source file over 600 lines              reported only
  src/, device/, python/: no C++ function over 100 lines             reported only
With --strict the reported rules fail too (the ctest lint_source_sizes passes it).

With --ctest and --build-dir it also checks that the label list in tests/CMakeLists.txt (the
comment line starting "# Labels:") names every label a test carries in that configured tree
(`ctest --print-labels`); a label the list misses fails.

  /usr/bin/python3 scripts/check_sizes.py [--root DIR] [--strict]
                                          [--ctest CTEST --build-dir BUILD_DIR]

Python 3 standard library only. Exit status: 0 clean, 1 a failing breach, 2 bad usage.
"""

import argparse
import os
import re
import subprocess
import sys

TEST_DIRS = ("tests",)
SOURCE_DIRS = ("src", "device", "python")
CODE_EXTENSIONS = (".cc", ".h", ".cu", ".cuh", ".py")
CPP_EXTENSIONS = (".cc", ".h", ".cu", ".cuh")
SKIPPED_DIRS = {"node_modules", "__pycache__"}

TEST_FILE_LIMIT = 800
SOURCE_FILE_LIMIT = 600
FUNCTION_LIMIT = 100

DISABLED_TEST = re.compile(
    r"^\s*(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)


def code_files(root, top_dirs, extensions):
    """Paths (relative to root, sorted) of the code files under the given top folders."""
    found = []
    for top in top_dirs:
        base = os.path.join(root, top)
        for folder, subdirs, files in os.walk(base):
            subdirs[:] = sorted(d for d in subdirs
                                if d not in SKIPPED_DIRS and not d.startswith("."))
            for name in files:
                if name.endswith(extensions):
                    found.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(found)


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def line_count(text):
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def blank_comments_and_literals(text):
    """The C++ text with comments, string and character literals and preprocessor lines blanked
    (every newline kept, so line numbers still hold)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A preprocessor line, with its backslash continuations.
            while i < n and not (text[i] == "\n" and text[i - 1] != "\\"):
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
            continue
        if c == "\n":
            at_line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            open_paren = text.find("(", i + 2)
            delim = text[i + 2:open_paren]
            end = text.find(")" + delim + '"', open_paren)
            end = n if end < 0 else end + len(delim) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


ACCESS = re.compile(r"\s*(?:(?:public|private|protected)\s*:(?!:)\s*)*")
CONTROL = re.compile(r"^(if|for|while|switch|catch|do|else|try|return)\b")
TEMPLATE_PREFIX = re.compile(r"^template\s*<")


def strip_template_prefix(header):
    """The header without a leading template<...> (angle brackets balanced)."""
    while TEMPLATE_PREFIX.match(header):
        depth, i = 0, header.index("<")
        for i in range(i, len(header)):
            depth += {"<": 1, ">": -1}.get(header[i], 0)
            if depth == 0:
                break
        header = header[i + 1:].lstrip()
    return header


def top_level(header):
    """The header with everything inside parentheses removed."""
    out, depth = [], 0
    for c in header:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def classify(header):
    """What a '{' opens at namespace or class scope, from the text since the last ; { or }."""
    h = strip_template_prefix(" ".join(header.split()))
    if re.match(r"^(inline\s+)?namespace\b", h) or re.match(r'^extern\s*"', h):
        return "scope"
    if re.match(r"^(typedef\s+)?enum\b", h):
        return "other"
    if re.match(r"^(typedef\s+)?(class|struct|union)\b", h) and "(" not in h:
        return "scope"
    if "(" not in h or ")" not in h or CONTROL.match(h):
        return "other"
    plain = top_level(re.sub(r"\boperator\s*[^\s(]+\s*\(", "operator(", h))
    if "=" in plain.replace("operator", ""):  # a variable's initializer (a lambda, a table)
        return "other"
    return "function"


def function_name(header):
    h = strip_template_prefix(" ".join(header.split()))
    macro = re.match(r"^((?:TYPED_)?TEST(?:_F|_P)?\s*\([^)]*\))", h)
    if macro:
        return macro.group(1)
    m = re.search(r"(~?[\w:~]+(?:\s*operator\s*[^\s(]+)?)\s*\(", h)
    return m.group(1) if m else h[:40]


def long_functions(text, limit):
    """(line, name, length) of each function definition longer than `limit` lines."""
    code = blank_comments_and_literals(text)
    found = []
    stack = []  # (kind, first line, name)
    header_start = 0
    line = 1
    line_of = []  # the line of each offset so far
    for i, c in enumerate(code):
        line_of.append(line)
        if c == "\n":
            line += 1
        elif c == ";":
            if all(kind == "scope" for kind, _, _ in stack):
                header_start = i + 1
        elif c == "{":
            if all(kind == "scope" for kind, _, _ in stack):
                header = code[header_start:i]
                stripped = header.rstrip()
                in_init_list = (re.search(r"\)\s*(noexcept\s*)?(->[^:]*)?:", header)
                                and stripped and (stripped[-1].isalnum() or stripped[-1] in "_>"))
                if in_init_list:  # a member's brace initializer in a constructor's init list
                    stack.append(("init", 0, ""))
                    continue
                access = ACCESS.match(header)  # "public:" and the like start no header
                header = header[access.end():]
                kind = classify(header)
                first = header_start + access.end()
                start_line = line_of[first] if first < len(line_of) else line
                name = function_name(header) if kind == "function" else ""
                stack.append((kind, start_line, name))
                header_start = i + 1
            else:
                stack.append(("other", line, ""))
        elif c == "}":
            if not stack:
                continue
            top = stack.pop()
            if top[0] == "function" and line - top[1] + 1 > limit:
                found.append((top[1], top[2], line - top[1] + 1))
            if top[0] != "init" and all(kind == "scope" for kind, _, _ in stack):
                header_start = i + 1
    return found


def disabled_tests(text):
    return [(text.count("\n", 0, m.start()) + 1, "%s.%s" % (m.group(2), m.group(3)))
            for m in DISABLED_TEST.finditer(text)
            if m.group(2).startswith("DISABLED_") or m.group(3).startswith("DISABLED_")]


def ctest_labels(ctest, build_dir):
    out = subprocess.run([ctest, "--print-labels"], cwd=build_dir, capture_output=True,
                         text=True, check=True).stdout
    lines = out.splitlines()
    if "All Labels:" not in [l.strip() for l in lines]:
        return []
    start = [l.strip() for l in lines].index("All Labels:") + 1
    return sorted(l.strip() for l in lines[start:] if l.strip())


def listed_labels(root):
    """The labels named on the "# Labels:" line(s) of tests/CMakeLists.txt, or None."""
    text = read(root, "tests/CMakeLists.txt")
    m = re.search(r"^# Labels:(.*?)\.\s*$", text, re.M | re.S)
    if not m:
        return None
    words = m.group(1).replace("\n#", " ")
    return {w.strip() for w in words.split(",") if w.strip()}


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=os.path.dirname(here), help="the checkout (default: ..)")
    p.add_argument("--strict", action="store_true", help="the source limits fail too")
    p.add_argument("--ctest", help="ctest, to read the labels of --build-dir")
    p.add_argument("--build-dir", help="a configured build tree whose labels are checked")
    args = p.parse_args(argv)
    if bool(args.ctest) != bool(args.build_dir):
        p.error("--ctest and --build-dir go together")
    if not os.path.isdir(os.path.join(args.root, "tests")):
        p.error("--root %s: no tests/ folder there" % args.root)

    failures, reports = [], []
    for path in code_files(args.root, TEST_DIRS, CODE_EXTENSIONS):
        text = read(args.root, path)
        n = line_count(text)
        if n > TEST_FILE_LIMIT:
            failures.append("%s: %d lines, over %d for a test file: split it along what it "
                            "tests" % (path, n, TEST_FILE_LIMIT))
        if path.endswith(CPP_EXTENSIONS):
            for line, name in disabled_tests(text):
                failures.append("%s:%d: %s is disabled: enable it, move it (a benchmark goes to "
                                "bench/), or remove it" % (path, line, name))
    source_breaches = failures if args.strict else reports
    for path in code_files(args.root, SOURCE_DIRS, CODE_EXTENSIONS):
        text = read(args.root, path)
        n = line_count(text)
        if n > SOURCE_FILE_LIMIT:
            source_breaches.append("%s: %d lines, over %d for a source file"
                                   % (path, n, SOURCE_FILE_LIMIT))
        if path.endswith(CPP_EXTENSIONS):
            for line, name, length in long_functions(text, FUNCTION_LIMIT):
                source_breaches.append("%s:%d: %s is %d lines, over %d for a function"
                                       % (path, line, name, length, FUNCTION_LIMIT))
    if args.ctest:
        listed = listed_labels(args.root)
        if listed is None:
            failures.append('tests/CMakeLists.txt: no "# Labels: a, b, c." comment line')
        else:
            for label in ctest_labels(args.ctest, args.build_dir):
                if label not in listed:
                    failures.append("tests/CMakeLists.txt: its \"# Labels:\" list misses "
                                    "label '%s', which tests in %s carry"
                                    % (label, args.build_dir))

    for r in reports:
        print("report: " + r)
    for f in failures:
        print("FAIL: " + f)
    note = "" if args.strict else " (src limits; --strict fails them)"
    print("check_sizes: %d failing, %d reported only%s" % (len(failures), len(reports), note))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
