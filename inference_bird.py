"""Bird-song classifier demo: the trained ResNet on held-out clips, with the OpenCL layers and with torch.

    python inference_bird.py            # the held-out clips stored in the checkpoint (offline)
    python inference_bird.py --quick    # one clip per species
    python inference_bird.py --all      # every clip of the test split (reads the recordings' wheels)

For each clip it prints the top-3 species with probabilities from both runs and whether they
agree: same top-1 and every probability within --atol. Exits 1 when any clip disagrees.
The checkpoint comes from `make bird-model` (python -m extras.train_audio).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

import torch

from extras import birdsong
from extras.train_audio import make_model
from utils.patching import opencl_layers

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent / "extras" / "models" / "birdsong_resnet.pt"


def top3(probs: torch.Tensor, classes: List[str]) -> str:
    values, idx = probs.topk(min(3, len(classes)))
    return " | ".join(f"{classes[i]} {v:.3f}" for v, i in zip(values.tolist(), idx.tolist()))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    p.add_argument("--quick", action="store_true", help="one clip per species")
    p.add_argument("--all", action="store_true", help="the whole test split instead of the stored clips")
    p.add_argument("--atol", type=float, default=1e-3, help="largest allowed probability difference")
    args = p.parse_args(argv)
    if args.atol <= 0:
        p.error(f"--atol must be positive, got {args.atol}")
    if not args.checkpoint.is_file():
        raise SystemExit(f"no checkpoint at {args.checkpoint}: build it with `make bird-model`")

    ckpt = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    classes = list(ckpt["classes"])
    model = make_model(ckpt["arch"], len(classes))
    model.load_state_dict(ckpt["state_dict"])
    model.eval()

    if args.all:
        test = birdsong.build("test", ckpt["seed"])
        waves, labels, recordings, starts = test.waves, test.labels, test.recordings, test.starts
    else:
        demo = ckpt["demo"]
        waves = demo["waves"].float() / 32767.0
        labels, recordings, starts = demo["labels"], demo["recordings"], demo["starts"]
    if args.quick:
        first = [labels.tolist().index(c) for c in sorted(set(labels.tolist()))]
        waves, labels = waves[first], labels[first]
        recordings, starts = [recordings[i] for i in first], [starts[i] for i in first]

    x = birdsong.log_mel(waves)  # (N, 1, mels, frames)
    with torch.no_grad():
        with opencl_layers():
            p_ocl = model(x).softmax(1)
        p_torch = model(x).softmax(1)

    rate = ckpt["features"]["sample_rate"]
    print(f"{ckpt['arch']} checkpoint {args.checkpoint.name}: {len(classes)} classes, {len(labels)} held-out clips")
    disagree = 0
    for i in range(len(labels)):
        diff = float((p_ocl[i] - p_torch[i]).abs().max())
        agree = int(p_ocl[i].argmax()) == int(p_torch[i].argmax()) and diff <= args.atol
        disagree += not agree
        hit = "correct" if int(p_ocl[i].argmax()) == int(labels[i]) else "wrong"
        print(f"[{i + 1:2d}] {classes[int(labels[i])]}  ({recordings[i]} at {starts[i] / rate:.2f} s)")
        print(f"     OpenCL: {top3(p_ocl[i], classes)}  ({hit})")
        print(f"     torch:  {top3(p_torch[i], classes)}")
        print(f"     max |p_OpenCL - p_torch| = {diff:.2e}: {'agree' if agree else 'DISAGREE'}")
    acc_ocl = float((p_ocl.argmax(1) == labels).float().mean())
    acc_torch = float((p_torch.argmax(1) == labels).float().mean())
    print(f"accuracy OpenCL {acc_ocl:.3f}, torch {acc_torch:.3f} (chance {1 / len(classes):.3f}); "
          f"{len(labels) - disagree}/{len(labels)} clips agree within {args.atol:g}")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
