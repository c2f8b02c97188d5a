"""The suite's shared captures rely on pytest-xdist's --dist loadgroup keeping the tests of one
xdist_group on one worker (the zoo's configurations of a model, OpInfo's opsets of an op). With
pytest 9.2 and pytest-xdist 3.8 it silently did not (the group is added to the node id, which
pytest 9.2 no longer takes), and every worker captured again: this runs a small suite the way
`make test` does and checks where its groups ran."""
import os
import re
import subprocess
import sys


def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n"
        "G = [pytest.param(i, marks=pytest.mark.xdist_group(f'g{i % 2}')) for i in range(8)]\n"
        "@pytest.mark.parametrize('i', G)\n"
        "def test_member(i):\n"
        "    pass\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                        "--dist", "loadgroup", "-v", "test_grouped.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTEST_ADDOPTS=""))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ran = re.findall(r"\[(gw\d+)\].*PASSED .*test_member\[(\d+)\]", p.stdout)
    assert len(ran) == 8, p.stdout[-3000:]
    workers = {}
    for worker, i in ran:
        workers.setdefault(int(i) % 2, set()).add(worker)
    assert all(len(w) == 1 for w in workers.values()), \
        f"xdist_group members ran on several workers: {workers} (pytest / pytest-xdist versions?)"
