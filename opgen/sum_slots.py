"""Where a block's code adds its sums' terms: the templates' one way to name a sum's slots.

A kernel keeps each sum s of a block in arrays named after it, `<s>_<suffix>`: a run of float
partial sums (`s_run`), double lanes (`s_lanes`), a group's sums (`s_group`) and so on. A block
adds the term of its lane `lane` to slot `offset + lane` of one of them. Which array depends
on the sum: a sum kept in float runs goes to the float array, the others (and every sum
summed again in the accumulation type) to the accumulation array.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class SumSlots:
    """The slots of one block: `<s>_<array>[offset + lane]`, or `<s>_<float_array>[...]` for a
    sum in float runs. Invariant: the suffixes are C identifier tails and `offset` a C
    expression of the block's first slot ("" for slot 0), all written by the templates."""

    array: str
    float_array: str
    offset: str = ""

    def name(self, sum_name: str, in_float_run: bool = False) -> str:
        """The array of `sum_name`'s slots."""
        return f"{sum_name}_{self.float_array if in_float_run else self.array}"

    def lane(self, sum_name: str, in_float_run: bool = False) -> str:
        """The slot of lane `lane` (the lane loop's variable)."""
        start = f"{self.offset} + " if self.offset else ""
        return f"{self.name(sum_name, in_float_run)}[{start}lane]"

    def first(self, sum_name: str, in_float_run: bool = False) -> str:
        """A pointer to the block's first slot (an offset with a sum or difference in it
        parenthesized: it is one term of the pointer's)."""
        offset = self.offset
        if any(operator in offset for operator in "+-"):
            offset = f"({offset})"
        return f"{self.name(sum_name, in_float_run)}{f' + {offset}' if offset else ''}"


def sum_slots(array: str, float_array: str | None = None, offset: str = "") -> SumSlots:
    """The templates' constructor: `float_array` defaults to `array` (one array for every sum)."""
    return SumSlots(array, float_array if float_array is not None else array, offset)
