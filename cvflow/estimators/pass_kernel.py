"""The one pass's kernel (:mod:`cvflow.estimators.one_pass`): one block's contributions to the
terms, module-level so that it runs on any worker.

A block is every param of a group (or a kernel block of them at a time) on a run of the
store's splits. Each loss is applied once to the kernel block on all its splits; the plain
sums of every split (Σ_{i∈mask} w_i ℓ_i) come from batched matrix products (:class:`Layout`);
the change sums Σ_{i∈mask} |ℓ_i − ref_i| subtract, split by split, the reference each column
names (the full fit's, a shared reference handed in; or a fold fit's, from the block's own
losses or from ``carry``) into one buffer, and sum it with a matrix-vector product: no stack
of references (a float64 copy of the kernel block) is made.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .losses import apply_loss, get_loss

# the kernel's temporaries: the float64 losses of a sub-block of params on the task's splits.
# DESIGN CHOICE: 4 MB (about 60 params of 18 splits of 442 samples): measured on one block of
# the 10^6-fit cube, 1-8 MB take the same CPU, 16-32 MB 1.4-1.6x more (out of cache).
KERNEL_BYTES = 4 * 2**20


def _columns(plan, entries: list[tuple]):
    """The sums one split contributes: ``plain`` [(term, index, mask, weight, divisor)] are
    Σ_{i∈mask} w_i ℓ_i / divisor; ``change`` [(term, index, mask, ref position, divisor)] are
    Σ_{i∈mask} |ℓ_i − ref_i| / divisor; ``copies`` [((r, j), mask)]: oof rows."""
    member, analysis, w = plan.member, plan.analysis, plan.weights
    n_d = analysis.sum()
    plain, change, copies = [], [], []
    for entry in entries:
        if entry[0] == "full":
            plain.append(("full_risk", (), analysis, None, n_d))
            if plan.test.any():
                plain.append(("test_risk", (), plan.test, None, plan.test.sum()))
        elif entry[0] == "fold":
            _, r, j = entry
            d_weight = n_d if w is None else (analysis * w).sum()
            plain.append(("fold_sum", (r, j), member[r, j], w, 1.0))
            plain.append(("fold_risk", (r, j), analysis, w, d_weight))
            if "train" in plan.roles:
                plain.append(("train_sum", (r, j), ~member[r, j] & analysis, w, 1.0))
            if "change" in plan.roles:
                change.append(("fold_change", (r, j), analysis, plan.refs.index(("full",)), n_d))
            if "oof" in plan.roles:
                copies.append(((r, j), member[r, j]))
        else:
            _, r, t, l = entry
            rest = analysis & ~member[r, t]
            plain.append(("inner_sum", (r, t, l), member[r, l], None, 1.0))
            change.append(("inner_change", (r, t, l), rest, plan.refs.index(("fold", r, t)),
                           rest.sum()))
    return plain, change, copies


def _split_columns(plan, split: int):
    """:func:`_columns` of the store's split ``split``, made once per plan in a process (every
    param group's blocks share them; a few kB a split, its masks mostly views of the plan's):
    made again by each block, they took 5% of the pass's kernel (pairs 10^6-fit cube)."""
    made = plan.columns_made
    if split not in made:
        made[split] = _columns(plan, plan.entries.get(split, []))
    return made[split]


def _redo_bad_rows(out: np.ndarray, values: np.ndarray, masks: np.ndarray,
                   weights: np.ndarray) -> None:
    """Sum again, mask by mask, the rows of ``out`` (rows, C) that a non-finite value made
    non-finite in every column: ``out`` is ``values @ matrix`` (the weights within the masks, 0
    outside), and 0 · NaN and 0 · inf are NaN, so a row holding one is redone here
    (np_roles.masked_sum's rule: a value outside the mask never counts)."""
    bad = ~np.isfinite(out).all(axis=1)
    if bad.any():
        rows = values[bad]
        out[bad] = np.stack([(np.where(m, rows, 0.0) * w).sum(axis=1)
                             for m, w in zip(masks, weights)], axis=1)


