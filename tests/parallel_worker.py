"""Run by tests/test_device_parallel.py under torchrun, two processes on two devices of one
machine (process r on opencl:r, bound by init_process_group(device_id=...)): FSDP2, its
mixed precision, a distributed checkpoint, tensor parallelism and DTensor's random numbers,
each checked against the same work on one device (or in float64 on the CPU) that every
process computes for itself. `python parallel_worker.py CHECK [FOLDER]`; exits non-zero with
the failing check's message, prints "CHECK ok" on rank 0."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import torch_opencl  # noqa: F401  (registers the device and its backend)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

WORLD_BATCH = 10


class MLP(nn.Module):
    def __init__(self, sizes=(13, 30, 30, 7)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.gelu(x)
        return x


def full(tensor: torch.Tensor) -> torch.Tensor:
    """A parameter (or its gradient) whole, on the CPU: a DTensor's shards gathered."""
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().cpu()


def batches(steps: int, sizes=(13, 30, 30, 7)):
    """The global batches (inputs, targets) of each step, the same in every process."""
    gen = torch.Generator().manual_seed(17)
    return [(torch.randn(WORLD_BATCH, sizes[0], generator=gen), torch.randn(WORLD_BATCH, sizes[-1], generator=gen))
            for _ in range(steps)]


