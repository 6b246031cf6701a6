"""A real-model-sized GRPO step: steps/s and peak memory, and the log-prob head at V = 151,936.

    python benchmarks/bench_real_model.py                 # on a GPU: a Qwen2.5-0.5B-shaped model
    python benchmarks/bench_real_model.py --toy           # on a CPU: the same code at toy sizes

The model is built from a Qwen2 config with Qwen2.5-0.5B's shapes (hidden 896, 24 layers, 14 heads,
2 KV heads, intermediate 4864, V = 151,936, tied embeddings: ~494M parameters), randomly initialized:
nothing is downloaded. Part 1 times `grpo_train_step` (`--dtype` weights, bfloat16 by default,
float32 log-probs, AdamW) on B rollouts of T tokens with the plain head and the chunked head
(course.chunked_head), each with and without gradient checkpointing. Part 2 times log π(y) +
backward through the output head alone: plain (full logits), chunked, and Cut Cross-Entropy /
Liger's fused linear cross-entropy where installed (`pip install cut-cross-entropy liger-kernel`;
both GPU-only; a row says so where one is not importable). Prints a table and the machine;
`--json FILE` writes the rows too (benchmarks/gpu_check.py reads them).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from course.loop.tiny_hf import build_bpe_tokenizer
from course.train_step import grpo_train_step

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151_936, tie_word_embeddings=True)
TOY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=4096, tie_word_embeddings=True)


def build(shape: dict, device: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**shape, max_position_embeddings=4096)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)


def peak_memory(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
    return "n/a (CPU)"


def reset(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def step_rows(shape: dict, device: str, batch: int, length: int, repeats: int,
              dtype: torch.dtype = torch.bfloat16) -> list[tuple]:
    """(setting, seconds per step, peak memory) of grpo_train_step on random token rollouts."""
    texts = [" ".join(str(i * j % 97) for j in range(length)) for i in range(1, batch + 1)]
    tokenizer = build_bpe_tokenizer(texts, vocab_size=300)
    reward = lambda response, truth: {"reward": float(len(response) % 3), "format_reward": 1.0,  # noqa: E731
                                      "answer_reward": 0.0}
    rows = []
    for chunk, checkpointing in ((0, False), (0, True), (256, False), (256, True)):
        model = build({**shape, "vocab_size": max(shape["vocab_size"], len(tokenizer))}, device, dtype)
        model.config.grpo_logits_chunk_size = chunk
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        args = (model, tokenizer, optimizer, 2, 1.0, reward, ["Q:"] * batch, texts, ["0"] * batch, 4)
        grpo_train_step(*args)  # warm-up
        reset(device)
        start = time.perf_counter()
        for _ in range(repeats):
            grpo_train_step(*args)
        sync(device)
        seconds = (time.perf_counter() - start) / repeats
        rows.append((f"train step, chunk={chunk}, checkpointing={checkpointing}", seconds, peak_memory(device)))
        del model, optimizer
    return rows


def head_rows(shape: dict, device: str, tokens: int, repeats: int) -> list[tuple]:
    """(head, seconds per forward+backward, peak memory) of log π(y) through the output head alone."""
    hidden, vocab = shape["hidden_size"], shape["vocab_size"]
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, hidden, generator=generator).to(device, torch.bfloat16).requires_grad_()
    w = (0.02 * torch.randn(vocab, hidden, generator=generator)).to(device, torch.bfloat16).requires_grad_()
    y = torch.randint(0, vocab, (tokens,), generator=generator).to(device)

    def plain():
        logits = (h @ w.t()).float()
        return logits.gather(-1, y[:, None])[:, 0] - logits.logsumexp(-1)

    def chunked():
        from course.chunked_head import _ChunkedHeadLogProb
        return _ChunkedHeadLogProb.apply(h, w, y, 256 * vocab, False)[0]

    heads = {"plain (full logits)": plain, "chunked (course)": chunked}
    rows = []
    if not device.startswith("cuda"):
        rows.append(("head: Cut Cross-Entropy, Liger fused linear CE", None, "skipped: GPU-only"))
    else:
        try:
            from cut_cross_entropy import linear_cross_entropy
            heads["Cut Cross-Entropy"] = lambda: -linear_cross_entropy(h, w, y, reduction="none")
        except ImportError:
            rows.append(("head: Cut Cross-Entropy", None, "skipped: cut_cross_entropy not importable"))
        try:
            from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
            heads["Liger fused linear CE"] = lambda: -liger_fused_linear_cross_entropy(h, w, y, reduction="none")
        except ImportError:
            rows.append(("head: Liger fused linear CE", None, "skipped: liger_kernel not importable"))
    for name, head in heads.items():
        head().sum().backward()  # warm-up
        reset(device)
        start = time.perf_counter()
        for _ in range(repeats):
            h.grad = w.grad = None
            head().sum().backward()
        sync(device)
        rows.append((f"head: {name}", (time.perf_counter() - start) / repeats, peak_memory(device)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--toy", action="store_true", help="toy sizes (runs on a CPU in seconds)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=None, help="rollouts per step (default 16; toy 8)")
    parser.add_argument("--length", type=int, default=None, help="tokens per response (default 256; toy 16)")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                        help="the model's weights in the train steps (notebook 10 trains 0.5B in float32)")
    parser.add_argument("--json", type=str, default=None, metavar="FILE", help="also write the rows here")
    args = parser.parse_args()
    shape = TOY if args.toy else QWEN25_05B
    batch, length = args.batch or (8 if args.toy else 16), args.length or (16 if args.toy else 256)
    repeats = 2 if args.toy else 3
    print(f"machine: {platform.machine()} {platform.processor() or ''}, torch {torch.__version__}, "
          f"device {torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}")
    print(f"model: Qwen2 {'toy' if args.toy else 'Qwen2.5-0.5B shapes'}, V={shape['vocab_size']:,}; "
          f"B={batch} rollouts of {length} tokens, 2 micro-batches, {args.dtype} weights")
    rows = step_rows(shape, args.device, batch, length, repeats, getattr(torch, args.dtype))
    rows += head_rows(shape, args.device, batch * length, repeats)
    print(f"{'setting':<52} {'s/step':>9} {'steps/s':>8}  peak memory")
    for name, seconds, memory in rows:
        timing = f"{'-':>9} {'-':>8}" if seconds is None else f"{seconds:>9.3f} {1 / seconds:>8.2f}"
        print(f"{name:<52} {timing}  {memory}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump([{"setting": n, "seconds": s, "peak_memory": m} for n, s, m in rows], file, indent=1)


if __name__ == "__main__":
    main()
