"""``tw.optim``: optimizers whose steps run on the cluster, and learning-rate schedulers."""

from . import lr_scheduler
from .algorithms import SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, NAdam, RAdam, RMSprop
from .lbfgs import LBFGS
from .optimizer import Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS",
           "lr_scheduler"]
