"""LLM decoding, where a device's launch cost shows most: batch 1, greedy, a key/value cache,
each new token one forward pass of one row. Random weights (the point is time, launches and
agreement; no hub is reachable to fetch trained ones), float16 by default:

    llama   TinyLlama-1.1B's shape (transformers' LlamaConfig: hidden 2048, 22 layers, 32 heads,
            4 key/value heads (grouped-query attention), MLP 5632, vocabulary 32000)
    gpt2    GPT-2 (GPT2Config()'s defaults, 124M parameters)

A run: a 16-token prompt's pass (it gives the first token), then 127 one-token steps; each
step picks its token on the device (argmax), writes it into the next step's input and keeps
its logits, so no step waits for the host. Ours, on the opencl device: eager (the step as it
is, transformers' default DynamicCache), replay (a StaticCache; one step recorded with
device.graph() and replayed per token), compile (a StaticCache, the step under torch.compile:
our back end's generated kernels, each graph recorded and replayed). torch's side, in child
processes on CUDA (on the CPU, eager alone, in float32, where no CUDA is): eager (the same
step), graph (the static-cache step captured once in a CUDA graph, replayed per token) and
reduce-overhead (the static-cache step under torch.compile's mode="reduce-overhead", in a
process of its own). A variant that fails is recorded with its reason.

Per variant: the median (and fastest) run of --rounds, as ms/token (the run over its new
tokens) and tokens/s; commands per token (ours: kernel launches and CLBlast calls, by a
kernel profile of one step, the recording's own count when replayed, a compiled step's
first, unrecorded call; torch CUDA eager: kernels, by torch.profiler), the wall time per
command (ms/token over commands) and the host's (one more run's steps handed to the device,
not waited for, over commands: what a launch costs the host); the share of the memory
bandwidth (bench.peaks): each pass reads every
weight once (an embedding one row), each step the keys and values cached so far. Agreement:
our logits against torch's float32 on the CPU with the same weights, fed the same tokens (one
pass over the prompt and ours): the largest error relative to the largest logit, and the steps
whose token is the CPU's greedy choice too (all of them: our tokens are its greedy decoding).

    python -m bench.decode [--model llama|gpt2 ...] [--mode eager|replay|compile ...] [--dtype D]
                           [--rounds N] [--quick] [--json FILE] [--peer-device cuda|cpu|none] [--cuda-timeout S]

--quick: tiny configurations (2 layers, hidden 96, vocabulary 311), a 7-token prompt, 6 new
tokens, eager and replay unless --mode says otherwise (compiling costs more than the rest on
a CPU); its rows are recorded under keys of their own.
"""
from __future__ import annotations

import argparse
import copy
import inspect
import json
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

import opencl_functions
from bench import peaks, peers, record

MODES = ("eager", "replay", "compile")
PEER_VARIANTS = ("eager", "graph", "reduce-overhead")
PROMPT_TOKENS, NEW_TOKENS = 16, 128
QUICK_PROMPT, QUICK_NEW = 7, 6


def device_module():
    """The opencl torch device's Python module (importing it registers the device)."""
    import torch_opencl

    return torch_opencl


def config(name: str, quick: bool):
    """The model's transformers configuration: full size, or --quick's tiny one (odd sizes)."""
    from transformers import GPT2Config, LlamaConfig

    if name == "llama":
        sizes = dict(hidden_size=96, intermediate_size=200, num_hidden_layers=2, num_attention_heads=6,
                     num_key_value_heads=2, vocab_size=311) if quick else \
            dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000)
        return LlamaConfig(**sizes, max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False)
    if name == "gpt2":
        # (tiny and tied to its embedding, GPT-2's output with the default weights' scale
        # picks one token over and over)
        return GPT2Config(n_embd=96, n_layer=2, n_head=6, vocab_size=311, n_positions=128, initializer_range=0.2,
                          bos_token_id=0, eos_token_id=0) if quick else GPT2Config()
    raise ValueError(f"bench.decode: unknown model {name!r} (llama, gpt2)")


