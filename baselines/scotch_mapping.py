"""Scotch static-mapping baseline.

What Scotch does
----------------
Scotch (F. Pellegrini, "Scotch and libScotch: software package for static
mapping, graph partitioning and sparse matrix ordering") computes a *static
mapping* of a weighted source graph onto a weighted target architecture: every
source vertex (here, an operation with a computation cost) is assigned to one
target vertex (here, a device with a compute capacity) so that (i) the load of
each device is proportional to its capacity and (ii) the communication cost
``sum over cut source edges (volume * distance between the two devices)`` is
small.  Its default mapping strategy (used here, via an empty ``SCOTCH_Strat``)
is a multilevel scheme whose coarsest-level method is *dual recursive
bipartitioning*: the target architecture and the source graph are bipartitioned
recursively in lockstep (each graph bipartition computed by multilevel
coarsening, greedy graph growing and Fiduccia-Mattheyses refinement, taking the
distances between target domains into account), and the result is refined by
diffusion and k-way Fiduccia-Mattheyses passes while uncoarsening.

Reference: Pellegrini, Scotch static mapping; used as the Scotch and MinCut
baselines in Mirhoseini et al. 2017 ("Device Placement Optimization with
Reinforcement Learning"), Sec. 4.2.

Target architecture
-------------------
The devices are described by a *weighted target graph*: a complete graph on
the ``D`` devices whose vertex weights are the device compute capacities
(``device_weights``) and whose edge weights are the link costs
(``link_costs[i, j]``).  It is turned into a decomposition-defined ("deco")
architecture with ``SCOTCH_archBuild0`` (the classic, fully compiled
decomposition-defined architecture, saved by Scotch as ``deco 1``: Scotch
recursively bipartitions the target graph, balancing device capacities, and
tabulates the distance between every pair of domains; ``SCOTCH_archBuild2``
builds the "deco 2" variant meant for very large target graphs).  With a
complete target graph the terminal-to-terminal distance is the link cost
itself (checked: ``link_costs[0, 2] = 1000`` is kept as 1000 even though
``link_costs[0, 1] + link_costs[1, 2] = 18``).  A deco architecture, unlike a
plain weighted complete one (``cmpltw``), takes the link costs into account;
no fallback to ``cmpltw`` is used.

Binding
-------
This module uses ``scotchpy`` (PyPI distribution ``scotchpy64`` 1.0.2, the
official Inria binding, bundling Scotch 7.0.16 built with 64-bit
``SCOTCH_Num``).  Its ``Arch.build0`` method wraps ``SCOTCH_archBuild0``
directly.  The other installed binding, ``pyscotch`` 7.0.5, was checked: its
high-level ``pyscotch.arch.Architecture`` class only exposes fixed
architectures (complete / weighted complete / hypercube / mesh / torus /
tree-leaf / variable / sub / load from file) and has *no* method to build a
deco architecture from a weighted target graph.  Its low-level ctypes module
``pyscotch.libscotch`` does declare raw ``SCOTCH_archBuild0`` /
``SCOTCH_archBuild2`` prototypes, but using them would mean hand-managing
opaque C structures; pyscotch also prints a "Loaded Scotch" banner on stderr
at import.  scotchpy is therefore the simpler and official route.

scotchpy calls used: ``Graph.build`` (``SCOTCH_graphBuild`` + ``SCOTCH_graphCheck``),
``Context.thread_spawn`` / ``option_set_num`` / ``random_clone`` / ``bind_graph``,
``Arch.build0`` and ``Strat()``.  Two C functions are called through scotchpy's
own library handle ``scotchpy.common.libscotch``: ``SCOTCH_contextRandomSeed``
(its scotchpy wrapper tests the return value of a ``void`` function) and
``SCOTCH_graphMap`` (``Graph.map`` needs the graph's vertex count, which scotchpy
does not record for a context-bound graph).

Determinism
-----------
Every call runs Scotch in a private execution context
(``SCOTCH_contextInit`` + ``SCOTCH_contextThreadSpawn(ctx, 1, NULL)``) with a
private copy of the pseudo-random generator (``SCOTCH_contextRandomClone``)
seeded by ``SCOTCH_contextRandomSeed``; both the target graph and the source
graph are bound to it with ``SCOTCH_contextBindGraph``.  Two findings drove
this design (both checked on the installed Scotch 7.0.16):

* With Scotch's implicit default context, results varied from call to call
  *even after* ``SCOTCH_randomSeed`` + ``SCOTCH_randomReset``: the default
  context uses one thread per core, and 7.0.16's multi-threaded greedy graph
  growing (``bgraphBipartGg``) seeds its per-thread generators racily.  A
  single-threaded context makes the mapping reproducible (same inputs and
  seed -> identical output, within and across processes).  The
  ``SCOTCH_OPTIONNUMDETERMINISTIC`` option is also set, but is not relied upon.
* Scotch ORs the seed with 1, so seeds ``2k`` and ``2k+1`` give identical
  runs; ``seed`` is therefore passed to Scotch as ``2*seed+1``.

Scotch's C structures are freed explicitly at the end of each call, and a
module lock serialises calls (scotchpy is not meant to be used concurrently).

Limits
------
With this build (Scotch 7.0.16, 64-bit ``SCOTCH_Num``) the load balance
breaks down once the *total* vertex weight reaches about 2**32: e.g. 100
vertices of weight 42949672 in a chain on devices of weights ``[1, 3]`` are
all put on device 0 (and 1000 vertices of weight 10**7 likewise), while totals
up to 2**31 map 25%/75% as expected.  Edge weights up to 10**15, link costs up
to 10**12 and device weights up to 10**12 showed no such problem.
[`scotch_static_map`][baselines.scotch_mapping.scotch_static_map] therefore rejects inputs whose vertex weights sum
above ``2**31 - 1`` with a ValueError (unless D == 1, where Scotch is not
called); callers with e.g. FLOP counts must
rescale them first.

Public API: [`scotch_static_map`][baselines.scotch_mapping.scotch_static_map].
"""

