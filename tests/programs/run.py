"""Public PyTorch programs run on the `opencl` device from a checkout of theirs, each as its
README says with small settings, in a child process; prints a table of what passed.

    make programs SRC=.clients/pytorch-examples [ARGS="--only mnist dcgan"]
    python tests/programs/run.py --src CHECKOUT [--only NAME ...] [--list] [--work DIR]

The programs are pytorch/examples' and are not kept here: fetch them (FETCH) into .clients/,
which git ignores. Each runs through on_device.py (the device registered before the program
starts, a report of what the device did at exit) with OCLF_FALLBACK=error. A run passes when
it exits 0 with no traceback, each of its processes ran on the device (peak memory above zero)
with nothing on the CPU fallback, and the program's own check holds: finite losses that fall,
the RNN language models' perplexities those of the same run on the CPU, batch by batch.
Each run's output is kept in WORK/NAME/ (default out/programs/)."""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ON_DEVICE = HERE / "on_device.py"
TINY_CORPUS = HERE / "tiny_corpus"  # our own text, in Wikitext's layout, in place of Wikitext-2
REPOSITORY = "https://github.com/pytorch/examples"
CHECKED_AT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"  # the commit these settings were last run at
FOLDERS = ("word_language_model", "dcgan", "mnist", "imagenet", "distributed/minGPT-ddp")
FETCH = (f"git clone --filter=blob:none --sparse {REPOSITORY} .clients/pytorch-examples\n"
         f"git -C .clients/pytorch-examples sparse-checkout set {' '.join(FOLDERS)}\n"
         f"(last run at commit {CHECKED_AT}: git -C .clients/pytorch-examples checkout {CHECKED_AT[:12]})")


class Failed(Exception):
    """A run that did not pass; the message is its row's note."""


@dataclass
class Program:
    name: str                          # the table's row, and --only's word
    folder: str                        # the checkout's folder it runs from
    readme: str                        # the README's command, which `run` follows with small settings
    run: Callable[["Runner", Path], str]  # runs it in a fresh folder; returns the row's note or raises Failed
    needs: Sequence[str] = ()          # modules it imports beyond torch (a row "skipped" without them)