def my_share(tensor: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    return tensor.chunk(world)[rank]


def sharded(model: nn.Module, **policy) -> nn.Module:
    for layer in model.layers:
        fully_shard(layer, **policy)
    return fully_shard(model, **policy)


def train(model, opt, data, device, share: bool, dtype=torch.float32):
    """Steps of mean squared error; FSDP's processes each take their share of the batch (the
    mean of the shares' gradients, which FSDP takes, is the whole batch's)."""
    losses = []
    for x, t in data:
        if share:
            x, t = my_share(x), my_share(t)
        out = model(x.to(device, dtype))
        loss = F.mse_loss(out.to(t.dtype), t.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return out, losses


def check_fsdp(device) -> None:
    """fully_shard in float32: the parameters after each of 3 Adam steps equal those of one
    device trained on the whole batches; a model made on the meta device, sharded, then
    initialised on the device (DTensor's random numbers) gets the one-device model's values."""
    torch.manual_seed(0)
    reference = MLP().to(device)
    model = sharded(MLP().to(device))
    for p, q in zip(model.parameters(), reference.parameters()):
        with torch.no_grad():
            p.copy_(distribute_tensor(q.detach(), p.device_mesh, p.placements))
    assert all(isinstance(p, DTensor) for p in model.parameters())
    ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2, foreach=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    for step, batch in enumerate(batches(3)):
        train(reference, ref_opt, [batch], device, share=False)
        train(model, opt, [batch], device, share=True)
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(full(p), q.detach().cpu(), rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"step {step}, {name}: {m}")

    sizes = (16, 32, 8)   # shards of whole groups of 4 numbers, as DTensor's offsets are
    torch.manual_seed(7)
    with torch.device(device):
        made_here = MLP(sizes)
    state_after = torch.opencl.get_rng_state(device)
    with torch.device("meta"):
        late = MLP(sizes)
    sharded(late)
    late.to_empty(device=device)
    torch.manual_seed(7)
    for layer in late.layers:
        layer.reset_parameters()
    for (name, p), q in zip(late.named_parameters(), made_here.parameters()):
        assert torch.equal(full(p), q.detach().cpu()), f"{name}: the sharded initialisation differs"
    assert torch.equal(torch.opencl.get_rng_state(device), state_after), "the stream went on elsewhere"


def check_fsdp_bf16(device) -> None:
    """MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): 3 SGD steps against
    float64 on the CPU, within 3 times the error of torch's own bfloat16 on the CPU (float32
    parameters, each step's forward and backward on their bfloat16 copy, the whole batch)."""
    torch.manual_seed(0)
    initial = MLP().state_dict()
    data = batches(3)

    exact = MLP().double()
    exact.load_state_dict(initial)
    opt = torch.optim.SGD(exact.parameters(), lr=0.1)
    train(exact, opt, [(x.double(), t.double()) for x, t in data], "cpu", share=False, dtype=torch.float64)

    master = MLP()
    master.load_state_dict(initial)
    opt = torch.optim.SGD(master.parameters(), lr=0.1)
    for x, t in data:
        low = MLP().to(torch.bfloat16)
        low.load_state_dict(master.state_dict())
        F.mse_loss(low(x.bfloat16()).float(), t).backward()
        for p, q in zip(master.parameters(), low.parameters()):
            p.grad = q.grad.float()
        opt.step()
        opt.zero_grad()

    model = MLP()
    model.load_state_dict(initial)
    sharded(model.to(device), mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out, _ = train(model, opt, data, device, share=True)
    assert out.dtype == torch.bfloat16, out.dtype
    worst = (0.0, 0.0)
    for (name, p), q, r in zip(model.named_parameters(), master.parameters(), exact.parameters()):
        assert p.dtype == torch.float32 and p.grad is None
        moved = (r.detach() - initial[name]).abs().max().item()
        ours = (full(p).double() - r.detach()).abs().max().item()
        torch_own = (q.detach().double() - r.detach()).abs().max().item()
        assert moved > 1e-3, f"{name} did not train"
        assert ours <= 3 * torch_own + 1e-6, f"{name}: error {ours:.2e}, torch's bfloat16 {torch_own:.2e}"
        worst = max(worst, (ours, torch_own))
    if dist.get_rank() == 0:
        print(f"bfloat16 FSDP against float64: {worst[0]:.2e}, torch's bfloat16 on the CPU {worst[1]:.2e}")


def check_checkpoint(device, folder: str) -> None:
    """torch.distributed.checkpoint: a sharded model and its Adam state saved after 2 steps,
    loaded into a fresh sharded model and optimizer, which then take the next step exactly as
    the model that went on."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    data = batches(3)
    torch.manual_seed(1)
    model = sharded(MLP().to(device))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    train(model, opt, data[:2], device, share=True)
    weights, optim = get_state_dict(model, opt)
    dcp.save({"model": weights, "optim": optim}, checkpoint_id=folder)
    _, (expected_loss,) = train(model, opt, data[2:], device, share=True)

    torch.manual_seed(2)
    fresh = sharded(MLP().to(device))
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1e-2, foreach=False)
    weights, optim = get_state_dict(fresh, fresh_opt)
    state = {"model": weights, "optim": optim}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    _, (loss,) = train(fresh, fresh_opt, data[2:], device, share=True)
    assert torch.equal(loss.cpu(), expected_loss.cpu()), (loss.item(), expected_loss.item())
    for (name, p), q in zip(fresh.named_parameters(), model.parameters()):
        assert torch.equal(p.to_local().cpu(), q.to_local().cpu()), f"{name} differs after resuming"


def check_tensor_parallel(device) -> None:
    """parallelize_module with ColwiseParallel / RowwiseParallel on an MLP: forward and
    backward equal one device's; DTensor's random numbers (uniform_, dropout) on a tensor
    sharded by rows equal one device's draws of the whole tensor."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("opencl", (dist.get_world_size(),))
    torch.manual_seed(0)
    reference = MLP((26, 38, 22)).to(device)
    model = MLP((26, 38, 22)).to(device)
    model.load_state_dict(reference.state_dict())
    parallelize_module(model, mesh, {"layers.0": ColwiseParallel(), "layers.1": RowwiseParallel()})
    assert isinstance(model.layers[0].weight, DTensor) and model.layers[0].weight.placements == (Shard(0),)
    x = torch.randn(5, 26).to(device)
    x_tp = x.clone().requires_grad_()
    x_ref = x.clone().requires_grad_()
    out, expected = model(x_tp), reference(x_ref)
    torch.testing.assert_close(out.cpu(), expected.cpu(), rtol=1e-5, atol=1e-6)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x_tp.grad.cpu(), x_ref.grad.cpu(), rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(full(p.grad), q.grad.cpu(), rtol=1e-5, atol=1e-6, msg=name)

    torch.manual_seed(3)
    whole = torch.empty(8, 12, device=device).uniform_()
    dropped = F.dropout(torch.ones(8, 12, device=device), 0.5)
    after = torch.opencl.get_rng_state(device)
    torch.manual_seed(3)
    mine = distribute_tensor(torch.empty(8, 12, device=device), mesh, [Shard(0)]).uniform_()
    mine_dropped = F.dropout(distribute_tensor(torch.ones(8, 12, device=device), mesh, [Shard(0)]), 0.5)
    assert torch.equal(full(mine), whole.cpu()), "DTensor's uniform_ differs from one device's"
    assert torch.equal(full(mine_dropped), dropped.cpu()), "DTensor's dropout differs from one device's"
    assert torch.equal(torch.opencl.get_rng_state(device), after)
    from torch.distributed.tensor import _random
    assert isinstance(_random._rng_tracker, _random.OffsetBasedRNGTracker), "DTensor's tracker did not draw these"


def main() -> None:
    check = sys.argv[1]
    rank = int(os.environ["RANK"])
    device = torch.device("opencl", rank)
    torch.opencl.set_device(device)
    dist.init_process_group(device_id=device)
    assert dist.get_backend() == "oclf", dist.get_backend()
    host = torch.full((3,), rank + 1.0)
    dist.all_reduce(host)                # host tensors too, in a group of the device's backend
    world = dist.get_world_size()
    assert host.tolist() == [world * (world + 1) / 2] * 3, host
    if check == "fsdp":
        check_fsdp(device)
    elif check == "fsdp_bf16":
        check_fsdp_bf16(device)
    elif check == "checkpoint":
        check_checkpoint(device, sys.argv[2])
    elif check == "tensor_parallel":
        check_tensor_parallel(device)
    else:
        raise SystemExit(f"unknown check {check!r}")
    dist.barrier()
    if rank == 0:
        print(f"{check} ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
