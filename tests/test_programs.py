"""The harness that runs public programs on the device from a checkout of theirs
(tests/programs/run.py, `make programs SRC=...`), tried on small programs written here into a
temporary checkout: a clean run on the device passes, with the argv, `__file__` and
`sys.path[0]` that `python PROGRAM.py` gives; an exception, a printed traceback, a CPU
fallback, a run that never used the device, losses that do not fall and a run past its time
each fail with their cause in the table; a program not in the checkout is "absent", one
missing a module "skipped", and the exit status says so. The data the harness writes for
mnist and imagenet reads back through torchvision as those programs read it."""
import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_harness():
    spec = importlib.util.spec_from_file_location("programs_run", ROOT / "tests" / "programs" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


harness = load_harness()

# A linear regression that finds the accelerator as public programs do (torch.accelerator),
# prints what `python train.py` gives it and one loss per step.
TRAIN = """
    import sys
    import torch

    print("identity", __name__, __file__, sys.argv, sys.path[0])
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else "cpu"
    print("device", device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(61, 5, generator=gen)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0, 0.0]) + 0.25
    model = torch.nn.Linear(5, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(int(sys.argv[2])):
        loss = torch.nn.functional.mse_loss(model(x.to(device)).squeeze(1), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.5f}")
"""

# Programs that go wrong, each its own way (the ones without torch start in milliseconds).
BROKEN = {
    "raises": 'raise ValueError("the toy\'s own error")',
    "traceback": """
        import traceback
        try:
            1 / 0
        except ZeroDivisionError:
            traceback.print_exc()
    """,
    "rising": "for step in range(8):\n    print(f'step {step} loss {step + 1.5}')",
    "sleeps": "import time\ntime.sleep(60)",
    "cpu_only": "import torch\nprint(torch.ones(3).sum().item())",
    "fallback": """
        import torch
        torch.linalg.eigvals(torch.randn(6, 6, device="opencl"))  # no OpenCL kernel
    """,
}


def checkout(tmp_path, programs):
    """A checkout with each program at NAME/main.py."""
    src = tmp_path / "src"
    for name, text in programs.items():
        (src / name).mkdir(parents=True)
        (src / name / "main.py").write_text(textwrap.dedent(text))
    return src


def losses(out):
    return [float(v) for v in re.findall(r"step \d+ loss (\S+)", out)]


def run_toy(runner, cwd, *, accel=True, processes=1, env=None):
    return harness.falling(losses(runner(cwd, "toy/main.py", "--steps", "12", accel=accel, processes=processes,
                                         env=env)), "loss")


def test_a_program_trained_on_the_device_passes_as_python_would_run_it(opencl_device, tmp_path):
    src = checkout(tmp_path, {"toy": TRAIN})
    outputs = {}

    def run(runner, cwd):
        note = run_toy(runner, cwd)
        outputs["device"] = (cwd / "output.txt").read_text()
        runner(cwd, "toy/main.py", "--steps", "12", accel=False, log="plain")
        outputs["plain"] = (cwd / "plain.txt").read_text()
        return note

    rows = harness.run_programs([harness.Program("toy", "toy", "python main.py", run)], src, tmp_path / "work")
    assert [(r.name, r.result) for r in rows] == [("toy", "pass")], rows
    assert rows[0].note.startswith("loss ") and " → " in rows[0].note
    assert "\ndevice opencl\n" in outputs["device"]
    identity = [next(line for line in out.splitlines() if line.startswith("identity")) for out in outputs.values()]
    program = src / "toy" / "main.py"
    assert identity[0] == identity[1] == f"identity __main__ {program} {[str(program), '--steps', '12']} {program.parent}"
    assert "[on_device] opencl peak bytes" not in outputs["plain"]


@pytest.mark.slow
def test_a_program_under_torchrun_reports_from_every_process(opencl_device, tmp_path):
    src = checkout(tmp_path, {"toy": TRAIN})
    pocl = {"POCL_DEVICES": "pthread pthread"}
    program = harness.Program("toy", "toy", "torchrun main.py",
                              lambda runner, cwd: run_toy(runner, cwd, processes=2, env=pocl))
    rows = harness.run_programs([program], src, tmp_path / "work")
    assert rows[0].result == "pass", rows
    assert (tmp_path / "work" / "toy" / "output.txt").read_text().count("[on_device] opencl peak bytes") == 2


def test_failures_name_their_cause(opencl_device, tmp_path):
    src = checkout(tmp_path, BROKEN)
    on_device = {"cpu_only", "fallback"}

    def program(name):
        def run(runner, cwd):
            timeout, runner.timeout = runner.timeout, 3 if name == "sleeps" else runner.timeout
            try:
                return harness.falling(losses(runner(cwd, f"{name}/main.py", accel=name in on_device)), "loss")
            finally:
                runner.timeout = timeout
        return harness.Program(name, name, "python main.py", run)

    rows = harness.run_programs([program(name) for name in BROKEN], src, tmp_path / "work")
    notes = {row.name: row.note for row in rows}
    assert {row.result for row in rows} == {"FAIL"}, rows
    assert notes["raises"] == "raises/main.py exit 1: ValueError: the toy's own error"
    assert notes["traceback"] == "traceback/main.py printed a traceback: ZeroDivisionError: division by zero"
    assert notes["rising"].startswith("loss did not fall: first quarter 2.000, last 8.000")
    assert notes["sleeps"] == "sleeps/main.py ran past 3 s"
    assert notes["cpu_only"] == "the device held no memory: the program did not run there"
    assert notes["fallback"].startswith("fallback/main.py exit 1: NotImplementedError:"), notes["fallback"]
    assert "_linalg_eigvals" in notes["fallback"], f"eigvals has a kernel now? pick an op without one: {notes}"
    assert (tmp_path / "work" / "raises" / "output.txt").read_text().rstrip().endswith("the toy's own error")


def test_absent_and_skipped_programs_and_the_exit_status(tmp_path, capsys):
    src = checkout(tmp_path, {"here": "print('step 0 loss 1')"})

    def fails(runner, cwd):
        raise harness.Failed("never run")

    programs = [harness.Program("gone", "not/in/the/checkout", "python main.py", fails),
                harness.Program("needy", "here", "python main.py", fails, needs=("no_such_module_here",))]
    assert harness.main(["--src", str(src), "--work", str(tmp_path / "work")], programs=programs) == 1
    out = capsys.readouterr().out
    assert f"{src} at not a git checkout" in out
    assert re.search(rf"^gone +absent +0 s  no not/in/the/checkout/ in {src}: see --help to fetch it$", out, re.M)
    assert re.search(r"^needy +skipped +0 s  needs no_such_module_here: pip install -r requirements.txt$", out, re.M)
    assert out.rstrip().endswith("0 of 2 passed")
    assert harness.main(["--src", str(src), "--only", "needy", "--work", str(tmp_path / "work")],
                        programs=programs) == 0  # a skip alone is no failure
    with pytest.raises(SystemExit):
        harness.main(["--src", str(src), "--only", "nothing"], programs=programs)
    assert "no program named nothing" in capsys.readouterr().err


def test_without_a_checkout_the_help_says_how_to_fetch_one(tmp_path, capsys):
    assert harness.main([]) == 2
    captured = capsys.readouterr()
    assert "git clone --filter=blob:none --sparse https://github.com/pytorch/examples .clients/pytorch-examples" in captured.out
    assert "sparse-checkout set word_language_model dcgan mnist imagenet distributed/minGPT-ddp" in captured.out
    assert "no --src given" in captured.err
    assert harness.main(["--src", str(tmp_path / "nowhere")]) == 2
    assert "no checkout at" in capsys.readouterr().err
    assert "/.clients/" in (ROOT / ".gitignore").read_text().split()  # fetched programs stay out of git


def test_the_list_names_every_program_with_its_readme_command(capsys):
    assert harness.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(harness.PROGRAMS) == len({p.name for p in harness.PROGRAMS})
    for line, program in zip(lines, harness.PROGRAMS):
        assert line.split()[:2] == [program.name, program.folder + "/"] and program.readme in line
        assert program.folder in harness.FOLDERS


def test_written_mnist_files_read_back_through_torchvision(tmp_path):
    datasets = pytest.importorskip("torchvision.datasets")
    harness.write_mnist(tmp_path, n_train=37, n_test=5)
    train = datasets.MNIST(tmp_path, train=True, download=False)
    assert len(train) == 37 and len(datasets.MNIST(tmp_path, train=False, download=False)) == 5
    for image, digit in (train[i] for i in range(37)):
        rows = [r for r in range(28) if min(image.getpixel((x, r)) for x in range(4, 24)) == 255]
        assert rows == [2 + 2 * digit, 3 + 2 * digit]


def test_written_image_folder_reads_back_through_torchvision(tmp_path):
    datasets = pytest.importorskip("torchvision.datasets")
    harness.write_image_folder(tmp_path, {"train": 3, "val": 1})
    train = datasets.ImageFolder(tmp_path / "train")
    assert train.classes == ["n01440764", "n01443537"] and len(train) == 6
    assert train[0][0].size == (48, 40) and train[0][0].mode == "RGB"
    assert len(datasets.ImageFolder(tmp_path / "val")) == 2
