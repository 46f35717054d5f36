"""Classify MNIST-shaped images with a bidirectional LSTM, in the manner of the well-known "pytorch-tutorial"
bidirectional recurrent neural network: each 28x28 image is read as 28 steps of 28 features by a 2-layer
bidirectional ``nn.LSTM`` (hidden 128, ``batch_first``), zero initial states built from ``x.size(0)``, an
``nn.Linear`` on the last step's output (both directions), ``nn.CrossEntropyLoss``, Adam at lr 0.003, batch 100.
Written for these tests, not copied.

The images are synthetic (no download), drawn from a seeded numpy RNG: each of the 10 classes is a fixed random
stroke pattern, and an image is its class's pattern, shifted by up to a pixel, plus noise. Run it on its own:
``python tests/programs/bilstm_classifier.py``.
"""

import numpy as np
import torch
import torch.nn as nn

sequence_length = 28
input_size = 28
hidden_size = 128
num_layers = 2
num_classes = 10
batch_size = 100
learning_rate = 0.003


def make_images(n, seed):
    """``n`` images (n, 28, 28) in [0, 1] and their labels."""
    rng = np.random.RandomState(seed)
    patterns = (np.random.RandomState(0).rand(num_classes, 28, 28) < 0.15).astype(np.float32)
    labels = rng.randint(0, num_classes, n)
    images = patterns[labels]
    shifts = rng.randint(-1, 2, (n, 2))
    images = np.stack([np.roll(im, tuple(s), axis=(0, 1)) for im, s in zip(images, shifts)])
    images = np.clip(images + 0.3 * rng.rand(n, 28, 28).astype(np.float32), 0, 1)
    return images.astype(np.float32), labels


class BiRNN(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, num_classes):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(hidden_size * 2, num_classes)  # 2 for bidirection

    def forward(self, x):
        # Set initial states
        h0 = torch.zeros(self.num_layers * 2, x.size(0), self.hidden_size)  # 2 for bidirection
        c0 = torch.zeros(self.num_layers * 2, x.size(0), self.hidden_size)
        # Forward propagate LSTM
        out, _ = self.lstm(x, (h0, c0))  # out: tensor of shape (batch_size, seq_length, hidden_size*2)
        # Decode the hidden state of the last time step
        out = self.fc(out[:, -1, :])
        return out


def build_model():
    return BiRNN(input_size, hidden_size, num_layers, num_classes)


def train(model, steps):
    images, labels = make_images(steps * batch_size, seed=1)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    losses = []
    for i in range(steps):
        batch = slice(i * batch_size, (i + 1) * batch_size)
        x = torch.from_numpy(images[batch]).reshape(-1, sequence_length, input_size)
        y = torch.from_numpy(labels[batch])
        # Forward pass
        outputs = model(x)
        loss = criterion(outputs, y)
        # Backward and optimize
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return [float(v.item()) for v in losses]


if __name__ == "__main__":
    torch.manual_seed(0)
    for step, loss in enumerate(train(build_model(), 60)):
        print(f"step {step}: loss {loss:.4f}")
