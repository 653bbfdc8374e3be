"""repo_paths_check.py against a small tree of its own: what it must flag, and what it must
not. Standard library only (/usr/bin/python3)."""

import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repo_paths_check  # noqa: E402

# Split so that this file itself holds none of the references it writes.
HOME_TREE = "/" + "work/shared/NOTES.md"
CLIMB = ".." + "/shared/DESIGN.md"
ABS_DOC = "/" + "opt/docs/ENGINE_API.md"


class RepoPathsCheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        self.write("docs/guide.md", "# Guide\n")
        self.write("src/a/b.h", "#pragma once\n")

    def tearDown(self):
        self.dir.cleanup()

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def report(self):
        return repo_paths_check.check(self.root, repo_paths_check.repository_files(self.root))

    def test_flags_each_kind_of_reference_with_its_line(self):
        self.write("src/a/x.cc", f"// see {HOME_TREE}\n// and {CLIMB} section 2\n"
                                 f"// and {ABS_DOC}\n// and GPU.md section 4\n")
        report = self.report()
        self.assertIn(f"src/a/x.cc:1: {HOME_TREE} (an absolute path into a home or work tree)",
                      report)
        self.assertIn(f"src/a/x.cc:2: {CLIMB} (a ../ path to nothing in the repository)", report)
        self.assertIn(f"src/a/x.cc:3: {ABS_DOC} (an absolute path to a document)", report)
        self.assertIn("src/a/x.cc:4: GPU.md (no Markdown file of the repository has this name)",
                      report)
        self.assertEqual(len(report), 4, report)

    def test_accepts_paths_inside_the_repository_and_system_paths(self):
        self.write("src/a/y.cc", "// docs/guide.md and guide.md; ../a/b.h and ../../docs/guide.md\n"
                                 "// /usr/bin/python3 /proc/self/exe /sys/fs/cgroup\n"
                                 '// cd "$(dirname "$0")/../docs"; ${ROOT}/docs/guide.md\n')
        self.assertEqual(self.report(), [])

    def test_the_allow_list_matches_path_and_text(self):
        self.write("tests/unit/node/cgroup_test.cc", 'for (auto bad : {"../up"}) {}\n')
        self.write("tests/unit/node/other_test.cc", 'for (auto bad : {"../up"}) {}\n')
        self.assertEqual(self.report(), [
            "tests/unit/node/other_test.cc:1: ../up (a ../ path to nothing in the repository)"])

    def test_main_exits_1_and_names_the_finding(self):
        self.write("README.md", f"Follows {CLIMB}.\n")
        run = subprocess.run([sys.executable, repo_paths_check.__file__, self.root],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 1, run)
        self.assertIn(f"README.md:1: {CLIMB}", run.stdout)

    def test_main_refuses_a_source_dir_that_is_not_one(self):
        missing = os.path.join(self.root, "nowhere")
        run = subprocess.run([sys.executable, repo_paths_check.__file__, missing],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 2, run)
        self.assertIn("nowhere", run.stderr)


if __name__ == "__main__":
    unittest.main()
