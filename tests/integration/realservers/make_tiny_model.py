#!/usr/bin/env python3
"""Build a tiny random-weight Llama model + locally trained tokenizer.

Nothing is downloaded: the tokenizer is a byte-level BPE trained on a few
lines of text below, and the model weights are random (seeded).

Usage:  python make_tiny_model.py [OUT_DIR]      (default ./tiny-llama)
Needs:  torch, transformers (>=4.4x or 5.x), tokenizers, safetensors
Adapted from the project's shared/realservers.
"""
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

OUT = sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"
os.makedirs(OUT, exist_ok=True)

# ---------------------------------------------------------------- tokenizer
TEXT = [
    "Hello, how are you today? I am fine, thank you.",
    "The quick brown fox jumps over the lazy dog.",
    "This is a tiny language model with random weights, used to test a server.",
    "It produces nonsense text, but the server behaviour is real.",
    "user assistant system: what is the answer? The answer is forty two.",
    "Monitoring latency, throughput, tokens per second, queue depth and errors.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 { } [ ] ( ) < > = + - * / , . ; : ! ?",
] * 20
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
VOCAB_SIZE = 512  # upper bound; actual size depends on how many merges are found

tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
trainer = trainers.BpeTrainer(
    vocab_size=VOCAB_SIZE,
    min_frequency=2,
    special_tokens=SPECIALS,  # ids 0..3
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes -> any input encodes
    show_progress=False,
)
tok.train_from_iterator(TEXT, trainer=trainer)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

hf_tok = PreTrainedTokenizerFast(
    tokenizer_object=tok,
    bos_token="<s>",
    eos_token="</s>",
    unk_token="<unk>",
    pad_token="<pad>",
    model_max_length=2048,
)
hf_tok.chat_template = CHAT_TEMPLATE
vocab_size = len(hf_tok)
print("tokenizer vocab size:", vocab_size)

# ---------------------------------------------------------------- model
torch.manual_seed(0)
# Size: the default is tiny (fast start). A larger model (e.g. TINY_LLAMA_HIDDEN=768 TINY_LLAMA_LAYERS=12)
# makes each engine step slow enough on a CPU that the engine, not the HTTP front end, is the bottleneck,
# as on a real GPU server: requests then queue visibly and /metrics stays responsive under load.
HIDDEN = int(os.environ.get("TINY_LLAMA_HIDDEN", "256"))
LAYERS = int(os.environ.get("TINY_LLAMA_LAYERS", "2"))
config = LlamaConfig(
    vocab_size=vocab_size,
    hidden_size=HIDDEN,
    intermediate_size=2 * HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HIDDEN // 64,  # head_dim 64 (a size every attention backend supports)
    num_key_value_heads=max(1, HIDDEN // 128),
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    bos_token_id=hf_tok.bos_token_id,
    eos_token_id=hf_tok.eos_token_id,
    pad_token_id=hf_tok.pad_token_id,
    initializer_range=0.02,
)
model = LlamaForCausalLM(config).to(torch.float32)
model.eval()
n_params = sum(p.numel() for p in model.parameters())
print("params:", n_params)

model.save_pretrained(OUT, safe_serialization=True)
hf_tok.save_pretrained(OUT)
# also write the template as a standalone file (used by llama.cpp / vllm --chat-template if wanted)
with open(os.path.join(OUT, "chat_template.jinja"), "w") as f:
    f.write(CHAT_TEMPLATE)

# quick self-check
ids = hf_tok.apply_chat_template([{"role": "user", "content": "Hello!"}], add_generation_prompt=True)
if not isinstance(ids, list):  # transformers 5 may return a BatchEncoding
    ids = ids["input_ids"]
with torch.no_grad():
    out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
print("prompt ids:", ids)
print("generated:", repr(hf_tok.decode(out[0][len(ids):])))
print("saved to", OUT, sorted(os.listdir(OUT)))