from __future__ import annotations

import ctypes
import numbers
import threading
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["scotch_static_map"]

# Serialise calls: contextRandomClone reads Scotch's global generator and scotchpy
# sets ctypes restypes on shared function objects.
_SCOTCH_LOCK = threading.Lock()
_OPTION_DETERMINISTIC = 0  # SCOTCH_OPTIONNUMDETERMINISTIC in scotch.h
# Largest accepted sum of vertex weights (see "Limits" in the module docstring).
_MAX_TOTAL_VERTEX_WEIGHT = 2**31 - 1
_scotchpy = None


def _get_scotchpy():
    global _scotchpy
    if _scotchpy is None:
        import scotchpy  # imported lazily: it loads the bundled libscotch.so

        _scotchpy = scotchpy
    return _scotchpy


def _as_int_array(values, name: str, ndim: int) -> np.ndarray:
    """Convert ``values`` to an int64 array of dimension ``ndim``; values must be integral."""
    try:
        arr = np.asarray(values)
    except Exception as exc:  # ragged input etc.
        raise ValueError(f"{name} could not be converted to an array: {values!r}") from exc
    if arr.size == 0:
        arr = arr.reshape((0,) * ndim) if ndim == 1 else arr
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}: {values!r}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        # object arrays of Python ints are accepted if every entry is integral
        if arr.dtype == object and all(
            isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in arr.flat
        ):
            try:
                return arr.astype(np.int64)
            except OverflowError:
                raise ValueError(f"{name} has a value outside the int64 range: {values!r}") from None
        raise ValueError(f"{name} must contain integers, got dtype {arr.dtype}: {values!r}")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            idx_s = idx[0] if len(idx) == 1 else idx
            raise ValueError(f"{name} must contain integers, got {float(arr[idx])} at index {idx_s}")
    return arr.astype(np.int64)


def _check_positive(arr: np.ndarray, name: str) -> None:
    bad = arr <= 0
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        idx_s = idx[0] if len(idx) == 1 else idx
        raise ValueError(f"{name} must be positive, got {int(arr[idx])} at index {idx_s}")


