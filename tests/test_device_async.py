"""The device's submission thread (device/csrc/runtime/submitter.h): on GPUs the device hands
its launches, copies, host writes, library calls and graph replays to a thread that enqueues
them while the caller goes on. PoCL is a CPU device, where it is off by default;
OCLF_DEVICE_ASYNC=1 turns it on here, in a process of its own for each check (the setting is
read when the device opens). The results must be the same bits as the direct path's: the
same kernels run in the same order."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, asynchronous: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, OCLF_DEVICE_ASYNC=asynchronous)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


# A bit of everything that goes through the thread, its results saved for comparison: a small
# convolutional net's training steps (launches, CLBlast products, copies, host writes of
# scalars), a graph recorded and replayed, reads in between, memory given back mid-stream,
# a second thread's backward pass, and the library's own operators between device ones.
WORKLOAD = """
import sys, threading, torch
import opencl_functions as oclf
import torch_opencl as ocl
torch.manual_seed(0)
print("async", torch.ops.oclf.submits_async(0))
dev = "opencl"
net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                          torch.nn.Conv2d(8, 8, 3, stride=2), torch.nn.Flatten(), torch.nn.Linear(8 * 7 * 7, 10)).to(dev)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(4, 3, 15, 15).to(dev)
y = torch.randint(0, 10, (4,)).to(dev)
out = {}
losses = []
for step in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    torch.opencl.empty_cache()
out["losses"] = torch.tensor(losses)
out["weights"] = torch.cat([p.detach().cpu().flatten() for p in net.parameters()])

# A graph: recorded once, replayed on new inputs.
static_x = torch.randn(4, 3, 15, 15, device=dev)
net.eval()
with torch.no_grad():
    net(static_x)
    with ocl.graph() as g:
        static_y = net(static_x)
    replayed = []
    for i in range(3):
        static_x.copy_(torch.full((4, 3, 15, 15), 0.1 * i).to(dev))
        g.replay()
        replayed.append(static_y.cpu())
out["replayed"] = torch.stack(replayed)

# The library's operators between the device's (one runtime, one queue).
a = torch.randn(33, 17)
b = torch.randn(17, 29)
d = torch.randn(33, 29, device=dev)
e = (d * 2).relu_()
out["library_matmul"] = oclf.ocl_matmul(a, b)
out["after_library"] = (e + 1).cpu()

# A backward pass on autograd's own thread for the device, from a second Python thread too.
w = torch.randn(64, 64, device=dev, requires_grad=True)
def worker(result):
    (w @ w).tanh().sum().backward()
    result.append(w.grad.cpu().clone())
