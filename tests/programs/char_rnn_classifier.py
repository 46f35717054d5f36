"""Classify names by their language with a character-level RNN, in the manner of the PyTorch tutorial "NLP From
Scratch: Classifying Names with a Character-Level RNN": each name is a ``(len, 1, n_letters)`` tensor of one-hot
letters, a hand-written RNN (``i2h`` and ``i2o`` ``nn.Linear`` layers over ``torch.cat`` of the letter and the
hidden state, ``nn.LogSoftmax``) reads it one letter at a time in a Python loop, ``nn.NLLLoss`` scores the last
output, and the parameters are updated by hand (``p.data.add_(p.grad.data, alpha=-learning_rate)``), one name per
step, with ``loss.item()`` read every step as the tutorial does. Written for these tests, not copied.

The names are synthetic (no download): each "language" is a seeded random letter-level Markov chain with its own
favourite letters, and the training examples are drawn from a seeded numpy RNG as the tutorial's
``randomTrainingExample`` draws them with ``random``. Run it on its own:
``python tests/programs/char_rnn_classifier.py``.
"""

import string

import numpy as np
import torch
import torch.nn as nn

all_letters = string.ascii_letters + " .,;'"
n_letters = len(all_letters)
n_hidden = 128
learning_rate = 0.05  # the tutorial's 0.005 needs its 100000 steps; these small synthetic languages take 0.05


def make_languages(n_categories=4, names_per=40, seed=0):
    """``{language: [names]}``: each language a letter Markov chain over its own 6 letters (and 2 shared ones)."""
    rng = np.random.RandomState(seed)
    letters = string.ascii_lowercase
    order = rng.permutation(len(letters))
    out = {}
    for c in range(n_categories):
        favourites = np.concatenate([order[6 * c : 6 * c + 6], order[-2:]])
        trans = rng.dirichlet(np.full(8, 0.3), size=8)
        names = []
        for _ in range(names_per):
            n = rng.randint(3, 8)
            s = [rng.randint(8)]
            for _ in range(n - 1):
                s.append(rng.choice(8, p=trans[s[-1]]))
            name = "".join(letters[favourites[i]] for i in s)
            names.append(name.capitalize())
        out[f"lang{c}"] = names
    return out


category_lines = make_languages()
all_categories = list(category_lines)
n_categories = len(all_categories)


def letterToIndex(letter):
    return all_letters.find(letter)


def lineToTensor(line):
    """A name as a <line_length x 1 x n_letters> tensor of one-hot letter vectors."""
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][letterToIndex(letter)] = 1
    return tensor


class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(input_size + hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, input, hidden):
        combined = torch.cat((input, hidden), 1)
        hidden = self.i2h(combined)
        output = self.i2o(combined)
        output = self.softmax(output)
        return output, hidden

    def initHidden(self):
        return torch.zeros(1, self.hidden_size)


def build_model():
    return RNN(n_letters, n_hidden, n_categories)


def randomTrainingExample(rng):
    category = all_categories[rng.randint(n_categories)]
    names = category_lines[category]
    line = names[rng.randint(len(names))]
    category_tensor = torch.tensor([all_categories.index(category)], dtype=torch.long)
    line_tensor = lineToTensor(line)
    return category, line, category_tensor, line_tensor


def train(model, steps):
    rnn = model
    criterion = nn.NLLLoss()
    rng = np.random.RandomState(2)

    def train_one(category_tensor, line_tensor):
        hidden = rnn.initHidden()
        rnn.zero_grad()
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        loss = criterion(output, category_tensor)
        loss.backward()
        # Add parameters' gradients to their values, multiplied by learning rate
        for p in rnn.parameters():
            p.data.add_(p.grad.data, alpha=-learning_rate)
        return output, loss.item()

    losses = []
    for _ in range(steps):
        category, line, category_tensor, line_tensor = randomTrainingExample(rng)
        output, loss = train_one(category_tensor, line_tensor)
        losses.append(loss)
    return losses


if __name__ == "__main__":
    torch.manual_seed(0)
    losses = train(build_model(), 2000)
    for i in range(0, len(losses), 100):
        print(f"steps {i}-{i + 99}: mean loss {np.mean(losses[i:i + 100]):.4f}")