class Runner:
    """Runs a checkout's programs as child processes, the project importable, in `work`."""

    def __init__(self, src: Path, timeout: float):
        self.src, self.timeout = src, timeout

    def __call__(self, cwd: Path, script: str, *args, accel: bool = True, processes: int = 1,
                 env: Optional[dict] = None, log: str = "output") -> str:
        """`python SCRIPT ARGS` (SCRIPT relative to the checkout) in cwd, through on_device.py
        when accel, under torchrun with that many processes when processes > 1. Returns the
        output (written to cwd/LOG.txt too); raises Failed unless the run is clean."""
        program = self.src / script
        argv = [sys.executable, program, *args]
        if accel:
            argv[1:2] = [ON_DEVICE, program]
        if processes > 1:
            argv[1:1] = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
        paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OCLF_FALLBACK": "error",
                    "OCLF_TUNE": "0", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        proc = subprocess.Popen([str(a) for a in argv], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own children too (DataLoader workers, ranks)
            out, _ = proc.communicate()
            (cwd / f"{log}.txt").write_text(out)
            raise Failed(f"{script} ran past {self.timeout:.0f} s") from None
        (cwd / f"{log}.txt").write_text(out)
        if proc.returncode != 0:
            raise Failed(f"{script} exit {proc.returncode}: {last_error(out) or out.strip()[-200:]}")
        if "Traceback" in out:
            raise Failed(f"{script} printed a traceback: {last_error(out)}")
        if accel:
            check_device_reports(out, processes)
        return out


def last_error(out: str) -> str:
    """The last line that names an exception (what stopped the program), or ''."""
    errors = [line for line in out.splitlines() if re.match(r"^(\[rank\d+\]: )?[\w.]*(Error|Exception)\b", line)]
    return errors[-1].strip() if errors else ""


def check_device_reports(out: str, processes: int) -> None:
    """One on_device.py report per process: the device held memory, nothing fell back."""
    reports = re.findall(r"\[on_device\] opencl peak bytes (\d+) fallbacks (\{[^{}]*\})", out)
    if len(reports) != processes:
        raise Failed(f"{len(reports)} device report(s), {processes} process(es)")
    for peak, fallbacks in reports:
        if int(peak) == 0:
            raise Failed("the device held no memory: the program did not run there")
        if fallbacks != "{}":
            raise Failed(f"ops ran on the CPU fallback: {fallbacks}")


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


def falling(values: List[float], what: str) -> str:
    """Finite values whose last quarter's mean is below their first quarter's; 'A → B'."""
    expect(len(values) >= 4, f"{len(values)} {what} printed, 4 or more expected")
    expect(all(math.isfinite(v) for v in values), f"{what} not finite: {values}")
    quarter = len(values) // 4
    first, last = float(np.mean(values[:quarter])), float(np.mean(values[-quarter:]))
    expect(last < first, f"{what} did not fall: first quarter {first:.3f}, last {last:.3f}")
    return f"{what} {first:.3g} → {last:.3g}"


# --- pytorch/examples word_language_model: RNN (tanh, LSTM, GRU) and Transformer language models

def word_lm_args(model: str, save: Path, **flags) -> List[str]:
    """The README's command, small: 2 layers of 16, one epoch of the tiny corpus in 25 batches
    of 4 x 8 tokens, a line per batch, no dropout (a device run can be held to the CPU's)."""
    flags = {"data": TINY_CORPUS, "model": model, "emsize": 16, "nhid": 16, "nlayers": 2, "batch_size": 4,
             "bptt": 8, "epochs": 1, "log-interval": 1, "dropout": 0, "lr": 2, "save": save, **flags}
    args = []
    for flag, value in flags.items():  # True: a flag without a value
        args += [f"--{flag}"] + ([] if value is True else [str(value)])
    return args


def word_lm_numbers(out: str):
    """(train losses, train perplexities, the valid and test perplexities) as printed."""
    train = re.findall(r"batches \| lr .* \| loss +(\S+) \| ppl +(\S+)", out)
    ends = re.findall(r"(?:valid|test) ppl +(\S+)", out)
    return [float(l) for l, _ in train], [float(p) for _, p in train], [float(p) for p in ends]


def word_language_model(model: str, against_cpu: bool, **flags) -> Callable[[Runner, Path], str]:
    def run(runner: Runner, cwd: Path) -> str:
        out = runner(cwd, "word_language_model/main.py", "--accel", *word_lm_args(model, cwd / "model.pt", **flags))
        expect("Using device: opencl" in out, "the program did not pick the opencl device")
        losses, ppl, ends = word_lm_numbers(out)
        note = falling(losses[1:], "loss")  # the first line sums two batches
        expect(len(ends) == 2 and all(map(math.isfinite, ends)), f"valid/test perplexities: {ends}")
        if against_cpu:
            cpu = runner(cwd, "word_language_model/main.py", *word_lm_args(model, cwd / "cpu.pt", **flags),
                         accel=False, log="cpu")
            _, cpu_ppl, cpu_ends = word_lm_numbers(cpu)
            expect(len(cpu_ppl) == len(ppl) > 0 and len(cpu_ends) == 2, "the CPU run printed other lines")
            # float32 rounding moves them by about 1e-6 here; 0.2% tells a wrong kernel
            for i, (got, want) in enumerate(zip(ppl + ends, cpu_ppl + cpu_ends)):
                expect(abs(got - want) <= 2e-3 * want, f"perplexity {i + 1}: {got} on the device, {want} on the CPU")
            note += f", {len(ppl)} + 2 perplexities the CPU run's"
        # generate.py (the README's `python generate.py --accel`) samples from the saved model
        runner(cwd, "word_language_model/generate.py", "--accel", "--data", TINY_CORPUS, "--words", "40",
               log="generate")
        vocabulary = {w for f in TINY_CORPUS.glob("*.txt") for w in f.read_text().split()} | {"<eos>"}
        words = (cwd / "generated.txt").read_text().split()
        expect(len(words) == 40 and set(words) <= vocabulary, f"generated: {words}")
        return note + ", 40 words generated"
    return run


# --- pytorch/examples dcgan: a GAN on its own fake data (torchvision's FakeData, 64 x 64)

def dcgan(runner: Runner, cwd: Path) -> str:
    """One epoch of the 1000 fake images in 20 batches, 8 filters a layer, a 16-number latent:
    the discriminator learns to tell them from the generator's (its loss falls)."""
    out = runner(cwd, "dcgan/main.py", "--accel", "--dataset", "fake", "--nz", "16", "--ngf", "8", "--ndf", "8",
                 "--workers", "0", "--manualSeed", "1", "--niter", "1", "--batchSize", "50", "--outf", cwd)
    expect("Using device: opencl" in out, "the program did not pick the opencl device")
    steps = re.findall(r"Loss_D: (\S+) Loss_G: (\S+) D\(x\): (\S+) D\(G\(z\)\): (\S+) / (\S+)", out)
    expect(len(steps) == 20, f"{len(steps)} steps printed, 20 expected")
    expect(all(math.isfinite(float(v)) for step in steps for v in step), "a loss or score is not finite")
    for saved in ("netG_epoch_0.pth", "netD_epoch_0.pth", "fake_samples_epoch_000.png"):
        expect((cwd / saved).is_file() and (cwd / saved).stat().st_size > 0, f"no {saved}")
    return falling([float(step[0]) for step in steps], "Loss_D") + ", models and samples saved"


# --- pytorch/examples mnist: a CNN classifier's training loop, on MNIST files written here

def write_mnist(root: Path, n_train: int = 256, n_test: int = 64, seed: int = 0) -> None:
    """MNIST's raw files (IDX format) under root/MNIST/raw, where torchvision looks before it
    downloads: noise with a bright bar at row 2 + 2k for digit k, learnt in an epoch."""
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


def mnist(runner: Runner, cwd: Path) -> str:
    """One epoch of 8 batches of 32 (the accelerator is the program's default), a line per
    batch: the loss falls and at least 58 of the 64 test images are classified."""
    write_mnist(cwd / "data")
    run_in = cwd / "run"  # the program reads ../data
    run_in.mkdir()
    out = runner(run_in, "mnist/main.py", "--epochs", "1", "--batch-size", "32", "--test-batch-size", "32",
                 "--log-interval", "1", "--save-model")
    note = falling([float(v) for v in re.findall(r"Train Epoch: 1 .*\tLoss: (\S+)", out)], "loss")
    correct = re.search(r"Test set: Average loss: (\S+), Accuracy: (\d+)/64", out)
    expect(bool(correct) and math.isfinite(float(correct[1])), "no test line")
    expect(int(correct[2]) >= 58, f"{correct[2]}/64 test images classified")
    expect((run_in / "mnist_cnn.pt").is_file(), "no mnist_cnn.pt")
    return note + f", {correct[2]}/64 test images"


# --- pytorch/examples imagenet: ResNet-18's training loop on an image folder written here

def write_image_folder(root: Path, per_class: dict, seed: int = 0) -> None:
    """root/{train,val}/{class}/*.png as the README lays ImageNet out: 2 classes of noise."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, count in per_class.items():
        for label in ("n01440764", "n01443537"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")


def imagenet(runner: Runner, cwd: Path) -> str:
    """2 training steps of 2 images (224 x 224 crops), validation, a checkpoint."""
    write_image_folder(cwd / "data", {"train": 2, "val": 1})
    out = runner(cwd, "imagenet/main.py", "-a", "resnet18", "-b", "2", "-j", "0", "--epochs", "1", "-p", "1",
                 "--seed", "0", "data")
    expect("Using device: opencl" in out, "the program did not pick the opencl device")
    losses = [float(v) for v in re.findall(r"Epoch: \[0\]\[\d/2\].*\tLoss (\S+) ", out)]
    expect(len(losses) == 2 and all(map(math.isfinite, losses)), f"training losses: {losses}")
    expect(bool(re.search(r"Test: \[1/1\].*\tLoss (\S+) ", out)) and " *   Acc@1" in out, "no validation lines")
    expect((cwd / "checkpoint.pth.tar").is_file(), "no checkpoint.pth.tar")
    return f"2 steps, loss {losses[0]:.3g}, {losses[1]:.3g}; validated, checkpoint saved"


# --- pytorch/examples distributed/minGPT-ddp: a GPT trainer, DDP over 2 processes, AMP

NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"


def mingpt_ddp(runner: Runner, cwd: Path) -> str:
    """run_example.sh's torchrun, its config's AMP and DDP on, each process on its own PoCL
    device: a GPT of 1 layer on 10% of the tiny corpus, one epoch; both ranks train and
    evaluate, rank 0 saves a snapshot."""
    config = runner.src / "distributed/minGPT-ddp/mingpt/gpt2_train_cfg.yaml"
    expect("use_amp: True" in config.read_text(), "the config no longer turns AMP on")
    overrides = [f"data_config.path={TINY_CORPUS / 'train.txt'}", "data_config.block_size=16",
                 "data_config.truncate=0.1", "gpt_config.n_layer=1", "gpt_config.n_head=2", "gpt_config.n_embd=16",
                 "trainer_config.max_epochs=1", "trainer_config.batch_size=8",
                 "trainer_config.data_loader_workers=0", "trainer_config.save_every=1"]
    out = runner(cwd, "distributed/minGPT-ddp/mingpt/main.py", *overrides, processes=2,
                 env={"POCL_DEVICES": "pthread pthread", "HYDRA_FULL_ERROR": "1"})
    losses = []
    for rank in (0, 1):
        for step in ("Train", "Eval"):
            # the number alone: a rank's line and its newline are two writes, the other's may come between
            loss = re.search(rf"\[RANK{rank}\] Epoch 1 \| Iter 0 \| {step} Loss ({NUMBER})", out)
            expect(bool(loss) and math.isfinite(float(loss[1])), f"rank {rank}: no finite {step} loss")
            losses.append(float(loss[1]))
    expect("Snapshot saved at epoch 1" in out and (cwd / "gpt_snapshot.pt").is_file(), "no snapshot saved")
    return f"2 ranks trained and evaluated (losses {', '.join(f'{v:.3g}' for v in losses)}), snapshot saved"


LM = "python main.py --accel --epochs 6"
PROGRAMS = [
    Program("word_lm_rnn_tanh", "word_language_model", f"{LM} --model RNN_TANH", word_language_model("RNN_TANH", True)),
    Program("word_lm_lstm", "word_language_model", LM, word_language_model("LSTM", True)),
    Program("word_lm_gru", "word_language_model", f"{LM} --model GRU", word_language_model("GRU", True)),
    # nn.Transformer's own dropout (0.1) has no flag: held to falling losses, not to the CPU's
    Program("word_lm_transformer", "word_language_model", f"{LM} --model Transformer --lr 5",
            word_language_model("Transformer", False, nhead=2, nhid=32, lr=5)),
    Program("word_lm_transformer_adamw", "word_language_model",
            f"{LM} --model Transformer --use-optimizer --lr 0.001",
            word_language_model("Transformer", False, nhead=2, nhid=32, lr=0.003, **{"use-optimizer": True})),
    Program("dcgan", "dcgan", "python main.py --dataset fake --accel", dcgan),
    Program("mnist", "mnist", "python main.py", mnist),
    Program("imagenet", "imagenet", "python main.py -a resnet18 [imagenet-folder]", imagenet),
    Program("mingpt_ddp", "distributed/minGPT-ddp", "torchrun --standalone --nproc_per_node=2 main.py", mingpt_ddp,
            needs=("hydra", "omegaconf", "boto3")),
]


@dataclass
class Row:
    name: str
    result: str   # pass, FAIL, absent, skipped
    seconds: float
    note: str


def run_programs(programs: Sequence[Program], src: Path, work: Path, timeout: float = 600) -> List[Row]:
    """Each program in a fresh folder WORK/NAME; a row each, in order."""
    runner, rows = Runner(src, timeout), []
    for program in programs:
        start = time.monotonic()
        missing = [m for m in program.needs if importlib.util.find_spec(m) is None]
        if not (src / program.folder).is_dir():
            rows.append(Row(program.name, "absent", 0.0, f"no {program.folder}/ in {src}: see --help to fetch it"))
            continue
        if missing:
            rows.append(Row(program.name, "skipped", 0.0, f"needs {', '.join(missing)}: pip install -r requirements.txt"))
            continue
        cwd = work / program.name
        shutil.rmtree(cwd, ignore_errors=True)
        cwd.mkdir(parents=True)
        try:
            result, note = "pass", program.run(runner, cwd)
        except Failed as failure:
            result, note = "FAIL", str(failure)
        rows.append(Row(program.name, result, time.monotonic() - start, note))
        print(f"{program.name}: {result} ({rows[-1].seconds:.0f} s)", flush=True)
    return rows


def table(rows: Sequence[Row]) -> str:
    width = max([len("program")] + [len(row.name) for row in rows])
    lines = [f"{'program':<{width}}  result   time  notes"]
    lines += [f"{row.name:<{width}}  {row.result:<7} {row.seconds:4.0f} s  {row.note}" for row in rows]
    return "\n".join(lines)


def checkout_commit(src: Path) -> str:
    result = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "not a git checkout"


def main(argv: Optional[Sequence[str]] = None, programs: Sequence[Program] = PROGRAMS) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Fetch the programs ({REPOSITORY}: {', '.join(FOLDERS)}) from the project root:\n{FETCH}")
    parser.add_argument("--src", type=Path, help="the checkout of pytorch/examples")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these programs (--list names them)")
    parser.add_argument("--list", action="store_true", help="name each program and the README command it follows")
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "programs", help="where the runs write (kept)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a run may take")
    args = parser.parse_args(argv)
    if args.list:
        for program in programs:
            print(f"{program.name:<28} {program.folder + '/':<24} {program.readme}")
        return 0
    if args.src is None or not args.src.is_dir():
        parser.print_help()
        print(f"\n{'no --src given' if args.src is None else f'no checkout at {args.src}'}", file=sys.stderr)
        return 2
    chosen = programs
    if args.only:
        unknown = sorted(set(args.only) - {p.name for p in programs})
        if unknown:
            parser.error(f"no program named {', '.join(unknown)} (--list names them)")
        chosen = [p for p in programs if p.name in args.only]
    src = args.src.resolve()
    rows = run_programs(chosen, src, args.work.resolve(), args.timeout)
    print(f"\n{src} at {checkout_commit(src)}; outputs in {args.work}\n{table(rows)}")
    passed = sum(row.result in ("pass", "skipped") for row in rows)
    print(f"{sum(row.result == 'pass' for row in rows)} of {len(rows)} passed")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