res = []
t = threading.Thread(target=worker, args=(res,))
t.start(); t.join()
out["thread_grad"] = res[0]
torch.save(out, sys.argv[1] if len(sys.argv) > 1 else "/dev/null")
"""


def test_submission_thread_gives_the_direct_paths_bits(tmp_path):
    results = {}
    for mode in ("0", "1"):
        path = tmp_path / f"async{mode}.pt"
        code = WORKLOAD.replace('sys.argv[1] if len(sys.argv) > 1 else "/dev/null"', repr(str(path)))
        proc = run_python(code, mode)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"async {mode == '1'}" in proc.stdout
        import torch

        results[mode] = torch.load(path)
    for key, direct in results["0"].items():
        threaded = results["1"][key]
        assert torch_equal(direct, threaded), f"{key} differs with the submission thread"


def torch_equal(a, b) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.equal(a, b))


def test_a_failed_command_is_reported_at_the_next_wait(tmp_path):
    # A launch the driver refuses (a work-group larger than the device takes) returns at once
    # into the thread's list; the next wait reports it with its CL_* name, once, and the
    # device works on after it.
    source = tmp_path / "refused.cl"
    source.write_text("__kernel void refused(__global float* p, int offset) { p[offset + get_global_id(0)] = 1.0f; }\n")
    code = f"""
    import torch
    import torch_opencl
    x = torch.zeros(1 << 22, device="opencl")
    handle = torch.ops.oclf.generated_kernel({str(source)!r}, "refused")
    torch.ops.oclf.generated_launch(handle, [x], [], [1 << 22], [1 << 22])
    print("returned")
    # Deleters and the cache's release wait for the thread without raising (a deleter that
    # raised would end the process): the error waits for the next wait.
    pinned = torch.ones(1024).pin_memory()
    del pinned
    del x
    torch.opencl.empty_cache()
    try:
        torch.opencl.synchronize()
    except RuntimeError as err:
        print("raised:", err)
    torch.opencl.synchronize()  # reported once
    print("after:", (torch.ones(5, device="opencl") * 3).sum().item())
    """
    proc = run_python(code, "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "returned" in proc.stdout
    raised = [line for line in proc.stdout.splitlines() if line.startswith("raised:")]
    assert raised and "CL_INVALID_WORK_GROUP_SIZE" in raised[0] and "submission thread" in raised[0], proc.stdout
    assert "after: 15.0" in proc.stdout
    # Without the thread the same launch raises where it is made.
    proc = run_python(code.replace('print("returned")', 'print("not raised")'), "0")
    assert "not raised" not in proc.stdout and "CL_INVALID_WORK_GROUP_SIZE" in proc.stderr, proc.stdout + proc.stderr


def test_setting_is_checked():
    proc = run_python("import torch, torch_opencl; torch.zeros(1, device='opencl')", "yes")
    assert proc.returncode != 0 and "OCLF_DEVICE_ASYNC must be 0 or 1" in proc.stderr, proc.stderr[-2000:]


# The recorder's suite by default; the optimizers' too in make test-slow (a minute more on 2 cores).
@pytest.mark.parametrize("files", [["tests/test_device_graph.py"],
                                   pytest.param(["tests/test_device_optim.py"], marks=pytest.mark.slow)],
                         ids=["graph", "optim"])
def test_device_suites_pass_with_the_submission_thread(files):
    # Existing suites, as written, with every command going through the thread.
    env = dict(os.environ, OCLF_DEVICE_ASYNC="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_a_forked_child_gets_an_error_not_a_hang():
    # A child forked after the device opened has the parent's OpenCL state without the
    # driver's threads or the submission thread: a call into either could wait for ever.
    # Like CUDA, the device refuses such a child at once (allocation, launch, read, wait).
    code = """
    import os, time, torch
    import torch_opencl
    x = torch.ones(3, device="opencl") * 2
    assert not torch_opencl._is_in_bad_fork()
    pid = os.fork()
    if pid == 0:
        codes = []
        for attempt in (lambda: torch.empty(1000, device="opencl"), lambda: x + 1, lambda: x.cpu(),
                        lambda: torch.opencl.synchronize()):
            try:
                attempt()
                codes.append("ran")
            except RuntimeError as err:
                codes.append("refused" if "forked" in str(err) else "other")
        os._exit(0 if codes == ["refused"] * 4 and torch_opencl._is_in_bad_fork() else 4)
    for _ in range(600):  # a minute at most: a child that hangs fails the check, it does not hang it
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("child", os.waitstatus_to_exitcode(status))
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        print("child hung")
    print("parent", (x + 1).sum().item())
    """
    for mode in ("1", "0"):
        proc = run_python(code, mode, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "child 0" in proc.stdout and "parent 9.0" in proc.stdout, (mode, proc.stdout)


def test_a_program_may_end_with_commands_still_waiting():
    # Work never waited for, in the thread's list or the driver's queue: enqueued and run to
    # the end by the package's exit handler, before the interpreter frees the tensors and the
    # driver is torn down, and the process ends cleanly. (It once crashed in one run of three
    # under the parallel suite, when the driver was torn down with PoCL still at work.)
    code = """
    import torch, torch_opencl
    x = torch.randn(256, 256, device="opencl")
    for _ in range(200):
        x = torch.tanh(x @ x * 1e-3 + 1)
    print("queued")
    """
    for mode in ("1", "1", "1", "0"):
        proc = run_python(code, mode, timeout=300)
        assert proc.returncode == 0 and "queued" in proc.stdout, (mode, proc.stderr[-3000:])
