"""Public PyTorch programs written by others run unchanged on the `opencl` device, as their
READMEs say, each in a child process with small settings. tests/programs/ holds each program
with its LICENSE and a SOURCE.md (repository, path, commit, what was left out);
tests/programs/on_device.py imports the device before the program starts and reports what the
device did at exit.

Every run must exit 0, print no traceback, run on the device (the device's peak memory is above
zero) with no CPU fallback (OCLF_FALLBACK=error), and print finite losses that fall; the RNN
language model's losses must also be the CPU run's, batch by batch. What the device lacks today
makes a strict xfail naming the missing piece, so the test turns into a failure (to unmark) on
the day the piece lands. Heavy runs are slow."""
import importlib.util
import math
import os
import re
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
ON_DEVICE = PROGRAMS / "on_device.py"
TINY_CORPUS = PROGRAMS / "tiny_corpus"  # our own text: wikitext-2 (12 MB) is left out
WORD_LM = PROGRAMS / "word_language_model" / "main.py"
TIMEOUT = 600

def run(argv, cwd, env=None, timeout=TIMEOUT):
    """Run argv in cwd, the project importable and the device's CPU fallback an error;
    returns (exit status, stdout and stderr together)."""
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OCLF_FALLBACK": "error",
                "OCLF_TUNE": "0", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.Popen([str(a) for a in argv], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the program's own children (DataLoader workers, ranks) too
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(Path(str(a)).name for a in argv[1:4])} ran past {timeout} s:\n{out[-3000:]}")
    return proc.returncode, out


def on_device(program, *args, cwd, env=None):
    return run([sys.executable, ON_DEVICE, program, *args], cwd, env)


def last_error(out):
    """The last line that names an exception (the refusal that stopped the program), or ''."""
    errors = [line for line in out.splitlines() if re.match(r"^(\[rank\d+\]: )?[\w.]*(Error|Exception)\b", line)]
    return errors[-1] if errors else ""


def check_clean_run(rc, out, processes=1):
    """Exit 0, no traceback, and for each process the device held memory and nothing fell back."""
    assert rc == 0, f"exit {rc}: {last_error(out)}\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    reports = re.findall(r"\[on_device\] opencl peak bytes (\d+) fallbacks (\{[^{}]*\})", out)
    assert len(reports) == processes, f"expected {processes} device report(s):\n{out[-3000:]}"
    for peak, fallbacks in reports:
        assert int(peak) > 0, f"the device held no memory: the program did not run there\n{out[-3000:]}"
        assert fallbacks == "{}", f"ops ran on the CPU fallback: {fallbacks}"


def assert_finite_and_falling(losses, what):
    assert len(losses) >= 4, f"{len(losses)} {what} printed"
    assert all(math.isfinite(v) for v in losses), f"{what}: {losses}"
    quarter = len(losses) // 4
    first, last = np.mean(losses[:quarter]), np.mean(losses[-quarter:])
    assert last < first, f"{what} did not fall: first quarter {first:.3f}, last {last:.3f}: {losses}"


# ---------------------------------------------------------------------------------------------
# pytorch/examples word_language_model: an RNN (LSTM, GRU, tanh) and a Transformer language model

def word_lm_args(model, accel=True, **flags):
    """The README's command, small: 2 layers of 16, one epoch of the tiny corpus in 25 batches of
    4 x 8 tokens, a line per batch. No dropout, so a device run can be held to the CPU's."""
    flags = {"data": TINY_CORPUS, "model": model, "emsize": 16, "nhid": 16, "nlayers": 2, "batch_size": 4,
             "bptt": 8, "epochs": 1, "log-interval": 1, "dropout": 0, "lr": 2, **flags}
    args = ["--accel"] if accel else []
    for flag, value in flags.items():  # True: a flag without a value
        args += [f"--{flag}"] + ([] if value is True else [str(value)])
    return args


