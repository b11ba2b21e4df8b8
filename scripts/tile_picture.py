"""Draw how conv2d_tiled (opencl_functions/conv2d.cl) maps work onto a work-group and
local memory, and write docs/conv2d_tiles.png.

Three panels, for one chosen work-item (tx, ty) of one work-group:
  1. the output Y_g (channels × pixels): a few TM × TN tiles, the work-group's tile, and
     the WM × WN outputs the work-item keeps in registers (pixels strided by LX);
  2. local memory for one step along K: Ws (TK × TM) and Xs (TK × TN), with the elements
     the work-item loads filled and the ones it reads when accumulating outlined;
  3. the padded input image of one channel: where, for one tap (kh, kw), the work-item's
     pixels read, and the K_h × K_w window of its first pixel.
The tile parameters (LX, LY, WM, WN, TK) are read from the kernel's #define defaults, so the
picture follows the kernel. Run from the repository root:

    python scripts/tile_picture.py [--out docs/conv2d_tiles.png] [--kernel PATH]
"""
import argparse
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "opencl_functions" / "conv2d.cl"
OUT = ROOT / "docs" / "conv2d_tiles.png"

# Colours, the same in every panel.
ITEM = "#d62728"  # the chosen work-item: its outputs, its loads, what it reads
GROUP = "#1f77b4"  # the work-group's tile
GROUP_FILL = "#dbe9f6"
OTHER = "#f2f2f2"  # other tiles / untouched cells
PAD = "#bdbdbd"  # padding of the input image
NEIGHBOURS = "#f7c6c7"  # the other work-items' pixels at the same j (coalesced)

# The example drawn: the chosen work-item, its work-group (tile column, tile row) among
# 3 × 2 tiles, one 3×3 convolution (stride 1, padding 1) of 8×8-pixel images, one tap.
TX, TY = 1, 2
GROUP_ID = (1, 1)
TILES = (3, 2)
K_SIZE, H_OUT, W_OUT = 3, 8, 8
TAP = (1, 2)


def tile_parameters(path=KERNEL):
    """The tile parameters of conv2d_tiled: the #ifndef/#define defaults of LX, LY, WM, WN
    and TK in the kernel file, and TM = LY·WM, TN = LX·WN."""
    text = Path(path).read_text()
    params = {}
    for name in ("LX", "LY", "WM", "WN", "TK"):
        match = re.search(rf"#ifndef\s+{name}\s*\n\s*#define\s+{name}\s+(\d+)", text)
        if match is None:
            raise ValueError(f"{path}: no '#ifndef {name} / #define {name} value' default")
        params[name] = int(match.group(1))
    params["TM"] = params["LY"] * params["WM"]
    params["TN"] = params["LX"] * params["WN"]
    return params


def cell(ax, col, row, w=1, h=1, **kw):
    """A rectangle over cells [col, col + w) × [row, row + h) (row axis points down)."""
    ax.add_patch(Rectangle((col, row), w, h, **kw))


def grid(ax, cols, rows, step_x=1, step_y=1, x0=0, y0=0, **kw):
    """Thin lines between the cells of a cols × rows grid."""
    style = dict(color="#999999", lw=0.4, zorder=1) | kw
    ax.vlines([x0 + c for c in range(0, cols + 1, step_x)], y0, y0 + rows, **style)
    ax.hlines([y0 + r for r in range(0, rows + 1, step_y)], x0, x0 + cols, **style)


