"""Training loops of two common shapes on the opencl device, against the same steps on the CPU:

- a GAN: a generator of transposed convolutions and batch norm, a discriminator of strided
  convolutions, batch norm and leaky ReLU, binary cross-entropy on a label tensor refilled in
  place, two Adam optimizers, the discriminator trained on real and detached fake images and
  the generator through it. Losses, D(x), D(G(z)), parameters and batch-norm statistics lie
  as close to a float64 run as torch's float32 run does;
- a classifier fed by a DataLoader (a Dataset of its own, a transform, a shuffling sampler
  with a seeded generator, a short last batch): convolutions, max pooling, dropout, log-softmax
  and NLL loss, Adadelta with a step schedule, then a test pass summing losses and counting
  top-1 and top-3 hits. Without dropout it follows float64 as torch's float32 does; with
  dropout (the device's random numbers) it learns the task."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from device_checks import assert_trained_as_accurately

RUNS = [("opencl", torch.float32), ("cpu", torch.float32), ("cpu", torch.float64)]


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


# --- a GAN ------------------------------------------------------------------------------

LATENT, CHANNELS = 10, 3


def generator(width=6):
    """(n, LATENT, 1, 1) -> (n, CHANNELS, 16, 16) in [-1, 1]."""
    return nn.Sequential(
        nn.ConvTranspose2d(LATENT, 4 * width, 4, 1, 0, bias=False), nn.BatchNorm2d(4 * width), nn.ReLU(True),
        nn.ConvTranspose2d(4 * width, 2 * width, 4, 2, 1, bias=False), nn.BatchNorm2d(2 * width), nn.ReLU(True),
        nn.ConvTranspose2d(2 * width, CHANNELS, 4, 2, 1, bias=False), nn.Tanh())


def discriminator(width=5):
    """(n, CHANNELS, 16, 16) -> (n,) probabilities of being real."""
    return nn.Sequential(
        nn.Conv2d(CHANNELS, width, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(width, 2 * width, 4, 2, 1, bias=False), nn.BatchNorm2d(2 * width), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(2 * width, 1, 4, 1, 0, bias=False), nn.Sigmoid(), nn.Flatten(0))


def initialised(model):
    """Convolutions N(0, 0.02), batch norm's scale N(1, 0.02) and shift 0, from the CPU's seed."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)
    return model


def real_images(step, batch):
    """Smooth images (stripes whose phase and slope vary), in [-1, 1]."""
    gen = torch.Generator().manual_seed(100 + step)
    phase, slope = torch.rand(batch, CHANNELS, 1, 1, generator=gen) * 6, torch.rand(batch, 1, 1, 1, generator=gen)
    rows, cols = torch.arange(16.0).view(16, 1), torch.arange(16.0).view(1, 16)
    return torch.sin(phase + 0.4 * rows + slope * cols)


def train_gan(device, dtype, steps=3, batch=7):
    torch.manual_seed(0)
    net_g, net_d = initialised(generator()), initialised(discriminator())
    net_g, net_d = net_g.to(device, dtype), net_d.to(device, dtype)
    opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-3, betas=(0.5, 0.999))
    criterion = nn.BCELoss()
    records = []
    for step in range(steps):
        real = real_images(step, batch).to(device, dtype)
        noise = torch.randn(batch, LATENT, 1, 1, generator=torch.Generator().manual_seed(step)).to(device, dtype)
        # the discriminator: real images labelled 1, the generator's (detached) labelled 0
        net_d.zero_grad()
        label = torch.full((batch,), 1.0, dtype=dtype, device=device)
        out = net_d(real)
        loss_d_real = criterion(out, label)
        loss_d_real.backward()
        d_x = out.mean()
        fake = net_g(noise)
        label.fill_(0.0)
        out = net_d(fake.detach())
        loss_d_fake = criterion(out, label)
        loss_d_fake.backward()
        d_g_z1 = out.mean()
        opt_d.step()
        # the generator: its images labelled 1, through the updated discriminator
        net_g.zero_grad()
        label.fill_(1.0)
        out = net_d(fake)
        loss_g = criterion(out, label)
        loss_g.backward()
        opt_g.step()
        records.append(torch.stack([loss_d_real + loss_d_fake, loss_g, d_x, d_g_z1, out.mean()]).detach())
    result = {"losses and scores": torch.stack(records)}
    for prefix, net in (("G", net_g), ("D", net_d)):
        result.update((f"{prefix}.{name}", t.detach()) for name, t in net.state_dict().items())
    return result


