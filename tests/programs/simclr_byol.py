"""SimCLR-style contrastive learning with a BYOL-style EMA teacher: two augmented views per image (seeded numpy
noise, flips, reflect-pad random crops), a small CNN encoder with BatchNorm, a projection head, the NT-Xent loss
(F.normalize, z @ z.T / tau, an eye mask filled with -9e15, torch.arange labels, F.cross_entropy), plus the
info_nce_loss of sthalles/SimCLR (boolean-mask indexing) as a check, a BYOL regression term against an EMA
teacher made with copy.deepcopy, SGD with nesterov momentum, CosineAnnealingWarmRestarts, and three EMA updates as
real repos write them: the BYOL zip loop on .data, torch._foreach_mul_/_foreach_add_, and timm's ModelEmaV2 lerp_.
Synthetic seeded data, no download.
"""

import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingWarmRestarts

BATCH, IMG, CH = 16, 16, 3
FEAT_DIM, PROJ_DIM = 64, 32


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(CH, 16), conv_bn(16, 32, stride=2), conv_bn(32, 32), nn.MaxPool2d(2),
            conv_bn(32, FEAT_DIM), nn.AdaptiveAvgPool2d((1, 1)))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        return torch.flatten(self.features(x), 1)


class MLPHead(nn.Module):
    def __init__(self, in_dim, hidden, out_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
                                 nn.Linear(hidden, out_dim))

    def forward(self, x):
        return self.net(x)


class SimCLRNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.projector = MLPHead(FEAT_DIM, 64, PROJ_DIM)

    def forward(self, x):
        h = self.encoder(x)
        return h, self.projector(h)


class Student(nn.Module):
    def __init__(self):
        super().__init__()
        self.online = SimCLRNet()
        self.predictor = MLPHead(PROJ_DIM, 64, PROJ_DIM)

    def forward(self, x):
        h, z = self.online(x)
        return h, z, self.predictor(z)


def build_model():
    return Student()


def nt_xent(z1, z2, tau=0.5):
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    sim = z @ z.T / tau
    mask = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    sim = sim.masked_fill(mask, -9e15)
    labels = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, labels)


def info_nce_loss(features, n_views=2, temperature=0.5):
    """sthalles/SimCLR's formulation: positives and negatives picked with boolean masks, label 0 is the positive."""
    batch_size = features.shape[0] // n_views
    labels = torch.cat([torch.arange(batch_size) for _ in range(n_views)], dim=0)
    labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
    features = F.normalize(features, dim=1)
    similarity_matrix = torch.matmul(features, features.T)
    mask = torch.eye(labels.shape[0], dtype=torch.bool)
    labels = labels[~mask].view(labels.shape[0], -1)
    similarity_matrix = similarity_matrix[~mask].view(similarity_matrix.shape[0], -1)
    positives = similarity_matrix[labels.bool()].view(labels.shape[0], -1)
    negatives = similarity_matrix[~labels.bool()].view(similarity_matrix.shape[0], -1)
    logits = torch.cat([positives, negatives], dim=1)
    labels = torch.zeros(logits.shape[0], dtype=torch.long)
    logits = logits / temperature
    return logits, labels


def byol_loss(p, z):
    p = F.normalize(p, dim=-1, p=2)
    z = F.normalize(z, dim=-1, p=2)
    return 2 - 2 * (p * z).sum(dim=-1)


def make_images(n, seed=0):
    """Blobs of 4 'classes' at class-dependent positions and colours, plus noise."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 4, n)
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32) / IMG
    imgs = np.zeros((n, CH, IMG, IMG), np.float32)
    for i, c in enumerate(labels):
        cy, cx = 0.25 + 0.5 * (c // 2), 0.25 + 0.5 * (c % 2)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 0.02)
        imgs[i] = blob[None] * (0.5 + 0.5 * np.eye(CH, dtype=np.float32)[c % CH][:, None, None])
    imgs += 0.1 * rng.randn(*imgs.shape).astype(np.float32)
    return imgs, labels


def augment(x, rng):
    """Random horizontal flip, reflect-padded random crop, colour jitter (per-channel scale) and noise."""
    b = x.shape[0]
    flip = torch.from_numpy(rng.rand(b) < 0.5)
    x = torch.where(flip[:, None, None, None], torch.flip(x, dims=[3]), x)
    padded = F.pad(x, (2, 2, 2, 2), mode="reflect")
    offs = rng.randint(0, 5, size=(b, 2))
    x = torch.stack([padded[i, :, oy:oy + IMG, ox:ox + IMG] for i, (oy, ox) in enumerate(offs)])
    scale = torch.from_numpy(rng.uniform(0.8, 1.2, size=(b, CH, 1, 1)).astype(np.float32))
    x = x * scale + 0.05 * torch.from_numpy(rng.randn(*x.shape).astype(np.float32))
    return x.clamp_(-1.0, 2.0)


class ModelEmaV2(nn.Module):
    """timm's ModelEmaV2 (newer versions): lerp_ over the state_dict values."""

    def __init__(self, model, decay=0.99):
        super().__init__()
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_v.lerp_(model_v, weight=1.0 - self.decay)
            else:
                ema_v.copy_(model_v)