def label(name: str, quick: bool, dtype: str) -> str:
    what = {"llama": "Llama (TinyLlama-1.1B's shape)", "gpt2": "GPT-2"}[name] + (" tiny" if quick else "")
    return f"{what}, random weights, {QUICK_PROMPT if quick else PROMPT_TOKENS}-token prompt + " \
           f"{QUICK_NEW if quick else NEW_TOKENS} tokens, {dtype}"


def build(name: str, quick: bool, device: str, dtype: torch.dtype):
    """The model with seed 0's weights (the same on every device), eval, on `device` in `dtype`."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config(name, quick), attn_implementation="sdpa").eval()
    return model.to(device=device, dtype=dtype)


def prompt_of(model, quick: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, model.config.vocab_size, (1, QUICK_PROMPT if quick else PROMPT_TOKENS),
                         generator=generator)


def bytes_per_run(model, prompt: int, new: int, dtype: torch.dtype) -> int:
    """What a run must read at least: each of its `new` passes every weight once (an embedding
    table one row, unless it is also the output layer), each step the keys and values so far."""
    size = torch.empty((), dtype=dtype).element_size()
    output, seen, weights = model.get_output_embeddings().weight, set(), 0
    for module in model.modules():
        for param in module.parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                lookup = isinstance(module, torch.nn.Embedding) and param is not output
                weights += (param.shape[-1] if lookup else param.numel()) * size
    cfg = model.config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    per_position = 2 * cfg.num_hidden_layers * heads * (cfg.hidden_size // cfg.num_attention_heads) * size
    return new * weights + sum(prompt + t for t in range(1, new)) * per_position


def static_cache(model, length: int):
    """transformers' StaticCache for batch 1, whichever release's constructor this is."""
    from transformers import StaticCache

    known = inspect.signature(StaticCache.__init__).parameters
    extra = {"max_batch_size": 1, "batch_size": 1, "device": model.device, "dtype": model.dtype}
    return StaticCache(config=model.config, max_cache_len=length, **{k: v for k, v in extra.items() if k in known})


class Decoder:
    """Greedy decoding of `prompt` on the model's device, every token's state in device
    tensors: the next input (ids), its position (pos), the step's index (i), and the tokens and
    float32 logits so far. prefill() starts a run; step() adds a token without the host."""

    def __init__(self, model, prompt: torch.Tensor, new: int, static: bool):
        device = model.device
        self.model, self.new, self.static = model, new, static
        self.prompt = prompt.to(device)
        self.ids = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.i = torch.zeros(1, dtype=torch.long, device=device)
        self.tokens = torch.zeros(new, dtype=torch.long, device=device)
        self.logits = torch.zeros(new, model.config.vocab_size, device=device)
        self.cache = static_cache(model, prompt.shape[1] + new) if static else None
        # transformers releases before 5 take the cache's write positions as an argument.
        self.positions_arg = "cache_position" in inspect.signature(model.base_model.forward).parameters

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor):
        extra = {"cache_position": positions} if self.positions_arg else {}
        return self.model(input_ids=ids, past_key_values=self.cache, use_cache=True,
                          position_ids=positions.view(1, -1), **extra).logits[0, -1]

    def _keep(self, row: torch.Tensor) -> None:
        token = row.argmax().view(1)
        self.tokens.index_copy_(0, self.i, token)
        self.logits.index_copy_(0, self.i, row.float().view(1, -1))
        self.ids.copy_(token.view(1, 1))
        self.i.add_(1)

    def prefill(self) -> None:
        from transformers import DynamicCache

        with torch.no_grad():
            if self.static:
                self.cache.reset()
            else:
                self.cache = DynamicCache()
            length = self.prompt.shape[1]
            self.i.zero_()
            self._keep(self._forward(self.prompt, torch.arange(length, device=self.prompt.device)))
            self.pos.fill_(length)

    def step(self) -> None:
        with torch.no_grad():
            self._keep(self._forward(self.ids, self.pos))
            self.pos.add_(1)

    def run(self, step: Callable[[], None]) -> None:
        self.prefill()
        for _ in range(self.new - 1):
            step()


def times(dec: Decoder, step: Callable[[], None], sync: Callable[[], None], rounds: int) -> Dict[str, float]:
    """The median and fastest of `rounds` runs, each waited for, and the host's seconds per
    step in one more run (steps handed to the device, not waited for)."""
    spent = []
    for _ in range(rounds):
        start = time.perf_counter()
        dec.run(step)
        sync()
        spent.append(time.perf_counter() - start)
    dec.prefill()
    sync()
    start = time.perf_counter()
    for _ in range(dec.new - 1):
        step()
    host = (time.perf_counter() - start) / (dec.new - 1)
    sync()
    return {"seconds": statistics.median(spent), "seconds_min": min(spent), "host_per_token": host}


def prepared(dec: Decoder, mode: str, sync: Callable[[], None], count: Callable) -> Tuple[Callable[[], None], int]:
    """The step `mode` times, after its first-use work (a step run once, recorded or compiled),
    and the commands of one step as `count(fn)` counts fn's."""
    dec.prefill()
    if mode == "eager":
        dec.step()
        return dec.step, count(dec.step)
    if mode == "replay":
        dec.step()
        dev = device_module()
        with dev.graph() as g:
            dec.step()
        sync()
        counts = g.counts()
        return g.replay, counts["launches"] + counts["calls"]
    if mode == "compile":
        compiled = torch.compile(dec.step)
        launches = count(compiled)  # the first call runs the generated kernels unrecorded
        for _ in range(2):  # the second call records each graph, the third replays it
            compiled()
        return compiled, launches
    raise ValueError(f"bench.decode: unknown mode {mode!r} ({', '.join(MODES)})")


