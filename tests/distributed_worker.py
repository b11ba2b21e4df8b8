"""Run by tests/test_device_distributed.py under torchrun (the repository on PYTHONPATH): each collective of the "oclf"
backend on opencl tensors (odd sizes, a strided view) checked against the values every rank
can compute for itself. Exits non-zero with the failing check's message."""
import torch
import torch.distributed as dist

import torch_opencl  # noqa: F401  (registers the device and the backend)


def values(rank: int, n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32) * (rank + 1) + rank / 7


def sync_batch_norm(rank: int, world: int) -> None:
    """SyncBatchNorm over the processes' shares = BatchNorm over the whole batch (float64)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3 * world, 5, 4, 3, dtype=torch.float64, generator=gen)
    dy = torch.randn(x.shape, dtype=torch.float64, generator=gen)
    ref = torch.nn.BatchNorm2d(5).double()
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5, generator=gen)
        ref.bias.uniform_(-1, 1, generator=gen)
    sync = torch.nn.SyncBatchNorm(5)
    sync.load_state_dict(ref.state_dict())
    sync.to("opencl")
    whole = x.clone().requires_grad_()
    expected = ref(whole)
    expected.backward(dy)
    share = slice(3 * rank, 3 * rank + 3)
    mine = x[share].float().to("opencl").requires_grad_()
    out = sync(mine)
    out.backward(dy[share].float().to("opencl"))
    torch.testing.assert_close(out.detach().cpu().double(), expected[share].detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mine.grad.cpu().double(), whole.grad[share], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sync.running_var.cpu().double(), ref.running_var, rtol=1e-5, atol=1e-6)
    # the weight's gradient is this process's share; DDP would sum the shares
    total = sync.weight.grad.detach().clone()
    dist.all_reduce(total)
    torch.testing.assert_close(total.cpu().double(), ref.weight.grad, rtol=1e-5, atol=1e-5)


def main() -> None:
    dist.init_process_group("cpu:gloo,opencl:oclf")
    rank, world = dist.get_rank(), dist.get_world_size()
    ranks = range(world)

    x = values(rank, 37).to("opencl")
    dist.all_reduce(x)
    torch.testing.assert_close(x.cpu(), sum(values(r, 37) for r in ranks))

    m = values(rank, 5 * 8).view(5, 8).to("opencl")
    view = m[:, 1::3]                                    # a strided view: results must land in it
    dist.all_reduce(view, op=dist.ReduceOp.MAX)
    want = values(rank, 40).view(5, 8)
    want[:, 1::3] = torch.stack([values(r, 40).view(5, 8)[:, 1::3] for r in ranks]).amax(0)
    torch.testing.assert_close(m.cpu(), want)

    b = values(rank, 11).to("opencl")
    dist.broadcast(b, src=world - 1)
    torch.testing.assert_close(b.cpu(), values(world - 1, 11))

    outs = [torch.empty(13, device="opencl") for _ in ranks]
    dist.all_gather(outs, values(rank, 13).to("opencl"))
    for r in ranks:
        torch.testing.assert_close(outs[r].cpu(), values(r, 13))

    flat = torch.empty(world * 6, device="opencl")
    dist.all_gather_into_tensor(flat, values(rank, 6).to("opencl"))
    torch.testing.assert_close(flat.cpu(), torch.cat([values(r, 6) for r in ranks]))

    part = torch.empty(9, device="opencl")
    dist.reduce_scatter_tensor(part, values(rank, 9 * world).to("opencl"))
    torch.testing.assert_close(part.cpu(), sum(values(r, 9 * world) for r in ranks)[rank * 9:(rank + 1) * 9])

    sent = torch.cat([values(rank, 3 * world)]).to("opencl")
    got = torch.empty(3 * world, device="opencl")
    dist.all_to_all_single(got, sent)
    torch.testing.assert_close(got.cpu(), torch.cat([values(r, 3 * world)[3 * rank:3 * rank + 3] for r in ranks]))

    gathered = [torch.empty(5, device="opencl") for _ in ranks] if rank == 0 else None
    dist.gather(values(rank, 5).to("opencl"), gathered, dst=0)
    if rank == 0:
        for r in ranks:
            torch.testing.assert_close(gathered[r].cpu(), values(r, 5))

    ints = torch.full((4,), rank + 1, dtype=torch.int64, device="opencl")
    dist.all_reduce(ints)
    assert ints.cpu().tolist() == [sum(r + 1 for r in ranks)] * 4, ints.cpu()

    if world > 1:
        if rank == 0:
            dist.send(values(0, 7).to("opencl"), dst=1)
        elif rank == 1:
            got = torch.empty(7, device="opencl")
            dist.recv(got, src=0)
            torch.testing.assert_close(got.cpu(), values(0, 7))
    sync_batch_norm(rank, world)
    dist.barrier()
    if rank == 0:
        print("collectives ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
