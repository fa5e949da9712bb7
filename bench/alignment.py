"""Word alignment: the shipped model's attention against a statistical aligner, by AER.

    python bench/alignment.py [--checkpoint checkpoints/fra-eng-small.pt] [--reverse FR_EN_CK]
        [--eflomal PATH] [--eflomal-runs 3] [--train-pairs N] [--pairs 500] [--repeats 5]
        [--write-reference]

Part 0, on the dev gold set (100 validation pairs): the cut of the both-ways reading
(``extract.BOTH_WAYS``) chosen over the three shipped models. Then on each gold set (the
shipped one, and the held-out Tatoeba pairs where fra-eng.zip is here): part 1, every layer x
head x mode of the model (AWO and AWI), the best reader first, the best and a supervised head
read both ways, then the readers beyond one head: attribution methods, the stacks' states
(SimAlign), and with ``--reverse`` both directions symmetrised (by argmax and both ways).
Part 2: eflomal (Östling & Tiedemann 2016; GPLv3, so it runs here as an external program and is
never imported by the app: ``pip install eflomal`` in any environment and pass ``--eflomal
path/to/eflomal-align``, or have it on PATH) aligns the model's own training pairs with the
gold pairs appended, unsupervised, as is usual; the gold part is scored forward, reverse,
intersected, united and grow-diag-final-and, in each of ``--eflomal-runs`` runs (a sampler: its
runs differ; the median run is printed and ``--write-reference`` keeps its figure for the
page). Part 3: the time of the full AER grid over ``--pairs`` pairs (the shipped set
repeated), medians.

Needs fra-eng.zip (FRA_ENG_ZIP, else ../shared/data/fra-eng.zip) for the dev and held-out
sets and part 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import torch
from common import ROOT, corpus_path, median

from core.alignment.aer import combinations, score
from core.alignment.both_ways import best_aer_by_cut, chosen_cut
from core.alignment.eflomal_teacher import run_eflomal
from core.alignment.extract import BOTH_WAYS, WHOLE, Reader, reads_whole
from core.alignment.from_attribution import attribution_scores
from core.alignment.gold import GOLD_DIR, GoldError, studio_gold
from core.alignment.grid import alignment_grid
from core.alignment.held_out import DEV, held_out_gold
from core.alignment.similarity import similarity_scores
from core.alignment.symmetrised import reader_name, symmetrised
from core.attention.head_stats import supervised_head
from core.corpus.splits import load_splits
from core.model.checkpoints import trained_data
from core.model.opened import open_model

SHIPPED = ("fra-eng-small.pt", "fra-eng-small-aligned.pt", "fr-en-small-aligned.pt")
REFERENCES = {  # the page shows these figures beside the model's
    "shipped gold set": GOLD_DIR / "reference.json",
    "held-out Tatoeba set": GOLD_DIR / "tatoeba-test.reference.json",
}


def model_grid(lm, pairs, gold) -> None:
    """Part 1: the model's readers, best first."""
    grid = alignment_grid(lm, pairs, gold)
    rows = sorted(grid.rows, key=lambda r: (r.aer, -r.precision))
    print(f"model: {len(rows)} readers on {len(pairs)} gold pairs ({grid.seconds:.2f} s)")
    for r in rows[:8]:
        print(
            f"  layer {r.layer!s:>3} head {r.head:>4} {r.mode}: "
            f"AER {r.aer:.3f}  P {r.precision:.3f}  R {r.recall:.3f}"
        )
    worst = rows[-1]
    print(f"  ... worst: layer {worst.layer} head {worst.head} {worst.mode}: AER {worst.aer:.3f}")
    methods = ("alti", "integrated-gradients", "rollout", "norm", "value-zeroing", "grad-input")
    for method in methods:
        r = attribution_scores(lm, pairs, gold, method)
        print(f"  attribution {method:>20} awo: AER {r['aer']:.3f}  P {r['precision']:.3f}")
    for r in similarity_scores(lm, pairs, gold)[:3]:
        print(
            f"  states: encoder {r.encoder_layer} x decoder {r.decoder_layer} {r.mode} "
            f"{r.method}: AER {r.aer:.3f}  P {r.precision:.3f}  R {r.recall:.3f}"
        )


def read_both_ways(lm, pairs, gold) -> None:
    """Part 1: the best reader read both ways, and the supervised head (in the mode it was
    trained in) by argmax and both ways."""
    best = alignment_grid(lm, pairs, gold, both_ways=True).best
    print(
        f"  both ways (cut {BOTH_WAYS}): best {reader_name(best)}: AER {best.aer:.3f}  "
        f"P {best.precision:.3f}  R {best.recall:.3f}"
    )
    found = supervised_head(lm.meta)
    if found is None:
        return
    head = [Reader(found[0], found[1], WHOLE if reads_whole(lm) else "awo")]
    for ways in (False, True):
        r = alignment_grid(lm, pairs, gold, head, both_ways=ways).rows[0]
        print(
            f"  supervised head, {reader_name(r)}{', both ways' if ways else ''}: "
            f"AER {r.aer:.3f}  P {r.precision:.3f}  R {r.recall:.3f}"
        )


def chosen_on_dev(pairs, gold) -> None:
    """Part 0: every cut's AER of the shipped models' best readers on the dev set, and the
    cut chosen (the lowest mean)."""
    tables = []
    for name in SHIPPED:
        tables.append(best_aer_by_cut(open_model(ROOT / "checkpoints" / name), pairs, gold))
        print(f"  {name:26s} " + " ".join(f"{c}: {a:.3f}" for c, a in tables[-1].items()))
    cut, means = chosen_cut(tables)
    print(f"  {'mean':26s} " + " ".join(f"{c}: {a:.3f}" for c, a in means.items()))
    print(f"  chosen: {cut} (extract.BOTH_WAYS = {BOTH_WAYS})")