def word_lm_numbers(out):
    """(train losses, train perplexities, the valid and test perplexities) as printed."""
    train = re.findall(r"batches \| lr .* \| loss +(\S+) \| ppl +(\S+)", out)
    ends = re.findall(r"(?:valid|test) ppl +(\S+)", out)
    return [float(l) for l, _ in train], [float(p) for _, p in train], [float(p) for p in ends]


def check_generate(cwd):
    """generate.py (the README's `python generate.py --accel`) samples 40 words on the device
    from the model main.py saved in cwd: every one a word of the corpus."""
    rc, out = on_device(WORD_LM.parent / "generate.py", "--accel", "--data", TINY_CORPUS, "--words", "40",
                        cwd=cwd)
    check_clean_run(rc, out)
    vocabulary = {w for f in TINY_CORPUS.glob("*.txt") for w in f.read_text().split()} | {"<eos>"}
    words = (cwd / "generated.txt").read_text().split()
    assert len(words) == 40 and set(words) <= vocabulary, words


_word_lm_runs = {}


def word_lm_run(model, accel, tmp_path_factory):
    """One run per model and device for the whole module (two tests read each): (exit status,
    output, the folder it ran in and saved its model.pt to)."""
    if (model, accel) not in _word_lm_runs:
        cwd = tmp_path_factory.mktemp(f"word_lm_{model}")
        args = word_lm_args(model, accel, save=cwd / "model.pt")
        rc, out = on_device(WORD_LM, *args, cwd=cwd) if accel else run([sys.executable, WORD_LM, *args], cwd)
        _word_lm_runs[model, accel] = rc, out, cwd
    return _word_lm_runs[model, accel]


RNN_MODELS = ["RNN_TANH", "LSTM", "GRU"]


@pytest.mark.parametrize("model", RNN_MODELS)
def test_rnn_language_model_trains_on_the_device(opencl_device, tmp_path_factory, model):
    rc, out, cwd = word_lm_run(model, True, tmp_path_factory)
    check_clean_run(rc, out)
    assert "Using device: opencl" in out
    losses, _, ends = word_lm_numbers(out)
    assert_finite_and_falling(losses[1:], "training losses")  # the first line sums two batches
    assert len(ends) == 2 and all(math.isfinite(p) for p in ends), out[-2000:]
    check_generate(cwd)


@pytest.mark.parametrize("model", RNN_MODELS)
def test_rnn_language_model_matches_the_cpu(opencl_device, tmp_path_factory, model):
    """Same seed, no dropout: every printed perplexity (25 batches, validation, test) is the CPU
    run's to 0.2% (float32 rounding moves them by about 1e-6 here)."""
    rc, out, _ = word_lm_run(model, True, tmp_path_factory)
    assert rc == 0, f"exit {rc}: {last_error(out)}"
    cpu_rc, cpu_out, _ = word_lm_run(model, False, tmp_path_factory)
    assert cpu_rc == 0, cpu_out[-3000:]
    _, device_ppl, device_ends = word_lm_numbers(out)
    _, cpu_ppl, cpu_ends = word_lm_numbers(cpu_out)
    assert len(device_ppl) == len(cpu_ppl) == 25 and len(device_ends) == len(cpu_ends) == 2
    for what, got, want in (("batch", device_ppl, cpu_ppl), ("valid/test", device_ends, cpu_ends)):
        for i, (g, w) in enumerate(zip(got, want)):
            assert abs(g - w) <= 2e-3 * w, f"{what} {i + 1}: perplexity {g} on the device, {w} on the CPU"


