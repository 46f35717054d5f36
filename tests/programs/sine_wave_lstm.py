"""Predict sine waves with two stacked LSTM cells, trained with LBFGS and a closure, as pytorch/examples'
time_sequence_prediction does. Run it on its own: ``python tests/programs/sine_wave_lstm.py`` (``import torch``;
see ``_harness.py`` for the run with tensorwire imported as torch).
"""

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

HIDDEN = 16


def make_data(n=6, length=24, period=4, seed=2):
    rng = np.random.RandomState(seed)
    x = np.array(range(length)) + rng.randint(-4 * period, 4 * period, n).reshape(n, 1)
    return np.sin(x / 1.0 / period).astype("float64")


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, HIDDEN)
        self.lstm2 = nn.LSTMCell(HIDDEN, HIDDEN)
        self.linear = nn.Linear(HIDDEN, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        c_t = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


def build_model():
    return Sequence().double()


def train(model, steps):
    data = make_data()
    input = torch.from_numpy(data[1:, :-1])
    target = torch.from_numpy(data[1:, 1:])
    test_input = torch.from_numpy(data[:1, :-1])
    test_target = torch.from_numpy(data[:1, 1:])
    criterion = nn.MSELoss()
    # use LBFGS as optimizer since we can load the whole data to train
    optimizer = optim.LBFGS(model.parameters(), lr=0.8, max_iter=4)
    losses = []
    for _ in range(steps):
        def closure():
            optimizer.zero_grad()
            out = model(input)
            loss = criterion(out, target)
            loss.backward()
            return loss
        losses.append(optimizer.step(closure))
    with torch.no_grad():  # predict 4 steps past the end of the held-out wave
        future = 4
        pred = model(test_input, future=future)
        losses.append(criterion(pred[:, :-future], test_target))
    return [float(v.item()) for v in losses]  # read once at the end: the loop never waits for a value


if __name__ == "__main__":
    torch.manual_seed(0)
    for i, loss in enumerate(train(build_model(), 30)):
        print(f"step {i}: loss {loss:.6f}")