def test_gan_steps_as_on_the_cpu():
    runs = [train_gan(device, dtype) for device, dtype in RUNS]
    records = runs[0]["losses and scores"].cpu()
    assert records.isfinite().all() and ((records[:, 2:] > 0) & (records[:, 2:] < 1)).all(), records
    assert runs[0]["D.3.num_batches_tracked"].item() == 3 * 3  # real, fake, and the generator's pass
    torch.manual_seed(0)
    initial = initialised(generator()).state_dict()["0.weight"]
    assert (runs[0]["G.0.weight"].cpu() - initial).abs().max() > 1e-3  # it trained
    assert_trained_as_accurately(runs)


# --- a classifier fed by a DataLoader ----------------------------------------------------

class Bars(Dataset):
    """(1, 20, 20) noise images with a bright bar across row 2k for class k (10 classes), as
    uint8 pixels turned into normalised floats by the transform."""

    def __init__(self, count, seed):
        gen = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (count,), generator=gen)
        self.pixels = torch.randint(0, 80, (count, 20, 20), generator=gen, dtype=torch.uint8)
        for image, k in zip(self.pixels, self.labels.tolist()):
            image[2 * k:2 * k + 2, 3:17] = 255

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        image = self.pixels[i].float().div(255).sub(0.2).div(0.3).unsqueeze(0)
        return image, int(self.labels[i])


class Classifier(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 3, 1), nn.Conv2d(6, 10, 3, 1)
        self.drop1, self.drop2 = nn.Dropout(dropout[0]), nn.Dropout(dropout[1])
        self.fc1, self.fc2 = nn.Linear(10 * 8 * 8, 24), nn.Linear(24, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = self.drop2(F.relu(self.fc1(torch.flatten(self.drop1(x), 1))))
        return F.log_softmax(self.fc2(x), dim=1)


def train_classifier(device, dtype, dropout=(0.0, 0.0), epochs=2, images=53):
    torch.manual_seed(0)
    model = Classifier(dropout).to(device, dtype)
    train_loader = DataLoader(Bars(images, seed=1), batch_size=16, shuffle=True,
                              generator=torch.Generator().manual_seed(2))
    test_loader = DataLoader(Bars(40, seed=3), batch_size=16)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    losses = []
    for _ in range(epochs):
        model.train()
        for images, labels in train_loader:
            images, labels = images.to(device, dtype), labels.to(device)
            opt.zero_grad()
            loss = F.nll_loss(model(images), labels)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        schedule.step()
    model.eval()
    total, hits = torch.zeros((), device=device, dtype=dtype), torch.zeros(3, device=device, dtype=dtype)
    with torch.no_grad():
        for images, labels in test_loader:
            images, labels = images.to(device, dtype), labels.to(device)
            out = model(images)
            total += F.nll_loss(out, labels, reduction="sum")
            best = out.argmax(dim=1, keepdim=True)
            top = out.topk(3, 1, True, True).indices.t()          # (3, n): best first
            correct = top.eq(labels.view(1, -1).expand_as(top))
            hits += torch.stack([best.eq(labels.view_as(best)).sum().to(dtype), correct[:1].reshape(-1).to(dtype).sum(),
                                 correct[:3].reshape(-1).to(dtype).sum()])
    result = {"losses": torch.stack(losses), "test loss": total / 40, "hits": hits}
    result.update((name, p.detach()) for name, p in model.named_parameters())
    return result


def test_classifier_with_a_data_loader_trains_as_on_the_cpu():
    runs = [train_classifier(device, dtype) for device, dtype in RUNS]
    assert len(runs[0]["losses"]) == 2 * 4  # 53 images: 3 batches of 16 and one of 5, twice
    assert runs[0]["hits"].tolist() == runs[2]["hits"].tolist()  # argmax's, top-1's and top-3's
    assert_trained_as_accurately(runs)


def test_classifier_with_dropout_learns():
    result = train_classifier("opencl", torch.float32, dropout=(0.25, 0.5), images=256)
    losses = result["losses"].cpu()
    assert len(losses) == 2 * 16 and losses.isfinite().all(), losses
    assert losses[-4:].mean() < 0.4 * losses[:4].mean(), losses
    best, top1, top3 = result["hits"].tolist()
    assert 36 <= best == top1 <= top3 <= 40, (best, top1, top3)
