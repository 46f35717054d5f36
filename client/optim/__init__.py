"""``tw.optim``: optimizers whose steps run on the cluster, and learning-rate schedulers."""

from . import lr_scheduler
from .algorithms import SGD, Adagrad, Adam, AdamW, RMSprop
from .optimizer import Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
