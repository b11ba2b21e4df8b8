"""Run by tests/test_device_ddp_amp.py under torchrun: 2 processes, each on its own opencl
device, train a small GPT with DistributedDataParallel and mixed precision the way trainers
that find their device through torch.accelerator alone do it: the device opencl:RANK, the
process group on torch's default backend for it, torch.accelerator.set_device_index(RANK),
batches moved with .to(RANK); a DistributedSampler feeding each process its share, AdamW with
and without weight decay by parameter, autocast in float16, a GradScaler, gradients unscaled
and clipped by norm; a snapshot saved by rank 0 and resumed by both.

Checks, every process for itself:
- the replicas hold the same parameters and the same loss scale after every step;
- the losses, the evaluation loss and the parameters' change lie as close to the same steps
  in float64 on the CPU (one process, the global batches) as torch's own float16 autocast on
  the CPU does, within FACTOR; the loss scale grows as torch's scaler grows it there;
- a model, optimizer and scaler loaded from the snapshot take the next step exactly as the
  ones that went on.
`python ddp_amp_worker.py FOLDER`; prints "ddp_amp ok" on rank 0, exits non-zero with the
failing check's message."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import torch_opencl  # noqa: F401  (registers the device and its backend)

VOCAB, BLOCK, WIDTH = 23, 12, 16
PER_RANK, WORLD, EPOCHS = 3, 2, 2   # 12 windows: 2 steps an epoch of 3 windows per process
FACTOR = 3.0        # our error from float64 may be this many times torch's CPU autocast error
FLOOR = 2.0**-13    # a quarter of float16's rounding step: a single loss's torch error can be luckily small


class TinyGPT(nn.Module):
    """(n, BLOCK) token ids -> logits (n, BLOCK, VOCAB), and the loss when targets are given."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Parameter(torch.randn(1, BLOCK, WIDTH) * 0.02)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 3 * WIDTH), nn.GELU(), nn.Linear(3 * WIDTH, WIDTH))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.register_buffer("future", torch.ones(BLOCK, BLOCK, dtype=torch.bool).triu(1))

    def forward(self, ids, targets=None):
        x = self.tokens(ids) + self.positions
        h = self.ln1(x)
        x = x + self.attention(h, h, h, attn_mask=self.future, need_weights=False)[0]
        x = x + self.mlp(self.ln2(x))
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1), ignore_index=-1)


class Windows(Dataset):
    """Windows of a token stream (each token 5 * previous + 2 + 0 or 1, mod VOCAB) and the
    same windows one token on."""

    def __init__(self, count, seed):
        noise = torch.randint(0, 2, (count + BLOCK,), generator=torch.Generator().manual_seed(seed))
        stream = [3]
        for n in noise.tolist():
            stream.append((5 * stream[-1] + 2 + n) % VOCAB)
        self.stream, self.count = torch.tensor(stream), count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        return self.stream[i:i + BLOCK], self.stream[i + 1:i + 1 + BLOCK]


def make_model():
    torch.manual_seed(0)
    return TinyGPT()


def adamw(model):
    """Weight decay on the linear layers' weights only, as GPT trainers group them."""
    decay = [p for name, p in model.named_parameters() if name.endswith("weight") and p.dim() == 2
             and not name.startswith("tokens")]
    rest = [p for p in model.parameters() if all(p is not q for q in decay)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=3e-3, betas=(0.9, 0.95))


def make_scaler(device_type):
    return torch.amp.GradScaler(device_type, init_scale=2.0**12, growth_interval=2)


def step(model, opt, scaler, ids, targets, device_type, amp=True):
    with torch.autocast(device_type=device_type, dtype=torch.float16, enabled=amp):
        _, loss = model(ids, targets)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    return loss.detach().float()


def global_batches(dataset):
    """Every step's batch of all processes together, as each DistributedSampler splits it."""
    batches = []
    for epoch in range(EPOCHS):
        shares = []
        for rank in range(WORLD):
            sampler = DistributedSampler(dataset, num_replicas=WORLD, rank=rank, seed=7)
            sampler.set_epoch(epoch)
            shares.append(list(DataLoader(dataset, batch_size=PER_RANK, sampler=sampler)))
        for parts in zip(*shares):
            batches.append((torch.cat([ids for ids, _ in parts]), torch.cat([t for _, t in parts])))
    return batches


def one_process(dtype, amp, batches, held_out):
    """The same steps on the CPU in one process: (losses, scales, evaluation loss, parameters)."""
    model = make_model().to(dtype)
    opt, scaler = adamw(model), make_scaler("cpu")
    losses, scales = [], []
    for ids, targets in batches:
        losses.append(step(model, opt, scaler, ids, targets, "cpu", amp).double())
        scales.append(scaler.get_scale())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16, enabled=amp):
        evaluation = model(*held_out)[1].double()
    return torch.stack(losses), scales, evaluation, [p.detach().double() for p in model.parameters()]


