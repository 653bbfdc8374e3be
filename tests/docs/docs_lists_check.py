#!/usr/bin/python3
"""Flags Markdown lists that the docs site renders flat (ctest docs_lists).

GitHub follows CommonMark, where a nested list item needs only the indent of its parent's text
(2 spaces under `- `). The site is built by Python-Markdown, which nests a list item, or keeps a
paragraph or a fenced block inside one, only at 4 spaces per level (its tab_length), and starts a
list only after a blank line. So a source that GitHub shows nested can come out of mkdocs flat:

- `nested`: an item indented deeper than the item above it, but not by a whole level of 4
  spaces, becomes that item's sibling;
- `blank`: a list item right under a paragraph or table line, with no blank line between,
  becomes text of it (a paragraph inside a list item swallows the next item the same way);
- `continuation`: after a blank line inside a list, a paragraph or fence indented by 1 to 3
  spaces leaves the list.

Indenting by 4 spaces per level renders the same on GitHub and on the site. The check reads the
sources (standard library only); docs_lists_check_test.py renders its examples with
Python-Markdown to show that what it flags is what the site breaks.

Usage: docs_lists_check.py SOURCE_DIR   (README.md and docs/**/*.md; exit 1 on a finding)
"""

import glob
import os
import re
import sys

ITEM = re.compile(r"^( *)(?:[-*+]|\d+[.)])(?: +\S|\s*$)")
FENCE = re.compile(r"^( *)(`{3,}|~{3,})")
RULE = re.compile(r"^ {0,3}([-*_])(?: *\1){2,} *$")
HEADING = re.compile(r"^ {0,3}#{1,6}(?: |$)")
TAB = 4  # Python-Markdown's tab_length, which mkdocs keeps.


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def check_text(text, name):
    """Returns "name:line: kind: message" for each list in text that renders flat."""
    findings = []
    fence = None  # the opening fence's characters while inside a fenced block
    in_list, prev_item, prev_blank = False, 0, True
    # What the last non-blank line was: "item" (a list item or its wrapped text), "text" (a
    # paragraph or table, which swallows a list item right under it) or "other".
    prev = "other"
    for number, raw in enumerate(text.expandtabs(TAB).splitlines(), 1):
        line = raw.rstrip()
        if fence:
            match = FENCE.match(line)
            if match and match.group(2).startswith(fence) and not line[match.end():].strip():
                fence = None
            continue
        if not line:
            prev_blank = True
            continue
        indent = indent_of(line)
        fence_match = FENCE.match(line)
        item = None if (fence_match or RULE.match(line)) else ITEM.match(line)
        if HEADING.match(line) or RULE.match(line) or line.lstrip().startswith(">"):
            in_list, prev = False, "other"
        elif item:
            if prev == "text" and not prev_blank and (in_list or indent < TAB):
                findings.append(f"{name}:{number}: blank: a list item right under a paragraph "
                                "or table line renders as its text; put a blank line before it")
            elif in_list and prev_item < indent and indent // TAB == prev_item // TAB:
                findings.append(
                    f"{name}:{number}: nested: indented {indent - prev_item} spaces under the "
                    f"item above, which renders as its sibling; nest by {TAB} spaces")
            in_list, prev_item, prev = True, indent, "item"
        else:
            if indent == 0 and prev_blank:
                in_list = False
            elif in_list and prev_blank and indent < TAB:
                findings.append(f"{name}:{number}: continuation: indented {indent} spaces after "
                                f"a blank line, which leaves the list; indent by {TAB}")
            prev = "item" if prev == "item" and not prev_blank else "text"
        if fence_match:
            fence, prev = fence_match.group(2), "other"
        prev_blank = False
    return findings


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    files += glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)
    return sorted(f for f in files if os.path.isfile(f))


def check(root):
    findings = []
    for path in markdown_files(root):
        with open(path, encoding="utf-8") as f:
            findings += check_text(f.read(), os.path.relpath(path, root))
    return findings


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(f"usage: {argv[0]} SOURCE_DIR (a directory; got {argv[1:]})", file=sys.stderr)
        return 2
    findings = check(argv[1])
    for finding in findings:
        print(finding)
    if findings:
        print(f"{len(findings)} list item(s) render flat on the docs site "
              f"(Python-Markdown nests at {TAB} spaces)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
