"""scripts/check_sizes.py on small trees of its own: each rule catches what it names, just past
its limit and not at it, and the source rules fail only with --strict."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "check_sizes.py")


def function(name, body_lines, indent=""):
    """A C++ function of exactly 3 + body_lines lines."""
    body = "".join("%s  x += %d;\n" % (indent, i) for i in range(body_lines))
    return "%sint %s(int x) {\n%s%s  return x;\n%s}\n" % (indent, name, body, indent, indent)


class CheckSizesTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="check_sizes_")
        self.write("tests/CMakeLists.txt", "# Labels: unit, integration.\n")

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def run_check(self, *args):
        r = subprocess.run([sys.executable, SCRIPT, "--root", self.root] + list(args),
                           capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def test_a_clean_tree_passes(self):
        self.write("tests/unit/a_test.cc", "TEST(A, B) {}\n")
        self.write("src/a.cc", function("F", 10))
        rc, out = self.run_check("--strict")
        self.assertEqual(rc, 0, out)
        self.assertIn("0 failing, 0 reported", out)

    def test_a_test_file_over_800_lines_fails_naming_it(self):
        self.write("tests/unit/ok_test.cc", "//\n" * 800)
        self.assertEqual(self.run_check()[0], 0)
        self.write("tests/python/test_big.py", "#\n" * 801)
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("tests/python/test_big.py: 801 lines, over 800", out)
        self.assertNotIn("ok_test.cc", out)

    def test_a_disabled_test_fails_naming_it(self):
        self.write("tests/unit/a_test.cc", textwrap.dedent("""\
            TEST(A, Enabled) {}
            // TEST(A, DISABLED_InAComment) is not a test.
            TEST_F(A, DISABLED_Slow) {
            }
            TEST(DISABLED_Suite, Case) {}
            """))
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("tests/unit/a_test.cc:3: A.DISABLED_Slow is disabled", out)
        self.assertIn("tests/unit/a_test.cc:5: DISABLED_Suite.Case is disabled", out)
        self.assertNotIn("Enabled", out)
        self.assertNotIn("InAComment", out)

    def test_a_source_file_over_600_lines_is_reported_and_fails_only_when_strict(self):
        self.write("src/ok.cc", "//\n" * 600)
        self.write("python/granary/big.py", "#\n" * 601)
        self.write("device/big.cu", "//\n" * 700)
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("report: python/granary/big.py: 601 lines, over 600", out)
        self.assertIn("report: device/big.cu: 700 lines", out)
        self.assertNotIn("ok.cc", out)
        rc, out = self.run_check("--strict")
        self.assertEqual(rc, 1, out)
        self.assertIn("FAIL: python/granary/big.py: 601 lines", out)

    def test_a_function_over_100_lines_is_reported_with_its_name_and_line(self):
        self.write("src/a.cc", "namespace a {\n" + function("Fits", 97) + "\n" +
                   function("TooLong", 98) + "}  // namespace a\n")
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("report: src/a.cc:103: TooLong is 101 lines, over 100", out)
        self.assertNotIn("Fits", out)
        self.assertEqual(self.run_check("--strict")[0], 1)

    def test_functions_are_found_past_what_looks_like_braces(self):
        # A class with an inline method, a constructor whose init list has brace initializers,
        # braces in strings, comments and a raw string, and lambdas and blocks inside a function
        # (counted as part of it); a table and an enum at namespace scope are not functions.
        long_body = "".join("    if (x) { x += %d; }\n" % i for i in range(99))
        self.write("src/b.h", textwrap.dedent("""\
            #pragma once
            #define OPEN {
            namespace b {
            enum class E { kA, kB };
            const int kTable[] = {1, 2, 3};
            class C : public Base {
             public:
              C(int a) : a_(a), b_{a, '}'} {
            """) + long_body + textwrap.dedent("""\
              }
              int Get() const { return a_; }
             private:
              int a_;
              std::vector<int> b_{1, 2};
            };
            template <class T>
            void Lambdas() {
              auto f = [](int x) { return x; };  // { in a comment
              const char* s = "}}}";
              const char* r = R"(}})";
              /* } */
            """) + "".join("  f(%d);\n" % i for i in range(96)) + "}\n}  // namespace b\n")
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("report: src/b.h:8: C is 101 lines, over 100", out)
        self.assertIn("report: src/b.h:114: Lambdas is 103 lines, over 100", out)
        self.assertEqual(out.count("for a function"), 2, out)

    def test_a_label_the_list_misses_fails(self):
        ctest = os.path.join(self.root, "fake_ctest")
        self.write("fake_ctest", "#!/bin/sh\nprintf 'Test project x\\nAll Labels:\\n"
                   "  integration\\n  unit\\n  upgrade\\n'\n")
        os.chmod(ctest, os.stat(ctest).st_mode | stat.S_IEXEC)
        rc, out = self.run_check("--ctest", ctest, "--build-dir", self.root)
        self.assertEqual(rc, 1, out)
        self.assertIn("misses label 'upgrade'", out)
        self.assertNotIn("'unit'", out)
        self.write("tests/CMakeLists.txt", "# Labels: unit, integration,\n# upgrade.\n")
        rc, out = self.run_check("--ctest", ctest, "--build-dir", self.root)
        self.assertEqual(rc, 0, out)

    def test_bad_usage_is_refused_naming_the_value(self):
        rc, out = self.run_check("--ctest", "ctest")
        self.assertEqual(rc, 2, out)
        self.assertIn("--ctest and --build-dir go together", out)
        r = subprocess.run([sys.executable, SCRIPT, "--root", "/nonexistent-root"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent-root", r.stderr)


if __name__ == "__main__":
    unittest.main()