def draw_output(ax, p, tx, ty):
    """Panel 1: Y_g as channels × pixels, tiles, the work-group and the work-item."""
    tm, tn, lx, wm = p["TM"], p["TN"], p["LX"], p["WM"]
    cols, rows = TILES[0] * tn, TILES[1] * tm
    m0, n0 = GROUP_ID[1] * tm, GROUP_ID[0] * tn
    cell(ax, 0, 0, cols, rows, facecolor=OTHER, edgecolor="none")
    cell(ax, n0, m0, tn, tm, facecolor=GROUP_FILL, edgecolor="none")
    # Inside the tile: a band of WM channels per ty, a block of LX pixels per j.
    grid(ax, tn, tm, step_x=lx, step_y=wm, x0=n0, y0=m0, color="#8fb3d9", lw=0.6)
    grid(ax, cols, rows, step_x=tn, step_y=tm, color="#555555", lw=1.0)
    cell(ax, n0, m0, tn, tm, fill=False, edgecolor=GROUP, lw=2.5, zorder=4)
    # The work-item's outputs: channels m0 + ty·WM + i, pixels n0 + tx + j·LX.
    mi = m0 + ty * wm
    for j in range(p["WN"]):
        cell(ax, n0 + tx + j * lx, mi, 1, wm, facecolor=ITEM, edgecolor=ITEM, lw=1.5, zorder=5)
    # The stride between two of its pixels, above the tile.
    y = m0 - 1.5
    ax.annotate("", xy=(n0 + tx + lx + 0.5, y), xytext=(n0 + tx + 0.5, y),
                arrowprops=dict(arrowstyle="<->", color=ITEM, lw=1.5))
    ax.text(n0 + tx + lx / 2 + 0.5, y - 1, f"stride LX = {lx}", color=ITEM, ha="center",
            va="bottom", fontsize=9)
    pixels = ", ".join(str(n0 + tx + j * lx) for j in range(p["WN"]))
    ax.annotate(f"work-item ({tx}, {ty}): channels m0 + ty·WM + i = {mi}..{mi + wm - 1},\n"
                f"pixels n0 + tx + j·LX = {pixels}", xy=(n0 + tx + 0.5, mi + wm + 0.5),
                xytext=(n0 - 0.4 * tn, rows + 0.3 * tm), fontsize=9, color=ITEM,
                ha="left", va="center", arrowprops=dict(arrowstyle="->", color=ITEM))
    ax.text(n0 + tn + 2, m0 + 1.5, f"work-group {GROUP_ID}:\nm0 = {m0}, n0 = {n0}\n\n"
            f"bands: WM channels\nper ty (LY = {p['LY']})\nblocks: LX pixels\n"
            f"per j (WN = {p['WN']})", color=GROUP, ha="left", va="top", fontsize=9)
    ax.set_xlim(-1, cols + 1)
    ax.set_ylim(rows + 0.55 * tm, -7)  # room below for the note, above for the stride arrow
    ax.set_xticks(range(0, cols + 1, tn))
    ax.set_yticks(range(0, rows + 1, tm))
    ax.set_xlabel("output pixel n = (b·H_out + oh)·W_out + ow")
    ax.set_ylabel("output channel m (within the group)")
    ax.set_title(f"1. Output Y_g: {TILES[1]}×{TILES[0]} tiles of TM × TN = {tm} × {tn}",
                 fontsize=11)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def draw_local(ax_w, ax_x, p, tx, ty):
    """Panel 2: Ws and Xs for one K step; loads filled, accumulator reads outlined."""
    tk, tm, tn, lx, ly, wm = p["TK"], p["TM"], p["TN"], p["LX"], p["LY"], p["WM"]
    for ax, cols in ((ax_w, tm), (ax_x, tn)):
        cell(ax, 0, 0, cols, tk, facecolor=OTHER, edgecolor="none")
        grid(ax, cols, tk)
        ax.set_xlim(-0.5, max(tn, 2 * tm) + 0.5)  # room right of Ws for its note
        ax.set_ylim(tk + 0.5, -0.5)
        ax.set_aspect("equal")
        ax.set_yticks(range(0, tk + 1, max(1, tk // 4)))
        ax.set_ylabel("k (within the step)")
    # Ws[k][m] = W_g[m0 + m][k]: the work-item loads row k = tx, its own WM channels, and
    # reads those WM columns for every k.
    for i in range(wm):
        cell(ax_w, ty * wm + i, tx, facecolor=ITEM, edgecolor="none", zorder=3)
    cell(ax_w, ty * wm, 0, wm, tk, fill=False, edgecolor=ITEM, lw=2, zorder=4)
    ax_w.set_xticks(range(0, tm + 1, wm))
    ax_w.set_xlabel("m (channel m0 + m)", labelpad=1)
    ax_w.set_title(f"2. Local memory, one step of TK = {tk} along K\n"
                   f"Ws[k][m] = W_g[m0+m][k]: TK × TM = {tk} × {tm}", fontsize=11)
    ax_w.text(tm + 2, tk / 2, f"loads k = tx = {tx}\nat m = ty·WM + i\n= "
              f"{ty * wm}..{ty * wm + wm - 1}", color=ITEM,
              fontsize=9, va="center")
    # Xs[k][n] = X_g[k][n0 + n]: the work-item loads rows k = ty + r·LY of its own WN
    # pixels, and reads those WN columns for every k.
    rows = [ty + r * ly for r in range(tk // ly)]
    for j in range(p["WN"]):
        for k in rows:
            cell(ax_x, tx + j * lx, k, facecolor=ITEM, edgecolor="none", zorder=3)
        cell(ax_x, tx + j * lx, 0, 1, tk, fill=False, edgecolor=ITEM, lw=2, zorder=4)
    ax_x.set_xticks(range(0, tn + 1, lx))
    ax_x.set_xlabel("n (pixel n0 + n)", labelpad=1)
    cols = ", ".join(str(tx + j * lx) for j in range(p["WN"]))
    ax_x.set_title(f"Xs[k][n] = X_g[k][n0+n]: TK × TN = {tk} × {tn}", fontsize=11, pad=17)
    ax_x.text(0.5, 1.04, f"loads k = ty + r·LY = {', '.join(map(str, rows))} "
              f"at n = tx + j·LX = {cols}", color=ITEM, fontsize=9, ha="center",
              va="bottom", transform=ax_x.transAxes)


def draw_input(ax, p, tx):
    """Panel 3: one padded input channel, where the work-item's pixels read at one tap."""
    lx, tn = p["LX"], p["TN"]
    size = H_OUT + K_SIZE - 1  # padded input, stride 1
    hw_out = H_OUT * W_OUT
    n0 = GROUP_ID[0] * tn
    kh, kw = TAP
    cell(ax, 0, 0, size, size, facecolor=PAD, edgecolor="none")
    pad = (K_SIZE - 1) // 2
    cell(ax, pad, pad, size - 2 * pad, size - 2 * pad, facecolor="white", edgecolor="none")
    grid(ax, size, size)
    pixels = [n0 + tx + j * lx for j in range(p["WN"])]
    image = pixels[0] // hw_out
    # The whole work-group at j = 0 (tx = 0..LX-1): neighbouring pixels, coalesced reads.
    for t in range(lx):
        n = n0 + t
        if n // hw_out == image:
            oh, ow = divmod(n % hw_out, W_OUT)
            cell(ax, ow + kw, oh + kh, facecolor=NEIGHBOURS, edgecolor="none", zorder=2)
    # The work-item's pixels n → (b, oh, ow), read at (oh + kh, ow + kw).
    for j, n in enumerate(pixels):
        if n // hw_out != image:
            continue
        oh, ow = divmod(n % hw_out, W_OUT)
        cell(ax, ow + kw, oh + kh, facecolor=ITEM, edgecolor="none", zorder=3)
        ax.text(ow + kw + 0.5, oh + kh + 0.5, f"j={j}", color="white", ha="center",
                va="center", fontsize=8, fontweight="bold", zorder=4)
        if j == 0:  # the K_h × K_w window of its first pixel
            cell(ax, ow, oh, K_SIZE, K_SIZE, fill=False, edgecolor="black", lw=2.2,
                 ls="--", zorder=5)
            ax.text(0, -0.16, f"j: where its pixels n0 + tx + j·LX read,\n(oh + kh, ow + kw);"
                    f" dashed: the window of\npixel j = 0, n = {n}, (oh, ow) = ({oh}, {ow})",
                    transform=ax.transAxes, fontsize=9, va="top")
    ax.set_xlim(0, size)
    ax.set_ylim(size, 0)
    ax.set_aspect("equal")
    ax.set_xticks([c + 0.5 for c in range(size)], range(size))
    ax.set_yticks([r + 0.5 for r in range(size)], range(size))
    ax.tick_params(labelsize=8)
    ax.set_xlabel("padded input column (ow·stride + kw)")
    ax.set_ylabel("padded input row (oh·stride + kh)")
    ax.set_title(f"3. Input x[b = {image}], one channel, tap {TAP}\n"
                 f"{K_SIZE}×{K_SIZE} kernel, stride 1, pad {pad}, W_out = {W_OUT}",
                 fontsize=11)


def draw(params, out, tx=TX, ty=TY):
    """The three-panel figure, written to out."""
    tx, ty = min(tx, params["LX"] - 1), min(ty, params["LY"] - 1)
    fig = plt.figure(figsize=(14, 6))
    outer = fig.add_gridspec(1, 3, width_ratios=[1.3, 1.2, 0.9], wspace=0.25,
                             left=0.05, right=0.98, top=0.84, bottom=0.17)
    draw_output(fig.add_subplot(outer[0]), params, tx, ty)
    inner = outer[1].subgridspec(2, 1, hspace=0.6)
    draw_local(fig.add_subplot(inner[0]), fig.add_subplot(inner[1]), params, tx, ty)
    draw_input(fig.add_subplot(outer[2]), params, tx)
    p = params
    fig.suptitle(f"conv2d_tiled: Y_g = W_g · X_g in tiles   (LX = {p['LX']}, LY = {p['LY']}, "
                 f"WM = {p['WM']}, WN = {p['WN']}, TK = {p['TK']};  TM = LY·WM = {p['TM']}, "
                 f"TN = LX·WN = {p['TN']})", fontsize=13, fontweight="bold")
    handles = [
        Patch(facecolor=GROUP_FILL, edgecolor=GROUP, lw=2, label="the work-group's TM × TN tile"),
        Patch(facecolor=ITEM, label=f"work-item (tx, ty) = ({tx}, {ty}): its outputs / its loads"),
        Patch(facecolor="none", edgecolor=ITEM, lw=2, label="read by it when accumulating"),
        Patch(facecolor=NEIGHBOURS, label=f"work-items tx = 0..{p['LX'] - 1} at j = 0 (coalesced)"),
        Patch(facecolor=PAD, label="padding"),
        Patch(facecolor="none", edgecolor="black", ls="--", lw=1.5, label="window of one pixel"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=9, frameon=False)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(OUT), help="the PNG to write")
    parser.add_argument("--kernel", default=str(KERNEL), help="the conv2d.cl to read")
    args = parser.parse_args(argv)
    params = tile_parameters(args.kernel)
    out = draw(params, args.out)
    print(", ".join(f"{k}={v}" for k, v in params.items()), "->", out)
    return params


if __name__ == "__main__":
    main()
