"""Shape rules: which broadcast form an operand takes, and the shape of its gradient.

A broadcast form maps an operand's shape to an "expanded" shape of the reference's rank
(1 where the operand is broadcast). The C runtime (templates/runtime.c.j2) applies the same
rules to split a call into kernel calls; Python uses them for its messages and output shapes.
"""

from __future__ import annotations

import math

from opgen.specs import LAYOUTS

FORM_RULES = {
    "per_channel": "1-D of the channel length",
    "per_tensor": "1-D of length 1",
    "trailing": "{reference}'s shape without its first dim",
    "numpy": "{reference}'s rank, each dim 1 or equal to {reference}'s",
    "single": "exactly one element (any shape)",
    "channel_count": "as many elements as {reference}'s dim 1 (1 if it has one dim or none)",
}


def channel_axis(rank: int, layout: str) -> int | None:
    """Index of the channel dim for a tensor of `rank` in `layout`, or None when it has none."""
    axis = LAYOUTS[layout]
    if axis < 0:
        return rank + axis if rank >= -axis else None
    return axis if rank > axis else None


def expand(form: str, shape: tuple[int, ...], reference: tuple[int, ...], layout: str) -> tuple[int, ...] | None:
    """The expanded shape of an operand of `shape` in `form`, or None if it does not fit."""
    rank = len(reference)
    axis = channel_axis(rank, layout)
    if form == "per_channel":
        if axis is None or shape != (reference[axis],):
            return None
        return tuple(reference[axis] if d == axis else 1 for d in range(rank))
    if form == "per_tensor":
        return (1,) * rank if shape == (1,) else None
    if form == "trailing":
        return (1, *shape) if rank >= 1 and shape == reference[1:] else None
    if form == "numpy":
        fits = len(shape) == rank and all(s in (1, r) for s, r in zip(shape, reference))
        return shape if fits else None
    if form == "single":
        return (1,) * rank if math.prod(shape) == 1 else None
    if form == "channel_count":
        channels = reference[axis] if axis is not None else 1
        if math.prod(shape) != channels:
            return None
        return tuple(channels if d == axis else 1 for d in range(rank))
    raise ValueError(f"unknown broadcast form {form!r}")


def reduced_shape(form: str, shape: tuple[int, ...], expanded: tuple[int, ...]) -> tuple[int, ...]:
    """Shape of the gradient of an operand in `form`: its own shape, or [C] for channel_count."""
    if form == "channel_count":
        return (math.prod(expanded),)
    return shape


def channel_dims(reference: tuple[int, ...], layout: str) -> tuple[int, int, int]:
    """(outer, channels, inner) of a tensor whose channel axis is given by `layout`."""
    axis = channel_axis(len(reference), layout)
    if axis is None:
        raise ValueError(f"a tensor of rank {len(reference)} has no channel axis in {layout}")
    return math.prod(reference[:axis]), reference[axis], math.prod(reference[axis + 1 :])


def line_axes(rank: int, axis: int, role: str) -> tuple[int, int]:
    """(first, last): the axes an along_axes op's lines run along, for its axis attribute's
    value `axis` (negative: from the last) and role ('axis': that one; 'begin_axis': from it to
    the last). ValueError when `axis` is not an axis of a tensor of `rank` dims."""
    if not -rank <= axis < rank:
        raise ValueError(f"{axis} is not an axis of a tensor of rank {rank}: it must be in {-rank}..{rank - 1}")
    first = axis + rank if axis < 0 else axis
    return first, first if role == "axis" else rank - 1


def axes_shape(reference: tuple[int, ...], first: int, last: int, kind: str) -> tuple[int, ...]:
    """The shape of an along_axes operand of `kind`: 'line' (the reference without the line's
    axes, one value per line), 'along' (the line's axes alone), else the reference's."""
    if kind == "line":
        return reference[:first] + reference[last + 1 :]
    if kind == "along":
        return reference[first : last + 1]
    return reference


def reduced_axes(rank: int, axes: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The axes an int list of role 'axes' names for a tensor of `rank` dims (negative: from the
    last), sorted. ValueError when one is not an axis of it, or two name the same axis."""
    seen: dict[int, int] = {}
    for value in axes:
        value = int(value)
        if not -rank <= value < rank:
            raise ValueError(f"{value} is not an axis of a tensor of rank {rank}: each must be in {-rank}..{rank - 1}")
        axis = value + rank if value < 0 else value
        if axis in seen:
            raise ValueError(
                f"names axis {axis} of a tensor of rank {rank} twice ({seen[axis]} and {value}): each at most once"
            )
        seen[axis] = value
    return tuple(sorted(seen))


def axes_reduced_shape(reference: tuple[int, ...], axes: tuple[int, ...], keep_dims: bool) -> tuple[int, ...]:
    """The shape of a line output of an op over the set `axes` (normalized): the reference's
    without them, or with 1 in their place when `keep_dims`."""
    return tuple(1 if d in axes else n for d, n in enumerate(reference) if keep_dims or d not in axes)


def axes_blocks(reference: tuple[int, ...], axes: tuple[int, ...]) -> list[tuple[int, bool]]:
    """The reference's dims as the driver sees them: dims of 1 dropped, neighbours of the same
    kind (reduced or kept) merged: (size, reduced) per block. The axes are one contiguous block
    (a line: outer, length, inner) when at most one block is reduced."""
    blocks: list[tuple[int, bool]] = []
    for d, size in enumerate(reference):
        if size == 1:
            continue
        if blocks and blocks[-1][1] == (d in axes):
            blocks[-1] = (blocks[-1][0] * size, d in axes)
        else:
            blocks.append((size, d in axes))
    return blocks
