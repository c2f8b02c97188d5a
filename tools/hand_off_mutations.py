"""Does comparing the hand-off once per program, in a sample of the tests,
catch what comparing every export caught? (issue 35: the suite's hand-off
check, tests/conftest.py, used to serialize and convert every export a second
time; it then compared each distinct program once, and now does so in a fixed
sample of the tests.)

Each mutation below plants a difference in the tree reader
(src/python/program_object.cpp), the one place the two routes differ. For
each, the module is rebuilt and a subset of the suite (the families that
export one program under several configurations: the zoo, OpInfo, ModuleInfo,
TorchScript models; quick entries) runs under each mode (MODES: every export,
each distinct program, the suite's sample). It prints, per mutation
and mode, how many tests reported a hand-off difference and how many distinct
programs they cover (a test's id less its configuration). The source is
restored and the module rebuilt at the end.

    python tools/hand_off_mutations.py [--quick] [--no-baseline] [--modes every sample]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "src", "python", "program_object.cpp")
PY = os.path.join(ROOT, ".venv", "bin", "python")
# The families that export one program under several configurations, and the test of the NaN
# difference; --quick: their quick entries only, else every entry (OpInfo at its float32 "train"
# configurations).
FAMILIES = ("test_zoo_model and not compiled and not every_dim_auto or test_opinfo and float32-train or test_moduleinfo "
            "or test_torchscript_model or test_nan_with_its_sign_bit")

# (name, text in the reader, replacement): each a difference the JSON route
# does not have.
MUTATIONS = [
    ("NaN read with its own bits (the difference the check found when it was added)",
     "if (std::isnan(d)) d = std::numeric_limits<double>::quiet_NaN();",
     "(void)0;"),
    ("a non-integral float argument read 1e-6 off",
     "      if (std::isnan(d)) d = std::numeric_limits<double>::quiet_NaN();\n      return true;",
     "      if (std::isnan(d)) d = std::numeric_limits<double>::quiet_NaN();\n"
     "      if (d != std::floor(d)) d += 1e-6;\n      return true;"),
]

# The check's modes (tests/conftest.py, PT2ONNX_TEST_HAND_OFF): every export compared (the
# first check), each distinct program once, and the suite's default, a fixed sample of the tests
# (one in conftest.HAND_OFF_SAMPLE) each distinct program once.
MODES = {"every": "every", "once per program": "distinct", "sample": "sample"}

HAND_OFF = re.compile(r"direct hand-off|torch's JSON|two routes fail differently")


def build():
    subprocess.run(["make", "python"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def run(mode, quick, keyword=None):
    with tempfile.TemporaryDirectory() as d:
        xml = os.path.join(d, "junit.xml")
        env = dict(os.environ)
        env.pop("PT2ONNX_TEST_HAND_OFF", None)
        if mode in MODES:
            env["PT2ONNX_TEST_HAND_OFF"] = MODES[mode]
        t0 = time.perf_counter()
        subset = ["tests/python", "tests/models", "-k", keyword or FAMILIES,
                  *(["-m", "not slow"] if quick else [])]
        subprocess.run([PY, "-m", "pytest", *subset, "-q", "-n", "2", "--dist", "loadgroup",
                        "-p", "no:cacheprovider", f"--junitxml={xml}"], cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        tests, failed = 0, []
        for tc in ET.parse(xml).getroot().iter("testcase"):
            tests += 1
            for f in list(tc.iter("failure")) + list(tc.iter("error")):
                if HAND_OFF.search((f.get("message") or "") + (f.text or "")):
                    failed.append(f"{tc.get('classname')}::{tc.get('name')}")
                    break
    return tests, failed, seconds


def program_of(test_id):
    # test_zoo_model[resnet18-opset18] -> test_zoo_model[resnet18]; OpInfo's
    # and ModuleInfo's ids name the op/module and sample after the config.
    return re.sub(r"-(opset|ort|o)\d+\w*", "", test_id)


def main():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the families' quick entries only")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the run without a mutation (the suite itself shows it passes)")
    ap.add_argument("--mutation", type=int, action="append",
                    help="only these mutations (0-based index; repeatable)")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression instead of the families")
    ap.add_argument("--modes", nargs="+", default=["every", "once per program", "sample"],
                    choices=["every", "once per program", "sample"],
                    help="the checks to run each mutation under")
    args = ap.parse_args()
    original = open(SOURCE).read()
    rows = []
    chosen = [m for i, m in enumerate(MUTATIONS) if args.mutation is None or i in args.mutation]
    cases = ([] if args.no_baseline else [("none (the suite as it is)", None, None)]) + chosen
    try:
        for name, old, new in cases:
            if old is not None:
                assert original.count(old) == 1, name
                with open(SOURCE, "w") as fh:
                    fh.write(original.replace(old, new))
            build()
            for mode in args.modes:
                tests, failed, seconds = run(mode, args.quick, args.keyword)
                rows.append((name, mode, tests, len(failed),
                             len({program_of(t) for t in failed}), seconds))
                print(f"{name} | {mode}: {tests} tests, {len(failed)} with a hand-off difference"
                      f" ({rows[-1][4]} programs), {seconds:.0f} s", flush=True)
                for t in failed[:8]:
                    print("   ", t, flush=True)
            with open(SOURCE, "w") as fh:
                fh.write(original)
    finally:
        with open(SOURCE, "w") as fh:
            fh.write(original)
        build()
    print("\n| mutation | check | tests | tests reporting it | programs | seconds |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
