"""Log-prob scoring the ways a user would pick: peak extra memory and time of forward + backward.

  log_softmax  model(x).logits → full (B, T, V) log_softmax → gather        (the textbook way)
  trl          model(x).logits → trl.trainer.utils.selective_log_softmax    (what TRL's GRPOTrainer uses)
  gather_lse   model(x).logits → gather − logsumexp                         (get_response_log_probs, chunk 0)
  chunked      decoder → output head over `--chunk` positions at a time,
               recomputed in backward                                       (get_response_log_probs, chunk > 0)
  cce          decoder → Cut Cross-Entropy's `torch_compile` implementation (cut_cross_entropy.linear_cross_entropy)
  decoder      decoder alone, no head (one feature of h is the score): what every method above keeps
               (its activations, its own gradients), so the floor under any head; not a log-prob

At a realistic vocabulary (OLMo 2's 50304 by default) the (B, T, V) logits dominate: the first
three keep them (and their gradient) alive, the chunked head only one (B, chunk, V) block at a time.
The chunk is chosen by bytes (`--block-mib`, one float32 block of logits), not by positions: what
fits depends on B and V. Idea: Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024, arXiv
2410.10989); Cut Cross-Entropy (Wijmans et al. 2024, arXiv 2411.09009). TRL and Cut Cross-Entropy
are optional (`pip install -e ".[bench]"`); without them their rows say so. Cut Cross-Entropy's
`torch_compile` implementation runs on a CPU (its Triton kernels need a GPU); it is compiled in the
warm-up, on the full batch, so neither its compile time nor the compiler's memory is counted.

Each method runs in a fresh subprocess so that allocator caches from one cannot hide another's peak.
Peak extra memory is measured around one forward + backward (parameter gradients included):
  cpu   peak resident set size (Linux VmHWM, reset through /proc/self/clear_refs) minus RSS before;
  cuda  torch.cuda.max_memory_allocated minus memory_allocated before.
Time is the median of `--repeats` forward + backward passes, taken in one further process that runs
the methods in turn, round after round, so that load from other programs falls on all of them alike.
Results are compared with the log_softmax path: log-probs and the output head's gradient.
The summary line also gives the chunked head's cost above the decoder row (peak and time minus the
decoder's) over log_softmax's above it: the head's own share, which the decoder's activations hide.

    python benchmarks/bench_logprobs.py                      # CPU, V = 50304
    python benchmarks/bench_logprobs.py --device cuda --batch 16 --seq 1024
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from machine import cpu_model

METHODS = ("log_softmax", "trl", "gather_lse", "chunked", "cce", "decoder")
OPTIONAL = {"trl": "trl", "cce": "cut_cross_entropy"}  # method -> the module it needs


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status (Linux only)")


def available(method: str) -> bool:
    return method not in OPTIONAL or importlib.util.find_spec(OPTIONAL[method]) is not None


def chunk_for(args: argparse.Namespace) -> int:
    """Positions per block: the most whose float32 (B, chunk, V) logits fit in `--block-mib`."""
    if args.chunk:
        return args.chunk
    return max(1, int(args.block_mib * 2**20) // (args.batch * args.vocab * 4))


def _score(method: str, model, input_ids, labels, chunk: int) -> torch.Tensor:
    from course import get_response_log_probs

    if method == "log_softmax":
        logits = model(input_ids).logits  # (B, T, V)
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[..., None])[..., 0]
    if method == "trl":
        from trl.trainer.utils import selective_log_softmax

        return selective_log_softmax(model(input_ids).logits, labels)  # (B, T)
    if method == "cce":
        from cut_cross_entropy import linear_cross_entropy

        hidden = model.model(input_ids).last_hidden_state  # (B, T, H)
        head = model.get_output_embeddings().weight  # (V, H)
        return -linear_cross_entropy(hidden, head, labels, impl="torch_compile", reduction="none")  # (B, T)
    if method == "decoder":
        return model.model(input_ids=input_ids, use_cache=False).last_hidden_state[..., 0]  # (B, T)
    size = 0 if method == "gather_lse" else chunk
    return get_response_log_probs(model, input_ids, labels, logits_chunk_size=size)["log_probs"]


def _setup(args: argparse.Namespace):
    """The model, inputs and per-token weights every method scores: seeded, the same in each process."""
    from course.loop.models import build_tiny_model

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model = build_tiny_model(vocab_size=args.vocab, hidden_size=args.hidden,
                             num_hidden_layers=args.layers, num_attention_heads=args.heads,
                             max_position_embeddings=max(256, args.seq), seed=0, dtype=getattr(torch, args.dtype))
    model = model.to(device)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator)
    input_ids, labels = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
    weights = torch.randn(args.batch, args.seq, generator=generator).to(device)
    chunk = chunk_for(args)

    def forward_backward(method: str) -> torch.Tensor:
        log_probs = _score(method, model, input_ids, labels, chunk)
        (log_probs * weights).sum().backward()
        return log_probs.detach()

    def warm_up(method: str) -> None:
        # one short row: lazy initialization and the parameter-gradient buffers (the same for every
        # method) are allocated here, so what is measured after is the scoring's own cost; a
        # compiled method (cce) is compiled for the batch's own shape
        rows, length = (None, None) if method == "cce" else (1, chunk)
        _score(method, model, input_ids[:rows, :length], labels[:rows, :length], chunk).sum().backward()
        model.zero_grad(set_to_none=False)

    return model, device, forward_backward, warm_up


def run_one(args: argparse.Namespace, method: str, output: str) -> None:
    """In a fresh process: the peak extra memory of one forward + backward, and its results."""
    model, device, forward_backward, warm_up = _setup(args)
    warm_up(method)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        log_probs = forward_backward(method)
        torch.cuda.synchronize()
        peak_extra = torch.cuda.max_memory_allocated() - before
    else:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # reset the peak RSS (VmHWM) to the current RSS
        before = _rss_kib("VmRSS")
        log_probs = forward_backward(method)
        peak_extra = (_rss_kib("VmHWM") - before) * 1024
    head_grad = model.get_output_embeddings().weight.grad  # None for the decoder row
    head_grad = None if head_grad is None else head_grad.detach().float().cpu()
    torch.save({"peak_extra": peak_extra, "log_probs": log_probs.float().cpu(), "head_grad": head_grad}, output)


def run_timing(args: argparse.Namespace, methods: list[str], output: str) -> None:
    """In one process: `--repeats` rounds, each timing one forward + backward of every method in turn
    (the order rotating), so that a busy minute on a shared machine slows every method alike."""
    model, device, forward_backward, warm_up = _setup(args)
    for method in methods:
        warm_up(method)
    seconds = {method: [] for method in methods}
    for round_ in range(args.repeats):
        for method in methods[round_ % len(methods):] + methods[:round_ % len(methods)]:
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            forward_backward(method)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds[method].append(time.perf_counter() - start)
    torch.save(seconds, output)


def describe_machine(device: str) -> str:
    cpu = cpu_model()
    text = (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {platform.system()}, "
            f"load average {os.getloadavg()[0]:.1f}")
    if device == "cuda":
        text += f", GPU {torch.cuda.get_device_name()}"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--block-mib", type=float, default=8.0,
                        help="bytes of one float32 block of logits in the chunked head (default: 8 MiB)")
    parser.add_argument("--chunk", type=int, default=0, help="positions per block (overrides --block-mib)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds of every method (default: 5)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--method", choices=METHODS, help=argparse.SUPPRESS)  # subprocess mode: memory
    parser.add_argument("--time", nargs="+", choices=METHODS, help=argparse.SUPPRESS)  # subprocess mode: time
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.method:
        run_one(args, args.method, args.output)
        return
    if args.time:
        run_timing(args, args.time, args.output)
        return

    if min(args.vocab, args.hidden, args.layers, args.heads, args.batch, args.seq, args.repeats) < 1 \
            or args.chunk < 0 or args.block_mib <= 0:
        parser.error("sizes, --repeats and --block-mib must be positive (--chunk non-negative)")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    methods = [m for m in METHODS if available(m)]
    results = {}
    # glibc would keep freed (B, T, V) blocks in its heap and RSS would not fall; serving every block
    # over 1 MiB with mmap returns it on free, so peak RSS tracks live tensors
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**20)}
    # OpenMP workers that spin between parallel regions hold a core a busy machine needs elsewhere:
    # each region then waits for a descheduled worker, which costs a method in proportion to its
    # number of regions (the chunked head has ~10 per tile) rather than its work. Passive waiting
    # applies to every method alike; set OMP_WAIT_POLICY yourself to measure otherwise.
    environment.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with tempfile.TemporaryDirectory() as directory:
        for method in methods:
            output = os.path.join(directory, f"{method}.pt")
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--method", method,
                            "--output", output], check=True, env=environment)
            results[method] = torch.load(output)
        output = os.path.join(directory, "seconds.pt")
        subprocess.run([sys.executable, __file__, *sys.argv[1:], "--time", *methods, "--output", output],
                       check=True, env=environment)
        for method, seconds in torch.load(output).items():
            results[method]["seconds"] = seconds
    print_table(args, results)


def print_table(args: argparse.Namespace, results: dict) -> None:
    reference = results["log_softmax"]
    chunk = chunk_for(args)
    logits_mib = args.batch * args.seq * args.vocab * 4 / 2**20
    print(f"machine: {describe_machine(args.device)}")
    print(f"device {args.device}, {args.dtype} OLMo2 hidden {args.hidden} x {args.layers} layers, "
          f"V = {args.vocab}, B = {args.batch}, T = {args.seq}, chunk = {chunk} positions "
          f"({args.batch * chunk * args.vocab * 4 / 2**20:.1f} MiB of logits); "
          f"one fp32 (B, T, V) tensor = {logits_mib:.0f} MiB; {args.threads} threads, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'PASSIVE')}")
    print(f"{'method':<12} {'peak extra MiB':>15} {'vs log_softmax':>15} {'fwd+bwd s':>10} "
          f"{'vs log_softmax':>15} {'max |Δ log p|':>14} {'max |Δ grad|':>13}")
    reference_seconds = statistics.median(reference["seconds"])
    for method in METHODS:
        if method not in results:
            print(f"{method:<12} not installed: pip install -e '.[bench]' ({OPTIONAL[method]})")
            continue
        result = results[method]
        seconds = statistics.median(result["seconds"])
        if result["head_grad"] is None:  # the decoder row scores no log-prob
            differences = f"{'-':>14} {'-':>13}"
        else:
            differences = (f"{(result['log_probs'] - reference['log_probs']).abs().max().item():>14.2e} "
                           f"{(result['head_grad'] - reference['head_grad']).abs().max().item():>13.2e}")
        print(f"{method:<12} {result['peak_extra'] / 2**20:>15.0f} "
              f"{result['peak_extra'] / reference['peak_extra']:>15.3f} {seconds:>10.2f} "
              f"{seconds / reference_seconds:>15.2f} {differences}")
    chunked, decoder = results["chunked"], results["decoder"]
    chunked_seconds, decoder_seconds = (statistics.median(r["seconds"]) for r in (chunked, decoder))
    summary = {"chunked_over_log_softmax_peak": chunked["peak_extra"] / reference["peak_extra"],
               "chunked_over_log_softmax_time": chunked_seconds / reference_seconds,
               "decoder_over_log_softmax_peak": decoder["peak_extra"] / reference["peak_extra"]}
    # the head's own share: what each costs above the decoder row (at toy sizes RSS noise may leave none)
    above = {"peak": (chunked["peak_extra"] - decoder["peak_extra"],
                      reference["peak_extra"] - decoder["peak_extra"]),
             "time": (chunked_seconds - decoder_seconds, reference_seconds - decoder_seconds)}
    for name, (head, plain) in above.items():
        if plain > 0:
            summary[f"chunked_over_log_softmax_{name}_above_decoder"] = head / plain
    if "trl" in results:
        summary["chunked_over_trl_peak"] = chunked["peak_extra"] / results["trl"]["peak_extra"]
        summary["chunked_over_trl_time"] = chunked_seconds / statistics.median(results["trl"]["seconds"])
    print(json.dumps({key: round(value, 4) for key, value in summary.items()}))


if __name__ == "__main__":
    main()