def reference(cpu_model, prompt: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The CPU model's float32 logits at each new token's step, fed the prompt and `tokens`."""
    with torch.no_grad():
        seq = torch.cat([prompt, tokens[:-1].view(1, -1).cpu()], dim=1)
        return cpu_model(input_ids=seq).logits[0, prompt.shape[1] - 1:].float()


def agreement(logits: torch.Tensor, tokens: torch.Tensor, ref: torch.Tensor) -> Dict[str, float]:
    logits, tokens = logits.cpu(), tokens.cpu()
    error = float((logits - ref).abs().max() / ref.abs().max().clamp(min=1e-12))
    return {"max_rel_error": error, "tokens_agree": int((ref.argmax(-1) == tokens).sum())}


def measure_ours(model, prompt: torch.Tensor, new: int, mode: str, rounds: int, cpu_model) -> Dict:
    """One of our modes, `model` on the opencl device: times, commands per token, agreement."""
    dev = device_module()
    sync = dev.synchronize

    def count(fn: Callable[[], None]) -> int:
        sync()
        with dev.kernel_profile() as prof:
            fn()
        return len(prof.launches)

    dec = Decoder(model, prompt, new, static=mode != "eager")
    threads = torch.get_num_threads()
    # On a CPU device, torch's idle OpenMP workers would spin on PoCL's cores: one thread, from
    # the first step on (torch.compile's graphs are guarded on the count: a change recompiles).
    ours_threads = 1 if opencl_functions.device_info()["type"] == "CPU" else threads
    torch.set_num_threads(ours_threads)
    try:
        start = time.perf_counter()
        step, commands = prepared(dec, mode, sync, count)
        sync()
        first = time.perf_counter() - start
        dec.run(step)
        torch.set_num_threads(threads)
        result = agreement(dec.logits, dec.tokens, reference(cpu_model, prompt, dec.tokens))
        torch.set_num_threads(ours_threads)
        result.update(times(dec, step, sync, rounds))
    finally:
        torch.set_num_threads(threads)
    return {**result, "launches_per_token": commands, "first_call": first, "tokens": dec.tokens.cpu().tolist()}


def cuda_kernels(fn: Callable[[], None], device: str) -> Optional[int]:
    """Kernels torch CUDA ran for one fn() (torch.profiler), None elsewhere or if it cannot say."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA and not e.name.startswith("Memset"))
    except Exception:  # noqa: BLE001  (the count is an extra: the time stands without it)
        return None


def peer_only(args: argparse.Namespace) -> Dict:
    """The child: torch's variants on --peer-device, {variant: {seconds, ...}, "errors": {...}}."""
    device = args.peer_device
    # torch on the CPU runs float32, its fast path (its 16-bit products are slower there).
    dtype = torch.float32 if device == "cpu" else getattr(torch, args.dtype)
    peers.tuned_like_a_user(device)
    sync = peers.synchronizer(device)
    model = build(args.peer_only, args.quick, device, dtype)
    prompt = prompt_of(model, args.quick)
    out: Dict = {"errors": {}}
    for variant in args.peer_variants.split(","):
        try:
            dec = Decoder(model, prompt, QUICK_NEW if args.quick else NEW_TOKENS, static=variant != "eager")
            dec.prefill()
            step, launches = dec.step, None
            if variant == "eager":
                dec.step()
                launches = cuda_kernels(dec.step, device) if device == "cuda" else None
            elif variant == "graph":
                step = peers.cuda_graph(dec.step)
            elif variant == "reduce-overhead":
                for buffer in (dec.ids, dec.pos, dec.i, dec.tokens, dec.logits):  # written in place by each step
                    torch._dynamo.mark_static_address(buffer)
                step = torch.compile(dec.step, mode="reduce-overhead")
                for _ in range(3):  # compiles, then records the CUDA graph
                    step()
            else:
                raise ValueError(f"unknown variant {variant!r} ({', '.join(PEER_VARIANTS)})")
            sync()
            out[variant] = {**times(dec, step, sync, args.rounds), "launches_per_token": launches,
                            "tokens": dec.tokens.cpu().tolist()}
        except Exception as err:  # noqa: BLE001  (any failure is recorded, with its reason)
            out["errors"][variant] = peers._reason(err)
        sync()
    return out


def measure_peer(name: str, quick: bool, dtype: str, rounds: int, device: str, variants: List[str],
                 timeout: float) -> Tuple[Dict, Dict]:
    """torch's variants in child processes (reduce-overhead in one of its own): ({variant:
    result}, {variant: reason})."""
    base = ["--peer-only", name, "--peer-device", device, "--dtype", dtype, "--rounds", str(rounds)]
    base += ["--quick"] if quick else []
    found, errors = {}, {}
    groups = [[v for v in variants if v != "reduce-overhead"], [v for v in variants if v == "reduce-overhead"]]
    for group in filter(None, groups):
        got = peers._child([*base, "--peer-variants", ",".join(group)], timeout, module="bench.decode")
        for variant in group:
            if variant in got:
                found[variant] = got[variant]
            else:
                errors[variant] = got.get("failed") or got.get("errors", {}).get(variant, "no time printed")
    return found, errors


def describe(row: Dict) -> str:
    """The row in words: each of our modes and torch's variants, per token."""
    new, peak = row["new_tokens"], peaks.lookup(row["machine"]["device"])

    def part(what: str, r: Dict) -> str:
        per = r["seconds"] / new
        text = f"{what} {per * 1e3:.3f} ms/token ({1 / per:.0f} tokens/s"
        if r.get("launches_per_token"):
            n = r["launches_per_token"]
            text += f", {n} commands/token, {per / n * 1e6:.2f} µs each, host {r['host_per_token'] / n * 1e6:.2f} µs"
        if peak and peak.bw:
            text += f", {peaks.percent(row['bytes_per_run'] / r['seconds'] / peak.bytes_per_s())} of bandwidth"
        if "max_rel_error" in r:
            text += f", error {r['max_rel_error']:.1e}, {r['tokens_agree']}/{new} tokens as the CPU's"
        return text + ")"

    parts = [part(f"ours {mode}", r) for mode, r in row["ours"].items()]
    parts += [f"ours {mode} failed ({why})" for mode, why in row["ours_errors"].items()]
    device = row.get("peer_device")
    parts += [part(f"torch {device} {v}", r) for v, r in row["torch"].items()]
    parts += [f"torch {device} {v} failed ({why})" for v, why in row["torch_errors"].items()]
    best_ours, best_peer = fastest(row["ours"], MODES), fastest(row["torch"], PEER_VARIANTS)
    for ours, theirs, what in (("eager", "eager", "eager"), (best_ours, best_peer, "fastest")):
        if ours in row["ours"] and theirs in row["torch"]:
            speed = row["torch"][theirs]["seconds"] / row["ours"][ours]["seconds"]
            parts.append(f"{what}: ours {ours} at {speed:.2f}x the speed of torch {theirs}")
    return f"{row['label']} ({row['machine']['device']}):\n  " + "\n  ".join(parts)


def fastest(results: Dict[str, Dict], among) -> Optional[str]:
    """The fastest of the variants `among` that have a time, or None."""
    timed = [v for v in among if v in results]
    return min(timed, key=lambda v: results[v]["seconds"]) if timed else None


def main(argv=None) -> Dict[str, Dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["llama", "gpt2"], action="append", help="repeatable (default: llama)")
    p.add_argument("--mode", choices=MODES, action="append", help="our modes (default: all; --quick: eager, replay)")
    p.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default="float16")
    p.add_argument("--rounds", type=int, default=5, help="timed runs per mode (default 5)")
    p.add_argument("--quick", action="store_true", help="tiny configurations, a few tokens (for tests)")
    p.add_argument("--json", help="record each row into this file as it is measured (bench.record, bench.report)")
    p.add_argument("--peer-device", choices=["cuda", "cpu", "none"],
                   help="where torch's side runs (default: cuda where present, else cpu)")
    p.add_argument("--peer-variants", default=",".join(PEER_VARIANTS),
                   help="torch's variants, comma-separated (default: all; on the CPU only eager)")
    p.add_argument("--cuda-timeout", type=float, default=600.0, help="seconds each torch process may take")
    p.add_argument("--peer-only", metavar="MODEL", help="internal: time torch's side alone, print JSON")
    args = p.parse_args(argv)
    if args.peer_only:
        print(json.dumps(peer_only(args)))
        return {}
    from opencl_functions.info import host_cpu

    device_module()
    peer = args.peer_device or ("cuda" if torch.cuda.is_available() else "cpu")
    variants = [v for v in args.peer_variants.split(",") if v]
    unknown = sorted(set(variants) - set(PEER_VARIANTS))
    if unknown:
        p.error(f"--peer-variants: {unknown} not among {list(PEER_VARIANTS)}")
    if peer == "cpu" and args.peer_device is None:
        variants = ["eager"]  # CUDA graphs and cudagraph trees are CUDA's
    modes = args.mode or (["eager", "replay"] if args.quick else list(MODES))
    print(f"host CPU: {host_cpu()}", flush=True)
    rows = {}
    for name in args.model or ["llama"]:
        cpu_model = build(name, args.quick, "cpu", torch.float32)
        prompt = prompt_of(cpu_model, args.quick)
        new, dtype = QUICK_NEW if args.quick else NEW_TOKENS, getattr(torch, args.dtype)
        row = {"model": name, "label": label(name, args.quick, args.dtype), "dtype": args.dtype, "quick": args.quick,
               "prompt_tokens": prompt.shape[1], "new_tokens": new,
               "params": sum(x.numel() for x in cpu_model.parameters()),
               "bytes_per_run": bytes_per_run(cpu_model, prompt.shape[1], new, dtype), "rounds": args.rounds,
               "machine": record.machine(), "ours": {}, "ours_errors": {},
               "peer_device": None if peer == "none" else peer, "torch": {}, "torch_errors": {}}
        key = f"{name}:{args.dtype}" + (":quick" if args.quick else "")
        model = copy.deepcopy(cpu_model).to(device="opencl", dtype=dtype)  # the same weights

        def save() -> None:
            if args.json:
                record.save(args.json, "decode", key, row)

        def ours(mode: str) -> None:
            try:
                row["ours"][mode] = measure_ours(model, prompt, new, mode, args.rounds, cpu_model)
            except Exception as err:  # noqa: BLE001  (recorded with its reason)
                row["ours_errors"][mode] = peers._reason(err)
            save()

        for mode in [m for m in MODES if m in modes and m != "compile"]:
            ours(mode)
        if peer != "none":
            row["torch"], row["torch_errors"] = measure_peer(name, args.quick, args.dtype, args.rounds, peer,
                                                             variants, args.cuda_timeout)
            save()
        if "compile" in modes:  # last: a failure there, or a budget spent on it, leaves the rest recorded
            ours("compile")
        print(describe(row), flush=True)
        rows[key] = row
    return rows


if __name__ == "__main__":
    main()
