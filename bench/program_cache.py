"""A repeated export through the program cache against `cp` and onnxruntime-genai's builder,
side by side in one run (issue 38 items 1-2).

    python bench/program_cache.py [--sizes 44M,0.37B,6.7B] [--repeats N] [--data DIR]
                                  [--keep-data] [--out PREFIX]

Method. The checkpoints are bench/size_sweep.py's (LLaMA configs, bfloat16 safetensors,
random weights, written by bench/scale.py's writer; 6.7B is Llama-2-7B's dimensions and
reuses bench/scale.py's checkpoint when one is complete). Each contender is a whole process
under GNU time, with the page cache dropped before it (`sync; echo 3 > drop_caches`), so
each reads the checkpoint from disk, as bench/size_sweep.py and bench/scale.py measure:
  cp          `cp` of the checkpoint's safetensors shards into the output folder;
  hit bf16    `pt2onnx-pretrained CKPT --task text-generation-with-past --no-verify
              --dtype bfloat16` with the program in the cache: the file holds the
              checkpoint's bytes as they are, what `cp` copies (target: at most 1.1x cp's
              wall time + 0.3 s);
  hit fp32    the same at float32 (the default; bfloat16 converted while streamed): the
              builder's output type (target: at most 0.3x the builder's wall time);
  miss fp32   the same with an empty cache folder: capture, conversion, the entry written
              (target: no slower than today's path, the next row);
  no cache    the same with --no-cache: today's first export;
  builder     onnxruntime-genai's builder, fp32, cpu (bench/size_sweep.py's launch).
The cache folder of the hits is filled once per size before the timed runs (untimed, one
export per dtype). Sizes under 0.5 B parameters run --repeats rounds (default 3, contenders
interleaved, medians); larger ones once. A hit process imports neither torch nor
transformers (checked here from each hit's output line: the command prints the cache's
result; tests/models/test_program_cache.py checks the imports themselves).

Results: PREFIX.json and PREFIX.md (default bench/program_cache.*).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scale  # noqa: E402
import size_sweep  # noqa: E402

TASK = "text-generation-with-past"
CONTENDERS = {
    "cp": "`cp` (shards)",
    "hit_bf16": "pt2onnx-pretrained, cache hit, --dtype bfloat16",
    "hit_fp32": "pt2onnx-pretrained, cache hit (float32)",
    "miss_fp32": "pt2onnx-pretrained, cache miss (float32; capture + entry written)",
    "nocache_fp32": "pt2onnx-pretrained --no-cache (float32; today's path)",
    "builder": "onnxruntime-genai builder (fp32)",
}
size_sweep.CONTENDERS.update(CONTENDERS)  # run_one prints the label


def contenders(sweep, ck: dict, work: str, hits: str) -> list[tuple[str, list[str]]]:
    path = ck["path"]
    onnx = os.path.join(work, "model.onnx")
    pre = [*scale.pretrained_cmd(), path, "--task", TASK, "--no-verify", "-o", onnx, "-q"]
    return [
        ("cp", ["cp", *ck["shards"], work]),
        ("hit_bf16", [*pre, "--cache-dir", hits, "--dtype", "bfloat16"]),
        ("hit_fp32", [*pre, "--cache-dir", hits]),
        ("miss_fp32", [*pre, "--cache-dir", os.path.join(sweep.data, "cache-miss")]),
        ("nocache_fp32", [*pre, "--no-cache"]),
        ("builder", [*size_sweep.python_cmd(), "-c", size_sweep.BUILDER_LAUNCH, "-m",
                     "bench-model", "-i", path, "-o", work, "-p", "fp32", "-e", "cpu", "-c",
                     os.path.join(sweep.data, "builder-cache")]),
    ]


def cache_result(stdout: str) -> str | None:
    for line in stdout.splitlines():
        if "program cache:" in line:
            return line.split("program cache:", 1)[1].split()[0]
    return None


def measure(sweep, size: str, repeats: int) -> dict:
    print(f"{size}:", flush=True)
    ck = sweep.prepare_checkpoint(size)
    params = ck["parameters"]
    rounds = repeats if params < size_sweep.SMALL else 1
    work = os.path.join(sweep.data, "run")
    hits = os.path.join(sweep.data, "cache-hits")
    shutil.rmtree(hits, ignore_errors=True)
    print("  filling the cache of the hits (untimed)", flush=True)
    for dtype in ("bfloat16", "float32"):
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run([*scale.pretrained_cmd(), ck["path"], "--task", TASK, "--no-verify",
                        "-q", "-o", os.path.join(work, "model.onnx"), "--cache-dir", hits,
                        "--dtype", dtype], check=True, capture_output=True)
    runs: dict[str, list[dict]] = {k: [] for k in CONTENDERS}
    out_bytes = params * 4 + 64 * 2**20
    for i in range(rounds):
        if rounds > 1:
            print(f"  round {i + 1}/{rounds}", flush=True)
        for key, cmd in contenders(sweep, ck, work, hits):
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(os.path.join(sweep.data, "cache-miss"), ignore_errors=True)
            rec = sweep.run_one(key, cmd, ck["shards"], work, out_bytes)
            rec["program_cache"] = cache_result(rec.get("stdout") or "")
            runs[key].append(rec)
        shutil.rmtree(work, ignore_errors=True)
    for d in ("builder-cache", "cache-miss", "cache-hits"):
        shutil.rmtree(os.path.join(sweep.data, d), ignore_errors=True)
    if ck["owned"] and not sweep.args.keep_data:
        shutil.rmtree(ck["path"])
        print(f"  deleted {ck['path']}", flush=True)
    elif not ck["owned"]:
        shutil.rmtree(ck["path"])  # the links only
    ck.pop("shards")
    return {"checkpoint": ck, "rounds": rounds, "runs": runs}


def median(recs: list[dict], field: str) -> float | None:
    vals = [r[field] for r in recs if r.get("returncode") == 0 and r.get(field) is not None]
    return statistics.median(vals) if vals else None


def write_report(res: dict, prefix: str) -> None:
    with open(prefix + ".json", "w") as f:
        json.dump(res, f, indent=1)
    m = res["machine"]
    lines = [
        "# A repeated export through the program cache against `cp` and onnxruntime-genai's "
        "builder (issue 38 items 1-2)",
        "",
        f"Measured {res['date']} on {m['host']} ({m['cpus']} cores, {m['ram_gb']:.1f} GB RAM; "
        f"Python {m['python']}, {m['versions']}), pt2onnx at {res['commit']}, by "
        f"`python bench/program_cache.py {res['argv']}`.",
        "",
        "Every contender is a whole process (interpreter start and imports included) under GNU "
        "time, with the page cache dropped before it: each reads the checkpoint from disk. "
        "bfloat16 checkpoints, random weights; the pt2onnx rows export "
        f"`--task {TASK} --no-verify` (the builder's file: a decoder step with a KV cache). "
        "Method: the docstring of bench/program_cache.py.",
        "",
        "| size | cp (s) | cp + its sync (s) | hit bf16 (s) | hit bf16 / (1.1 cp + 0.3 s) | "
        "hit fp32 (s) | builder (s) | hit fp32 / builder | miss fp32 (s) | no cache (s) | "
        "miss / no cache | peak RSS hit fp32 / builder (MB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size, r in res["sizes"].items():
        md = {k: median(v, "wall_s") for k, v in r["runs"].items()}
        # cp leaves its data to the kernel's writeback; a hit fsyncs before it exits
        cp_synced = median([dict(x, both=x["wall_s"] + (x.get("sync_after_s") or 0))
                            for x in r["runs"]["cp"]], "both")
        rss = {k: median(v, "peak_rss_mb") for k, v in r["runs"].items()}

        def f(x, spec=".2f"):
            return "—" if x is None else format(x, spec)

        def ratio(a, b):
            return None if a is None or not b else a / b

        lines.append(
            f"| {size} | {f(md['cp'])} | {f(cp_synced)} | {f(md['hit_bf16'])} | "
            f"{f(ratio(md['hit_bf16'], None if md['cp'] is None else 1.1 * md['cp'] + 0.3))}x | "
            f"{f(md['hit_fp32'])} | {f(md['builder'])} | "
            f"{f(ratio(md['hit_fp32'], md['builder']))}x | {f(md['miss_fp32'])} | "
            f"{f(md['nocache_fp32'])} | {f(ratio(md['miss_fp32'], md['nocache_fp32']))}x | "
            f"{f(rss['hit_fp32'], '.0f')} / {f(rss['builder'], '.0f')} |")
    for size, r in res["sizes"].items():
        ck = r["checkpoint"]
        lines += ["", f"## {size}: {ck['parameters'] / 1e9:.3f} B parameters", "",
                  f"{ck['bytes'] / 1e9:.2f} GB of bfloat16 safetensors; {r['rounds']} "
                  "round(s), medians.", "",
                  "| contender | wall (s) | sync after (s) | user + sys (s) | peak RSS (MB) | "
                  "bytes written | program cache | every round's wall (s) |",
                  "|---|---|---|---|---|---|---|---|"]
        for key, label in CONTENDERS.items():
            recs = r["runs"][key]
            ok = [x for x in recs if x.get("returncode") == 0]
            if not ok:
                err = (recs[0].get("error") or "not run").splitlines()[-1] if recs else "not run"
                lines.append(f"| {label} | failed: {err} | | | | | | |")
                continue
            cpu = median(ok, "user_s")
            sys_ = median(ok, "system_s")
            walls = ", ".join(format(x["wall_s"], ".2f") for x in ok)
            caches = ", ".join(sorted({str(x.get("program_cache")) for x in ok}))
            lines.append(
                f"| {label} | {median(ok, 'wall_s'):.2f} | {median(ok, 'sync_after_s'):.2f} | "
                f"{'—' if cpu is None else f'{cpu + (sys_ or 0):.2f}'} | "
                f"{median(ok, 'peak_rss_mb'):.0f} | {int(median(ok, 'bytes_written')):,} | "
                f"{caches} | {walls} |")
    lines += ["", "## Findings", "", *res.get("findings", ["(none written)"]), ""]
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="44M,0.37B,6.7B")
    ap.add_argument("--data", default=size_sweep.DEFAULT_DATA)
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "program_cache"))
    args = ap.parse_args()
    args.cache = "cold"
    args.profile = False
    args.sizes = args.sizes.split(",")
    sweep = size_sweep.Sweep(args)
    os.makedirs(sweep.data, exist_ok=True)
    import importlib.metadata as md

    versions = ", ".join(f"{p} {md.version(p)}" for p in
                         ("torch", "transformers", "onnxruntime", "onnxruntime-genai", "pt2onnx"))
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain"],
                           capture_output=True, text=True).stdout.strip()
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "argv": " ".join(sys.argv[1:]), "commit": commit + (" (uncommitted changes)" if dirty
                                                               else ""),
           "machine": {"host": os.uname().nodename, "cpus": os.cpu_count(),
                       "ram_gb": sweep.ram / 1e9, "python": sys.version.split()[0],
                       "versions": versions},
           "sizes": {}}
    for size in args.sizes:
        res["sizes"][size] = measure(sweep, size, args.repeats)
        write_report(res, args.out)
    print(f"wrote {args.out}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