def train(model, steps, lr=0.05, base_m=0.99, use_foreach=True):
    imgs, img_labels = make_images(256)
    data = torch.from_numpy(imgs)
    rng = np.random.RandomState(7)

    teacher = copy.deepcopy(model.online)
    teacher.requires_grad_(False)
    ema = ModelEmaV2(model, decay=0.95)

    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
    scheduler = CosineAnnealingWarmRestarts(optimizer, T_0=4, T_mult=2, eta_min=1e-4)
    iters_per_epoch = 4

    losses, checks = [], []
    for step in range(steps):
        model.train()
        idx = rng.choice(len(data), BATCH, replace=False)
        x = data[torch.from_numpy(idx)]
        v1, v2 = augment(x, rng), augment(x, rng)

        _, z1, p1 = model(v1)
        _, z2, p2 = model(v2)
        with torch.no_grad():
            _, t1 = teacher(v1)
            _, t2 = teacher(v2)
        contrastive = nt_xent(z1, z2, tau=0.5)
        regression = (byol_loss(p1, t2.detach()) + byol_loss(p2, t1.detach())).mean()
        loss = contrastive + 0.5 * regression

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        epoch = step // iters_per_epoch
        scheduler.step(epoch + (step % iters_per_epoch + 1) / iters_per_epoch)

        # BYOL momentum schedule
        m = 1 - (1 - base_m) * (math.cos(math.pi * step / max(steps, 1)) + 1) / 2
        with torch.no_grad():
            for pt, ps in zip(teacher.encoder.parameters(), model.online.encoder.parameters()):
                pt.data.mul_(m).add_(ps.data, alpha=1 - m)
            t_params = list(teacher.projector.parameters())
            s_params = [p.detach() for p in model.online.projector.parameters()]
            if use_foreach:  # as timm ModelEmaV3 / ema-pytorch do
                torch._foreach_mul_(t_params, m)
                torch._foreach_add_(t_params, s_params, alpha=1 - m)
            else:
                for pt, ps in zip(t_params, s_params):
                    pt.mul_(m).add_(ps, alpha=1 - m)
            for bt, bs in zip(teacher.buffers(), model.online.buffers()):
                bt.copy_(bs)
        ema.update(model)
        losses.append(loss.item())

    with torch.no_grad():
        logits, labels = info_nce_loss(torch.cat([z1, z2], dim=0).detach(), temperature=0.5)
        checks.append(F.cross_entropy(logits, labels).item())
        checks.append(nt_xent(z1.detach(), z2.detach()).item())
        checks.append(optimizer.param_groups[0]["lr"])
        checks.append(sum(p.double().sum() for p in teacher.parameters()).item())
        checks.append(sum(float(v.float().abs().sum()) for v in ema.module.state_dict().values()))

        # evaluation: teacher features, kNN top-1 (cosine), alignment and uniformity (Wang & Isola)
        teacher.eval()
        feats = F.normalize(teacher.encoder(data), dim=1)
        sims = feats @ feats.t()
        sims.fill_diagonal_(-float("inf"))
        _, nn_idx = sims.topk(5, dim=1)
        lab = torch.from_numpy(img_labels)
        votes = F.one_hot(lab[nn_idx], num_classes=4).sum(1)
        knn_acc = (votes.argmax(1) == lab).float().mean().item()
        checks.append(knn_acc)
        za = F.normalize(model.online(augment(data[:32], rng))[1], dim=1)
        zb = F.normalize(model.online(augment(data[:32], rng))[1], dim=1)
        checks.append((za - zb).norm(p=2, dim=1).pow(2).mean().item())
        checks.append(torch.pdist(za, p=2).pow(2).mul(-2).exp().mean().log().item())
    return losses + checks


if __name__ == "__main__":
    torch.manual_seed(0)
    for i, v in enumerate(train(build_model(), 40)):
        print(i, round(v, 5))