def _parse_edges(edges, n: int):
    """Return (u, v, w) int64 arrays after validation (self loops kept; dropped later)."""
    edge_list: Any
    if isinstance(edges, np.ndarray):
        edge_list = edges
    else:
        edge_list = list(edges)
    if len(edge_list) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    for k, e in enumerate(edge_list):
        try:
            ok = len(e) == 3
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(f"edges[{k}] must be a (u, v, w) triple, got {e!r}")
    arr = _as_int_array([tuple(e) for e in edge_list], "edges", 2)
    u, v, w = arr[:, 0], arr[:, 1], arr[:, 2]
    for col, label in ((u, "u"), (v, "v")):
        bad = (col < 0) | (col >= n)
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(
                f"edges[{k}] has vertex index {label}={int(col[k])} out of range [0, {n})"
            )
    badw = w <= 0
    if badw.any():
        k = int(np.argmax(badw))
        raise ValueError(f"edges[{k}] has non-positive weight w={int(w[k])}")
    return u, v, w


def _symmetric_csr(n: int, u: np.ndarray, v: np.ndarray, w: np.ndarray):
    """Merge parallel/reversed edges (summing weights), drop self loops, return compact CSR."""
    keep = u != v
    u, v, w = u[keep], v[keep], w[keep]
    a = np.minimum(u, v)
    b = np.maximum(u, v)
    if a.size:
        key = a * n + b
        uniq, inv = np.unique(key, return_inverse=True)
        wsum = np.zeros(uniq.size, dtype=np.int64)
        np.add.at(wsum, inv, w)
        a, b = uniq // n, uniq % n
    else:
        wsum = np.zeros(0, dtype=np.int64)
    src = np.concatenate([a, b])
    dst = np.concatenate([b, a])
    wts = np.concatenate([wsum, wsum])
    order = np.lexsort((dst, src))
    src, dst, wts = src[order], dst[order], wts[order]
    verttab = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=verttab[1:])
    return verttab, np.ascontiguousarray(dst, dtype=np.int64), np.ascontiguousarray(wts, dtype=np.int64)


def _build_graph(sp, verttab, velotab, edgetab, edlotab):
    g = sp.Graph()
    # Graph.build runs SCOTCH_graphBuild then SCOTCH_graphCheck, raising LibraryError on failure.
    g.build(
        baseval=0,
        vertnbr=int(verttab.size - 1),
        verttab=verttab,
        velotab=velotab,
        edgenbr=int(edgetab.size),
        edgetab=edgetab,
        edlotab=edlotab,
    )
    return g