def error(value, reference):
    """The largest deviation from reference, relative to reference's largest value."""
    return ((value.double() - reference).abs().max() / reference.abs().max()).item()


def update_error(params, reference, initial):
    """How far the parameters' change from initial is from reference's change, relative to
    the latter's size (both over every parameter together, as vectors)."""
    flat = [torch.cat([p.detach().cpu().double().view(-1) for p in ps]) for ps in (params, reference, initial)]
    return ((flat[0] - flat[1]).norm() / (flat[1] - flat[2]).norm()).item()


def same_everywhere(tensor, what):
    """tensor (on the device) equal in every process."""
    gathered = [torch.empty_like(tensor) for _ in range(WORLD)]
    dist.all_gather(gathered, tensor)
    assert all(torch.equal(g.cpu(), gathered[0].cpu()) for g in gathered), f"the replicas' {what} differ"


def main() -> None:
    folder = sys.argv[1]
    rank = int(os.environ["LOCAL_RANK"])
    assert torch.accelerator.is_available() and torch.accelerator.device_count() >= WORLD
    device = torch.device(f"{torch.accelerator.current_accelerator()}:{rank}")
    dist.init_process_group(backend=dist.get_default_backend_for_device(device))
    torch.accelerator.set_device_index(rank)
    assert dist.get_backend() == "oclf" and torch.accelerator.current_device_index() == rank

    dataset = Windows(WORLD * PER_RANK * 2, seed=1)
    held_out = Windows(4, seed=2)[0]
    held_out = held_out[0].view(1, -1), held_out[1].view(1, -1)
    sampler = DistributedSampler(dataset, seed=7)
    loader = DataLoader(dataset, batch_size=PER_RANK, sampler=sampler, num_workers=0)
    model = make_model().to(rank)
    opt, scaler = adamw(model), make_scaler(device.type)
    ddp = DistributedDataParallel(model, device_ids=[rank])
    losses, scales = [], []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for ids, targets in loader:
            ids, targets = ids.to(rank), targets.to(rank)
            assert ids.device == device, ids.device
            loss = step(ddp, opt, scaler, ids, targets, device.type)
            dist.all_reduce(loss)
            losses.append(loss / WORLD)  # the global batch's loss
            scales.append(scaler.get_scale())
            same_everywhere(torch.cat([p.detach().view(-1) for p in model.parameters()]), "parameters")
            same_everywhere(scaler._scale, "loss scales")
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.float16):
        evaluation = ddp.module(*(t.to(rank) for t in held_out))[1].double()

    batches = global_batches(dataset)
    ref_losses, _, ref_evaluation, ref_params = one_process(torch.float64, False, batches, held_out)
    torch_losses, torch_scales, torch_evaluation, torch_params = one_process(torch.float32, True, batches, held_out)
    assert scales == torch_scales, f"loss scales {scales}, torch's on the CPU {torch_scales}"
    ours = {"losses": error(torch.stack(losses).cpu(), ref_losses), "evaluation": error(evaluation.cpu(), ref_evaluation),
            "parameters": update_error(model.parameters(), ref_params, make_model().parameters())}
    torchs = {"losses": error(torch_losses, ref_losses), "evaluation": error(torch_evaluation, ref_evaluation),
              "parameters": update_error(torch_params, ref_params, make_model().parameters())}
    for what, e in ours.items():
        assert e <= FACTOR * torchs[what] + FLOOR, f"{what}: {e:.2e} from float64, torch's autocast {torchs[what]:.2e}"
    assert ref_losses[-1] < ref_losses[0] and losses[-1].item() < losses[0].item(), losses

    # a snapshot: rank 0 saves, every process resumes from it; the next step equals the one
    # the trainer that went on takes
    path = os.path.join(folder, "snapshot.pt")
    if rank == 0:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict(),
                    "epochs": EPOCHS}, path)
    dist.barrier()
    snapshot = torch.load(path, map_location="cpu")
    resumed = make_model()
    resumed.load_state_dict(snapshot["model"])
    resumed.to(rank)
    resumed_opt, resumed_scaler = adamw(resumed), make_scaler(device.type)
    resumed_opt.load_state_dict(snapshot["optimizer"])
    resumed_scaler.load_state_dict(snapshot["scaler"])
    resumed_ddp = DistributedDataParallel(resumed, device_ids=[rank])
    ids, targets = (t.to(rank) for t in next(iter(loader)))
    step(ddp, opt, scaler, ids, targets, device.type)
    step(resumed_ddp, resumed_opt, resumed_scaler, ids, targets, device.type)
    for (name, p), q in zip(model.named_parameters(), resumed.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach().cpu()), f"{name}: the resumed step differs"
    assert scaler.get_scale() == resumed_scaler.get_scale()

    dist.barrier()
    if rank == 0:
        print(f"ddp_amp ok: errors {ours}, torch's {torchs}, scales {scales}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
