"""Random-weight checkpoint of the Qwen2.5-0.5B shape (hidden 896, 24 layers, 14/2 heads,
intermediate 4864, vocab 151936, tied embeddings; 494,032,768 parameters, f32) in HF layout,
with the Qwen2.5 tokenizer files from TOKENIZER_DIR (e.g. tests/fixtures/qwen25-tokenizer).
For side-by-side benchmarks (scripts/bench_vs_comlrl.sh) where the Hub is unreachable.

Usage: python make_qwen05b_shape.py TOKENIZER_DIR OUT_DIR   (needs torch and transformers)
"""
import json, os, shutil, sys
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
tok_dir, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                  hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6,
                  rope_theta=1000000.0, use_sliding_window=False, attention_dropout=0.0,
                  bos_token_id=151643, eos_token_id=151643, pad_token_id=151643, initializer_range=0.02)
m = Qwen2ForCausalLM(cfg).eval()
os.makedirs(out, exist_ok=True)
m.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(tok_dir, f), out)
p = os.path.join(out, "config.json")
c = json.load(open(p))
rp = c.get("rope_parameters") or {}
c.setdefault("rope_theta", rp.get("rope_theta", 1000000.0))
c.setdefault("torch_dtype", "float32")
json.dump(c, open(p, "w"), indent=2, sort_keys=True)
print("params", sum(p.numel() for p in m.parameters()))
