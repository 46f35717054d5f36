"""An MLP on MNIST the way the classic tutorials train it (yunjey's pytorch-tutorial feedforward network,
pytorch/examples' mnist): the images kept as torchvision's ``MNIST`` keeps them, one uint8 tensor read from the idx
file's bytes with ``torch.frombuffer``, and its ``__getitem__`` as torchvision's (``self.data[index]``,
``int(self.targets[index])``, the image's ``.numpy()``), each image turned into floats by torchvision's ``ToTensor``
(its numpy-array path: ``from_numpy(...).permute(...).contiguous().to(float).div(255)``) and ``Normalize((0.1307,),
(0.3081,))`` (``clone().sub_(mean).div_(std)``), a ``DataLoader`` of 100 with its default collate, ``Linear(784,
500)``-ReLU-``Linear(500, 10)``, cross entropy, Adam, and an evaluation under ``torch.no_grad()`` at the end.
Written for these tests, not copied.

The images are synthetic (no download): ten seeded templates with noise, in the idx format. The loader samples with
a seeded numpy permutation (``sampler=``) so torch and tensorwire, whose generators differ, see the same batches.
Run it on its own: ``python tests/programs/mnist_loader_mlp.py``.
"""

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

batch_size = 100
N_TRAIN, N_TEST, SIDE = 6000, 500, 28


def idx_file(n, seed):
    """(images file bytes, labels file bytes) in MNIST's idx format: a magic number, the sizes, the bytes."""
    rng = np.random.RandomState(seed)
    templates = np.random.RandomState(1234).rand(10, SIDE, SIDE) ** 3 * 255
    labels = rng.randint(0, 10, n).astype(np.uint8)
    images = np.clip(templates[labels] * 0.1 + rng.rand(n, SIDE, SIDE) * 230, 0, 255).astype(np.uint8)

    def pack(arr):
        head = (0x0800 | arr.ndim).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
        return head + arr.tobytes()
    return pack(images), pack(labels)


def read_idx(data):
    """torchvision's ``read_sn3_pascalvincent_tensor`` for a uint8 file."""
    nd = int.from_bytes(data[0:4], "big") % 256
    s = [int.from_bytes(data[4 * (i + 1): 4 * (i + 2)], "big") for i in range(nd)]
    parsed = torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=4 * (nd + 1))
    return parsed.view(*s)


def to_tensor(pic):
    """torchvision's ``to_tensor`` of a numpy image (H x W, uint8)."""
    img = torch.from_numpy(pic[:, :, None].transpose((2, 0, 1))).contiguous()
    if isinstance(img, torch.ByteTensor):
        return img.to(dtype=torch.get_default_dtype()).div(255)
    return img


def normalize(tensor, mean=(0.1307,), std=(0.3081,)):
    """torchvision's ``Normalize`` (not in place)."""
    tensor = tensor.clone()
    m = torch.as_tensor(mean, dtype=tensor.dtype, device=tensor.device).view(-1, 1, 1)
    s = torch.as_tensor(std, dtype=tensor.dtype, device=tensor.device).view(-1, 1, 1)
    return tensor.sub_(m).div_(s)


class MNIST(Dataset):
    def __init__(self, train):
        images, labels = idx_file(N_TRAIN if train else N_TEST, 0 if train else 1)
        self.data = read_idx(images)
        self.targets = read_idx(labels).long()

    def __getitem__(self, index):
        img, target = self.data[index], int(self.targets[index])
        return normalize(to_tensor(img.numpy())), target

    def __len__(self):
        return len(self.data)


class NeuralNet(nn.Module):
    def __init__(self, input_size=SIDE * SIDE, hidden_size=500, num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def build_model():
    return NeuralNet()


def train(model, steps):
    train_set, test_set = MNIST(True), MNIST(False)
    order = np.random.RandomState(1).permutation(len(train_set)).tolist()
    loader = DataLoader(train_set, batch_size=batch_size, sampler=order * (1 + steps * batch_size // len(order)))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    batches = iter(loader)
    for _ in range(steps):
        images, labels = next(batches)
        loss = criterion(model(images.reshape(-1, SIDE * SIDE)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    with torch.no_grad():
        test = [criterion(model(x.reshape(-1, SIDE * SIDE)), y).item() for x, y in DataLoader(test_set, 100)]
    return [float(v.item()) for v in losses] + [sum(test) / len(test)]


if __name__ == "__main__":
    torch.manual_seed(0)
    for step, loss in enumerate(train(build_model(), 300)):
        if step % 50 == 0:
            print(f"step {step}: loss {loss:.4f}")
