"""WGAN-GP (Gulrajani et al.) on a 2-D mixture of 8 Gaussians, in the manner of the usual toy-data repos
(caogang/wgan-gp's gan_toy.py): MLP generator and critic, a gradient penalty on random interpolates computed with
torch.autograd.grad(create_graph=True), 5 critic iterations per generator iteration, Adam(lr=1e-4, betas=(0.5, 0.9)).
Noise, real samples and interpolation alphas come from seeded numpy.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch import autograd

DIM = 64
BATCH_SIZE = 64
CRITIC_ITERS = 5
LAMBDA = 0.1


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(2, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, 2),
        )

    def forward(self, noise):
        return self.main(noise)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(2, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, 1),
        )

    def forward(self, inputs):
        return self.main(inputs).view(-1)


class WGAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.netG = Generator()
        self.netD = Critic()


def weights_init(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_normal_(m.weight)
        m.bias.data.fill_(0)


def build_model():
    model = WGAN()
    model.apply(weights_init)
    return model


def inf_train_gen(rng):
    scale = 2.0
    centers = [(1, 0), (-1, 0), (0, 1), (0, -1),
               (1.0 / np.sqrt(2), 1.0 / np.sqrt(2)), (1.0 / np.sqrt(2), -1.0 / np.sqrt(2)),
               (-1.0 / np.sqrt(2), 1.0 / np.sqrt(2)), (-1.0 / np.sqrt(2), -1.0 / np.sqrt(2))]
    centers = np.array(centers) * scale
    while True:
        idx = rng.randint(0, 8, BATCH_SIZE)
        dataset = rng.randn(BATCH_SIZE, 2) * 0.02 + centers[idx]
        yield (dataset / 1.414).astype("float32")


def calc_gradient_penalty(netD, real_data, fake_data, alpha):
    alpha = alpha.expand(real_data.size())
    interpolates = alpha * real_data + ((1 - alpha) * fake_data)
    interpolates = interpolates.clone().detach().requires_grad_(True)
    disc_interpolates = netD(interpolates)
    gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                              grad_outputs=torch.ones_like(disc_interpolates),
                              create_graph=True, retain_graph=True, only_inputs=True)[0]
    gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean() * LAMBDA
    return gradient_penalty


def train(model, steps):
    netG, netD = model.netG, model.netD
    optimizerD = optim.Adam(netD.parameters(), lr=1e-4, betas=(0.5, 0.9))
    optimizerG = optim.Adam(netG.parameters(), lr=1e-4, betas=(0.5, 0.9))
    one = torch.tensor(1, dtype=torch.float)
    mone = one * -1
    rng = np.random.RandomState(0)
    data = inf_train_gen(rng)
    losses = []
    for _ in range(steps):
        ############################
        # (1) Update D network
        ###########################
        for p in netD.parameters():
            p.requires_grad = True
        for _ in range(CRITIC_ITERS):
            real_data_v = torch.from_numpy(next(data))
            netD.zero_grad()
            D_real = netD(real_data_v).mean()
            D_real.backward(mone)
            noise = torch.from_numpy(rng.randn(BATCH_SIZE, 2).astype(np.float32))
            with torch.no_grad():
                fake = netG(noise)
            D_fake = netD(fake).mean()
            D_fake.backward(one)
            alpha = torch.from_numpy(rng.rand(BATCH_SIZE, 1).astype(np.float32))
            gradient_penalty = calc_gradient_penalty(netD, real_data_v, fake, alpha)
            gradient_penalty.backward()
            D_cost = D_fake - D_real + gradient_penalty
            Wasserstein_D = D_real - D_fake
            optimizerD.step()
        ############################
        # (2) Update G network
        ###########################
        for p in netD.parameters():
            p.requires_grad = False
        netG.zero_grad()
        noise = torch.from_numpy(rng.randn(BATCH_SIZE, 2).astype(np.float32))
        fake = netG(noise)
        G = netD(fake).mean()
        G.backward(mone)
        G_cost = -G
        optimizerG.step()
        losses.append(D_cost.item())
    losses.append(G_cost.item())
    losses.append(Wasserstein_D.item())
    return losses


if __name__ == "__main__":
    torch.manual_seed(0)
    print(train(build_model(), 20))
