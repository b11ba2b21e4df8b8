"""A fresh process's first call against its steady calls, for one model on the opencl
device (bench.models' makers), with and without the program cache (OCLF_PROGRAM_CACHE,
runtime/program_cache.hpp). Each configuration runs the model in a child process of its own:

- cold: empty program cache and empty driver kernel cache (POCL_CACHE_DIR; NVIDIA's
  ComputeCache is left as it is): a machine's very first run;
- no cache: OCLF_PROGRAM_CACHE=0, the driver's cache warm: what every process paid before
  the program cache, each program compiled from source again;
- warm: the program cache that the cold run filled: programs made from stored binaries.

Each child reports the import of torch and the device, moving the model to the device, the
first call (the kernels' programs made, then the run; synchronised), the median of the
steady calls after it, and the program cache's counters: programs built from source or
loaded from binaries, and the seconds spent making them. Tuning is off (OCLF_TUNE=0), so
the first call is program making, the driver's first use of each kernel and the run. After
the cold run, "no cache" and "warm" alternate --repeats times (a busy machine slows both
alike); the table shows each one's median.

    python -m bench.first_call [--model resnet50] [--rounds 5] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("cold", "no cache", "warm")


def child(model: str, rounds: int) -> Dict[str, object]:
    """Runs in the child: times one model's first and steady calls on the opencl device."""
    start = time.perf_counter()
    import torch

    import opencl_functions
    import torch_opencl  # noqa: F401  (registers the opencl device)
    from bench.models import MODELS

    imported = time.perf_counter()
    torch.set_num_threads(1)  # torch's idle workers would spin on PoCL's cores
    run = MODELS[model]["make"]("opencl")
    torch.opencl.synchronize()
    ready = time.perf_counter()
    run()
    torch.opencl.synchronize()
    first = time.perf_counter()
    steady = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        torch.opencl.synchronize()
        steady.append(time.perf_counter() - t0)
    cache = opencl_functions._core.program_cache(opencl_functions._core.current_device())
    return {"import_s": imported - start, "to_device_s": ready - imported, "first_s": first - ready,
            "steady_s": statistics.median(steady), "device": opencl_functions.device_info()["device"],
            **{k: cache[k] for k in ("programs_built", "programs_loaded", "binaries_stored", "binaries_rejected",
                                     "build_seconds", "load_seconds")}}


def run_child(model: str, rounds: int, env: Dict[str, str]) -> Dict[str, object]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "OCLF_TUNE": "0", **env}
    proc = subprocess.run([sys.executable, "-m", "bench.first_call", "--child", model, "--rounds", str(rounds)],
                          cwd=ROOT, env=full, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"the {model} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> Dict[str, Dict[str, object]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50", help="a model of bench.models (default resnet50: b1 224x224)")
    p.add_argument("--rounds", type=int, default=5, help="steady calls after the first (default 5)")
    p.add_argument("--repeats", type=int, default=3, help="runs of no cache and warm, alternated (default 3)")
    p.add_argument("--child", metavar="MODEL", help="internal: run one model here and print JSON")
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.rounds)))
        return {}
    from opencl_functions.info import host_cpu

    runs: Dict[str, List[Dict[str, object]]] = {config: [] for config in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="oclf-first-call-") as tmp:
        programs, pocl = Path(tmp) / "programs", Path(tmp) / "pocl"
        envs = {"cold": {"OCLF_PROGRAM_CACHE": str(programs), "POCL_CACHE_DIR": str(pocl)},
                "no cache": {"OCLF_PROGRAM_CACHE": "0", "POCL_CACHE_DIR": str(pocl)},
                "warm": {"OCLF_PROGRAM_CACHE": str(programs), "POCL_CACHE_DIR": str(pocl)}}
        runs["cold"].append(run_child(args.model, args.rounds, envs["cold"]))
        for _ in range(args.repeats):
            for config in ("no cache", "warm"):
                runs[config].append(run_child(args.model, args.rounds, envs[config]))
    results = {config: {key: statistics.median(r[key] for r in rs) if key != "device" else rs[0][key]
                        for key in rs[0]} for config, rs in runs.items()}
    print(f"{args.model} on the opencl device ({results['cold']['device']}); host CPU: {host_cpu()}")
    print(f"median of {args.repeats} runs (cold: 1); seconds")
    print(f"{'':<10}{'import':>8}{'to device':>11}{'first call':>12}{'steady':>8}{'built':>7}{'loaded':>8}"
          f"{'making programs':>17}")
    for config, r in results.items():
        print(f"{config:<10}{r['import_s']:>8.2f}{r['to_device_s']:>11.2f}{r['first_s']:>12.2f}{r['steady_s']:>8.3f}"
              f"{r['programs_built']:>7.0f}{r['programs_loaded']:>8.0f}"
              f"{r['build_seconds'] + r['load_seconds']:>17.2f}")
    return results


if __name__ == "__main__":
    main()
