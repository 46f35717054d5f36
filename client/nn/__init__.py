"""``tw.nn``: PyTorch's model-building toolkit on cluster tensors.

Modules hold :class:`Parameter` s and buffers that live on the cluster's devices; a forward pass records
ops (``tw.nn.functional``), so nothing moves to the client unless you ask for a value.
"""

from . import functional, init, parallel, utils
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv_transpose import ConvTranspose1d, ConvTranspose2d
from .distance import CosineSimilarity, PairwiseDistance
from .layers import (
    ELU,
    GELU,
    GLU,
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AlphaDropout,
    AvgPool1d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Bilinear,
    Conv1d,
    Conv2d,
    Dropout,
    Dropout1d,
    Dropout2d,
    Dropout3d,
    Embedding,
    FeatureAlphaDropout,
    Flatten,
    GroupNorm,
    Hardtanh,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MaxPool1d,
    MaxPool2d,
    Mish,
    ReLU,
    ReLU6,
    RMSNorm,
    Sigmoid,
    SiLU,
    Softmax,
    Softmin,
    Softplus,
    Tanh,
    Unflatten,
)
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .module import Module, RemovableHandle
from .parameter import Buffer, Parameter
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .transformer import (
    MultiheadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "Module", "Parameter", "Buffer", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
    "Linear", "Bilinear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "MaxPool1d", "MaxPool2d",
    "AvgPool1d", "AvgPool2d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "RMSNorm", "GroupNorm",
    "Embedding", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
    "Flatten", "Unflatten", "Identity", "ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid",
    "Softmax", "LogSoftmax", "Softmin", "LeakyReLU", "ELU", "Softplus", "Hardtanh", "Mish", "GLU",
    "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
    "TransformerDecoder", "Transformer", "RNNBase", "RNN", "LSTM", "GRU",
    "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell", "MSELoss", "L1Loss", "SmoothL1Loss",
    "HuberLoss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "functional", "init", "utils",
    "RemovableHandle", "PairwiseDistance", "CosineSimilarity",
]
