"""Train a ResNet on log-mel spectrograms of bird song with the OpenCL layers (forward and backward).

    python -m extras.train_audio                       # small ResNet on the wheel recordings
    python -m extras.train_audio --arch resnet50       # torchvision ResNet-50, 1 input channel
    python -m extras.train_audio --quick               # 1 epoch on a few clips (tests)
    python -m extras.train_audio --birdset             # BirdSet PER from the Hugging Face Hub
    python -m extras.train_audio --device opencl       # the whole model on the opencl torch device

By default (--device patched) every nn.Conv2d and nn.Linear runs inside
utils.patching.opencl_layers() for the forward pass and, through their autograd Functions, the
backward pass. --device opencl moves the model, the batches and the optimizer's state to the
opencl torch device (torch_opencl), where every layer, the loss and AdamW's step run
as OpenCL kernels; --device cpu (or --no-opencl) is plain torch. Prints a tqdm bar per epoch, the train
and test loss and accuracy, saves a PNG of the curves and a checkpoint that inference_bird.py loads.
The checkpoint also carries a few held-out clips (raw audio) so inference runs offline.
"""
from __future__ import annotations

import argparse
import io
import socket
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402
from torch import nn  # noqa: E402
from torchvision.models.resnet import BasicBlock  # noqa: E402
from tqdm import tqdm  # noqa: E402

from extras import birdsong  # noqa: E402

ARCHS = ("resnet_small", "resnet18", "resnet50")
BIRDSET_REPO, BIRDSET_CONFIG = "DBD-research-group/BirdSet", "PER"


