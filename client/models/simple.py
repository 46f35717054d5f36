"""``MLP`` and ``LeNet``: small models for tabular data and small images (the digits examples)."""

from __future__ import annotations

from tensorwire import nn

from .registry import register_model

_ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
         "leaky_relu": nn.LeakyReLU}


@register_model(architectures=("MLP",), model_type="mlp")
class MLP(nn.Sequential):
    """Linear layers with an activation (and optional dropout) between them: ``MLP(64, [128, 64], 10)``.
    Parameter names are ``"0.weight"``, ``"0.bias"``, ``"2.weight"`` ... (a ``Sequential``)."""

    model_type = "mlp"

    def __init__(self, in_features: int, hidden_features=(128,), out_features: int = 10, activation: str = "relu",
                 dropout: float = 0.0, bias: bool = True, device=None, dtype=None):
        hidden = [hidden_features] if isinstance(hidden_features, int) else list(hidden_features)
        layers = []
        d = in_features
        for h in hidden:
            layers.append(nn.Linear(d, h, bias=bias, device=device, dtype=dtype))
            layers.append(_ACTS[activation]())
            if dropout:
                layers.append(nn.Dropout(dropout))
            d = h
        layers.append(nn.Linear(d, out_features, bias=bias, device=device, dtype=dtype))
        super().__init__(*layers)
        self.config = {"architectures": ["MLP"], "model_type": "mlp", "in_features": in_features,
                       "hidden_features": hidden, "out_features": out_features, "activation": activation,
                       "dropout": dropout, "bias": bias}

    @classmethod
    def from_config(cls, config: dict, **kwargs):
        keys = ("in_features", "hidden_features", "out_features", "activation", "dropout", "bias")
        return cls(**{k: config[k] for k in keys if k in config}, **kwargs)


@register_model(architectures=("LeNet",), model_type="lenet")
class LeNet(nn.Module):
    """A LeNet-style CNN: two (conv 3x3 + ReLU + 2x2 max-pool) blocks, then two linear layers.

    ``LeNet(in_channels=1, num_classes=10, image_size=8)`` fits scikit-learn's 8x8 digits."""

    model_type = "lenet"

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28, channels=(16, 32),
                 hidden: int = 64, dropout: float = 0.0, device=None, dtype=None):
        super().__init__()
        fk = dict(device=device, dtype=dtype)
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 3, padding=1, **fk), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1, **fk), nn.ReLU(), nn.MaxPool2d(2))
        side = image_size // 4
        layers = [nn.Flatten(), nn.Linear(c2 * side * side, hidden, **fk), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(hidden, num_classes, **fk))
        self.classifier = nn.Sequential(*layers)
        self.config = {"architectures": ["LeNet"], "model_type": "lenet", "in_channels": in_channels,
                       "num_classes": num_classes, "image_size": image_size, "channels": list(channels),
                       "hidden": hidden, "dropout": dropout}

    @classmethod
    def from_config(cls, config: dict, **kwargs):
        keys = ("in_channels", "num_classes", "image_size", "channels", "hidden", "dropout")
        return cls(**{k: config[k] for k in keys if k in config}, **kwargs)

    def forward(self, x):
        return self.classifier(self.features(x))
