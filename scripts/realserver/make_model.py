#!/usr/bin/env python3
"""Writes a tiny LLaMA-architecture GGUF with random weights and a real byte-level BPE tokenizer.

The model's output is gibberish; what a load tool measures (batching, prefix caching, prefill and decode cost,
the tokenizer, the HTTP/SSE surface) is the real llama.cpp server's. Deterministic for a given --seed and
training text. Usage: make_model.py OUT.gguf [--size tiny|small] [--seed N] [--perturb X]

`--perturb X` adds independent noise of X times the weights' scale to every matrix of the --seed model: a draft
model for speculative decoding (`llama-server -md`) that shares the tokenizer and agrees with the target on some
tokens, more the smaller X.
"""

import argparse
import glob
import sys

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import gguf

SIZES = {
    # layers, embedding, heads, kv heads, ffn
    "tiny": (4, 256, 4, 2, 768),
    "small": (8, 512, 8, 4, 1536),
}
VOCAB = 4096
CONTEXT = 32768
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_tokenizer(files):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--perturb", type=float, default=0.0)
    args = ap.parse_args()

    files = sorted(glob.glob("/usr/share/common-licenses/*"))
    files = [f for f in files if not f.endswith("/GFDL")] or files
    if not files:
        sys.exit("make_model: no training text under /usr/share/common-licenses")
    tok = train_tokenizer(files)
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    merges = [" ".join(m) if isinstance(m, (list, tuple)) else m for m in _merges(tok)]
    n_vocab = len(tokens)
    types = [gguf.TokenType.CONTROL if t in SPECIAL else gguf.TokenType.NORMAL for t in tokens]

    n_layer, n_embd, n_head, n_head_kv, n_ff = SIZES[args.size]
    head_dim = n_embd // n_head
    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(f"loadshape-{args.size}-random")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    rng = np.random.default_rng(args.seed)
    noise = np.random.default_rng(args.seed + 1_000_003)

    def mat(rows, cols):
        m = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
        if args.perturb > 0:
            m += noise.standard_normal((rows, cols), dtype=np.float32) * (0.02 * args.perturb)
        return m.astype(np.float16)

    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", mat(n_vocab, n_embd))
    kv = n_head_kv * head_dim
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(kv, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(kv, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"make_model: wrote {args.out} ({args.size}, vocab {n_vocab})")


def _merges(tok):
    """The BPE merges of a trained tokenizer, as the JSON model lists them."""
    import json

    return json.loads(tok.to_str())["model"]["merges"]


if __name__ == "__main__":
    main()
