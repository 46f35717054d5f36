"""A small DCGAN in the manner of pytorch/examples' dcgan: a generator of ``ConvTranspose2d`` / ``BatchNorm2d`` /
``ReLU`` layers ending in ``Tanh``, a discriminator of ``Conv2d`` / ``BatchNorm2d`` / ``LeakyReLU(0.2)`` layers
ending in ``Sigmoid``, the DCGAN weight init (``normal_(0, 0.02)``, BatchNorm weights ``normal_(1, 0.02)``),
``nn.BCELoss`` with real/fake label tensors from ``torch.full``, and two Adam optimizers (lr 2e-4, betas
(0.5, 0.999)); each step updates D on a real batch and a detached fake batch, then G through D. Scaled down to
32x32 single-channel images, batch 32, ``nz = ngf = ndf = 16``. Written for these tests, not copied.

The "dataset" is synthetic (no download): soft discs of random centre and radius on a dark background, in
[-1, 1]; the real images and the noise come from seeded numpy RNGs so torch and tensorwire see the same draws.
Each step's loss is ``errD``, the discriminator's (the example prints it with ``errG``): D learns to tell the
generator's blobs from discs, so it falls, while ``errG`` rises, as GAN losses do this early. After the steps come
the last step's ``errG`` and an evaluation ``errD`` in ``eval()`` mode (BatchNorm on its running statistics) on a
held-out real batch and a fresh fake one. ``build_model(inplace=False)`` gives the discriminator out-of-place
``LeakyReLU``s (the example's are ``inplace=True``). Run it on its own:
``python tests/programs/dcgan.py``.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

nc, nz, ngf, ndf = 1, 16, 16, 16
image_size, batch_size = 32, 32
lr, beta1 = 2e-4, 0.5


def weights_init(m):
    """Custom weights initialization called on netG and netD."""
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 4 x 4
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 8 x 8
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 16 x 16
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
            # state size. (nc) x 32 x 32
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, inplace=True):
        super().__init__()
        self.main = nn.Sequential(
            # input is (nc) x 32 x 32
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=inplace),
            # state size. (ndf) x 16 x 16
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=inplace),
            # state size. (ndf*2) x 8 x 8
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=inplace),
            # state size. (ndf*4) x 4 x 4
            nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


class DCGAN(nn.Module):
    """Both networks in one module, so one state dict holds the whole program's weights."""

    def __init__(self, inplace=True):
        super().__init__()
        self.netG = Generator()
        self.netG.apply(weights_init)
        self.netD = Discriminator(inplace)
        self.netD.apply(weights_init)


def build_model(inplace=True):
    return DCGAN(inplace)


def real_batches(steps, seed=0):
    """``steps`` batches of soft discs, (steps, batch, 1, 32, 32) float32 in [-1, 1]."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:image_size, 0:image_size].astype(np.float32)
    n = steps * batch_size
    cy, cx = rng.uniform(8, 24, (2, n, 1, 1)).astype(np.float32)
    r = rng.uniform(4, 9, (n, 1, 1)).astype(np.float32)
    d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
    img = 1.0 / (1.0 + np.exp(2.0 * (d - r)))  # 1 inside the disc, 0 outside, a soft edge
    return (img * 2 - 1).astype(np.float32).reshape(steps, batch_size, nc, image_size, image_size)


def train(model, steps):
    netG, netD = model.netG, model.netD
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=lr, betas=(beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=lr, betas=(beta1, 0.999))
    data = real_batches(steps)
    noise_rng = np.random.RandomState(1)
    losses = []
    for i in range(steps):
        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        # train with real
        netD.zero_grad()
        real_cpu = torch.from_numpy(data[i])
        b_size = real_cpu.size(0)
        label = torch.full((b_size,), real_label, dtype=real_cpu.dtype)
        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()

        # train with fake
        noise = torch.from_numpy(noise_rng.randn(b_size, nz, 1, 1).astype(np.float32))
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        optimizerG.step()
        losses.append(errD.detach())
    losses.append(errG.detach())
    netD.eval()
    netG.eval()
    with torch.no_grad():
        real = torch.from_numpy(real_batches(1, seed=2)[0])
        noise = torch.from_numpy(noise_rng.randn(batch_size, nz, 1, 1).astype(np.float32))
        ones, zeros = torch.ones(batch_size), torch.zeros(batch_size)
        losses.append(criterion(netD(real), ones) + criterion(netD(netG(noise)), zeros))
    return [float(v.item()) for v in losses]


if __name__ == "__main__":
    torch.manual_seed(0)
    for step, loss in enumerate(train(build_model(), 60)):
        print(f"step {step}: loss {loss:.4f}")