def both_directions(lm, reverse, pairs, gold) -> None:
    """Part 1, with a model of the opposite direction: both best readers, combined (by
    argmax, then both ways)."""
    rows = symmetrised(lm, reverse, pairs, gold) + symmetrised(lm, reverse, pairs, gold, None, True)
    for r in rows:
        print(
            f"  both directions, {r['combination']:>20}: AER {r['aer']:.3f}  "
            f"P {r['precision']:.3f}  R {r['recall']:.3f}"
            f"  ({r['forward_reader']} / {r['reverse_reader']})"
        )


def statistical(program: str, lm, pairs, gold, args, name: str) -> dict:
    """Part 2: eflomal on the training pairs + the gold pairs, the gold part scored, ``args.
    eflomal_runs`` times (a sampler: every run differs); the median run's figures printed and
    its grow-diag-final-and figure returned as the page's reference (a dict)."""
    corpus_path()
    train = load_splits(trained_data(lm.meta)).train.pairs[: args.train_pairs]
    sizes = [(len(s), len(t)) for s, t in pairs]
    names = {"forward": "forward (en->fr)", "reverse": "reverse (fr->en)"}
    runs, start = [], time.perf_counter()
    for _ in range(args.eflomal_runs):
        fwd, rev = run_eflomal(program, [*train, *pairs])  # the studio's own run of eflomal
        fwd, rev = fwd[-len(pairs) :], rev[-len(pairs) :]
        kinds = {names.get(k, k): v for k, v in combinations(fwd, rev, sizes).items()}
        runs.append({kind: score(links, gold) for kind, links in kinds.items()})
    seconds = (time.perf_counter() - start) / len(runs)
    runs.sort(key=lambda r: r["grow-diag-final-and"].aer)
    print(
        f"\neflomal, {len(train):,} training pairs + {len(pairs)} gold pairs, {len(runs)} runs "
        f"({seconds:.0f} s each); grow-diag-final-and: "
        + ", ".join(f"{r['grow-diag-final-and'].aer:.3f}" for r in runs)
        + "; the median run:"
    )
    middle = runs[(len(runs) - 1) // 2]
    for kind, s in middle.items():
        print(f"  {kind:22s} AER {s.aer:.3f}  P {s.precision:.3f}  R {s.recall:.3f}")
    best = middle["grow-diag-final-and"]
    return {
        "aligner": "eflomal (grow-diag-final-and)",
        "aer": round(best.aer, 4),
        "precision": round(best.precision, 4),
        "recall": round(best.recall, 4),
        "pairs": len(pairs),
        "how": f"eflomal --model 3 on {len(train):,} training pairs of the shipped model's "
        f"split with the {name}'s {len(pairs)} pairs appended; both directions symmetrised; "
        f"the median of {len(runs)} runs (bench/alignment.py)",
    }


def gold_sets() -> dict:
    """{name: (pairs, gold)}: the shipped set, and the held-out and dev ones where their corpus
    is here."""
    sets = {"shipped gold set": studio_gold()}
    try:
        sets["held-out Tatoeba set"] = held_out_gold(corpus_path())
        sets["dev set"] = held_out_gold(corpus_path(), DEV)
    except (GoldError, SystemExit) as e:
        print(f"held-out gold set skipped: {e}")
    return sets


def grid_speed(lm, pairs, gold, n: int, repeats: int) -> None:
    """Part 3: seconds of the full grid over n pairs."""
    k = -(-n // len(pairs))
    many, many_gold = (pairs * k)[:n], (gold * k)[:n]
    runs = [alignment_grid(lm, many, many_gold).seconds for _ in range(repeats)]
    print(
        f"\nfull grid (every layer x head x mode), {n} pairs: median {median(runs):.2f} s "
        f"(runs {', '.join(f'{r:.2f}' for r in runs)}; goal < 5 s)"
    )


def main() -> None:
    """Print the model's AER grid, the statistical aligner's AER and the grid's speed."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "fra-eng-small.pt"))
    p.add_argument("--reverse", help="a French-to-English model, to symmetrise with")
    p.add_argument("--eflomal", default=shutil.which("eflomal-align"))
    p.add_argument("--train-pairs", type=int, default=200_000)
    p.add_argument("--eflomal-runs", type=int, default=3, help="a sampler: its median run")
    p.add_argument("--pairs", type=int, default=500)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--write-reference", action="store_true", help="store eflomal's figure")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    lm = open_model(args.checkpoint)
    reverse = open_model(args.reverse) if args.reverse else None
    sets = gold_sets()
    if "dev set" in sets:
        print("=== the both-ways cut, on the dev set ===")
        chosen_on_dev(*sets.pop("dev set"))
    for name, (pairs, gold) in sets.items():
        print(f"\n=== {name} ({len(pairs)} pairs) ===")
        model_grid(lm, pairs, gold)
        read_both_ways(lm, pairs, gold)
        if reverse is not None:
            read_both_ways(reverse, pairs, gold)
        if reverse is not None:
            both_directions(lm, reverse, pairs, gold)
        if not args.eflomal:
            print("\neflomal-align not found: pip install eflomal (GPLv3) and pass --eflomal")
            continue
        reference = statistical(args.eflomal, lm, pairs, gold, args, name)
        if args.write_reference:
            path = REFERENCES[name]
            path.write_text(json.dumps(reference, indent=1) + "\n", encoding="utf-8")
            print(f"  written to {path.relative_to(ROOT)}")
    pairs, gold = studio_gold()
    grid_speed(lm, pairs, gold, args.pairs, args.repeats)


if __name__ == "__main__":
    main()
