"""Decode-step latency of a LLaMA (hidden 512, 4 layers, 8 heads / 2 kv heads,
vocab 32000, random weights) exported three ways: opset 18 standard (the
decomposed attention), opset 23 standard (ONNX Attention), onnxruntime target
(com.microsoft GroupQueryAttention). onnxruntime CPU, 2 threads; the three
sessions run interleaved (10 runs each per round), medians.
Usage: python bench/attention_decode.py [ROUNDS] [WORKDIR]"""
import sys, time, statistics, numpy as np, torch, onnxruntime as ort, os
from pt2onnx import hf
hf.prepare()
import transformers as tr
W = sys.argv[2] if len(sys.argv) > 2 else "/tmp/attention_decode"
os.makedirs(W, exist_ok=True)
d = os.path.join(W, "llama")
if not os.path.exists(d):
    cfg = tr.LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048)
    torch.manual_seed(0); tr.LlamaForCausalLM(cfg).eval().save_pretrained(d)
variants = {"base_o18_std": (18, "standard"), "attn_o23_std": (23, "standard"), "gqa_o18_ort": (18, "onnxruntime")}
paths={}
for name,(opset,target) in variants.items():
    p=os.path.join(W, f"{name}.onnx")
    if not os.path.exists(p):
        hf.export_pretrained(d, "text-generation-with-past", p, opset=opset, target=target, verify=False)
    paths[name]=p
so=ort.SessionOptions(); so.intra_op_num_threads=2; so.inter_op_num_threads=1
sess={n:ort.InferenceSession(p,so,providers=["CPUExecutionProvider"]) for n,p in paths.items()}
def feeds(b,past):
    rng=np.random.default_rng(0)
    f={"input_ids":rng.integers(0,32000,(b,1)).astype(np.int64),
       "attention_mask":np.ones((b,past+1),np.int64),
       "position_ids":np.full((b,1),past,np.int64)}
    for i in range(4):
        f[f"past_key_values.{i}.key"]=rng.standard_normal((b,2,past,64)).astype(np.float32)
        f[f"past_key_values.{i}.value"]=rng.standard_normal((b,2,past,64)).astype(np.float32)
    return f
for b,past in ((1,128),(4,512)):
    f=feeds(b,past)
    outs={n:s.run(None,f)[0] for n,s in sess.items()}
    for n in outs: print(n, "max|logits - base|", float(np.abs(outs[n]-outs["base_o18_std"]).max()))
    times={n:[] for n in sess}
    for r in range(int(sys.argv[1]) if len(sys.argv)>1 else 15):
        for n,s in sess.items():
            for _ in range(10):
                t=time.perf_counter(); s.run(None,f); times[n].append(time.perf_counter()-t)
    base=statistics.median(times["base_o18_std"])
    for n,t in times.items():
        m=statistics.median(t); print(f"batch {b} past {past}: {n:14s} median {m*1e3:.3f} ms  ({base/m:.2f}x vs base)")
