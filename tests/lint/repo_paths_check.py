"""Fails when a file of the repository refers to a path outside it.

A comment or a doc that needs a fact states it; it does not send the reader to a file that
someone who cloned the repository does not have. Flagged, in every tracked (or new, not ignored)
text file:
  - an absolute path into a home or work tree (/work/..., /home/..., /Users/...), or an absolute
    path to a document (ending in .md, .rst, .txt or .pdf);
  - a relative path that climbs with ../ and then names something that is neither in the
    repository relative to the file's folder nor relative to the repository root;
  - a Markdown file named by its file name (NAME.md) that no file of the repository has.
ALLOWED lists the few references that are meant (test data, say), each with its reason.

Usage: repo_paths_check.py SOURCE_DIR. Exit status 0 when clean, 1 with one line per finding
(path:line: the reference, and why it is flagged). Standard library only (/usr/bin/python3).
"""

import fnmatch
import os
import re
import subprocess
import sys

# (path pattern as fnmatch reads it, the exact text on the line, why it is allowed).
ALLOWED = [
    ("tests/*cgroup_test.cc", '"../up"', "a cgroup name that must be refused (test data)"),
    ("*", "summary.md", "the report bench/gpu_check.sh writes into its output folder"),
]

# A path after a variable (${ROOT}/docs/x.md, $(dirname "$0")/x) is not absolute.
_ABSOLUTE_TREE = re.compile(r"(?<![\w.~/}$)-])/(?:work|home|Users)/[^\s`'\")\]]*")
_ABSOLUTE_DOC = re.compile(r"(?<![\w.~/}$)-])/(?:[\w.-]+/)+[\w.-]+\.(?:md|rst|txt|pdf)\b")
_CLIMB = re.compile(r"(?<![\w$)}./-])(?:\.\./)+[\w.-]+(?:/[\w.-]+)*")
_MARKDOWN_NAME = re.compile(r"(?<![\w./-])[\w-]+\.md\b")
_SKIP_FOLDERS = {".git", "node_modules"}


def repository_files(root):
    """The tracked files and the new ones git does not ignore; without git, every file under
    root except build trees and hidden folders."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True).stdout
        return sorted({p for p in out.decode().split("\0") if p})
    except (OSError, subprocess.CalledProcessError):
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs
                       if d not in _SKIP_FOLDERS and not d.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(folder, n), root) for n in names]
        return sorted(files)


def read_text(path):
    """The file's lines, or None for a binary file or one that is not there."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").splitlines()


def _inside(root, path):
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return (real == real_root or real.startswith(real_root + os.sep)) and os.path.exists(real)


def findings_in(rel, lines, root, markdown_names):
    """(line number, reference, why) for each reference outside the repository in one file."""
    out = []
    folder = os.path.dirname(os.path.join(root, rel))
    for number, line in enumerate(lines, 1):
        for m in _ABSOLUTE_TREE.finditer(line):
            out.append((number, m.group(0), "an absolute path into a home or work tree"))
        for m in _ABSOLUTE_DOC.finditer(line):
            if not _ABSOLUTE_TREE.match(line, m.start()):
                out.append((number, m.group(0), "an absolute path to a document"))
        for m in _CLIMB.finditer(line):
            ref = m.group(0).rstrip(".")
            if not (_inside(root, os.path.join(folder, ref)) or
                    _inside(root, os.path.join(root, ref))):
                out.append((number, ref, "a ../ path to nothing in the repository"))
        for m in _MARKDOWN_NAME.finditer(line):
            if m.group(0) not in markdown_names:
                out.append((number, m.group(0), "no Markdown file of the repository has this name"))
    return [f for f in out if not _allowed(rel, lines[f[0] - 1])]


def _allowed(rel, line):
    return any(fnmatch.fnmatch(rel, pattern) and text in line for pattern, text, _ in ALLOWED)


def check(root, files):
    """Every finding in `files` (paths relative to root), as 'path:line: reference (why)'."""
    markdown_names = {os.path.basename(p) for p in files if p.endswith(".md")}
    report = []
    for rel in files:
        lines = read_text(os.path.join(root, rel))
        if lines is None:
            continue
        for number, ref, why in findings_in(rel, lines, root, markdown_names):
            report.append(f"{rel}:{number}: {ref} ({why})")
    return report


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(f"usage: {os.path.basename(argv[0])} SOURCE_DIR (got {argv[1:]!r})", file=sys.stderr)
        return 2
    root = argv[1]
    # This checker and its test name the patterns they look for: they are not scanned.
    here = os.path.dirname(os.path.realpath(__file__))
    mine = {os.path.relpath(os.path.join(here, name), os.path.realpath(root))
            for name in ("repo_paths_check.py", "repo_paths_check_test.py")}
    files = [p for p in repository_files(root) if p not in mine]
    report = check(root, files)
    for line in report:
        print(line)
    if report:
        print(f"{len(report)} reference(s) to paths outside the repository: state the fact "
              "instead, or add the file to the repository", file=sys.stderr)
        return 1
    print(f"{len(files)} files: no reference to a path outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
