"""Where tokens live (TensorBoard's embedding projector, LIT): the encoder's and decoder's
token representations at each layer for validation sentences, projected to 2-D or 3-D.

Layer 0 of a stack is what its first layer reads (token embeddings with positions), layer l
the output of layer l, before a pre-LN stack's final norm (``Record.stream``, the same for
every model: a Hugging Face model's ``hidden_states`` differ only at the top of a pre-LN
stack, which they give after that norm). The decoder reads each sentence's first reference
translation, teacher-forced; a decoder point is the token read at that position (the start
token first).

PCA is exact, on the model's device: the SVD of the centred points, each component's sign
fixed so that its largest loading is positive, with the share of the variance each explains.
Projecting every layer at once fits one PCA (or UMAP) to all of them: the layers share
axes. UMAP (McInnes et al. 2018, ``umap-learn``) runs with ``random_state=0``, so the page
and ``python -m core.project`` agree. A point's nearest neighbours are the points of the
same layer whose representations (width D, not the projection) have the highest cosine
similarity with its own.

Shape key: N points, D model width, K projected dimensions (2 or 3), B sentences of one
pass, S source pieces, T decoder inputs.
"""

from __future__ import annotations

import importlib.util
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from core.measure.progress import ProgressFn, check_time, checked
from core.measure.sample import validation_sample
from core.model import batched
from core.model.checkpoints import validation_source
from core.runs import budget

SIDES = ("encoder", "decoder")
METHODS = ("pca", "umap")
METHOD_NAMES = {"pca": "PCA", "umap": "UMAP"}
COLOURS = ("token", "position", "layer", "sentence")  # what a point's colour shows
DIMS = (2, 3)
SENTENCES = 200  # validation sentences by default
MAX_SENTENCES = 1000
SENTENCE_CHOICES = (50, 100, 200, 500, MAX_SENTENCES)  # what the page offers (its cache keys)
AUTOMATIC = 200  # a page projects by PCA at most this many sentences without being asked
ALL_LAYERS = -1  # every layer of the stack, projected together
NEIGHBOURS = 10
READS = ("reference", "translation")  # what the decoder reads: a reference or its own output
BATCH = 64  # sentences in one pass


class ProjectionError(ValueError):
    """A projection this model, this machine or these settings cannot give, in one line."""


@dataclass
class Sentences:
    """Validation sentences as the model reads them: ids and pieces of each side."""

    sources: list[list[int]]  # S ids of each source, <eos> included
    targets: list[list[int]]  # T decoder inputs of each first reference: <bos> + output[:-1]
    source_tokens: list[list[str]]
    target_tokens: list[list[str]]
    texts: list[str]  # "source → reference", shown on hover

    def ids(self, side: str) -> list[list[int]]:
        """Each sentence's ids on one side."""
        return self.sources if side == "encoder" else self.targets

    def tokens(self, side: str) -> list[list[str]]:
        """Each sentence's pieces on one side."""
        return self.source_tokens if side == "encoder" else self.target_tokens


@dataclass
class Projection:
    """Every point of the projected layers: its coordinates, representation and labels."""

    model: str  # the model's name, as the page and the command show it
    side: str  # "encoder" or "decoder"
    method: str  # one of METHODS
    layers: list[int]  # the layers projected (0 = the stack's input)
    coords: np.ndarray  # (N, K) float32
    vectors: np.ndarray  # (N, D) float16: each point's representation
    sentence: np.ndarray  # (N,) int32: the sentence's index in ``texts``
    position: np.ndarray  # (N,) int32: the piece's position in its sentence
    layer: np.ndarray  # (N,) int32
    tokens: list[str]  # N pieces
    texts: list[str]  # each sentence, "source → reference"
    explained: list[float] = field(default_factory=list)  # PCA: K shares of the variance

    @property
    def dims(self) -> int:
        """K, the projected dimensions."""
        return int(self.coords.shape[1])

    def point(self, i: int) -> dict:
        """One point as the command prints it."""
        axes = dict(zip("xyz", (round(float(v), 6) for v in self.coords[i])))
        return {
            "side": self.side,
            "layer": int(self.layer[i]),
            "sentence": int(self.sentence[i]),
            "position": int(self.position[i]),
            "token": self.tokens[i],
            **axes,
        }

    def rows(self) -> list[dict]:
        """Every point, as the command prints it."""
        return [self.point(i) for i in range(len(self.tokens))]

    def summary(self) -> dict:
        """The command's last line: what was projected and how much variance PCA keeps."""
        return {
            "model": self.model,
            "side": self.side,
            "method": self.method,
            "dims": self.dims,
            "layers": self.layers,
            "sentences": len(self.texts),
            "points": len(self.tokens),
            "explained_variance": [round(v, 6) for v in self.explained],
        }

    def index_of(self, sentence: int, position: int, layer: int) -> int | None:
        """The point of this sentence, position and layer, or None."""
        hit = np.flatnonzero(
            (self.sentence == sentence) & (self.position == position) & (self.layer == layer)
        )
        return int(hit[0]) if hit.size else None

    def neighbours(self, index: int, k: int = NEIGHBOURS) -> list[dict]:
        """The ``k`` points of the same layer most similar to point ``index`` (cosine in the
        model's width), most similar first, each with its ``similarity``."""
        same = np.flatnonzero(
            (self.layer == self.layer[index]) & (np.arange(len(self.tokens)) != index)
        )
        if not same.size:
            return []
        x = torch.from_numpy(self.vectors[same]).float()  # (M, D)
        q = torch.from_numpy(self.vectors[index]).float()  # (D,)
        sims = torch.nn.functional.cosine_similarity(x, q[None], dim=-1)  # (M,)
        best = sims.topk(min(k, same.size))
        return [
            {**self.point(int(same[j])), "similarity": round(float(s), 6), "index": int(same[j])}
            for s, j in zip(best.values, best.indices)
        ]


