"""Helpers of the program cache's tests (tests/models/test_program_cache*.py): editing an
entry as a damaged disk, another user or a writer holding the cache's key would; and a
deadline for the tests of untrusted files (test_checkpoint_config.py too)."""

import contextlib
import hashlib
import json
import os
import signal

from pt2onnx import _cache_entry


def entry_of(cache) -> str:
    """The one entry folder of cache folder `cache`."""
    names = [n for n in os.listdir(cache) if not n.startswith(".")]
    assert len(names) == 1, names
    return os.path.join(cache, names[0])


def resign(entry) -> None:
    """Signs entry folder `entry` again with its cache's key, as a store would: an entry a
    test edited then passes the signature check, so the checks after it are what is tested
    (a writer holding the key: a bug of pt2onnx, or the user)."""
    with open(os.path.join(os.path.dirname(entry), ".key"), "rb") as f:
        key = f.read()
    with open(os.path.join(entry, "entry.json"), "rb") as f:
        meta = f.read()
    with open(os.path.join(entry, "entry.mac"), "w") as f:
        f.write(_cache_entry.mac(key, meta))


def edit_entry(entry, change, sign: bool = False) -> None:
    """entry.json of `entry` parsed, changed in place by `change(meta)`, written back; signed
    again if `sign`."""
    path = os.path.join(entry, "entry.json")
    with open(path) as f:
        meta = json.load(f)
    change(meta)
    with open(path, "w") as f:
        json.dump(meta, f)
    if sign:
        resign(entry)


def rewrite_part(entry, name: str, data: bytes, sign: bool = False) -> None:
    """Replaces part file `name` (part0.json / part0.bin) and records its new hash and size
    in entry.json, as someone who can write the folder would; signed again if `sign`."""
    with open(os.path.join(entry, name), "wb") as f:
        f.write(data)
    i, what = int(name[4]), "program" if name.endswith(".json") else "data"

    def change(meta):
        meta["parts"][i][f"{what}_sha256"] = hashlib.sha256(data).hexdigest()
        meta["parts"][i][f"{what}_bytes"] = len(data)

    edit_entry(entry, change, sign)


def first_stored_view(meta, part: int = 0) -> list:
    """The first weight view of a part whose bytes are kept in the entry."""
    return next(v for v in meta["parts"][part]["views"] if v[1] is not None)


def tree(folder) -> dict:
    """{relative path: (size, mtime_ns)} of every file under `folder`: what a test compares
    to show that nothing outside an export's output was touched."""
    out = {}
    for d, _, files in os.walk(folder):
        for name in files:
            st = os.lstat(os.path.join(d, name))
            out[os.path.relpath(os.path.join(d, name), folder)] = (st.st_size, st.st_mtime_ns)
    return out


@contextlib.contextmanager
def deadline(seconds):
    """A TimeoutError if the body still runs after `seconds` (a read that waits on a FIFO, a
    config built for minutes): the test fails instead of running away."""
    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
