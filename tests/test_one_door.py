"""Issue 65's goals as ratchets: each figure here may only go down, so work in parallel cannot
regress them. Each LIMIT is the count on the day the test was written (phase P0 of the plan);
a change that lowers a count lowers its LIMIT in the same commit. The goals are 0 branches on a
model's kind and 0 adapter imports outside ``core/model``, 0 twins, no adapter inheriting
from another and a door of at most 20 methods.

Source scans only (``ast``), and the model classes imported, never a model loaded.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import core.model

ROOT = Path(__file__).resolve().parent.parent


def sources(*folders: str, skip: tuple[str, ...] = ()) -> list[Path]:
    """Every ``.py`` file under the folders (relative to the repository), but those under
    ``skip``, in a stable order."""
    found = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(skip):
                found.append(path)
    return found


def by_place(entry: str) -> tuple[str, int]:
    """``path:line …`` sorted by path, then line as a number."""
    path, line = entry.split()[0].rsplit(":", 1)
    return path, int(line)


# ----------------------------------------------------------------------------- the door


def adapter_classes() -> dict[str, type]:
    """Every class under ``core/model`` that implements the door (a ``TranslationModel``
    subclass), by name; every module of the package imported, so a new adapter is found."""
    for info in pkgutil.iter_modules(core.model.__path__):
        importlib.import_module(f"core.model.{info.name}")
    from core.model.interface import TranslationModel

    found, todo = {}, [TranslationModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("core.model."):
                found[sub.__name__] = sub
                todo.append(sub)
    return found


def public_names(cls: type) -> set[str]:
    """The public names a class offers: ``dir`` and every annotated field along its MRO."""
    names = set(dir(cls))
    for base in cls.__mro__:
        names |= set(getattr(base, "__annotations__", {}))
    return {n for n in names if not n.startswith("_")}


def interface_names() -> set[str]:
    """Every public name of the door and of its adapters: what a ``getattr`` probe asks."""
    from core.model.interface import TranslationModel

    names = public_names(TranslationModel)
    for cls in adapter_classes().values():
        names |= public_names(cls)
    return names


# ----------------------------------------------------------------------------- kind branches

KIND_ATTRIBUTES = {"one_sequence", "stream_sides", "reads_prompt", "trained_here", "family"}
KIND_NAMES = {"SEQUENCE", "family_of", "STUDIO", "HUGGING_FACE", "LANGUAGE_MODEL", "MASKED_LM"}
DECLINED = {  # what a model of two stacks declines (core.model.one_sequence: one `raise`)
    "sequence_ids",
    "sequence_patterns",
    "sequence_heads",
    "sequence_spans",
    "first_step",
    "output_positions",
}


def kind_branches() -> list[str]:
    """Every place outside ``core/model`` (in ``core/**`` and ``pages/**``) that reads a
    model's kind or family, as ``path:line what``. The rule, one entry per AST node:

    1. an attribute read ``<x>.<name>`` (any receiver) of ``one_sequence``, ``stream_sides``,
       ``reads_prompt``, ``trained_here`` or ``family``;
    2. a name, bare or as an attribute (``opened.family_of``), loaded as ``SEQUENCE``,
       ``family_of``, ``STUDIO``, ``HUGGING_FACE``, ``LANGUAGE_MODEL`` or ``MASKED_LM``
       (imports and the definition itself are not reads);
    3. a probe ``getattr(<x>, "<name>", ...)`` whose literal name is a public name of the
       door or of an adapter (``mask_id``, ``template``: a name the door should declare);
    4. an attribute read of a method a model of two stacks declines (``DECLINED``:
       ``sequence_ids``/``_patterns``/``_heads``/``_spans``, ``first_step``,
       ``output_positions``).

    Not counted: data a model of any kind gives and callers iterate over or show, never
    branch on (``head_kinds``, ``kinds_words``, ``loss_words``, ``output_label``,
    ``view_key``, ``with_prompt``, ``start_ids``, ``loss_pairs``), and ``supports`` (the
    sanctioned question: a capability row).
    """
    probed = interface_names()
    found = []
    for path in sources("core", "pages", skip=("core/model/",)):
        for line, what in branches_in(path.read_text(), probed):
            found.append(f"{path.relative_to(ROOT).as_posix()}:{line} {what}")
    return sorted(found, key=by_place)


def branches_in(source: str, probed: set[str]) -> list[tuple[int, str]]:
    """(line, what) of each kind branch in one module's source (``kind_branches``' rule;
    ``probed``: the names a ``getattr`` probe may not ask for)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        what = None
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if node.attr in KIND_ATTRIBUTES | KIND_NAMES | DECLINED:
                what = f".{node.attr}"
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in KIND_NAMES:
                what = node.id
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in probed:
                what = f'getattr(…, "{name.value}")'
        if what:
            found.append((node.lineno, what))
    return sorted(found)


KIND_BRANCHES_LIMIT = 0  # may only go down (issue 65's goal: 0); P0 40, P1a 39, P4 35, the twins
# united, head roles asked of the capability table 18, opening sizes asked of the factory 9; the
# rows "template", "own_split", "decoder_side" and the door's token_weights 0


def test_kind_branches_outside_core_model_only_go_down():
    """Branches on a model's kind or family outside ``core/model`` (``kind_branches``' rule)
    are at most the count of phase P0; each phase of issue 65 lowers it, to 0."""
    found = kind_branches()
    assert len(found) <= KIND_BRANCHES_LIMIT, "\n".join(found)


def test_the_kind_branch_scan_finds_what_it_says():
    """Each clause of the rule finds its branch; imports, definitions and other probes are
    not branches."""
    source = (
        "from core.attention.kinds import SEQUENCE\n"
        "STUDIO = 'studio'\n"
        "if m.one_sequence: pass\n"
        "kind = SEQUENCE\n"
        "f = opened.family_of(path)\n"
        "t = getattr(lm, 'template', '')\n"
        "ids = m.sequence_ids(src, out)\n"
        "n = getattr(args, 'flag')\n"
        "k = m.head_kinds\n"
    )
    assert branches_in(source, {"template", "head_kinds"}) == [
        (3, ".one_sequence"),
        (4, "SEQUENCE"),
        (5, ".family_of"),
        (6, 'getattr(…, "template")'),
        (7, ".sequence_ids"),
    ]


# ----------------------------------------------------------------------------- adapter imports

GOAL_SEVEN = (  # issue 65 goal 7: what may read a model only through the door
    "core/attention",
    "core/attribution",
    "core/alignment",
    "core/measure",
    "core/figures",
    "core/runs",
    "core/training",
    "pages",
)
COMMANDS = (
    "train",
    "translate",
    "evaluate",
    "ablate",
    "checkpoint",
    "attribute",
    "align",
    "runs_table",
    "trajectories",
    "inside_head",
    "patch",
    "project",
    "export_tensorboard",
    "logit_attribution",
)
ADAPTER_MODULES = {
    f"core.model.{name}"
    for name in (
        "studio_model",
        "transformer",
        "blocks",
        "decode",
        "hf_model",
        "sites",
        "hf_folder",
        "hf_size",
        "hugging_face",
        "prompted",
        "prompted_decoding",
        "prompt",
        "masked",
        "lm_sites",
        "lm_heads",
        "lm_loading",
        "one_sequence",
    )
}


def imported_modules(tree: ast.AST) -> set[str]:
    """Every module an import statement of the tree names, at any depth: ``import a.b``,
    ``from a.b import c`` (both ``a.b`` and ``a.b.c``, for ``from core.model import decode``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def adapter_imports() -> list[str]:
    """``path module`` for each goal-7 source (``GOAL_SEVEN`` and the commands) that imports
    an adapter module (``ADAPTER_MODULES``) itself; what it reaches through another module
    is not counted (``lint-imports`` with indirect imports forbidden is the final check)."""
    paths = sources(*GOAL_SEVEN) + [ROOT / "core" / f"{c}.py" for c in COMMANDS]
    found = []
    for path in paths:
        for module in sorted(imported_modules(ast.parse(path.read_text())) & ADAPTER_MODULES):
            found.append(f"{path.relative_to(ROOT).as_posix()} {module}")
    return sorted(found)


ADAPTER_IMPORTS_LIMIT = 4  # (file, adapter module) pairs; may only go down (goal: 0); P0 47,
# P4 5, budget's decode import gone 4
ADAPTER_IMPORTING_FILES_LIMIT = 3  # files among them; may only go down (goal: 0); P0 40, P4 3


def test_adapter_imports_from_the_analysis_only_go_down():
    found = adapter_imports()
    files = {f.split()[0] for f in found}
    assert len(found) <= ADAPTER_IMPORTS_LIMIT, "\n".join(found)
    assert len(files) <= ADAPTER_IMPORTING_FILES_LIMIT, "\n".join(sorted(files))


def test_the_adapter_import_scan_finds_what_it_says():
    """``from core.model.decode import X`` and ``from core.model import decode`` both count."""
    tree = ast.parse("from core.model.decode import X\nfrom core.model import transformer\n")
    assert imported_modules(tree) & ADAPTER_MODULES == {
        "core.model.decode",
        "core.model.transformer",
    }


# ----------------------------------------------------------------------------- the contract

ABSTRACT_LIMIT = 20  # the door's abstract methods; may only go down (goal: at most 20); P0 34,
# P5 20 (the rest derived once on the door: core.model.interface, core.model.passes)
INHERITANCE_ALLOWED: set[tuple[str, str]] = set()  # (adapter, an adapter it inherits from);
# may only shrink (goal: none); P5: the Hugging Face adapters share core.model.hf_base.HFBase
STUDIO_NAMES_LIMIT = 92  # StudioModel's public names; may only go down (P0 94; P1a added the
# door's derived evaluating(), which took `evaluating` out of 11 adapter imports; P5 94;
# trained_here and stream_sides asked of the capability table instead 92)


def test_the_door_has_no_more_abstract_methods():
    from core.model.interface import TranslationModel

    assert len(TranslationModel.__abstractmethods__) <= ABSTRACT_LIMIT, sorted(
        TranslationModel.__abstractmethods__
    )


def test_no_adapter_inherits_from_another_but_those_allowed():
    """An adapter shares through the door (or a mixin), not by being another adapter."""
    adapters = adapter_classes()
    assert {"StudioModel", "HFModel", "PromptedModel", "MaskedModel"} <= set(adapters)
    pairs = {
        (name, base.__name__)
        for name, cls in adapters.items()
        for base in cls.__mro__[1:]
        if base.__name__ in adapters
    }
    assert pairs <= INHERITANCE_ALLOWED, f"new: {sorted(pairs - INHERITANCE_ALLOWED)}"
    gone = sorted(INHERITANCE_ALLOWED - pairs)
    assert not gone, f"gone: remove {gone} from INHERITANCE_ALLOWED"


def test_studio_model_offers_no_more_public_names():
    from core.model.studio_model import StudioModel

    names = sorted(n for n in dir(StudioModel) if not n.startswith("_"))
    assert len(names) <= STUDIO_NAMES_LIMIT, names


# ----------------------------------------------------------------------------- twins

# One computation written once per kind of model (issue 65's seven), each copy as (module,
# qualified name). No scan finds a new twin by itself: this list is the record, and a review
# that finds one adds it here rather than letting it pass unnamed.
TWINS: dict[str, tuple[tuple[str, str], ...]] = {}
TWINS_LIMIT = 0  # may only go down (issue 65's goal: 0); P4 united sub-layer terms, value
# zeroing, rollout and contributions (core/attribution/one_sequence.py deleted): 7 -> 3; one
# losses, one head importance (core.model.resumed, the capability "importance_bleu") and one
# q·k view (core.model.record.layer_heads) for every family: 3 -> 0


def defined(module: str, qualname: str) -> bool:
    """Whether ``module`` (its source, not imported) defines ``qualname`` (``f`` or ``C.f``)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        return False
    scope: list[ast.stmt] = ast.parse(path.read_text()).body
    for part in qualname.split("."):
        named = [
            n
            for n in scope
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and n.name == part
        ]
        if not named:
            return False
        scope = named[0].body
    return True


def test_twins_only_go_away():
    """The twins of issue 65 are all still there, and no new one is listed: a twin whose
    copies are one again is removed from ``TWINS`` (and ``TWINS_LIMIT`` lowered) in the
    commit that unites them, so the list stays the truth."""
    assert len(TWINS) <= TWINS_LIMIT, sorted(TWINS)
    for twin, copies in TWINS.items():
        gone = [c for c in copies if not defined(*c)]
        assert len(copies) - len(gone) >= 2, f"{twin} is one now: remove it from TWINS"
        assert not gone, f"{twin}: {gone} gone, list the copies left"


def test_the_twin_check_sees_methods_and_missing_names():
    assert defined("core.attention.head_measures", "Measures.losses")
    assert not defined("core.attention.head_measures", "Measures.no_such_method")
    assert not defined("core.no_such_module", "f")