class SmallResNet(nn.Module):
    """A narrow ResNet-10 for (B, 1, mels, frames) log-mels: 3x3 stem (stride 2) and 2x2 max-pool,
    four stages of one torchvision BasicBlock each (widths 16, 32, 64, 128; stride 2 from the
    second stage), global average pooling, a linear classifier. About 0.3 M parameters."""

    def __init__(self, num_classes: int, widths: Tuple[int, ...] = (16, 32, 64, 128)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, widths[0], 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        stages, cin = [], widths[0]
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            down = None
            if stride != 1 or cin != width:
                down = nn.Sequential(nn.Conv2d(cin, width, 1, stride=stride, bias=False), nn.BatchNorm2d(width))
            stages.append(BasicBlock(cin, width, stride=stride, downsample=down))
            cin = width
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(arch: str, num_classes: int) -> nn.Module:
    """resnet_small (SmallResNet) or a torchvision resnet18 / resnet50 whose first convolution
    takes 1 channel (the log-mel) instead of RGB."""
    if arch == "resnet_small":
        return SmallResNet(num_classes)
    if arch in ("resnet18", "resnet50"):
        model = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
        model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return model
    raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Log-mel batch (B, 1, mels, frames): a random circular time shift and one frequency and one
    time mask (set to the clip mean, 0 after standardization) per clip."""
    out = x.clone()
    b, _, mels, frames = x.shape
    shifts = torch.randint(0, frames, (b,), generator=gen).tolist()
    for i in range(b):
        out[i] = torch.roll(out[i], shifts[i], dims=-1)
        f0, fw = int(torch.randint(0, mels - 8, (1,), generator=gen)), int(torch.randint(0, 8, (1,), generator=gen))
        t0, tw = int(torch.randint(0, frames - 10, (1,), generator=gen)), int(torch.randint(0, 10, (1,), generator=gen))
        out[i, :, f0:f0 + fw, :] = 0.0
        out[i, :, :, t0:t0 + tw] = 0.0
    return out


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int,
             weight: torch.Tensor, device: str = "cpu") -> Tuple[float, float, float]:
    """(loss, accuracy, balanced accuracy) of model (on `device`) on log-mels x with labels y."""
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + batch_size].to(device)).cpu() for i in range(0, len(x), batch_size)])
    pred = logits.argmax(1)
    per_class = [float((pred[y == c] == c).float().mean()) for c in torch.unique(y).tolist()]
    loss = float(F.cross_entropy(logits, y, weight=weight))
    return loss, float((pred == y).float().mean()), float(np.mean(per_class))


def load_birdset(max_clips: Optional[int] = None):
    """BirdSet PER (train and test splits) through Hugging Face datasets, cut to 1 s clips at
    birdsong.SAMPLE_RATE: (train BirdClips, test BirdClips). Exits with a clear message when
    datasets is missing or the Hub cannot be reached."""
    try:
        import datasets
        import soundfile
    except ImportError as err:
        raise SystemExit(f"--birdset needs Hugging Face datasets and soundfile (see requirements.txt): {err}")
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname
    try:
        if not constants.HF_HUB_OFFLINE:  # offline mode reads the local cache only
            socket.create_connection((host, 443), timeout=5).close()
    except OSError as err:  # fail at once instead of waiting through the Hub client's retries
        raise SystemExit(f"--birdset needs network access to {host} to load {BIRDSET_REPO} ({BIRDSET_CONFIG}), "
                         f"which is not reachable ({err}); without it, train on the bundled recordings "
                         f"(drop --birdset).")
    try:
        ds = datasets.load_dataset(BIRDSET_REPO, BIRDSET_CONFIG)
        ds = ds.cast_column("audio", datasets.Audio(decode=False))
    except Exception as err:  # offline, Hub errors, unsupported loading script: all end here
        raise SystemExit(
            f"--birdset: could not load {BIRDSET_REPO} ({BIRDSET_CONFIG}) from the Hugging Face Hub: "
            f"{type(err).__name__}: {err}\nThis needs network access to huggingface.co; without it, "
            f"train on the bundled recordings (drop --birdset).")
    names = ds["train"].features["ebird_code"].names

    def clips(split: str) -> birdsong.BirdClips:
        waves, labels, recs = [], [], []
        for row in ds[split].select(range(min(len(ds[split]), max_clips or len(ds[split])))):
            audio = row["audio"]
            where = audio["path"] if audio.get("bytes") is None else io.BytesIO(audio["bytes"])
            data, rate = soundfile.read(where, dtype="float32", always_2d=True)
            data = birdsong.resample(data.mean(1), rate)
            # Train rows mark their calls in detected_events ([[start, end], ...] s); test rows have start_time.
            events = row.get("detected_events") or [[row.get("start_time") or 0.0]]
            start = int(birdsong.SAMPLE_RATE * events[0][0])
            piece = data[start:start + birdsong.CLIP_SAMPLES]
            waves.append(np.pad(piece, (0, birdsong.CLIP_SAMPLES - len(piece))))
            labels.append(int(row["ebird_code"]))
            recs.append(str(row.get("filepath", audio.get("path"))))
        return birdsong.BirdClips(torch.from_numpy(np.stack(waves)), torch.tensor(labels), recs,
                                  [0] * len(recs), tuple(names))

    return clips("train"), clips("test")


def demo_clips(test: birdsong.BirdClips, per_class: int, seed: int) -> Dict[str, object]:
    """A few held-out clips per class, raw audio as int16, to ship inside the checkpoint."""
    gen = np.random.default_rng(seed)
    chosen: List[int] = []
    for c in torch.unique(test.labels).tolist():
        idx = np.flatnonzero(test.labels.numpy() == c)
        chosen += sorted(gen.choice(idx, size=min(per_class, len(idx)), replace=False).tolist())
    waves = (test.waves[chosen].clamp(-1, 1) * 32767).round().to(torch.int16)
    return {"waves": waves, "labels": test.labels[chosen], "recordings": [test.recordings[i] for i in chosen],
            "starts": [test.starts[i] for i in chosen]}


def plot_curves(history: List[Dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [h["train_loss"] for h in history], "o-", label="train")
    ax_loss.plot(epochs, [h["test_loss"] for h in history], "o-", label="test")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    ax_acc.plot(epochs, [h["train_acc"] for h in history], "o-", label="train")
    ax_acc.plot(epochs, [h["test_acc"] for h in history], "o-", label="test")
    ax_acc.plot(epochs, [h["test_bal_acc"] for h in history], "o--", label="test (balanced)")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1.02))
    for ax in (ax_loss, ax_acc):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="resnet_small", choices=ARCHS)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="1 epoch on 8 clips per class and split")
    p.add_argument("--device", choices=["patched", "opencl", "cpu"], default="patched",
                   help="patched: OpenCL layers on CPU tensors (default); opencl: the opencl torch device; "
                        "cpu: plain torch")
    p.add_argument("--no-opencl", action="store_true", help="plain torch layers (the same as --device cpu)")
    p.add_argument("--birdset", action="store_true", help=f"train on BirdSet {BIRDSET_CONFIG} from the Hub")
    p.add_argument("--checkpoint", type=Path, default=ROOT / "out" / "birdsong_resnet.pt")
    p.add_argument("--plot", type=Path, default=ROOT / "out" / "birdsong_curves.png")
    p.add_argument("--demo-per-class", type=int, default=3, help="held-out clips per class kept in the checkpoint")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1:
        p.error("--epochs and --batch-size must be at least 1")
    if args.quick:
        args.epochs = 1
    if args.no_opencl:
        args.device = "cpu"
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, object]:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    if args.birdset:
        train, test = load_birdset(max_clips=64 if args.quick else None)
    else:
        per_class = 8 if args.quick else None
        train = birdsong.build("train", args.seed, max_per_class=per_class)
        test = birdsong.build("test", args.seed, max_per_class=per_class)
    classes = list(train.classes)
    x_train, x_test = train.features(), test.features()
    y_train, y_test = train.labels, test.labels
    counts = torch.bincount(y_train, minlength=len(classes)).float()
    weight = counts.sum() / (len(classes) * counts.clamp(min=1))  # balanced classes in the loss
    described = {"patched": "OpenCL layers (forward and backward)", "opencl": "the opencl torch device",
                 "cpu": "torch layers"}
    print(f"{len(y_train)} train and {len(y_test)} test clips, {len(classes)} classes, "
          f"log-mel {tuple(x_train.shape[1:])}, arch {args.arch}, {described[args.device]}")

    model = make_model(args.arch, len(classes))
    device = "opencl" if args.device == "opencl" else "cpu"
    if device == "opencl":
        import torch_opencl  # noqa: F401  (registers the device)

        model.to(device)
        weight = weight.to(device)
    steps = args.epochs * -(-len(y_train) // args.batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps, pct_start=0.2)

    if args.device == "patched":
        from utils.patching import opencl_layers as layers
    else:
        from contextlib import nullcontext as layers

    history: List[Dict[str, float]] = []
    with layers():
        for epoch in range(1, args.epochs + 1):
            model.train()
            order = torch.randperm(len(y_train), generator=gen)
            seen = correct = 0
            total_loss = 0.0
            start = time.perf_counter()
            bar = tqdm(range(0, len(order), args.batch_size), desc=f"epoch {epoch}/{args.epochs}", unit="batch",
                       disable=None)  # a bar on terminals only: in a log, the epoch lines alone
            for i in bar:
                idx = order[i:i + args.batch_size]
                xb, yb = augment(x_train[idx], gen).to(device), y_train[idx].to(device)
                logits = model(xb)
                loss = F.cross_entropy(logits, yb, weight=weight)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                seen += len(yb)
                correct += int((logits.argmax(1) == yb).sum())
                total_loss += loss.item() * len(yb)
                bar.set_postfix(loss=f"{total_loss / seen:.3f}", acc=f"{correct / seen:.3f}")
            train_s = time.perf_counter() - start
            test_loss, test_acc, test_bal = evaluate(model, x_test, y_test, args.batch_size, weight.cpu(), device)
            history.append({"epoch": epoch, "train_loss": total_loss / seen, "train_acc": correct / seen,
                            "test_loss": test_loss, "test_acc": test_acc, "test_bal_acc": test_bal,
                            "epoch_s": train_s})
            print(f"epoch {epoch}: train loss {total_loss / seen:.3f} acc {correct / seen:.3f} | "
                  f"test loss {test_loss:.3f} acc {test_acc:.3f} balanced {test_bal:.3f} | {train_s:.1f} s")

    side = {"patched": "OpenCL layers", "opencl": "opencl device", "cpu": "torch"}[args.device]
    plot_curves(history, args.plot, f"{args.arch} on bird-song log-mels ({side})")
    checkpoint = {
        "arch": args.arch,
        "classes": classes,
        "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "history": history,
        "seed": args.seed,
        "features": {"sample_rate": birdsong.SAMPLE_RATE, "clip_samples": birdsong.CLIP_SAMPLES,
                     "n_fft": birdsong.N_FFT, "hop": birdsong.HOP, "n_mels": birdsong.N_MELS},
        "demo": demo_clips(test, args.demo_per_class, args.seed),
    }
    args.checkpoint.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, args.checkpoint)
    mean_epoch = float(np.mean([h["epoch_s"] for h in history]))
    print(f"saved {args.checkpoint} ({args.checkpoint.stat().st_size / 1e6:.1f} MB) and {args.plot}; "
          f"final test accuracy {history[-1]['test_acc']:.3f} (balanced {history[-1]['test_bal_acc']:.3f}, "
          f"chance {1 / len(classes):.3f}); {mean_epoch:.1f} s per training epoch")
    return checkpoint


if __name__ == "__main__":
    main()
