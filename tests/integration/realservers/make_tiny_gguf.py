#!/usr/bin/env python3
"""Write a tiny llama-architecture GGUF with the `gguf` PyPI package.

Default: convert ./tiny-llama (made by make_tiny_model.py: random weights,
byte-level BPE tokenizer) so that vLLM and llama.cpp serve the *same* model.
--standalone: no HF model needed; random numpy weights and a minimal byte-level vocab
(4 specials + 256 byte tokens, no merges).  Needs only numpy + gguf.

usage: make_tiny_gguf.py [--src DIR] [--out FILE] [--standalone]
"""
import argparse
import json
import os
import struct

import gguf
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--src", default="tiny-llama")
ap.add_argument("--out", default="tiny-llama.gguf")
ap.add_argument("--standalone", action="store_true")
a = ap.parse_args()

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]


def bytes_to_unicode():
    """GPT-2 byte->unicode table (what ByteLevel BPE vocabularies use)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


def read_safetensors(path):
    """Minimal safetensors reader (F32/F16/BF16) -> dict name -> float32 ndarray."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            s, e = info["data_offsets"]
            f.seek(base + s)
            raw = f.read(e - s)
            dt = info["dtype"]
            if dt == "F32":
                arr = np.frombuffer(raw, dtype=np.float32)
            elif dt == "F16":
                arr = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
            elif dt == "BF16":
                arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                raise SystemExit(f"unsupported dtype {dt}")
            out[name] = arr.reshape(info["shape"]).copy()
    return out


if a.standalone:
    hp = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
              bos_token_id=1, eos_token_id=2, pad_token_id=3)
    b2u = bytes_to_unicode()
    tokens = SPECIALS + [b2u[b] for b in range(256)]
    # llama.cpp refuses a BPE vocab without merges: add a handful (and their merged tokens)
    merges = ["\u0120 t", "h e", "\u0120 a", "i n", "e r", "o n", "\u0120t h", "r e"]
    tokens += [m.replace(" ", "") for m in merges]
    hp["vocab_size"] = len(tokens)
    rng = np.random.default_rng(0)
    H, FF, V = hp["hidden_size"], hp["intermediate_size"], hp["vocab_size"]
    hd = H // hp["num_attention_heads"]
    KV = hp["num_key_value_heads"] * hd
    W = {"model.embed_tokens.weight": rng.normal(0, 0.02, (V, H)), "model.norm.weight": np.ones(H),
         "lm_head.weight": rng.normal(0, 0.02, (V, H))}
    for i in range(hp["num_hidden_layers"]):
        p = f"model.layers.{i}."
        W[p + "input_layernorm.weight"] = np.ones(H)
        W[p + "post_attention_layernorm.weight"] = np.ones(H)
        W[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.02, (H, H))
        W[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.02, (KV, H))
        W[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.02, (KV, H))
        W[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.02, (H, H))
        W[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.02, (FF, H))
        W[p + "mlp.up_proj.weight"] = rng.normal(0, 0.02, (FF, H))
        W[p + "mlp.down_proj.weight"] = rng.normal(0, 0.02, (H, FF))
    W = {k: v.astype(np.float32) for k, v in W.items()}
else:
    with open(os.path.join(a.src, "config.json")) as f:
        hp = json.load(f)
    hp.setdefault("rope_theta", (hp.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    with open(os.path.join(a.src, "tokenizer.json")) as f:
        tj = json.load(f)
    assert tj["model"]["type"] == "BPE"
    vocab = dict(tj["model"]["vocab"])
    for t in tj.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    assert None not in tokens and len(tokens) == hp["vocab_size"], (len(tokens), hp["vocab_size"])
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    W = read_safetensors(os.path.join(a.src, "model.safetensors"))

n_head, n_kv = hp["num_attention_heads"], hp["num_key_value_heads"]
head_dim = hp.get("head_dim") or hp["hidden_size"] // n_head


def permute(w, nh):
    # HF (rotate_half) -> GGML (interleaved) rope layout, as llama.cpp's convert_hf_to_gguf.py does
    return w.reshape(nh, 2, w.shape[0] // nh // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


w = gguf.GGUFWriter(a.out, "llama")
w.add_name("tiny-llama-random")
w.add_context_length(hp["max_position_embeddings"])
w.add_embedding_length(hp["hidden_size"])
w.add_block_count(hp["num_hidden_layers"])
w.add_feed_forward_length(hp["intermediate_size"])
w.add_head_count(n_head)
w.add_head_count_kv(n_kv)
w.add_rope_dimension_count(head_dim)
w.add_rope_freq_base(float(hp["rope_theta"]))
w.add_layer_norm_rms_eps(float(hp["rms_norm_eps"]))
w.add_vocab_size(len(tokens))
w.add_file_type(gguf.LlamaFileType.ALL_F32)

w.add_tokenizer_model("gpt2")       # byte-level BPE
w.add_tokenizer_pre("gpt-2")        # GPT-2 pre-tokenizer regex (= HF ByteLevel use_regex=True)
w.add_token_list(tokens)
w.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens])
w.add_token_merges(merges)
w.add_bos_token_id(hp["bos_token_id"])
w.add_eos_token_id(hp["eos_token_id"])
w.add_unk_token_id(0)
w.add_pad_token_id(hp["pad_token_id"])
w.add_add_bos_token(False)          # the chat template already emits <s>
w.add_add_eos_token(False)
w.add_chat_template(CHAT_TEMPLATE)

names = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
per_layer = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
for i in range(hp["num_hidden_layers"]):
    for k, v in per_layer.items():
        names[f"model.layers.{i}.{k}"] = f"blk.{i}.{v}"

for hf_name, gg_name in names.items():
    t = W[hf_name].astype(np.float32)
    if hf_name.endswith("q_proj.weight"):
        t = permute(t, n_head)
    elif hf_name.endswith("k_proj.weight"):
        t = permute(t, n_kv)
    w.add_tensor(gg_name, np.ascontiguousarray(t))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", a.out, os.path.getsize(a.out), "bytes; vocab", len(tokens), "merges", len(merges))