# ----------------------------------------------------------------------------- sentences


def own_translations(lm, sources: list[list[int]], target_lang=None) -> list[list[int]]:
    """The model's greedy translation of each source, as output ids ending with its end
    token (a translation cut at ``max_output`` gets one)."""
    outs = []
    for row in batched.greedy_outputs(lm, sources, target_lang, tick=lambda _: check_time()):
        row = [int(i) for i in row]
        cut = row[: row.index(lm.eos_id)] if lm.eos_id in row else row
        outs.append([*cut, lm.eos_id])
    return outs


def sentences_of(
    lm, n: int = SENTENCES, source: str | None = None, target_lang=None, reads: str = READS[0]
) -> Sentences:
    """The first ``n`` validation sentences of the model's split (DataError when they cannot
    be rebuilt), each with what the decoder reads: its first reference (``reads``
    "reference") or the model's own greedy translation ("translation")."""
    if reads not in READS:
        raise ProjectionError(f"the decoder reads one of {', '.join(READS)} (got {reads!r})")
    cfg, carried = validation_source(lm.meta, source)
    sample = validation_sample(lm, cfg, n, target_lang, carried)
    firsts = np.cumsum([0, *(len(refs) for refs in sample.references)])[:-1]
    sources = [list(map(int, ids)) for ids in sample.src_ids]
    if reads == "translation":
        outs = own_translations(lm, sources, target_lang)
    else:
        outs = [list(sample.encoded[i][1]) for i in firsts]  # each ends with the end token
    targets = [lm.decoder_inputs(o) for o in outs]  # the start token + the output
    src_tokens = [lm.source_tokens(s) for s in sources]
    tgt_tokens = [lm.target_tokens(t) for t in targets]
    read = (
        [" ".join(lm.target_words(o)) for o in outs]
        if reads == "translation"
        else [" ".join(ref[0]) for ref in sample.references]
    )
    texts = [f"{' '.join(src)} → {out}" for src, out in zip(sample.sources, read)]
    if "decoder" not in sides(lm):  # it reads the sentence alone
        texts = [" ".join(src) for src in sample.sources]
    return Sentences(sources, targets, src_tokens, tgt_tokens, texts)


# ----------------------------------------------------------------------------- representations


def sides(lm) -> tuple[str, ...]:
    """The stacks whose tokens have states in this model: both, or the encoder's alone where
    its capability row refuses "decoder_side" (a masked LM reads one sentence with one stack)."""
    return SIDES[:1] if lm.supports("decoder_side") else SIDES


def layer_count(lm, side: str) -> int:
    """L, the layers of one stack (the points have layers 0..L)."""
    return lm.cfg.num_encoder_layers if side == "encoder" else lm.cfg.num_decoder_layers


def _padded(rows: Sequence[Sequence[int]], pad: int, device) -> torch.Tensor:
    """(B, longest) ids, ``pad`` after each row."""
    tensors = [torch.tensor(r, dtype=torch.long) for r in rows]
    return torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True, padding_value=pad).to(device)


def projection_bytes(points: int, width: int, dims: int) -> int:
    """What a projection of ``points`` points of width D holds: float16 vectors, float32
    coordinates, three int32 labels and a token each."""
    return points * (2 * width + 4 * dims + 12 + budget.TOKEN_BYTES)


