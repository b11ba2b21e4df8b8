"""scripts/tile_picture.py: the picture of conv2d_tiled's tiles is written as a PNG, and
its tile parameters are read from the kernel's #define defaults (no build needed)."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "tile_picture.py"
KERNEL = ROOT / "opencl_functions" / "conv2d.cl"


@pytest.fixture(scope="module")
def tile_picture():
    spec = importlib.util.spec_from_file_location("tile_picture", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_size(path):
    """(width, height) from a PNG's IHDR chunk, after checking its signature."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_tile_parameters_of_the_kernel(tile_picture):
    assert tile_picture.tile_parameters(KERNEL) == {
        "LX": 16, "LY": 8, "WM": 4, "WN": 4, "TK": 16, "TM": 32, "TN": 64}


def test_writes_a_png(tile_picture, tmp_path):
    out = tmp_path / "x.png"
    tile_picture.main(["--out", str(out)])
    assert out.is_file()
    width, height = png_size(out)
    assert 1000 <= width <= 2500 and 400 <= height <= 1200, (width, height)
    assert width > height  # about 14 × 6 inches


def test_follows_the_defines(tile_picture, tmp_path, capsys):
    text = KERNEL.read_text()
    assert "#define WN 4\n" in text
    kernel = tmp_path / "conv2d.cl"
    kernel.write_text(text.replace("#define WN 4\n", "#define WN 2\n", 1))
    params = tile_picture.tile_parameters(kernel)
    assert params["WN"] == 2 and params["TN"] == 16 * 2
    assert {k: v for k, v in params.items() if k not in ("WN", "TN")} == {
        "LX": 16, "LY": 8, "WM": 4, "TK": 16, "TM": 32}
    out = tmp_path / "wn2.png"
    reported = tile_picture.main(["--kernel", str(kernel), "--out", str(out)])
    assert reported == params
    assert "WN=2" in capsys.readouterr().out
    png_size(out)


def test_missing_define_is_an_error(tile_picture, tmp_path):
    kernel = tmp_path / "conv2d.cl"
    kernel.write_text(KERNEL.read_text().replace("#ifndef TK", "#ifdef TK", 1))
    with pytest.raises(ValueError, match="TK"):
        tile_picture.tile_parameters(kernel)
