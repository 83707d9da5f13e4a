"""The checked mode (``check_values=True``): value rules on offsets, rows and first columns, in order.

1. ``offsets[0] >= 0``; 2. offsets non-decreasing; 3. ``offsets[bs] <= len(flat_in)``; 4. every row in ``[0, R)``;
5. rows distinct; 6. with ``start_cols``: every first column ``>= 0``. Written once against ``xp`` (numpy, or
jax.numpy under ``jit`` with checkify), so every frontend reports the same first violation. A window at or past the
width is not malformed: the operation truncates there.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from shared_spec import errors


class ValueCheck(NamedTuple):
    """One rule: ``ok`` is a boolean scalar; ``template`` takes ``fields``."""

    ok: Any
    template: str
    fields: dict


def value_checks(xp, offsets, rows, n_tokens: int, n_rows: int, start_cols=None) -> list[ValueCheck]:
    """Every rule of the checked mode, in order, evaluated with ``xp``.

    ``offsets`` has length ``bs + 1``, ``rows`` and ``start_cols`` (None: no
    windowed write) length ``bs`` (the argument checks have passed). Fields are
    scalars of ``xp``; the first check whose ``ok`` is False is the error to raise.
    """
    bs = rows.shape[0]
    checks = [ValueCheck(offsets[0] >= 0, errors.OFFSETS_START, {"value": offsets[0]})]
    if bs > 0:
        falls = offsets[1:] < offsets[:-1]
        i = xp.argmax(falls)
        checks.append(
            ValueCheck(
                ~xp.any(falls),
                errors.OFFSETS_DECREASING,
                {"i": i, "a": offsets[i], "j": i + 1, "b": offsets[i + 1]},
            )
        )
    checks.append(ValueCheck(offsets[bs] <= n_tokens, errors.OFFSETS_END, {"n": n_tokens, "value": offsets[bs]}))
    if bs > 0:
        outside = (rows < 0) | (rows >= n_rows)
        i = xp.argmax(outside)
        checks.append(
            ValueCheck(~xp.any(outside), errors.ROW_OUT_OF_RANGE, {"i": i, "row": rows[i], "rows": n_rows})
        )
        # A stable sort keeps equal rows in call order, so the first position of
        # a value in the sorted rows holds its earliest index in the call.
        order = xp.argsort(rows, stable=True)
        ordered = rows[order]
        first = xp.searchsorted(ordered, ordered, side="left")
        repeated = xp.arange(bs) != first
        k = xp.argmin(xp.where(repeated, order, bs))
        checks.append(
            ValueCheck(
                ~xp.any(repeated),
                errors.ROW_REPEATED,
                {"j": order[k], "row": ordered[k], "i": order[first[k]]},
            )
        )
        if start_cols is not None:
            behind = start_cols < 0
            i = xp.argmax(behind)
            checks.append(ValueCheck(~xp.any(behind), errors.START_COLS_NEGATIVE, {"i": i, "value": start_cols[i]}))
    return checks


def raise_first_value_error(offsets: np.ndarray, rows: np.ndarray, n_tokens: int, n_rows: int, start_cols=None) -> None:
    """Raise the checked mode's first violation on host (numpy) values."""
    start_cols = None if start_cols is None else np.asarray(start_cols)
    for check in value_checks(np, np.asarray(offsets), np.asarray(rows), n_tokens, n_rows, start_cols):
        if not bool(check.ok):
            raise errors.value_error(check.template, **{k: int(v) for k, v in check.fields.items()})