def check_size(points: int, width: int, dims: int, sentences: int, layers: int) -> None:
    """ProjectionError when the projection would pass ``budget.PROJECTION_BYTES``."""
    need = projection_bytes(points, width, dims)
    if need <= budget.PROJECTION_BYTES:
        return
    fits = int(sentences * budget.PROJECTION_BYTES / need)
    more = " or one layer instead of all" if layers > 1 else ""
    raise ProjectionError(
        f"{points:,} points of width {width} would take {budget.size_words(need)}, more than "
        f"the {budget.size_words(budget.PROJECTION_BYTES)} one projection may hold: choose at "
        f"most {fits} sentences{more}."
    )


@torch.no_grad()
def representations(
    lm, sentences: Sentences, side: str, layers: Sequence[int], progress: ProgressFn | None = None
) -> tuple[torch.Tensor, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(vectors (N, D) float32, sentence, position, layer (N,) int32, N tokens): every piece of
    every sentence at each of ``layers``, layer by layer, sentence by sentence."""
    n, device = len(sentences.sources), lm.device
    per_layer: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    with lm.evaluating():
        for start in range(0, n, BATCH):
            src = _padded(sentences.sources[start : start + BATCH], lm.pad_id, device)  # (B, S)
            tgt_in = _padded(sentences.targets[start : start + BATCH], lm.pad_id, device)
            states = lm.stream(src, tgt_in, side)  # L + 1 x (B, S|T, D)
            lengths = [len(r) for r in sentences.ids(side)[start : start + BATCH]]
            for layer in layers:
                per_layer[layer] += [states[layer][b, :m].cpu() for b, m in enumerate(lengths)]
            checked(progress)(min(start + BATCH, n) / n, f"reading {n} sentences")
    lengths = [len(r) for r in sentences.ids(side)]
    one = np.concatenate([np.full(m, i, dtype=np.int32) for i, m in enumerate(lengths)])
    spots = np.concatenate([np.arange(m, dtype=np.int32) for m in lengths])
    tokens = [t for row in sentences.tokens(side) for t in row]
    vectors = torch.cat([torch.cat(per_layer[layer]) for layer in layers]).float()  # (N, D)
    marks = np.concatenate([np.full(len(one), layer, dtype=np.int32) for layer in layers])
    return (
        vectors,
        np.tile(one, len(layers)),
        np.tile(spots, len(layers)),
        marks,
        tokens * len(layers),
    )


# ----------------------------------------------------------------------------- projecting


def pca(x: torch.Tensor, dims: int) -> tuple[np.ndarray, list[float]]:
    """(N, K) coordinates of the points (N, D) on their first K principal components, and the
    share of the variance each explains; each component's largest loading is positive."""
    centred = x - x.mean(dim=0, keepdim=True)  # (N, D)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)  # (r,), (r, D)
    vh = vh[:dims]  # (K, D)
    signs = torch.sign(vh.gather(1, vh.abs().argmax(dim=1, keepdim=True)))  # (K, 1)
    vh = vh * torch.where(signs == 0, torch.ones_like(signs), signs)
    coords = centred @ vh.T  # (N, K)
    variance = s.square()
    shares = (variance[:dims] / variance.sum().clamp(min=1e-12)).tolist()
    return coords.cpu().numpy().astype(np.float32), shares


def umap_available() -> bool:
    """Whether ``umap-learn`` is installed here (found, not imported: importing it and numba
    takes seconds, paid only when UMAP is asked for)."""
    return importlib.util.find_spec("umap") is not None


class EpochChecks(io.TextIOBase):
    """Where UMAP's progress bar writes at every epoch of its layout: nothing is shown, and
    the heavy slot's deadline is checked (TimeLimit out of the fit past it)."""

    def write(self, text: str) -> int:
        check_time()
        return len(text)


KNN_BYTES = 16 * 2**20  # the distances one chunk of the neighbour search holds (float64)


def neighbours(x: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """((N, k) indices, (N, k) Euclidean distances) of each point's k nearest, itself first,
    exact, chunk by chunk of rows, each checking the heavy slot's deadline: what UMAP's own
    search (one call, or NN-descent past 4,096 points) did where no check could stop it.
    Memory: the points in float64 (at most 4 x budget.PROJECTION_BYTES of float16 vectors) and
    a chunk's distances and their product, about 3 x KNN_BYTES."""
    x = x.detach().cpu().double()
    sq = (x * x).sum(1)  # (N,)
    rows = max(1, KNN_BYTES // (8 * len(x)))
    idx, d2 = [], []
    for start in range(0, len(x), rows):
        check_time()
        block = x[start : start + rows]  # (R, D)
        d = sq[start : start + rows, None] - 2 * block @ x.T + sq[None]  # (R, N) squared
        d[torch.arange(len(block)), torch.arange(start, start + len(block))] = -1.0  # itself
        nearest = d.topk(k, largest=False)  # (R, k)
        idx.append(nearest.indices)
        d2.append(nearest.values)
    dist = torch.cat(d2).clamp(min=0).sqrt()  # (N, k), float64 against the expansion's loss
    return torch.cat(idx).numpy().astype(np.int32), dist.numpy().astype(np.float32)


def umap_coords(x: torch.Tensor, dims: int) -> np.ndarray:
    """(N, K) UMAP coordinates of the points (N, D), seeded (ProjectionError without umap);
    the neighbours found here (``neighbours``: the deadline checked), the layout's epochs
    checked through its progress bar (``EpochChecks``)."""
    try:
        import umap
    except ImportError as e:
        raise ProjectionError(
            "UMAP needs the umap-learn package (pip install umap-learn); PCA works without it."
        ) from e
    if x.size(0) <= dims + 1:
        raise ProjectionError(f"UMAP needs more than {dims + 1} points; choose PCA.")
    k = min(15, x.size(0) - 1)
    reducer = umap.UMAP(
        n_components=dims,
        random_state=0,
        n_neighbors=k,
        precomputed_knn=(*neighbours(x, k), None),
        tqdm_kwds={"disable": False, "file": EpochChecks(), "mininterval": 0, "miniters": 1},
    )
    with warnings.catch_warnings():  # "n_jobs overridden by setting random_state": wanted;
        warnings.filterwarnings("ignore", message="n_jobs value", category=UserWarning)
        warnings.filterwarnings("ignore", message="precomputed_knn", category=UserWarning)
        return reducer.fit_transform(x.cpu().numpy()).astype(np.float32)  # (no transform later)


def check_choice(side: str, method: str, dims: int, sentences: int) -> None:
    """ProjectionError for a side, method, dimension or sentence count out of range."""
    if side not in SIDES:
        raise ProjectionError(f"The side is one of {', '.join(SIDES)}, not {side!r}.")
    if method not in METHODS:
        raise ProjectionError(f"The method is one of {', '.join(METHODS)}, not {method!r}.")
    if dims not in DIMS:
        raise ProjectionError("The projection has 2 or 3 dimensions.")
    if not 1 <= sentences <= MAX_SENTENCES:
        raise ProjectionError(f"Project between 1 and {MAX_SENTENCES} sentences.")


def project(
    lm,
    side: str = "encoder",
    layer: int = ALL_LAYERS,
    method: str = "pca",
    dims: int = 2,
    sentences: int | Sentences = SENTENCES,
    source: str | None = None,
    target_lang: str | None = None,
    progress: ProgressFn | None = None,
    name: str = "",
    reads: str = READS[0],
) -> Projection:
    """Project one stack's token representations (``layer``, or ALL_LAYERS) of the first
    ``sentences`` validation sentences (or of these Sentences, already read by
    ``sentences_of``), the decoder reading a reference or the model's own translation
    (``reads``); the size is checked before anything is computed."""
    count = len(sentences.texts) if isinstance(sentences, Sentences) else sentences
    check_choice(side, method, dims, count)
    if side == "decoder" and (problem := lm.supports("decoder_side")):
        raise ProjectionError(problem)
    top = layer_count(lm, side)
    if layer != ALL_LAYERS and not 0 <= layer <= top:
        raise ProjectionError(f"The {side} has layers 0 (its input) to {top}, not {layer}.")
    layers = list(range(top + 1)) if layer == ALL_LAYERS else [layer]
    if not isinstance(sentences, Sentences):
        if progress:
            progress(0.0, "rebuilding the validation sentences")
        sentences = sentences_of(lm, count, source, target_lang, reads)
    points = len(layers) * sum(len(r) for r in sentences.ids(side))
    check_size(points, lm.cfg.d_model, dims, len(sentences.texts), len(layers))
    x, sentence, position, marks, tokens = representations(lm, sentences, side, layers, progress)
    if progress:
        progress(1.0, f"projecting {points:,} points with {METHOD_NAMES[method]}")
    check_time()  # not begun past it; UMAP's layout checks it at every epoch (EpochChecks)
    if method == "pca":
        coords, explained = pca(x.to(next(lm.model.parameters()).device), dims)
    else:
        coords, explained = umap_coords(x, dims), []
    return Projection(
        name, side, method, layers, coords, x.numpy().astype(np.float16), sentence, position,
        marks, tokens, sentences.texts, explained,
    )  # fmt: skip
