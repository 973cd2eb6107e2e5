"""The workloads of ``speed.MaskedSpeedSuite``, ``speed.ModelStepSuite`` and
``features.FeatureSpeedSuite``: shapes, paddings, document lengths, attended-pair counts,
features and readable labels.

One source of truth for the facts that the benchmarks (which build the masks:
``benchmarks/_masks.py``, ``benchmarks/_llama.py``), the README report and the dashboard
(labels, TFLOP/s on attended pairs) all need. Dependency-free (no torch, no pandas): the
benchmarks load it by file path as they load :mod:`regress.metrics`, and the
dashboard image, which has no ``benchmarks/``, imports it.

Every masked workload is causal (top-left, as PyTorch's ``is_causal``) and has H·D = 2048
(:func:`heads_for`), as the dense GPU speed grid (DESIGN.md). Left padding puts a batch
element's padding tokens first, as a decoder batch padded by Hugging Face's tokenizers with
``padding_side="left"``: with causal masking, the query rows of the padding then see no key
at all (empty rows, exactly the case safeattn exists for).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# H·D of every GPU benchmark shape (DESIGN.md): the work per call stays constant across
# head dims.
HEADS_TIMES_DIM = 2048


def heads_for(head_dim: int) -> int:
    """Query heads of a GPU benchmark shape: ``2048 // head_dim`` (16 at D=128)."""
    return HEADS_TIMES_DIM // head_dim


TOKENS_PER_CALL = 16384  # B·N of every dense GPU benchmark shape


def batch_for(seq_len: int) -> int:
    """Batch of a dense GPU benchmark shape: ``16384 // seq_len`` (4 at N=4096)."""
    return TOKENS_PER_CALL // seq_len


def left_padding(batch: int, seq_len: int, max_fraction: float) -> tuple[int, ...]:
    """Padding tokens per batch element, spread evenly from 0 (first element) to
    ``max_fraction`` of ``seq_len`` (last), rounded half up: ``left_padding(4, 2048, 0.5)``
    is ``(0, 341, 683, 1024)``."""
    if batch == 1:
        return (0,)
    return tuple(math.floor(seq_len * max_fraction * b / (batch - 1) + 0.5) for b in range(batch))


