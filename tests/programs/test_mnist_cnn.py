"""PyTorch's MNIST example (``pytorch/examples/mnist``) shrunk to sklearn's 8x8 digits: a two-convolution CNN with
max pooling, ``log_softmax`` + ``nll_loss``, trained by ``Adadelta(lr=1.0)`` with a ``StepLR(gamma=0.7)`` schedule
stepped per epoch over a ``DataLoader``, then evaluated under ``no_grad``. The example's dropout is left out: its
masks come from each library's own generator, so they cannot agree."""

from __future__ import annotations

import numpy as np
import pytest

from ._harness import run_both

pytestmark = pytest.mark.usefixtures("session")


def mnist_cnn(torch, init):
    nn, F = torch.nn, torch.nn.functional
    StepLR = torch.optim.lr_scheduler.StepLR  # (the module given, not an import of the real torch)
    DataLoader, TensorDataset = torch.utils.data.DataLoader, torch.utils.data.TensorDataset

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3, 1)
            self.conv2 = nn.Conv2d(8, 16, 3, 1)
            self.fc1 = nn.Linear(64, 32)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            return F.log_softmax(self.fc2(x), dim=1)

    model = Net()
    model.load_state_dict({k: torch.tensor(v) for k, v in init["weights"].items()})
    train = DataLoader(
        TensorDataset(torch.tensor(init["x_train"]), torch.tensor(init["y_train"])),
        batch_size=16,
        shuffle=False,
        num_workers=2,
        pin_memory=True,
        drop_last=True,
    )
    test = DataLoader(TensorDataset(torch.tensor(init["x_test"]), torch.tensor(init["y_test"])), batch_size=100)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    losses = []
    for _epoch in range(int(init.get("epochs", 3))):
        model.train()
        for data, target in train:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return losses + [test_loss / len(test.dataset), correct / len(test.dataset)]


def _init() -> dict:
    """Digits as 8x8 MNIST, 512 to train and 300 to test, and torch's default initial weights (numpy)."""
    datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn is needed for the digits data set")
    digits = datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    tr, te = order[:512], order[512:812]

    def u(shape, fan_in):  # torch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        return (rng.uniform(-1, 1, shape) / np.sqrt(fan_in)).astype(np.float32)

    weights = {
        "conv1.weight": u((8, 1, 3, 3), 9),
        "conv1.bias": u(8, 9),
        "conv2.weight": u((16, 8, 3, 3), 72),
        "conv2.bias": u(16, 72),
        "fc1.weight": u((32, 64), 64),
        "fc1.bias": u(32, 64),
        "fc2.weight": u((10, 32), 32),
        "fc2.bias": u(10, 32),
    }
    return {"weights": weights, "x_train": x[tr], "y_train": y[tr], "x_test": x[te], "y_test": y[te]}


@pytest.mark.filterwarnings("ignore:.*pin_memory")
def test_mnist_cnn_adadelta_steplr_matches_torch():
    got, _ = run_both(mnist_cnn, _init(), rtol=1e-3, atol=1e-5)
    assert got[-3] < 0.6 * got[0]  # it learns (torch: 2.41 -> ~1.0 over 96 steps)
    assert got[-1] > 0.6  # test accuracy (torch: 0.77)