@pytest.mark.parametrize("flags", [
    pytest.param({"lr": 5}, id="sgd"),
    pytest.param({"use-optimizer": True, "lr": 0.003}, id="adamw", marks=pytest.mark.slow),
])
def test_transformer_language_model(opencl_device, tmp_path, flags):
    """The README's Transformer commands (`--model Transformer --lr 5`, and with AdamW
    `--use-optimizer`), small. nn.Transformer's own dropout (0.1) has no flag, so the run is held
    to falling losses, not to the CPU's."""
    args = word_lm_args("Transformer", nhead=2, nhid=32, save=tmp_path / "model.pt", **flags)
    rc, out = on_device(WORD_LM, *args, cwd=tmp_path)
    check_clean_run(rc, out)
    assert "Using device: opencl" in out
    losses, _, ends = word_lm_numbers(out)
    assert_finite_and_falling(losses[1:], "training losses")
    assert len(ends) == 2 and all(math.isfinite(p) for p in ends), out[-2000:]
    check_generate(tmp_path)


# ---------------------------------------------------------------------------------------------
# pytorch/examples dcgan: a GAN on its fake data (torchvision's FakeData, 64 x 64 images)

DCGAN = PROGRAMS / "dcgan" / "main.py"


def dcgan(tmp_path, *flags):
    """The README's command on `--dataset fake`, small: 8 filters a layer, a 16-number latent."""
    args = ["--accel", "--dataset", "fake", "--nz", "16", "--ngf", "8", "--ndf", "8", "--workers", "0",
            "--manualSeed", "1", "--outf", tmp_path, *flags]
    rc, out = on_device(DCGAN, *args, cwd=tmp_path)
    check_clean_run(rc, out)
    assert "Using device: opencl" in out
    steps = re.findall(r"Loss_D: (\S+) Loss_G: (\S+) D\(x\): (\S+) D\(G\(z\)\): (\S+) / (\S+)", out)
    assert steps, out[-3000:]
    assert all(math.isfinite(float(v)) for step in steps for v in step), steps
    for saved in ("netG_epoch_0.pth", "netD_epoch_0.pth", "fake_samples_epoch_000.png"):
        assert (tmp_path / saved).stat().st_size > 0, saved
    return steps


def test_dcgan_dry_run(opencl_device, tmp_path):
    assert len(dcgan(tmp_path, "--dry-run", "--batchSize", "4")) == 1


@pytest.mark.slow
def test_dcgan_epoch(opencl_device, tmp_path):
    """A whole epoch of the 1000 fake images in 20 batches: the discriminator learns to tell
    them from the generator's (its loss falls)."""
    steps = dcgan(tmp_path, "--niter", "1", "--batchSize", "50")
    assert len(steps) == 20
    assert_finite_and_falling([float(step[0]) for step in steps], "discriminator losses")


# ---------------------------------------------------------------------------------------------
# pytorch/examples mnist: a CNN classifier's training loop, on MNIST files we write

MNIST = PROGRAMS / "mnist" / "main.py"


def write_mnist(root, n_train=256, n_test=64, seed=0):
    """MNIST's raw files (IDX format) under root/MNIST/raw, where the program looks before it
    downloads: noise with a bright bar at row 2 + 2k for digit k, a task a CNN learns in an epoch."""
    rng = np.random.default_rng(seed)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, count in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, count).astype(np.uint8)
        images = rng.integers(0, 64, (count, 28, 28)).astype(np.uint8)
        for image, digit in zip(images, labels):
            image[2 + 2 * digit:4 + 2 * digit, 4:24] = 255
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, count, 28, 28) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, count) + labels.tobytes())


def test_mnist_classifier(opencl_device, tmp_path):
    """`python main.py` (the accelerator is its default), one epoch of 8 batches of 32, a line
    per batch: the loss falls and the 64 test images are classified."""
    write_mnist(tmp_path / "data")
    work = tmp_path / "work"  # the program reads ../data
    work.mkdir()
    rc, out = on_device(MNIST, "--epochs", "1", "--batch-size", "32", "--test-batch-size", "32",
                        "--log-interval", "1", "--save-model", cwd=work)
    check_clean_run(rc, out)
    losses = [float(v) for v in re.findall(r"Train Epoch: 1 .*\tLoss: (\S+)", out)]
    assert len(losses) == 8, out[-3000:]
    assert_finite_and_falling(losses, "training losses")
    correct = re.search(r"Test set: Average loss: (\S+), Accuracy: (\d+)/64", out)
    assert correct and math.isfinite(float(correct[1])), out[-3000:]
    assert int(correct[2]) >= 58, f"{correct[2]}/64 test images classified"
    assert (work / "mnist_cnn.pt").stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# pytorch/examples imagenet: ResNet-18's training loop on an image folder we write

