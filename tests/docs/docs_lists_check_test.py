"""docs_lists_check.py on small texts: what it must flag, what it must not, and (where Debian's
python3-markdown, which mkdocs runs on, is installed) that what it flags is what Python-Markdown
renders flat and what it accepts renders nested. Standard library otherwise."""

import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_lists_check  # noqa: E402

try:
    import markdown  # the renderer mkdocs uses
except ImportError:
    markdown = None

# The extensions of mkdocs.yml that touch block structure.
EXTENSIONS = ["tables", "admonition", "pymdownx.superfences"]

TWO_SPACE_NESTED = "Intro.\n\n- parent\n  - child one\n  - child two\n- next\n"
FOUR_SPACE_NESTED = "Intro.\n\n- parent\n    - child one\n    - child two\n- next\n"
NO_BLANK_BEFORE = "Read these:\n- one\n- two\n"
SWALLOWED = "- one\n\n    A paragraph of one.\n- two\n"
CONTINUATION = "- one\n\n  More about one.\n"
ORDERED_THREE = "1. step\n   - detail\n"


def render(text):
    return markdown.markdown(text, extensions=EXTENSIONS)


class DocsListsCheckTest(unittest.TestCase):
    def kinds(self, text):
        return [f.split(": ")[1] for f in docs_lists_check.check_text(text, "index.md")]

    def test_flags_each_kind_with_its_line(self):
        self.assertTrue(docs_lists_check.check_text(TWO_SPACE_NESTED, "index.md")[0]
                        .startswith("index.md:4: nested: indented 2 spaces"))
        self.assertEqual(self.kinds(TWO_SPACE_NESTED), ["nested"])
        self.assertEqual(self.kinds(NO_BLANK_BEFORE), ["blank"])
        self.assertEqual(self.kinds(SWALLOWED), ["blank"])
        self.assertEqual(self.kinds(CONTINUATION), ["continuation"])
        self.assertEqual(self.kinds(ORDERED_THREE), ["nested"])

    def test_accepts_what_renders_as_written(self):
        for text in [FOUR_SPACE_NESTED, "## Heading\n- one\n- two\n",
                     "- one\n  wrapped line of one\n- two\n",
                     "- one\n\n    More about one.\n\n- two\n",
                     "  - top level, indented 2\n      - its child\n",
                     "Text.\n\n```text\n- not a list\n  - nor this\n```\n",
                     "- one\n\n    ```sh\n    echo hi\n    ```\n",
                     "Text\n---\n- after a rule\n", "> quoted\n> - item\n"]:
            self.assertEqual(docs_lists_check.check_text(text, "index.md"), [], text)

    @unittest.skipIf(markdown is None, "python3-markdown is not installed")
    def test_what_it_flags_renders_flat_and_the_fix_nests(self):
        self.assertNotIn("<ul>\n<li>child one", render(TWO_SPACE_NESTED))
        self.assertIn("<li>parent<ul>\n<li>child one</li>", render(FOUR_SPACE_NESTED))
        self.assertIn("- one", render(NO_BLANK_BEFORE))  # the list is text of the paragraph
        self.assertIn("- two", render(SWALLOWED))
        self.assertIn("<p>More about one.</p>", render(CONTINUATION).split("</ul>")[1])
        self.assertIn("<li>detail</li>", render(ORDERED_THREE).split("<li>step</li>")[1])

    def test_main_exits_1_on_a_finding_and_0_on_a_clean_tree(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "docs", "decisions"))
            with open(os.path.join(root, "README.md"), "w") as f:
                f.write(FOUR_SPACE_NESTED)
            page = os.path.join(root, "docs", "decisions", "index.md")
            with open(page, "w") as f:
                f.write(FOUR_SPACE_NESTED)
            script = docs_lists_check.__file__
            run = subprocess.run([sys.executable, script, root], capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run)
            with open(page, "w") as f:
                f.write(TWO_SPACE_NESTED)
            run = subprocess.run([sys.executable, script, root], capture_output=True, text=True)
            self.assertEqual(run.returncode, 1, run)
            self.assertIn("docs/decisions/index.md:4: nested", run.stdout)
            run = subprocess.run([sys.executable, script, os.path.join(root, "nowhere")],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 2, run)


if __name__ == "__main__":
    unittest.main()