def scotch_static_map(
    vertex_weights: Sequence[int] | np.ndarray,
    edges: Iterable[tuple[int, int, int]],
    device_weights: Sequence[int],
    link_costs,
    seed: int = 0,
) -> np.ndarray:
    """Map a weighted source graph onto a weighted target architecture with Scotch's default mapping strategy.

    Args:
        vertex_weights: N positive ints, computation cost of each source vertex.
        edges: iterable of ``(u, v, w)`` with ``0 <= u, v < N`` and ``w > 0`` (communication
            volume). The graph is undirected: parallel edges and both directions are merged
            by summing their weights; self loops are dropped.
        device_weights: D positive ints, compute capacity of each device.
        link_costs: D x D symmetric int matrix (diagonal ignored), positive off-diagonal:
            communication cost (distance) of the link between devices i and j.
        seed: seed of Scotch's pseudo-random generator (results are deterministic for a seed).

    Returns:
        int64 array of length N with the device index (0..D-1) of each vertex.

    Raises:
        ValueError: on invalid input (the message names the field and the bad value),
            including vertex weights summing above ``2**31 - 1``.
        RuntimeError: if Scotch fails.
    """
    vw = _as_int_array(vertex_weights, "vertex_weights", 1)
    n = int(vw.size)
    _check_positive(vw, "vertex_weights")

    dw = _as_int_array(device_weights, "device_weights", 1)
    d = int(dw.size)
    if d == 0:
        raise ValueError(f"device_weights must contain at least one device, got {device_weights!r}")
    _check_positive(dw, "device_weights")

    lc_raw = np.asarray(link_costs)
    if lc_raw.shape != (d, d):
        raise ValueError(
            f"link_costs must have shape ({d}, {d}) to match device_weights, got shape {lc_raw.shape}"
        )
    lc = _as_int_array(lc_raw, "link_costs", 2)
    off = ~np.eye(d, dtype=bool)
    bad = off & (lc <= 0)
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"link_costs must be positive off the diagonal, got {lc[i, j]} at ({i}, {j})")
    asym = off & (lc != lc.T)
    if asym.any():
        i, j = (int(x) for x in np.argwhere(asym)[0])
        raise ValueError(
            f"link_costs must be symmetric, got link_costs[{i}, {j}]={lc[i, j]} != link_costs[{j}, {i}]={lc[j, i]}"
        )

    u, v, w = _parse_edges(edges, n)

    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or abs(int(seed)) >= 2**61:
        raise ValueError(f"seed must be an int with |seed| < 2**61, got {seed!r}")

    if n == 0 or d == 1:
        return np.zeros(n, dtype=np.int64)

    total = int(vw.sum(dtype=object))  # exact (no int64 wrap-around)
    if total > _MAX_TOTAL_VERTEX_WEIGHT:
        raise ValueError(
            f"vertex_weights sum to {total}, above the supported maximum {_MAX_TOTAL_VERTEX_WEIGHT} "
            "(Scotch 7.0.16 silently ignores the balance constraint for larger totals); "
            "rescale the weights"
        )

    verttab, edgetab, edlotab = _symmetric_csr(n, u, v, w)

    # Target graph: complete graph on the devices, vertex weight = capacity, edge weight = link cost.
    tverttab = np.arange(d + 1, dtype=np.int64) * (d - 1)
    tsrc, tdst = np.nonzero(off)  # row-major: sorted by source, then destination
    tedgetab = np.ascontiguousarray(tdst, dtype=np.int64)
    tedlotab = np.ascontiguousarray(lc[tsrc, tdst], dtype=np.int64)

    sp = _get_scotchpy()
    lib = sp.common.libscotch
    num = sp.common.proper_int  # ctypes type of SCOTCH_Num (int64 in scotchpy64)
    parttab = np.full(n, -1, dtype=np.int64)
    with _SCOTCH_LOCK:
        ctx = tgraph = tbound = graph = bound = arch = None
        try:
            # Private single-threaded execution context with its own seeded random generator.
            ctx = sp.Context()
            ctx.thread_spawn(1, None)  # SCOTCH_contextThreadSpawn(ctx, 1, NULL)
            ctx.option_set_num(_OPTION_DETERMINISTIC, 1)  # SCOTCH_contextOptionSetNum
            ctx.random_clone()  # SCOTCH_contextRandomClone: private copy of the generator
            # SCOTCH_contextRandomSeed returns void: call it directly (the scotchpy wrapper
            # tests the undefined return value).
            # Scotch ORs the seed with 1, so seeds 2k and 2k+1 would give identical streams;
            # pass 2*seed+1 so that every distinct ``seed`` yields a distinct generator state.
            lib.SCOTCH_contextRandomSeed(ctx._contextptr, num(2 * int(seed) + 1))

            # Target graph: complete graph on the devices, vertex weight = capacity,
            # edge weight = link cost; turned into a deco architecture by SCOTCH_archBuild0.
            tgraph = _build_graph(sp, tverttab, dw, tedgetab, tedlotab)
            tbound = sp.Graph()
            ctx.bind_graph(tgraph, tbound)  # SCOTCH_contextBindGraph
            arch = sp.Arch()
            arch.build0(tbound, np.arange(d, dtype=np.int64), sp.Strat())  # SCOTCH_archBuild0

            graph = _build_graph(sp, verttab, vw, edgetab, edlotab)
            bound = sp.Graph()
            ctx.bind_graph(graph, bound)
            strat = sp.Strat()  # empty strategy: Scotch builds its default mapping strategy
            # SCOTCH_graphMap(bound graph, arch, strat, parttab), writing straight into parttab.
            if lib.SCOTCH_graphMap(
                bound._grafptr,
                arch._archptr,
                strat._straptr,
                parttab.ctypes.data_as(ctypes.POINTER(num)),
            ):
                raise sp.LibraryError("graphMap")
        except sp.LibraryError as exc:
            raise RuntimeError(f"Scotch mapping failed: {exc}") from exc
        finally:
            # Release the C structures deterministically, bound graphs before their context,
            # the context before the graphs it was bound to (scotchpy's __del__ would free
            # them too, but in an unspecified order).
            for obj in (bound, tbound, arch, ctx, graph, tgraph):
                if obj is not None:
                    obj.exit()

    if parttab.min() < 0 or parttab.max() >= d:
        raise RuntimeError(
            f"Scotch returned an invalid mapping (values in [{parttab.min()}, {parttab.max()}], expected [0, {d}))"
        )
    return parttab