def document_lengths(total: int, weights: tuple[int, ...]) -> tuple[int, ...]:
    """Packed-document lengths proportional to ``weights`` (rounded down, the remainder
    added to the last document) summing to ``total``: unequal and not multiples of any block
    size, as real packed documents are."""
    lengths = [total * w // sum(weights) for w in weights]
    lengths[-1] += total - sum(lengths)
    return tuple(lengths)


def causal_pairs(length: int) -> int:
    """Attended (query, key) pairs of one causal sequence of ``length`` tokens."""
    return length * (length + 1) // 2


@dataclass(frozen=True)
class MaskWorkload:
    """One ``mask`` value of ``speed.MaskedSpeedSuite`` (shapes per head; H = 2048 // D).

    ``batch`` × ``seq_len`` tokens; every kind is causal. At most one of: ``left_padding``
    (tokens lost at the start of each batch element), ``window`` (a query sees itself and
    the ``window - 1`` keys before it), ``doc_lengths`` (documents packed into one sequence,
    ``batch`` 1, causal within each document, nothing across documents).
    """

    kind: str
    label: str
    batch: int
    seq_len: int
    left_padding: tuple[int, ...] = ()
    window: int | None = None
    doc_lengths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.left_padding and len(self.left_padding) != self.batch:
            raise ValueError(f"{self.kind}: one left padding per batch element, got {self}")
        if self.doc_lengths and (self.batch != 1 or sum(self.doc_lengths) != self.seq_len):
            raise ValueError(f"{self.kind}: documents must fill one sequence, got {self}")

    def attended_pairs(self) -> int:
        """(query, key) pairs that attend, per head, summed over the batch: the work a
        block-sparse kernel cannot skip (FLOPs count these only:
        :func:`regress.metrics.attended_flops`)."""
        if self.doc_lengths:
            return sum(causal_pairs(n) for n in self.doc_lengths)
        if self.window is not None:
            w, n = self.window, self.seq_len
            per_sequence = causal_pairs(min(w, n)) + max(n - w, 0) * w
            return self.batch * per_sequence
        pads = self.left_padding or (0,) * self.batch
        return sum(causal_pairs(self.seq_len - p) for p in pads)

    def shrunk(self, seq_len: int) -> MaskWorkload:
        """The same structure at ``seq_len`` tokens (paddings, window and document lengths
        scaled in proportion): the tests' tiny CPU version of a GPU workload."""
        factor = seq_len / self.seq_len
        pads = tuple(math.floor(p * factor) for p in self.left_padding)
        window = max(1, math.floor(self.window * factor)) if self.window is not None else None
        docs = document_lengths(seq_len, self.doc_lengths) if self.doc_lengths else ()
        return replace(self, seq_len=seq_len, left_padding=pads, window=window, doc_lengths=docs)


# The document weights of varlen_docs: 10 unequal documents, no two alike, shuffled.
_DOC_WEIGHTS = (3, 7, 1, 9, 4, 10, 2, 6, 8, 5)

MASK_WORKLOADS: dict[str, MaskWorkload] = {
    w.kind: w
    for w in (
        MaskWorkload(
            "key_padding_causal",
            "left padding 0–60 % + causal, B=8 N=2048 (key_mask)",
            batch=8,
            seq_len=2048,
            left_padding=left_padding(8, 2048, 0.6),
        ),
        MaskWorkload(
            "sliding_window",
            "causal window of 1024 keys, B=2 N=8192",
            batch=2,
            seq_len=8192,
            window=1024,
        ),
        MaskWorkload(
            "varlen_docs",
            "10 packed documents in 16k tokens, causal per document (varlen)",
            batch=1,
            seq_len=16384,
            doc_lengths=document_lengths(16384, _DOC_WEIGHTS),
        ),
        MaskWorkload(
            "bool_mask",
            "dense (B,1,N,N) bool mask: left padding 0/512/1024/2048 + causal, B=4 N=4096",
            batch=4,
            seq_len=4096,
            left_padding=(0, 512, 1024, 2048),
        ),
    )
}
MASK_KINDS: tuple[str, ...] = tuple(MASK_WORKLOADS)


# --- speed.ModelStepSuite ------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    """The Llama-style decoder of ``speed.ModelStepSuite`` (``benchmarks/_llama.py``)."""

    layers: int = 4
    hidden: int = 2048
    heads: int = 16
    kv_heads: int = 4  # grouped-query attention: 4 query heads per key/value head
    head_dim: int = 128
    intermediate: int = 5632  # SwiGLU width, ~8/3 · hidden rounded to a multiple of 256
    vocab: int = 8192
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5

    def summary(self) -> str:
        return (
            f"{self.layers} layers, hidden {self.hidden}, {self.heads} heads / "
            f"{self.kv_heads} KV heads of {self.head_dim}, SwiGLU {self.intermediate}, "
            f"vocabulary {self.vocab}"
        )


MODEL = ModelConfig()
MODEL_BATCH = 4
# padding="left": batch element b loses left_padding(MODEL_BATCH, N, 0.5)[b] tokens.
MODEL_MAX_PADDING = 0.5
PADDING_LABELS: dict[str, str] = {
    "none": "no padding",
    "left": f"left padding 0–{round(MODEL_MAX_PADDING * 100)} % per sequence",
}


def model_padding(padding: str, seq_len: int) -> tuple[int, ...]:
    """Left padding per batch element of a ModelStepSuite batch (all 0 for ``"none"``)."""
    if padding == "none":
        return (0,) * MODEL_BATCH
    if padding == "left":
        return left_padding(MODEL_BATCH, seq_len, MODEL_MAX_PADDING)
    raise ValueError(f"unknown padding {padding!r}; known: {list(PADDING_LABELS)}")


# --- features.FeatureSpeedSuite ----------------------------------------------------------------


@dataclass(frozen=True)
class FeatureShape:
    """The one shape of ``features.FeatureSpeedSuite``: dense, non-causal (SDPA takes no
    ``is_causal`` beside a bias), B·N and H·D as every dense GPU shape (B=4, H=16)."""

    seq_len: int = 4096
    head_dim: int = 128

    @property
    def batch(self) -> int:
        return batch_for(self.seq_len)

    @property
    def heads(self) -> int:
        return heads_for(self.head_dim)


FEATURE_SHAPE = FeatureShape()
FEATURE_SOFTCAP = 50.0  # Gemma 2's attention cap
FEATURE_DROPOUT_P = 0.1
# The features safeattn shares with some peer (issue 16), and "none" (the plain kernel each
# feature's cost is measured against).
FEATURES: dict[str, str] = {
    "none": "plain attention",
    "softcap": f"logit soft-capping, cap {FEATURE_SOFTCAP:g}",
    "dropout": f"dropout p={FEATURE_DROPOUT_P:g}",
    "bias_grad": "additive bias (1, H, N, N) with its gradient",
}
