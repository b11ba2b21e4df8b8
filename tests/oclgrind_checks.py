"""What the Oclgrind tests share (test_oclgrind.py, test_device_oclgrind.py): a script run
under Oclgrind (its data-race, bounds and uninitialised-read checks), failing on any finding
or on a result that does not match torch."""
import os
import subprocess
import sys
import textwrap

from grading import check
from grading.fixtures import ROOT

# What every script starts with; `what` names the case its body runs.
PRELUDE = textwrap.dedent("""
    import sys
    sys.modules["triton"] = None  # torch.optim would load Triton, whose LLVM clashes with Oclgrind's
    import torch, torch.nn.functional as F
    import opencl_functions as ocl
    from grading.check import cases

    def close(a, b):
        assert torch.allclose(a, b, atol=1e-3, rtol=1e-3), (a - b).abs().max()

""")


def run_under_oclgrind(script: str, what: str, tmp_path, oclgrind_args=(), **env) -> None:
    """Runs PRELUDE, `what = "<what>"` and script under Oclgrind (with oclgrind_args, and env
    added to the environment); fails on Oclgrind's findings and on a nonzero exit."""
    log = tmp_path / "oclgrind.log"
    path = tmp_path / "paths.py"
    path.write_text(PRELUDE + f"what = {what!r}\n" + script)
    argv = check.oclgrind_argv(log)
    proc = subprocess.run(argv[:1] + list(oclgrind_args) + argv[1:] + [sys.executable, str(path)], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **env), capture_output=True, text=True,
                          timeout=600)
    findings = check.parse(log.read_text(errors="replace") if log.exists() else "")
    assert not findings, check.describe(findings)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
