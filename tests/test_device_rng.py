"""The opencl device's random numbers (torch_opencl/rng.py, csrc/runtime/generator.h,
kernels/random.cl): a stream of their own, as CUDA's, with CUDA's state layout.

- a generator's state is 16 bytes, the seed then the offset (as torch.cuda's), which torch's
  distributed RNG tracker reads and writes; an op drawing n numbers moves the offset on by n
  rounded up to 4, and element i is number offset + i of the stream (word (offset + i) % 4 of
  the Philox 4x32-10 block of counter (offset + i) / 4; 64-bit draws two words of a second
  stream), so consecutive draws continue one stream; a state of another size is refused;
- the numbers are Philox 4x32-10's, pinned by a reference written here and Random123's known
  answers, for every random kernel at offsets inside a block and past 2^32 blocks;
- the numbers are good enough: moments and a Kolmogorov-Smirnov distance of uniform and
  normal draws, the fraction dropout keeps, integers over their whole range;
- torch's utilities that save and restore the state: fork_rng(device_type="opencl"),
  activation checkpointing with dropout (use_reentrant True and False), and a transformers
  GPT-2 with gradient_checkpointing_enable(), whose gradients equal those of the same run
  without checkpointing.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@pytest.fixture(autouse=True)
def device(opencl_device):
    return opencl_device


def seed_and_offset(state: torch.Tensor):
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    return state[:8].view(torch.int64).item(), state[8:].view(torch.int64).item()


# ---- the state -------------------------------------------------------------------------------

def test_state_is_seed_then_offset_as_cuda():
    torch.manual_seed(2024)
    assert seed_and_offset(torch.opencl.get_rng_state()) == (2024, 0)
    torch.rand(7, device="opencl")
    assert seed_and_offset(torch.opencl.get_rng_state()) == (2024, 8)   # 7 rounded up to 4
    F.dropout(torch.ones(33, device="opencl"), 0.3)
    assert seed_and_offset(torch.opencl.get_rng_state()) == (2024, 44)
    torch.randint(0, 5, (4, 3), device="opencl")
    assert seed_and_offset(torch.opencl.get_rng_state()) == (2024, 56)
    g = torch.Generator(device="opencl").manual_seed(5)
    torch.randn(1, device="opencl", generator=g)
    assert seed_and_offset(g.get_state()) == (5, 4)
    assert seed_and_offset(torch.opencl.get_rng_state()) == (2024, 56)  # the default one untouched


def test_element_i_is_number_offset_plus_i():
    """Draws continue one stream: rand(8) then rand(8) is rand(16); rand(7) then rand(9) skips
    the number that rounding to 4 leaves out. Setting the offset by hand starts there."""
    torch.manual_seed(11)
    whole = torch.rand(20, device="opencl").cpu()
    torch.manual_seed(11)
    parts = [torch.rand(8, device="opencl").cpu(), torch.rand(8, device="opencl").cpu()]
    assert torch.equal(torch.cat(parts), whole[:16])
    torch.manual_seed(11)
    first, second = torch.rand(7, device="opencl").cpu(), torch.rand(9, device="opencl").cpu()
    assert torch.equal(first, whole[:7]) and torch.equal(second, whole[8:17])
    state = torch.opencl.get_rng_state()
    state[8:] = torch.tensor([12], dtype=torch.int64).view(torch.uint8)
    torch.opencl.set_rng_state(state)
    assert torch.equal(torch.rand(5, device="opencl").cpu(), whole[12:17])


M32 = 0xFFFFFFFF


def philox4x32_10(key: list[int], counter: list[int]) -> list[int]:
    """Philox 4x32-10 of a key of two words and a counter of four: the device's
    kernels/philox.h, written again here."""
    c, k = list(counter), list(key)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & M32, (p0 >> 32) ^ c[3] ^ k[1], p0 & M32]
        k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
    return c


def philox(seed: int, counter: int, stream: int = 0) -> list[int]:
    """The block of a 64-bit counter in a stream: key `seed`, counter (counter, stream, 0)."""
    return philox4x32_10([seed & M32, seed >> 32], [counter & M32, counter >> 32, stream, 0])


def test_the_reference_gives_random123s_known_answers():
    assert philox4x32_10([0, 0], [0, 0, 0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox4x32_10([M32] * 2, [M32] * 4) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox4x32_10([0xA4093822, 0x299F31D0], [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344]) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def set_state(seed: int, offset: int):
    torch.opencl.set_rng_state(torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8))


def numbers(seed: int, offset: int, n: int) -> list[int]:
    """Numbers offset .. offset + n - 1 of the stream: number k is word k % 4 of block k // 4."""
    return [philox(seed, k // 4)[k % 4] for k in range(offset, offset + n)]


@pytest.mark.parametrize("offset", [0, 13, 4 * 2**32 + 6])
@pytest.mark.parametrize("n", [1, 7, 33])
def test_every_random_kernel_draws_the_references_numbers(offset, n):
    """Element i takes number offset + i: uniform, dropout's mask, small-range integers one
    word each, normals both of Box-Muller's pair, int64 draws two words of stream 1 (number k:
    half k % 2 of that stream's block k // 2)."""
    seed = 0x5EED0000_1234ABCD
    words = numbers(seed, offset, n)
    units = [((w >> 8) + 1) / 2**24 for w in words]   # (0, 1]
    set_state(seed, offset)
    assert torch.rand(n, device="opencl").cpu().tolist() == [1 - u for u in units]
    set_state(seed, offset)
    mask = F.dropout(torch.ones(n, device="opencl"), 0.4).cpu() != 0
    assert mask.tolist() == [1 - u >= 0.4 for u in units]
    set_state(seed, offset)
    assert torch.randint(3, 10, (n,), device="opencl").cpu().tolist() == [3 + w % 7 for w in words]
    set_state(seed, offset)
    wide = torch.empty(n, dtype=torch.int64, device="opencl").random_().cpu().tolist()
    halves = [philox(seed, k // 2, stream=1)[2 * (k % 2):2 * (k % 2) + 2] for k in range(offset, offset + n)]
    assert wide == [(hi << 32 | lo) % 2**63 for hi, lo in halves]
    set_state(seed, offset)
    normal = torch.randn(n, device="opencl").cpu().double()
    expected = []
    for k in range(offset, offset + n):
        block = philox(seed, k // 4)
        pair = 2 * ((k % 4) // 2)
        radius = math.sqrt(-2 * math.log(((block[pair] >> 8) + 1) / 2**24))
        angle = math.pi * 2 * (block[pair + 1] >> 8) / 2**24
        expected.append(radius * (math.cos(angle) if k % 2 == 0 else math.sin(angle)))
    torch.testing.assert_close(normal, torch.tensor(expected, dtype=torch.float64), atol=2e-5, rtol=2e-5)


def test_state_round_trip_and_refusals():
    torch.manual_seed(3)
    torch.randn(10, device="opencl")
    state = torch.opencl.get_rng_state()
    a = torch.randn(9, device="opencl").cpu()
    torch.opencl.set_rng_state(state)
    assert torch.equal(torch.randn(9, device="opencl").cpu(), a)
    current = torch.opencl.get_rng_state()
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.opencl.set_rng_state(torch.get_rng_state())   # the CPU generator's 5056 bytes
    with pytest.raises(RuntimeError, match="uint8 CPU tensor"):
        torch.opencl.set_rng_state(torch.zeros(2, dtype=torch.int64))
    negative = state.clone()
    negative[8:] = torch.tensor([-4], dtype=torch.int64).view(torch.uint8)
    with pytest.raises(RuntimeError, match="offset cannot be negative"):
        torch.opencl.set_rng_state(negative)
    assert torch.equal(torch.opencl.get_rng_state(), current)   # a refused state changes nothing


def test_device_stream_is_not_the_cpu_stream():
    torch.manual_seed(0)
    cpu = torch.rand(100)
    torch.manual_seed(0)
    assert not torch.equal(torch.rand(100, device="opencl").cpu(), cpu)


def test_seed_picks_a_new_stream():
    torch.opencl.seed()
    chosen = torch.opencl.initial_seed()
    assert seed_and_offset(torch.opencl.get_rng_state()) == (chosen, 0)
    a = torch.rand(16, device="opencl").cpu()
    torch.opencl.manual_seed(chosen)
    assert torch.equal(torch.rand(16, device="opencl").cpu(), a)


# ---- quality ---------------------------------------------------------------------------------

def ks_distance(sample: torch.Tensor, cdf) -> float:
    """The Kolmogorov-Smirnov statistic of a sample (float64) against a distribution's cdf."""
    x, _ = sample.double().sort()
    n = x.numel()
    f = cdf(x)
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    return max((ranks / n - f).max().item(), (f - (ranks - 1) / n).max().item())


def test_uniform_and_normal_draws_have_their_distributions():
    n = 200_003
    torch.manual_seed(9)
    u = torch.rand(n, device="opencl").cpu()
    z = torch.randn(n, device="opencl").cpu()
    bound = 1.63 / math.sqrt(n)   # the KS test at the 1 % level
    assert 0 <= u.min() and u.max() < 1
    assert ks_distance(u, lambda x: x) < bound
    assert ks_distance(z, lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2)))) < bound
    assert abs(z.double().mean()) < 4 / math.sqrt(n) and abs(z.double().var() - 1) < 6 * math.sqrt(2 / n)
    # neighbours are independent: the correlation of consecutive elements
    assert abs(torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1]) < 4 / math.sqrt(n)


def test_dropout_keeps_its_share_and_integers_cover_their_range():
    torch.manual_seed(4)
    kept = (F.dropout(torch.ones(100_001, device="opencl"), 0.3) != 0).double().mean().item()
    assert abs(kept - 0.7) < 4 * math.sqrt(0.21 / 100_001)
    counts = torch.bincount(torch.randint(0, 7, (70_000,), device="opencl").cpu(), minlength=7)
    assert counts.numel() == 7 and (counts - 10_000).abs().max() < 450
    wide = torch.randint(-2**62, 2**62, (4001,), device="opencl").cpu()
    assert wide.min() < -2**61 and wide.max() > 2**61


# ---- torch's utilities that save and restore the state ---------------------------------------

def test_fork_rng_restores_the_device_stream():
    torch.manual_seed(21)
    before = torch.opencl.get_rng_state()
    with torch.random.fork_rng(device_type="opencl"):
        torch.randn(100, device="opencl")
        assert not torch.equal(torch.opencl.get_rng_state(), before)
    assert torch.equal(torch.opencl.get_rng_state(), before)
    after = torch.rand(6, device="opencl").cpu()
    torch.manual_seed(21)
    assert torch.equal(torch.rand(6, device="opencl").cpu(), after)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_with_dropout_gives_the_gradients_without_it(reentrant):
    """The recomputed forward draws the forward's dropout masks: the gradients equal those
    of the same run without checkpointing, and the stream goes on as without it."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(37, 53), torch.nn.GELU(), torch.nn.Dropout(0.4),
                                torch.nn.Linear(53, 29), torch.nn.Dropout(0.25)).to("opencl")
    x = torch.randn(11, 37).to("opencl")

    def run(checkpointed: bool):
        torch.manual_seed(5)
        block.zero_grad()
        inputs = x.clone().requires_grad_()
        h = F.dropout(inputs, 0.2)
        y = checkpoint(block, h, use_reentrant=reentrant) if checkpointed else block(h)
        (y.square().sum() + F.dropout(y, 0.5).sum()).backward()
        return y.detach().cpu(), inputs.grad.cpu(), [p.grad.cpu() for p in block.parameters()], \
            torch.opencl.get_rng_state()

    y0, gx0, grads0, state0 = run(False)
    y1, gx1, grads1, state1 = run(True)
    assert torch.equal(y1, y0)
    assert torch.equal(state1, state0)
    assert torch.equal(gx1 != 0, gx0 != 0)
    torch.testing.assert_close(gx1, gx0, rtol=1e-6, atol=1e-6)
    for g1, g0 in zip(grads1, grads0):
        torch.testing.assert_close(g1, g0, rtol=1e-6, atol=1e-6)


def test_gpt2_gradient_checkpointing_gives_the_gradients_without_it():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32,
                                     use_cache=False)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to("opencl").train()
    ids = torch.randint(0, 100, (3, 17)).to("opencl")

    def grads():
        model.zero_grad()
        torch.manual_seed(1)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        return out.loss.item(), {n: p.grad.cpu() for n, p in model.named_parameters()}

    loss0, grads0 = grads()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    loss1, grads1 = grads()
    model.gradient_checkpointing_disable()
    # dropout acts: the loss of another seed differs
    torch.manual_seed(2)
    assert model(input_ids=ids, labels=ids).loss.item() != loss0
    assert loss1 == loss0
    for name, g0 in grads0.items():
        torch.testing.assert_close(grads1[name], g0, rtol=1e-5, atol=1e-6, msg=name)
