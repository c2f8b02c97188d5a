"""What checking the file against PyTorch costs (issue 57: should `pt2onnx.export` verify by
default?): for each model, one process exports with verify=False and another with verify=True
(onnxruntime session, PyTorch run and comparison at the example inputs and at dims one larger);
wall time of the export() call, its verify stage, and the process's peak RSS.

    python bench/verify_cost.py            # writes bench/verify_cost.md and .json

Models: the zoo's quick entries (tests/models/zoo.py) and a LLaMA of ~110M and ~0.5B
parameters built from a config (random weights), decoder forward without a cache.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ["resnet18", "tv_mobilenet_v2", "timm_vit_tiny", "hf_bert", "hf_gpt2", "hf_llama",
          "word_lm_lstm", "llama_110m", "llama_500m"]
LLAMAS = {"llama_110m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                             num_attention_heads=12, vocab_size=32000),
          "llama_500m": dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=16,
                             num_attention_heads=16, vocab_size=32000)}


def _child(name: str, verify: bool) -> dict:
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
    import pt2onnx

    if name in LLAMAS:
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**LLAMAS[name], use_cache=False)).eval()
        ids = torch.randint(0, 32000, (2, 16))
        args, kw = (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        ds = {k: {0: "batch", 1: "seq"} for k in kw}
    else:
        import zoo

        model, make, ds = zoo.build(name)
        inputs = make(2, 16) if "seq" in str(ds) or name.startswith("hf_") else make(2, 0)
        args, kw = (inputs, {}) if isinstance(inputs, tuple) else ((), inputs)
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        r = pt2onnx.export(model, args, os.path.join(tmp, "m.onnx"), kwargs=kw or None,
                           dynamic_shapes=ds, verify=verify, verbose=False)
        wall = time.perf_counter() - t0
    return {"model": name, "verify": verify, "parameters": params, "export_s": wall,
            "verify_s": r.timings.get("verify", 0.0),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2], sys.argv[3] == "1")))
        return 0
    rows = []
    for name in MODELS:
        for verify in (False, True):
            out = subprocess.run([sys.executable, __file__, "--child", name, str(int(verify))],
                                 cwd=ROOT, capture_output=True, text=True)
            if out.returncode != 0:
                print(name, verify, "failed:", out.stderr.strip().splitlines()[-1:], flush=True)
                continue
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    with open(os.path.join(HERE, "verify_cost.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "machine": f"{platform.machine()}, {os.cpu_count()} cores", "rows": rows},
                  f, indent=1)
        f.write("\n")
    lines = ["# What verify=True costs (bench/verify_cost.py)", "",
             f"{time.strftime('%Y-%m-%d', time.gmtime())}, {platform.machine()}, "
             f"{os.cpu_count()} cores. One process per export; wall time of the export() call, "
             "its verify stage, the process's peak RSS.", "",
             "| model | parameters | export s | with verify s | verify stage s | verify / export "
             "| peak RSS MB | with verify MB |", "|---|---|---|---|---|---|---|---|"]
    by = {(r["model"], r["verify"]): r for r in rows}
    for name in MODELS:
        a, b = by.get((name, False)), by.get((name, True))
        if not a or not b:
            continue
        lines.append(f"| {name} | {a['parameters'] / 1e6:.1f}M | {a['export_s']:.2f} | "
                     f"{b['export_s']:.2f} | {b['verify_s']:.2f} | "
                     f"{b['verify_s'] / a['export_s']:.0%} | {a['peak_rss_mb']:.0f} | "
                     f"{b['peak_rss_mb']:.0f} |")
    with open(os.path.join(HERE, "verify_cost.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