IMAGENET = PROGRAMS / "imagenet" / "main.py"


def write_image_folder(root, per_class, seed=0):
    """root/{train,val}/{class}/*.png as the README lays ImageNet out: 2 classes of noise images."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, count in per_class.items():
        for label in ("n01440764", "n01443537"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")


@pytest.mark.slow
def test_imagenet_resnet18(opencl_device, tmp_path):
    """`python main.py -a resnet18 DIR`, small: 2 training steps of 2 images (224 x 224 crops),
    then validation, a checkpoint, and the summary line."""
    write_image_folder(tmp_path / "data", {"train": 2, "val": 1})
    rc, out = on_device(IMAGENET, "-a", "resnet18", "-b", "2", "-j", "0", "--epochs", "1", "-p", "1",
                        "--seed", "0", "data", cwd=tmp_path)
    check_clean_run(rc, out)
    assert "Using device: opencl" in out
    losses = [float(v) for v in re.findall(r"Epoch: \[0\]\[\d/2\].*\tLoss (\S+) ", out)]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses), out[-3000:]
    assert re.search(r"Test: \[1/1\].*\tLoss (\S+) ", out) and " *   Acc@1" in out, out[-3000:]
    assert (tmp_path / "checkpoint.pth.tar").stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# pytorch/examples distributed/minGPT-ddp: a GPT trainer, DDP over 2 processes (torchrun), AMP

MINGPT = PROGRAMS / "minGPT-ddp" / "mingpt" / "main.py"
NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"


def test_mingpt_ddp_amp_two_processes(opencl_device, tmp_path):
    """`torchrun --standalone --nproc_per_node=2 main.py` (run_example.sh), its config's AMP and
    DDP on, small through hydra's overrides: a GPT of 1 layer on 10% of the tiny corpus, one
    epoch, each process on its own PoCL device. Both ranks train and evaluate, rank 0 saves."""
    for module in ("hydra", "omegaconf", "boto3"):  # imported by the program (requirements.txt installs them)
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"minGPT-ddp needs {module}: pip install -r requirements.txt")
    overrides = [f"data_config.path={TINY_CORPUS / 'train.txt'}", "data_config.block_size=16",
                 "data_config.truncate=0.1", "gpt_config.n_layer=1", "gpt_config.n_head=2",
                 "gpt_config.n_embd=16", "trainer_config.max_epochs=1", "trainer_config.batch_size=8",
                 "trainer_config.data_loader_workers=0", "trainer_config.save_every=1"]
    rc, out = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                   ON_DEVICE, MINGPT, *overrides], tmp_path,
                  env={"POCL_DEVICES": "pthread pthread", "HYDRA_FULL_ERROR": "1"})
    assert "Unable to locate sufficient" not in out, "the program saw fewer than 2 devices and stopped"
    check_clean_run(rc, out, processes=2)
    assert "use_amp: True" in (MINGPT.parent / "gpt2_train_cfg.yaml").read_text()
    for rank in (0, 1):
        for step in ("Train", "Eval"):
            # the number alone: each line is one write, but its newline is another, so the
            # other rank's text may follow on the same line of the shared pipe
            loss = re.search(rf"\[RANK{rank}\] Epoch 1 \| Iter 0 \| {step} Loss ({NUMBER})", out)
            assert loss and math.isfinite(float(loss[1])), f"rank {rank} {step}:\n{out[-3000:]}"
    assert "Snapshot saved at epoch 1" in out and (tmp_path / "gpt_snapshot.pt").stat().st_size > 0
