"""make sanity: classic image filters through ocl_conv2d and through torch, on real photos.

Photos from scikit-image's package (astronaut, chelsea the cat, coffee) and a cartoon
version of the cat (flat colour regions with dark outlines). Each filter is a small
convolution: per colour channel (groups=3, as a depthwise layer) or on the grey image
(3 input channels mixed into 1, groups=1); one is dilated, one strided, one non-square.
Prints the max |ours - torch| per filter and writes out/sanity_check.png: for each
filter one row with the input, our output, torch's output and |difference|.

    python simple_sanity_check.py [--quick] [--device nvidia] [--out DIR]
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from extras import demo

ATOL, RTOL = 1e-4, 1e-4
LUMA = torch.tensor([0.299, 0.587, 0.114])  # RGB -> grey (ITU-R BT.601)


@dataclass
class Filter:
    name: str
    kernel: torch.Tensor  # (K_h, K_w)
    grey: bool = False  # mix RGB into one grey channel (groups=1) instead of per channel (groups=3)
    signed: bool = False  # output centred on 0 (edges): shown as grey 0.5 with the 99th percentile of |out| at 0/1
    stride: int = 1
    dilation: int = 1

    def weight(self) -> torch.Tensor:
        """(C_out, C_in/groups, K_h, K_w): (1, 3, K_h, K_w) for grey, (3, 1, K_h, K_w) per channel."""
        k = self.kernel.float()
        if self.grey:
            return (LUMA.view(3, 1, 1) * k).unsqueeze(0)
        return k.expand(3, 1, *k.shape).contiguous()

    @property
    def groups(self) -> int:
        return 1 if self.grey else 3

    def describe(self) -> str:
        kh, kw = self.kernel.shape
        text = f"{kh}x{kw}"
        if self.stride > 1:
            text += f" stride {self.stride}"
        if self.dilation > 1:
            text += f" dilation {self.dilation}"
        return text + (" grey" if self.grey else " RGB")


def gaussian(size: int, sigma: float) -> torch.Tensor:
    r = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(r**2) / (2 * sigma**2))
    g2 = torch.outer(g, g)
    return g2 / g2.sum()


def filters() -> List[Filter]:
    sobel_x = torch.tensor([[-1.0, 0, 1], [-2, 0, 2], [-1, 0, 1]])
    return [
        Filter("box blur", torch.full((5, 5), 1 / 25)),
        Filter("Gaussian blur", gaussian(7, 1.5)),
        Filter("Sobel x", sobel_x, grey=True, signed=True),
        Filter("Sobel y", sobel_x.t().contiguous(), grey=True, signed=True),
        Filter("sharpen", torch.tensor([[0.0, -1, 0], [-1, 5, -1], [0, -1, 0]])),
        Filter("emboss", torch.tensor([[-2.0, -1, 0], [-1, 1, 1], [0, 1, 2]]) / 2),
        Filter("Laplacian", torch.tensor([[0.0, 1, 0], [1, -4, 1], [0, 1, 0]]), grey=True, signed=True),
        Filter("dilated Laplacian", torch.tensor([[0.0, 1, 0], [1, -4, 1], [0, 1, 0]]), grey=True, signed=True,
               dilation=4),
        Filter("strided Gaussian (downsample)", gaussian(5, 1.0), stride=2),
        Filter("motion blur", torch.full((1, 9), 1 / 9)),
    ]


def cartoon(image: np.ndarray) -> np.ndarray:
    """A cartoon-like version of a photo: flat colour regions (SLIC superpixels, each filled with its
    mean colour) outlined in dark grey."""
    from skimage.color import label2rgb
    from skimage.segmentation import find_boundaries, slic

    segments = slic(image, n_segments=150, compactness=15, start_label=1)
    flat = label2rgb(segments, image, kind="avg", bg_label=0).astype(np.uint8)
    flat[find_boundaries(segments, mode="thick")] = 40
    return flat


def load_images(quick: bool) -> Dict[str, torch.Tensor]:
    """Photos shipped by scikit-image, as (1, 3, H, W) float32 in [0, 1]. --quick shrinks them."""
    from skimage import data
    from skimage.transform import rescale

    photos = {"astronaut": data.astronaut(), "chelsea (cat)": data.chelsea(), "coffee": data.coffee()}
    photos["cat, cartoon"] = cartoon(photos["chelsea (cat)"])
    images = {}
    for name, rgb in photos.items():
        img = rgb.astype(np.float32) / 255
        if quick:
            img = rescale(img, 96 / max(img.shape[:2]), channel_axis=2, anti_aliasing=True).astype(np.float32)
        images[name] = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))).unsqueeze(0)
    return images


def pad_for(f: Filter, x: torch.Tensor) -> torch.Tensor:
    """Reflect-pad x so that the filter keeps the size (up to the stride)."""
    kh, kw = f.kernel.shape
    ph, pw = f.dilation * (kh - 1), f.dilation * (kw - 1)
    return F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2), mode="reflect")


def run_filter(f: Filter, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, float, float]:
    """(ours, torch's, our seconds, torch's seconds) for one filter on one image."""
    from opencl_functions import ocl_conv2d

    padded, weight = pad_for(f, x), f.weight()
    ours, t_ours = demo.timed(ocl_conv2d, padded, weight, None, f.stride, f.dilation, f.groups)
    ref, t_ref = demo.timed(F.conv2d, padded, weight, None, f.stride, 0, f.dilation, f.groups)
    return ours, ref, t_ours, t_ref


def first_calls(images: Dict[str, torch.Tensor]) -> None:
    """Every filter on every image once, untimed, through ocl_conv2d and torch: the first call of
    each shape (kernel builds, tuning at first use), which the timed loop leaves out."""
    from opencl_functions import ocl_conv2d

    for f in filters():
        for x in images.values():
            padded, weight = pad_for(f, x), f.weight()
            ocl_conv2d(padded, weight, None, f.stride, f.dilation, f.groups)
            F.conv2d(padded, weight, None, f.stride, 0, f.dilation, f.groups)


def to_display(t: torch.Tensor, signed: bool) -> np.ndarray:
    """(1, C, H, W) -> an (H, W, 3) or (H, W) array in [0, 1] for imshow."""
    a = t[0].permute(1, 2, 0).numpy()
    if signed:
        a = 0.5 + a / (2 * max(float(np.percentile(np.abs(a), 99)), 1e-12))
    a = np.clip(a, 0, 1)
    return a[..., 0] if a.shape[2] == 1 else a


def save_grid(rows: List[Tuple[Filter, str, torch.Tensor, torch.Tensor, torch.Tensor]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), 4, figsize=(12, 2.6 * len(rows)), squeeze=False)
    for r, (f, image_name, x, ours, ref) in enumerate(rows):
        diff = (ours - ref).abs().amax(dim=1)[0].numpy()  # max over channels, (H, W)
        panels = [
            (to_display(x, False), f"{image_name}", None),
            (to_display(ours, f.signed), f"{f.name}: ocl_conv2d", "gray"),
            (to_display(ref, f.signed), f"{f.name}: torch", "gray"),
            (diff, f"|difference|, max {diff.max():.1e}", "magma"),
        ]
        for ax, (img, title, cmap) in zip(axes[r], panels):
            ax.imshow(img, cmap=cmap if img.ndim == 2 else None, interpolation="nearest")
            ax.set_title(title, fontsize=9)
            ax.axis("off")
    fig.suptitle("ocl_conv2d vs torch.nn.functional.conv2d (|difference| scaled to its own max)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))
    fig.savefig(path, dpi=60 if len(rows) > 6 else 80)
    plt.close(fig)


def main(argv=None) -> int:
    p = demo.parser(__doc__.splitlines()[0])
    p.add_argument("--out", help="folder for sanity_check.png (default: out/)")
    args = demo.parse_args(p, argv)
    demo.require("skimage", "scikit-image", "the sanity check's photos")
    demo.require("matplotlib", "matplotlib", "the sanity check's figure")
    demo.open_device()
    images = load_images(args.quick)
    names = list(images)
    print("images: " + ", ".join(f"{n} {tuple(x.shape[2:])}" for n, x in images.items()))
    print(f"tolerance: |ours - torch| <= {ATOL} + {RTOL}*|torch|")
    demo.warm_up(lambda: first_calls(images), f"the {len(filters())} filters on the {len(images)} images")
    checks = demo.Checks()
    rows = []
    total_ours = total_ref = 0.0
    print(f"{'filter':<30} {'kernel':<22} {'max |err|':>10} {'ocl ms':>8} {'torch ms':>9}")
    for i, f in enumerate(demo.progress(filters(), "filters")):
        worst, t_ours, t_ref, ok = 0.0, 0.0, 0.0, True
        for name, x in images.items():
            ours, ref, to, tr = run_filter(f, x)
            worst = max(worst, demo.max_abs_error(ours, ref))
            ok &= demo.within_tolerance(ours, ref, ATOL, RTOL)
            t_ours, t_ref = t_ours + to, t_ref + tr
            if name == names[i % len(names)]:
                rows.append((f, name, x, ours, ref))
        checks.add(ok, f"{f.name}: max |err| {worst:.2e}")
        total_ours, total_ref = total_ours + t_ours, total_ref + t_ref
        print(f"{f.name:<30} {f.describe():<22} {worst:>10.2e} {1e3 * t_ours:>8.1f} {1e3 * t_ref:>9.1f}"
              f"{'' if ok else '  MISMATCH'}")
    print(f"total over {len(images)} images: ocl_conv2d {total_ours:.3f} s, torch {total_ref:.3f} s "
          f"(second calls: each side's first call of every filter ran untimed before, see above)")
    folder = args.out or demo.out_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "sanity_check.png")
    save_grid(rows, path)
    print(f"wrote {path}")
    return checks.summary()


if __name__ == "__main__":
    sys.exit(main())
