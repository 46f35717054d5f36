"""``tw.models``: ready-made models (``MLP``, ``LeNet``, ``BertModel``) and the config registry
(``tw.models.for_config(config)``, which ``tw.hub.load`` uses)."""

from .bert import BertConfig, BertModel
from .registry import for_config, model_class, register_model, registered
from .simple import MLP, LeNet

__all__ = ["MLP", "LeNet", "BertModel", "BertConfig", "for_config", "model_class", "register_model", "registered"]
