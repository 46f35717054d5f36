"""``BertModel`` with Hugging Face's parameter names and outputs, so a BERT checkpoint in safetensors
(``model.safetensors`` + ``config.json``) loads with ``load_state_dict`` / :meth:`BertModel.from_pretrained`."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields

from tensorwire import nn
from tensorwire.creation import arange, zeros
from tensorwire.nn import functional as F
from tensorwire.nn._tensors import no_grad
from tensorwire.protocol.dtypes import finfo_max
from tensorwire.serialization import load

from .registry import register_model


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    architectures: list = field(default_factory=lambda: ["BertModel"])
    model_type: str = "bert"
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> BertConfig:
        names = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in d.items() if k in names}, extra={k: v for k, v in d.items() if k not in names})

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d.update(self.extra)
        return d


_ACT = {"gelu": lambda x: F.gelu(x), "gelu_new": lambda x: F.gelu(x, "tanh"), "gelu_pytorch_tanh":
        lambda x: F.gelu(x, "tanh"), "relu": F.relu, "silu": F.silu, "swish": F.silu, "tanh": lambda x: x.tanh()}


class BertEmbeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)
        self.position_embedding_type = c.position_embedding_type
        self.register_buffer("position_ids", arange(c.max_position_embeddings).reshape(1, -1), persistent=False)
        self.register_buffer("token_type_ids", zeros(1, c.max_position_embeddings, dtype="int64"), persistent=False)

    def _load_hook(self, state_dict: dict, prefix: str) -> None:
        state_dict.pop(prefix + "position_ids", None)  # older checkpoints saved these buffers
        state_dict.pop(prefix + "token_type_ids", None)

    def forward(self, input_ids, token_type_ids=None, position_ids=None):
        n, L = input_ids.shape
        if position_ids is None:
            position_ids = self.position_ids[:, :L]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :L].expand(n, L)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        if self.position_embedding_type == "absolute":
            x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        if c.hidden_size % c.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        self.num_attention_heads = c.num_attention_heads
        self.attention_head_size = c.hidden_size // c.num_attention_heads
        self.all_head_size = c.hidden_size
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)
        self.dropout = nn.Dropout(c.attention_probs_dropout_prob)

    def forward(self, h, mask=None):
        n, L, _ = h.shape
        H, d = self.num_attention_heads, self.attention_head_size

        def heads(x):
            return x.reshape(n, L, H, d).transpose(1, 2)

        q, k, v = heads(self.query(h)), heads(self.key(h)), heads(self.value(h))
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        if mask is not None:
            scores = scores + mask
        p = self.dropout(scores.softmax(-1))
        return (p @ v).transpose(1, 2).reshape(n, L, H * d)


class BertSelfOutput(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, h, x):
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSelfOutput(c)

    def forward(self, x, mask=None):
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.act = _ACT[c.hidden_act]

    def forward(self, x):
        return self.act(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.intermediate_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, h, x):
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertOutput(c)

    def forward(self, x, mask=None):
        a = self.attention(x, mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(c) for _ in range(c.num_hidden_layers)])

    def forward(self, x, mask=None):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertPooler(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, h):
        return self.activation(self.dense(h[:, 0]))


@register_model(architectures=("BertModel",), model_type="bert")
class BertModel(nn.Module):
    """Hugging Face's ``BertModel`` (encoder only). ``forward(input_ids, attention_mask=None,
    token_type_ids=None)`` returns the last hidden state ``[batch, seq, hidden]``; ``pooler(h)`` gives the
    pooled output. Dropout is active only in ``train()`` mode (``from_pretrained`` returns the model in eval)."""

    model_type = "bert"

    def __init__(self, config, add_pooling_layer: bool = True):
        super().__init__()
        c = config if isinstance(config, BertConfig) else BertConfig.from_dict(dict(config))
        self.config = c
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c)
        self.pooler = BertPooler(c) if add_pooling_layer else None
        self.apply(self._init_weights)

    def _init_weights(self, m) -> None:
        std = self.config.initializer_range
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
            if m.padding_idx is not None:
                with no_grad():
                    m.weight[m.padding_idx] = 0
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    @classmethod
    def from_config(cls, config: dict, **kwargs) -> BertModel:
        return cls(config, **kwargs)

    @classmethod
    def from_pretrained(cls, path: str, device=None, **kwargs) -> BertModel:
        """Build from a folder holding ``config.json`` and ``model.safetensors`` (Hugging Face layout);
        returns the model in eval mode. Weights named ``bert.*`` (task heads' checkpoints) are accepted."""
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        with nn.init.skip_init():  # the checkpoint overwrites every parameter
            model = cls(cfg, **kwargs)
        sd = load(os.path.join(path, "model.safetensors"), device=device)
        if any(k.startswith("bert.") for k in sd):
            sd = {k[5:]: v for k, v in sd.items() if k.startswith("bert.")}
        if model.pooler is None:
            sd = {k: v for k, v in sd.items() if not k.startswith("pooler.")}
        if device is not None:
            model.to(device)
        model.load_state_dict(sd, strict=True)
        return model.eval()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        mask = None
        if attention_mask is not None:
            dt = x.dtype
            big = -float(finfo_max(dt))  # Hugging Face adds finfo(dtype).min where the mask is 0
            m = attention_mask.to(dt).reshape(attention_mask.shape[0], 1, 1, attention_mask.shape[-1])
            mask = (1.0 - m) * big
        return self.encoder(x, mask)
