"""A Siamese network in the manner of pytorch/examples' siamese_network: a ResNet-18 feature extractor (torchvision's
``resnet18`` architecture, written out here: 7x7 stem, ``BatchNorm2d``, max pooling, four stages of two
``BasicBlock``s with 1x1 downsampling, adaptive average pooling), its first convolution replaced by a one-channel one
and its classifier removed, applied to both images of a pair; the two 512-feature vectors concatenated into
``Linear(1024, 256)``, ``ReLU``, ``Linear(256, 1)``, ``Sigmoid``; ``nn.BCELoss`` on same/different targets;
``optim.Adadelta(lr=1.0)`` and ``StepLR(step_size=1, gamma=0.7)``. The example trains on MNIST pairs at batch 64;
here the images are synthetic 28x28 (no download): seeded numpy blobs of ten "classes" (a blob's position and size
per class plus noise), each pair the same class or not. Each step's loss is returned, then an evaluation loss in
``eval()`` mode (BatchNorm on its running statistics). Written for these tests, not copied. Run it on its own:
``python tests/programs/siamese_resnet.py``.

At 28x28 the last stage's 3x3 convolutions see 1x1 inputs (padding 1: eight of nine taps read only padding) and its
downsampling 2x2 ones: the shapes that made tensorwire's CPU convolutions slow for small images.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR

image_size = 28


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(64, 2)
        self.layer2 = self._make_layer(128, 2, 2)
        self.layer3 = self._make_layer(256, 2, 2)
        self.layer4 = self._make_layer(512, 2, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class SiameseNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.resnet = ResNet18()
        self.resnet.conv1 = nn.Conv2d(1, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)
        self.fc_in_features = self.resnet.fc.in_features
        self.resnet = torch.nn.Sequential(*(list(self.resnet.children())[:-1]))
        self.fc = nn.Sequential(nn.Linear(self.fc_in_features * 2, 256), nn.ReLU(inplace=True), nn.Linear(256, 1))
        self.sigmoid = nn.Sigmoid()
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1, input2):
        output = torch.cat((self.forward_once(input1), self.forward_once(input2)), 1)
        return self.sigmoid(self.fc(output))


def build_model():
    return SiameseNetwork()


def pairs(steps, batch_size, seed=0):
    """``steps`` batches of image pairs (float32, [steps, batch, 1, 28, 28] each) and same-class targets: a class is
    a blob's centre and radius, each image that blob plus noise; even pairs share a class, odd ones do not."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:image_size, 0:image_size].astype(np.float32)
    centres = rng.uniform(7, 21, (10, 2)).astype(np.float32)
    radii = rng.uniform(3, 8, 10).astype(np.float32)

    def images(classes):
        cy, cx = centres[classes, 0, None, None], centres[classes, 1, None, None]
        d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
        img = 1.0 / (1.0 + np.exp(1.5 * (d - radii[classes, None, None])))
        return (img + 0.2 * rng.randn(*img.shape)).astype(np.float32)[:, None]

    n = steps * batch_size
    first = rng.randint(0, 10, n)
    other = (first + rng.randint(1, 10, n)) % 10
    same = np.arange(n) % 2 == 0
    second = np.where(same, first, other)
    shape = (steps, batch_size, 1, image_size, image_size)
    return (images(first).reshape(shape), images(second).reshape(shape),
            same.astype(np.float32).reshape(steps, batch_size))


def train(model, steps, batch_size=64):
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    criterion = nn.BCELoss()
    a, b, targets = pairs(steps + 1, batch_size)
    losses = []
    model.train()
    for i in range(steps):
        images_1, images_2 = torch.from_numpy(a[i]), torch.from_numpy(b[i])
        optimizer.zero_grad()
        outputs = model(images_1, images_2).squeeze()
        loss = criterion(outputs, torch.from_numpy(targets[i]))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    model.eval()
    with torch.no_grad():
        outputs = model(torch.from_numpy(a[steps]), torch.from_numpy(b[steps])).squeeze()
        losses.append(criterion(outputs, torch.from_numpy(targets[steps])).item())
    return losses


if __name__ == "__main__":
    torch.manual_seed(0)
    print(train(build_model(), 5))
