"""``tw.optim``: optimizers whose steps run on the cluster, and learning-rate schedulers."""

from . import lr_scheduler, swa_utils
from .algorithms import (
                         ASGD,
                         SGD,
                         Adadelta,
                         Adafactor,
                         Adagrad,
                         Adam,
                         Adamax,
                         AdamW,
                         Muon,
                         NAdam,
                         RAdam,
                         RMSprop,
                         Rprop,
                         SparseAdam,
)
from .lbfgs import LBFGS
from .optimizer import Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS",
           "Rprop", "ASGD", "Adafactor", "Muon", "SparseAdam", "lr_scheduler", "swa_utils"]
