"""A CIFAR-10 ResNet trained the way yunjey's pytorch-tutorial ``deep_residual_network`` trains one: a 3x3 stem of 16
channels, three stages of two residual blocks (16, 32 and 64 channels, the last two halving the image with a strided
conv and a strided 3x3 + ``BatchNorm2d`` shortcut), ``AvgPool2d(8)``, ``Linear(64, 10)``; cross-entropy, ``Adam`` at
lr 0.001, batch 100, torchvision-style augmentation (4 pixels of zero padding, a random 32x32 crop, a random
horizontal flip) done on the batch in numpy. The images are synthetic 32x32 RGB (no download): seeded numpy blobs of
ten "classes" (a colour, a position and a size a class, plus noise). Each step's loss is returned, then an
evaluation loss in ``eval()`` mode on held-out images. Written for these tests, not copied. Run it on its own:
``python tests/programs/cifar_resnet.py``.

Its time is the convolutions': 3x3 stride-1 convs of 16 channels at 32x32, 32 at 16x16 and 64 at 8x8, forward, input
gradient and weight gradient (the shapes of most small-image ResNets).
"""

import numpy as np
import torch
import torch.nn as nn

image_size = 32


def conv3x3(in_channels, out_channels, stride=1):
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)


class ResidualBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = downsample

    def forward(self, x):
        residual = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample:
            residual = self.downsample(x)
        return self.relu(out + residual)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2), num_classes=10):
        super().__init__()
        self.in_channels = 16
        self.conv = conv3x3(3, 16)
        self.bn = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self.make_layer(16, layers[0])
        self.layer2 = self.make_layer(32, layers[1], 2)
        self.layer3 = self.make_layer(64, layers[2], 2)
        self.avg_pool = nn.AvgPool2d(8)
        self.fc = nn.Linear(64, num_classes)

    def make_layer(self, out_channels, blocks, stride=1):
        downsample = None
        if stride != 1 or self.in_channels != out_channels:
            downsample = nn.Sequential(conv3x3(self.in_channels, out_channels, stride), nn.BatchNorm2d(out_channels))
        layers = [ResidualBlock(self.in_channels, out_channels, stride, downsample)]
        self.in_channels = out_channels
        layers += [ResidualBlock(out_channels, out_channels) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        out = self.relu(self.bn(self.conv(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = self.avg_pool(out)
        return self.fc(out.view(out.size(0), -1))


def build_model():
    return ResNet()


def images(n, seed=0):
    """``n`` float32 images [n, 3, 32, 32] normalised to about zero mean, and their int64 labels: a class is a
    coloured blob's centre, radius and colour, each image its class's blob plus noise."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:image_size, 0:image_size].astype(np.float32)
    centres = rng.uniform(8, 24, (10, 2)).astype(np.float32)
    radii = rng.uniform(4, 10, 10).astype(np.float32)
    colours = rng.uniform(0.2, 1.0, (10, 3)).astype(np.float32)
    labels = rng.randint(0, 10, n)
    cy, cx = centres[labels, 0, None, None], centres[labels, 1, None, None]
    blob = 1.0 / (1.0 + np.exp(1.5 * (np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2) - radii[labels, None, None])))
    img = blob[:, None] * colours[labels, :, None, None] + 0.25 * rng.randn(n, 3, image_size, image_size)
    return ((img - 0.5) / 0.25).astype(np.float32), labels.astype(np.int64)


def augment(batch, rng):
    """torchvision's ``Pad(4)``, ``RandomHorizontalFlip()`` and ``RandomCrop(32)`` of each image of the batch."""
    padded = np.pad(batch, ((0, 0), (0, 0), (4, 4), (4, 4)))
    out = np.empty_like(batch)
    for i, (dy, dx, flip) in enumerate(zip(rng.randint(0, 9, len(batch)), rng.randint(0, 9, len(batch)),
                                           rng.rand(len(batch)) < 0.5)):
        crop = padded[i, :, dy:dy + image_size, dx:dx + image_size]
        out[i] = crop[:, :, ::-1] if flip else crop
    return out


def train(model, steps, batch_size=100):
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    x, y = images((steps + 1) * batch_size)
    rng = np.random.RandomState(1)
    losses = []
    model.train()
    for i in range(steps):
        batch = slice(i * batch_size, (i + 1) * batch_size)
        inputs = torch.from_numpy(augment(x[batch], rng))
        labels = torch.from_numpy(y[batch])
        outputs = model(inputs)
        loss = criterion(outputs, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        held_out = slice(steps * batch_size, (steps + 1) * batch_size)
        losses.append(criterion(model(torch.from_numpy(x[held_out])), torch.from_numpy(y[held_out])).item())
    return losses


if __name__ == "__main__":
    torch.manual_seed(0)
    print(train(build_model(), 5))
