#!/usr/bin/env python3
"""The GPU kit's library check (tools/gpu_kit/kit_libs.py: bundle, check, needs) on a small case
built here with cc: a program, a library of ours that needs a Debian library (libxxhash, which
this machine has) and a stand-in for a device-provided CUDA library (soname libcudart.so.99, in
a directory of its own that plays the device's CUDA directory).

The check must pass on the bundled case and fail, naming the library, when the bundled copy of
the Debian library is missing (although the system has one: the check hides it), when the
device directory is not given, and when a RUNPATH points outside the kit. Run by ctest
(tests/CMakeLists.txt); needs cc, patchelf and libxxhash-dev (tools/install_deps.sh).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu_kit"))
import kit_libs  # noqa: E402

DEVICE_C = "int kit_case_device(void) { return 7; }\n"
LIB_C = """#include <xxhash.h>
int kit_case_device(void);
unsigned long long kit_case_lib(void) { return XXH64("kit", 3, 0) + kit_case_device(); }
"""
MAIN_C = """#include <stdio.h>
unsigned long long kit_case_lib(void);
int main(void) { printf("kit case %llu\\n", kit_case_lib()); return 0; }
"""


def cc(*args):
    subprocess.run(["cc", *args], check=True)


class KitLibraryCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kit-libs-test-")
        src = os.path.join(cls.tmp, "src")
        cls.device_dir = os.path.join(cls.tmp, "device-cuda")
        os.makedirs(src)
        os.makedirs(cls.device_dir)
        for name, text in (("device.c", DEVICE_C), ("lib.c", LIB_C), ("main.c", MAIN_C)):
            with open(os.path.join(src, name), "w") as f:
                f.write(text)
        cls.device_lib = os.path.join(cls.device_dir, "libcudart.so.99")
        cc("-shared", "-fPIC", "-Wl,-soname,libcudart.so.99", "-o", cls.device_lib,
           os.path.join(src, "device.c"))
        cls.build = os.path.join(cls.tmp, "build")
        os.makedirs(cls.build)
        cls.lib = os.path.join(cls.build, "libkitcase.so")
        cc("-shared", "-fPIC", "-Wl,-soname,libkitcase.so", "-o", cls.lib,
           os.path.join(src, "lib.c"), "-lxxhash", cls.device_lib)
        cls.exe = os.path.join(cls.build, "kitcase")
        cc("-o", cls.exe, os.path.join(src, "main.c"), cls.lib,
           "-Wl,-rpath," + cls.build + ":" + cls.device_dir)
        cls.auditor = kit_libs.build_auditor(os.path.join(cls.tmp, "hide_system_libs.so"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def kit(self, device_dirs=None):
        """A fresh kit holding the program, bundled as gpu_kit.sh does, its slots linked to the
        device dirs as run.sh does."""
        kit = tempfile.mkdtemp(prefix="kit-", dir=self.tmp)
        os.makedirs(os.path.join(kit, "bin", "tests"))
        shutil.copy(self.exe, os.path.join(kit, "bin", "tests", "kitcase"))
        bundled = kit_libs.bundle(kit)["bundled"]
        self.assertEqual(sorted(bundled), ["libkitcase.so", "libxxhash.so.0"])
        kit_libs.link(kit, [self.device_dir] if device_dirs is None else device_dirs, "kit")
        return kit

    def hidden_env(self, kit):
        env = dict(os.environ, LD_AUDIT=self.auditor, FTUNE_HIDE_UNDER=kit,
                   FTUNE_HIDE_ALLOW=kit + ":" + self.device_dir)
        env.pop("LD_LIBRARY_PATH", None)
        return env

    def test_the_bundled_case_passes_and_runs_with_the_system_libraries_hidden(self):
        kit = self.kit()
        problems, stats = kit_libs.check(kit, [self.device_dir], self.auditor)
        self.assertEqual(problems, [])
        self.assertEqual(stats["files"], 3)
        self.assertGreaterEqual(stats["resolved"]["kit"], 3)  # libkitcase twice, libxxhash
        self.assertGreaterEqual(stats["resolved"]["device"], 2)
        out = subprocess.run([os.path.join(kit, "bin", "tests", "kitcase")], env=self.hidden_env(kit),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(out.returncode, 0, out.stdout)
        self.assertTrue(out.stdout.startswith("kit case "), out.stdout)
        self.assertEqual(kit_libs.dynamic_entries(os.path.join(kit, "bin", "tests", "kitcase"),
                                                  "RUNPATH"),
                         ["$ORIGIN/../../lib"] + ["$ORIGIN/../../lib/" + s for s in
                                                  ("cxx", "dev0", "dev1", "dev2", "dev3")])
        self.assertEqual(os.path.realpath(os.path.join(kit, "lib", "dev0")),
                         os.path.realpath(self.device_dir))
        needs = kit_libs.needs(kit)
        # cuBLASLt and NVRTC are loaded at run time (src/cuda/lazy_library.h), not linked: the
        # machine must still provide them, of the linked CUDA runtime's major version.
        self.assertEqual(needs["device_libs"],
                         ["libcublasLt.so.99", "libcudart.so.99", "libnvrtc.so.99"])
        self.assertRegex(needs["glibc"], r"^2\.\d+$")

    def test_a_missing_bundled_library_fails_although_the_system_has_one(self):
        kit = self.kit()
        os.remove(os.path.join(kit, "lib", "libxxhash.so.0"))
        # Without the hiding the loader would take the system's copy: the check would pass.
        plain = dict(kit_libs.ldd(os.path.join(kit, "lib", "libkitcase.so")))
        self.assertIsNotNone(plain["libxxhash.so.0"])
        problems, _ = kit_libs.check(kit, [self.device_dir], self.auditor)
        self.assertTrue(any("libxxhash.so.0 not found: not in the kit" in p for p in problems),
                        problems)
        out = subprocess.run([os.path.join(kit, "bin", "tests", "kitcase")], env=self.hidden_env(kit),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertNotEqual(out.returncode, 0, out.stdout)

    def test_a_device_library_outside_the_device_dirs_fails(self):
        kit = self.kit(device_dirs=[])  # run.sh found no directory for it: no slot links there
        problems, _ = kit_libs.check(kit, [], self.auditor)
        self.assertTrue(any("libcudart.so.99 not found: device-provided" in p for p in problems),
                        problems)

    def test_a_runpath_outside_the_kit_fails(self):
        kit = self.kit()
        exe = os.path.join(kit, "bin", "tests", "kitcase")
        subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../../lib:" + self.build, exe],
                       check=True)
        problems, _ = kit_libs.check(kit, [self.device_dir], self.auditor)
        self.assertTrue(any("RUNPATH entry %s is outside the kit" % self.build in p
                            for p in problems), problems)

    def test_a_symbol_stored_in_an_old_runpath_is_never_renamed(self):
        # The linker may store a symbol name as the tail of a longer .dynstr string: "read" inside
        # ".../openblas-pthread". patchelf (NixOS/patchelf#162) overwrote the old RUNPATH with
        # X's, so the first GPU kit's libftune.so needed "XXXX" and failed to load. bundle() must
        # refuse such a file or leave every symbol intact.
        src = os.path.join(self.tmp, "reads.c")
        with open(src, "w") as f:
            f.write("#include <unistd.h>\nint main(void) { char b; return (int)read(0, &b, 0); }\n")
        exe = os.path.join(self.build, "reads")
        cc("-o", exe, src, "-Wl,-rpath," + os.path.join(self.tmp, "openblas-pthread"))
        names = lambda path: [n.split("@")[0] for n in kit_libs.dynamic_symbols(path)]
        self.assertIn("read", names(exe))
        kit = tempfile.mkdtemp(prefix="kit-", dir=self.tmp)
        os.makedirs(os.path.join(kit, "bin"))
        shutil.copy(exe, os.path.join(kit, "bin", "reads"))
        try:
            kit_libs.bundle(kit)
        except RuntimeError as e:
            self.assertIn("renamed dynamic symbols", str(e))
            return
        self.assertIn("read", names(os.path.join(kit, "bin", "reads")))

    def test_the_slots_follow_what_run_sh_chose(self):
        kit = self.kit()
        self.assertTrue(os.path.islink(os.path.join(kit, "lib", "cxx")))
        kit_libs.link(kit, [self.device_dir], "system")  # the machine's own C++ runtime
        self.assertFalse(os.path.lexists(os.path.join(kit, "lib", "cxx")))
        with self.assertRaisesRegex(RuntimeError, "spread over 5 directories"):
            kit_libs.link(kit, [self.device_dir] * 5, "kit")

    def test_an_empty_kit_fails(self):
        kit = tempfile.mkdtemp(prefix="kit-", dir=self.tmp)
        problems, _ = kit_libs.check(kit, [self.device_dir], self.auditor)
        self.assertTrue(any("holds no programs or libraries" in p for p in problems), problems)


if __name__ == "__main__":
    unittest.main()