@dataclass
class Layout:
    """A block's sums as arrays (see :func:`_columns`):

    - plain sums, every split's columns stacked for one batched matrix product (split, params,
      samples) @ (split, samples, columns): ``matrix`` (S, n, C) the weights within each
      column's mask (zero where a split has fewer columns), ``masks`` and ``weights`` (S, C, n)
      for the rows a non-finite value spoils, ``divisors`` (S, C), ``plain[s]`` the (term,
      index) of split s's columns;
    - change sums Σ |ℓ − ref|, split by split: ``change_masks`` (S, D, n) bool and
      ``change_vectors`` (S, D, n) the same as 0/1, ``change_at`` (S, D) the reference each
      column subtracts (a position in ``plan.refs``), ``change_divisors`` (S, D), ``change[s]``
      the (term, index) of split s's change columns;
    - ``copies[s]``: the oof copies [((r, j), mask)] of split s."""

    plain: list
    matrix: np.ndarray
    masks: np.ndarray
    weights: np.ndarray
    divisors: np.ndarray
    change: list
    change_masks: np.ndarray
    change_vectors: np.ndarray
    change_at: np.ndarray
    change_divisors: np.ndarray
    copies: list


def block_layout(plan, splits: list[int]) -> Layout:
    """The :class:`Layout` of a block of the store's splits ``splits``.

    DESIGN CHOICE: made again by each block, not kept per process for the param groups: kept,
    the 167 layouts of the 10^6-fit cube (~0.2 MB each) raised the pass's peak by 0.03 GiB."""
    n = plan.y.shape[0]
    per_split = [_split_columns(plan, s) for s in splits]
    width = max([len(plain) for plain, _, _ in per_split] + [1])
    masks = np.zeros((len(splits), width, n), dtype=bool)
    weights = np.ones((len(splits), width, n))
    divisors = np.ones((len(splits), width))
    depth = max([len(change) for _, change, _ in per_split] + [0])
    change_masks = np.zeros((len(splits), depth, n), dtype=bool)
    change_at = np.zeros((len(splits), depth), dtype=int)
    change_divisors = np.ones((len(splits), depth))
    for position, (plain, change, _) in enumerate(per_split):
        for c, (_, _, mask, weight, divisor) in enumerate(plain):
            masks[position, c] = mask
            if weight is not None:
                weights[position, c] = weight
            divisors[position, c] = divisor
        for c, (_, _, mask, at, divisor) in enumerate(change):
            change_masks[position, c] = mask
            change_at[position, c] = at
            change_divisors[position, c] = divisor
    return Layout([[(c[0], c[1]) for c in plain] for plain, _, _ in per_split],
                  np.where(masks, weights, 0.0).transpose(0, 2, 1).copy(), masks, weights,
                  divisors, [[(c[0], c[1]) for c in change] for _, change, _ in per_split],
                  change_masks, change_masks.astype(np.float64), change_at, change_divisors,
                  [copies for _, _, copies in per_split])


def _batched_sums(values: np.ndarray, matrix: np.ndarray, masks: np.ndarray,
                  weights: np.ndarray) -> np.ndarray:
    """(S, rows, n) @ (S, n, C) -> (S, rows, C), the rows a non-finite value spoils summed
    again mask by mask (:func:`_redo_bad_rows`)."""
    sums = np.empty(values.shape[:2] + matrix.shape[2:])
    with np.errstate(invalid="ignore", over="ignore"):      # the bad rows are redone below
        # a matrix-vector product a column: 2.5x faster than numpy's batched product with
        # a few columns (measured: 18 splits x 263 params x 442 samples, 2 columns)
        for c in range(matrix.shape[2]):
            sums[:, :, c] = np.matmul(values, matrix[:, :, c:c + 1])[:, :, 0]
    for position in np.flatnonzero(~np.isfinite(sums).all(axis=(1, 2))):
        _redo_bad_rows(sums[position], values[position], masks[position], weights[position])
    return sums


