"""The types a config dataclass's fields must hold, checked in words (one checker for all)."""

from __future__ import annotations

from dataclasses import fields

FIELD_TYPES = {  # a config field's annotation -> (accepted Python types, the words for it)
    "int": ((int,), "a whole number"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
    "str": ((str,), "text"),
}


def type_problems(config) -> list[str]:
    """'<field> must be <type> (got ...)' for each field of a config dataclass of the wrong type.

    A ``list[str]`` field must be a list of sentences.
    """
    problems = []
    for f in fields(config):
        value, annotation = getattr(config, f.name), str(f.type)
        if annotation.startswith("list"):
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                problems.append(f"{f.name} must be a list of sentences (got {value!r})")
            continue
        types, words = FIELD_TYPES[annotation]
        if not isinstance(value, types) or (isinstance(value, bool) and annotation != "bool"):
            problems.append(f"{f.name} must be {words} (got {value!r})")
    return problems


def too_large(config, limits: dict[str, float]) -> list[str]:
    """'<field> must be at most <limit>' for each field above its limit (what a machine holds)."""
    return [
        f"{name} must be at most {limit:,} (got {getattr(config, name)})"
        for name, limit in limits.items()
        if getattr(config, name) > limit
    ]


def flag_help(comment: str, default, most=None, choices: tuple = (), preset: str = "") -> str:
    """A setting flag's help: the field's comment, its default (``preset``'s, when named), and
    the values it takes: one of ``choices``, or at most ``most`` (the limit ``too_large``
    checks); %-escaped for argparse."""
    shown = "; ".join(map(str, default)) if isinstance(default, list) else default
    allowed = f"one of {', '.join(map(str, choices))}" if choices else ""
    if most is not None and not choices:
        allowed = f"at most {most:,}"
    words = [comment, f"default: {shown}" + (f" ({preset} preset)" if preset else ""), allowed]
    return "; ".join(w for w in words if w).replace("%", "%%")
