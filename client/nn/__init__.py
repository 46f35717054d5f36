"""``tw.nn``: PyTorch's model-building toolkit on cluster tensors.

Modules hold :class:`Parameter` s and buffers that live on the cluster's devices; a forward pass records
ops (``tw.nn.functional``), so nothing moves to the client unless you ask for a value.
"""

import importlib

from . import functional, init, parallel, utils
from .container import Container, ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .distance import CosineSimilarity, PairwiseDistance
from .embedding_bag import EmbeddingBag
from .layers import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AlphaDropout,
    AvgPool1d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Bilinear,
    Conv1d,
    Conv2d,
    Conv3d,
    Dropout,
    Dropout1d,
    Dropout2d,
    Dropout3d,
    Embedding,
    FeatureAlphaDropout,
    Flatten,
    GroupNorm,
    Hardshrink,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSigmoid,
    LogSoftmax,
    MaxPool1d,
    MaxPool2d,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    RMSNorm,
    RReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softmax2d,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Tanh,
    Tanhshrink,
    Threshold,
    Unflatten,
)
from .lazy import (
    LazyBatchNorm1d,
    LazyBatchNorm2d,
    LazyBatchNorm3d,
    LazyConv1d,
    LazyConv2d,
    LazyConv3d,
    LazyConvTranspose1d,
    LazyConvTranspose2d,
    LazyConvTranspose3d,
    LazyInstanceNorm1d,
    LazyInstanceNorm2d,
    LazyInstanceNorm3d,
    LazyLinear,
)
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    CTCLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    LinearCrossEntropyLoss,
    LinearCrossEntropyOptions,
    MarginRankingLoss,
    MSELoss,
    MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    NLLLoss,
    NLLLoss2d,
    PoissonNLLLoss,
    SmoothL1Loss,
    SoftMarginLoss,
    TripletMarginLoss,
    TripletMarginWithDistanceLoss,
)
from .module import Module, RemovableHandle
from .norm_layers import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LocalResponseNorm, SyncBatchNorm
from .padding_layers import (
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from .parallel import DataParallel
from .parameter import Buffer, Parameter, UninitializedBuffer, UninitializedParameter
from .pooling_layers import (
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool3d,
    FractionalMaxPool2d,
    FractionalMaxPool3d,
    LPPool1d,
    LPPool2d,
    LPPool3d,
    MaxPool3d,
    MaxUnpool1d,
    MaxUnpool2d,
    MaxUnpool3d,
)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .shape_layers import (
    ChannelShuffle,
    Fold,
    PixelShuffle,
    PixelUnshuffle,
    Unfold,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)
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
    "DataParallel",
    "RemovableHandle", "PairwiseDistance", "CosineSimilarity",
    # the rest of torch.nn's modules over the functional forms (layers' activations, pooling_layers, norm_layers,
    # padding_layers, shape_layers, lazy, loss)
    "Conv3d", "ConvTranspose3d", "BatchNorm3d", "MaxPool3d", "AvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d", "AdaptiveAvgPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d",
    "MaxUnpool3d", "FractionalMaxPool2d", "FractionalMaxPool3d", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "LocalResponseNorm", "SyncBatchNorm", "LogSigmoid", "Hardswish", "Hardsigmoid", "Hardshrink",
    "Softshrink", "Tanhshrink", "Softsign", "CELU", "SELU", "Threshold", "PReLU", "RReLU", "Softmax2d",
    "KLDivLoss", "MarginRankingLoss", "CosineEmbeddingLoss", "HingeEmbeddingLoss", "GaussianNLLLoss",
    "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "SoftMarginLoss", "PoissonNLLLoss",
    "TripletMarginLoss", "TripletMarginWithDistanceLoss", "CTCLoss", "NLLLoss2d", "LinearCrossEntropyLoss",
    "LinearCrossEntropyOptions", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d",
    "ZeroPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d", "PixelShuffle", "PixelUnshuffle",
    "ChannelShuffle", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "Fold", "Unfold", "EmbeddingBag",
    "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d",
    "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d",
    "LazyInstanceNorm2d", "LazyInstanceNorm3d", "UninitializedParameter", "UninitializedBuffer", "Container",
    "modules",
]


def __getattr__(name: str):
    """``tw.nn.modules`` (torch's module tree of re-exports, ``torch.nn.modules.loss._Loss``): imported at its first
    use, as ``import tensorwire.nn.modules...`` does, not with ``tw.nn`` (its ~25 small modules cost ~10 ms)."""
    if name == "modules":
        return importlib.import_module(f"{__name__}.modules")  # lazy: at its first use (PEP 562), not with tw.nn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