def block_sums(block: np.ndarray, plan, p0: int, splits: list[int], refs: dict | None = None,
               carry: dict | None = None, keep=()) -> tuple[list, dict]:
    """The contributions of one block of ``pred`` (params p0.., the store's splits ``splits``;
    shape (p, len(splits), n[, C])) to the terms, and the fold losses handed on.

    ``refs``: loss label -> the shared reference losses (p, len(plan.shared), n) of these
    params (the full fit's); ``carry``: fold split -> loss label -> its losses (p, n), for the
    fold splits the block's pair splits subtract that are not among ``splits`` (handed on by
    the block before, or read by this task); ``keep``: the fold splits whose losses (p, n)
    are handed on to the next block (among ``splits`` or in ``carry``).

    Returns (contributions, kept): the contributions a list of (loss label, term, index,
    values) that the pass's ``assemble`` writes at ``[p0:p0 + p, *index]``: an index of ints
    (a split's column; values (p,)) or of arrays (oof rows; values (p, m)); kept: split ->
    label -> losses (p, n) for ``keep``.

    The losses of a kernel block of params (about :data:`KERNEL_BYTES` of float64) are
    computed on all the block's splits at once, into one buffer laid out split by split
    (S, rows, n): each split's losses contiguous (from a strided (rows, n) view of the
    block's own (rows, S, n) layout, subtracting a reference took 2.7x the CPU).
    """
    block = np.asarray(block)
    carry = carry or {}
    rows_total, n = block.shape[0], plan.y.shape[0]
    rows = max(1, KERNEL_BYTES // max(1, 8 * n * len(splits) * 2))
    layout = block_layout(plan, splits)
    depth = layout.change_at.shape[1]
    position = {s: i for i, s in enumerate(splits)}
    shared = {a: i for i, a in enumerate(plan.shared)}
    kept: dict[int, dict] = {s: {} for s in keep}
    held = [(s, position[s]) for s in keep if s in position]
    buffers: dict[int, np.ndarray] = {}           # the losses (S, rows, n), by rows
    out = []
    for decl in plan.decls:
        label = decl.label
        plain = np.empty((len(splits), rows_total, layout.matrix.shape[2]))
        change = np.zeros((len(splits), depth, rows_total))
        # each change column's reference: (a position among the block's splits, None) or
        # (None, its losses (p, n)), resolved once for the block, and the steps that sum them
        sources = {(i, c): _source(plan, int(layout.change_at[i, c]), position, carry, shared,
                                   refs, label)
                   for i, columns in enumerate(layout.change) for c in range(len(columns))}
        steps = _change_steps(sources, depth)
        copies: dict[tuple, list] = {}
        for s in keep:
            kept[s][label] = carry[s][label] if s not in position else np.empty((rows_total, n))
        diff = np.empty((min(rows, rows_total), n)) if depth else None
        for q in range(0, rows_total, rows):
            sub = block[q:q + rows]
            m = len(sub)
            if m not in buffers:
                buffers[m] = np.empty((len(splits), m, n))
            losses = buffers[m]
            losses_into(decl, plan, sub, p0 + q, losses)
            plain[:, q:q + m] = _batched_sums(
                losses, layout.matrix, layout.masks, layout.weights) / layout.divisors[:, None]
            if depth:
                _change_sums(losses, steps, sources, layout, diff[:m], change[:, :, q:q + m], q)
            for s, i in held:
                kept[s][label][q:q + m] = losses[i]
            for i, split_copies in enumerate(layout.copies):
                for index, mask in split_copies:
                    copies.setdefault(index, []).append(losses[i][:, mask])
        change /= layout.change_divisors[:, :, None]
        for i, columns in enumerate(layout.plain):
            for c, (term, index) in enumerate(columns):
                out.append((label, term, index, plain[i, :, c]))
        for i, columns in enumerate(layout.change):
            for c, (term, index) in enumerate(columns):
                out.append((label, term, index, change[i, c]))
        for (r, j), pieces in copies.items():
            where = np.flatnonzero(plan.member[r, j])
            out.append((label, "oof_loss", (np.full(where.size, r), where),
                        np.concatenate(pieces)))
    return out, kept


# the built-in squared loss (losses_into computes it in place)
SQUARED = get_loss("squared")


def losses_into(decl, plan, sub: np.ndarray, p0: int, out: np.ndarray) -> None:
    """The float64 losses of ``sub`` (rows, S, n[, C]: params p0..) into ``out`` (S, rows, n).

    DESIGN CHOICE: the squared loss of a regression cube whose y and predictions subtract in
    float64 is computed in ``out`` itself: the predictions copied in (float32 -> float64), y
    subtracted, squared. The same values as :func:`cvflow.estimators.losses.apply_loss`'s
    ``(y - pred) ** 2`` (the same IEEE operations on the same float64 operands) without its
    two float64 temporaries: 0.6 against 1.0 ns a value (a block of 250 params x 18 splits,
    load ~11). Any other loss: ``apply_loss``, copied into ``out``."""
    view = out.transpose(1, 0, 2)
    if decl == SQUARED and plan.classes is None and sub.ndim == 3 \
            and np.result_type(plan.y, sub) == np.float64:
        np.copyto(view, sub)
        np.subtract(plan.y, out, out=out)
        np.square(out, out=out)
        return
    np.copyto(view, apply_loss(decl, plan.y, sub, plan.classes, plan.outputs[p0:p0 + len(sub)]))


def _change_steps(sources: dict, depth: int) -> list[tuple]:
    """How a block's change columns are summed (:func:`_change_sums`), made once a block:
    ("wide", c, users, reference) when every split ``users`` with a column c subtracts the
    same reference (stability's full fit: one broadcast, batched), else ("one", i, c,
    position, reference) for each split i."""
    steps: list[tuple] = []
    for c in range(depth):
        users = [i for (i, column) in sources if column == c]
        array = sources[(users[0], c)][1] if users else None
        if len(users) > 1 and array is not None and \
                all(sources[(i, c)][1] is array for i in users):
            steps.append(("wide", c, users, array))
            continue
        steps.extend(("one", i, c, *sources[(i, c)]) for i in users)
    return steps


def _change_sums(losses: np.ndarray, steps: list, sources: dict, layout: Layout,
                 diff: np.ndarray, change: np.ndarray, q: int) -> None:
    """Σ_{i∈mask} |ℓ_i − ref_i| of every change column of a kernel block (params q..q+m) into
    ``change`` (S, D, m), by ``steps`` (:func:`_change_steps`): the difference into one buffer
    ``diff`` (m, n), its absolute value summed by a matrix-vector product; a row a non-finite
    value spoils (0 · NaN, inf − inf) summed again within its mask."""
    m = len(diff)
    with np.errstate(invalid="ignore", over="ignore"):
        for step in steps:
            if step[0] == "wide":
                _, c, users, array = step
                wide = np.abs(np.subtract(losses, array[q:q + m]))
                sums = np.matmul(wide, layout.change_vectors[:, c, :, None])[:, :, 0]
                change[users, c] = sums[users]
                continue
            _, i, c, position, array = step
            np.subtract(losses[i], losses[position] if array is None else array[q:q + m],
                        out=diff)
            np.abs(diff, out=diff)
            np.matmul(diff, layout.change_vectors[i, c], out=change[i, c])
        bad = ~np.isfinite(change)
        for i, c in zip(*np.nonzero(bad.any(axis=2))):
            position, array = sources[(i, c)]
            rows = np.flatnonzero(bad[i, c])
            ref = losses[position][rows] if array is None else array[q + rows]
            change[i, c, rows] = np.where(layout.change_masks[i, c],
                                          np.abs(losses[i][rows] - ref), 0.0).sum(axis=1)


def _source(plan, at: int, position: dict, carry: dict, shared: dict, refs, label: str):
    """Where the losses of reference ``plan.refs[at]`` are: a fold fit's among the block's own
    splits (its position, None) or in ``carry`` (None, losses (p, n)); a shared one (the full
    fit's) in ``refs`` (``shared``: its position there)."""
    if plan.refs[at][0] == "fold":
        split = plan.ref_splits[at]
        if split in position:
            return position[split], None
        return None, carry[split][label]
    return None, refs[label][:, shared[at]]


def reference_losses(block: np.ndarray, plan, p0: int) -> dict[str, np.ndarray]:
    """The losses of reference splits (block (p, m, n[, C])): label -> array (p, m, n)."""
    block = np.asarray(block)
    return {decl.label: np.asarray(apply_loss(decl, plan.y, block, plan.classes,
                                              plan.outputs[p0:p0 + len(block)]),
                                   dtype=np.float64)
            for decl in plan.decls}
