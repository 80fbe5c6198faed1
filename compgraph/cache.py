"""On-disk cache of prepared graphs, in safe formats only (never pickle).

An entry is a folder ``<cache_dir>/<model>-<size>-<grouper>-<num_groups>-s<seed>-<hash>/``:

* ``meta.json``: the key (below), the format version and the entry's content hashes;
* ``graph.json``: the [`OpGraph`][compgraph.ir.OpGraph] (ops, edges, fetches), the [`Grouping`][compgraph.ir.Grouping] and the
  step's fetches, as plain JSON ([`graph_to_dict`][compgraph.cache.graph_to_dict], [`grouping_to_dict`][compgraph.cache.grouping_to_dict]);
* ``graph_def.pb``: the TensorFlow ``GraphDef``'s protobuf bytes, read back with
  ``GraphDef.ParseFromString`` (a parser, not code execution) when first used, so a cache
  hit does not import TensorFlow.

The key ([`cache_key`][compgraph.cache.cache_key]) is the benchmark, size, grouper, target number of groups,
seed, the code version ([`code_version`][compgraph.cache.code_version]: a hash of every ``compgraph/**/*.py``
source, so any change to the models, the importer, the cost rules or the groupers
misses), the TensorFlow version and the format version. A read checks the whole key
stored in ``meta.json``; a missing, unreadable or different entry is a miss. Entries are
written to a temporary folder and renamed into place, so a reader never sees half an entry.

An entry cannot be poisoned silently: ``meta.json`` stores the SHA-256 of ``graph.json`` and
of ``graph_def.pb`` and an entry hash over both and the code version
([`content_hash`][compgraph.cache.content_hash]). A read recomputes them; any mismatch (an edited ``graph.json``, a
flipped byte of the GraphDef that ``--env real`` would execute, an entry written by other
code) is logged as one warning line and is a miss, so the caller rebuilds and rewrites the
entry. (This detects tampering and damage, not an attacker who also rewrites the hashes in
``meta.json``: the cache folder must be as trusted as the code.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from compgraph.ir import Edge, Grouping, Op, OpGraph

FORMAT_VERSION = 2
#: the entry's files covered by its content hash, in hashing order
CONTENT_FILES = ("graph.json", "graph_def.pb")
_log = logging.getLogger(__name__)
_SOURCE_ROOT = Path(__file__).resolve().parent


def code_version() -> str:
    """16 hex digits of SHA-256 over the relative paths and bytes of ``compgraph/**/*.py``."""
    h = hashlib.sha256()
    for p in sorted(_SOURCE_ROOT.rglob("*.py")):
        h.update(p.relative_to(_SOURCE_ROOT).as_posix().encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _tf_version() -> str:
    try:
        return metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        return "none"


def cache_key(model: str, size: str, grouper: str, num_groups: int | None, seed: int = 0) -> dict:
    """The key of a prepared benchmark graph: a JSON-able dict (see the module docstring)."""
    return {
        "model": model,
        "size": size,
        "grouper": grouper,
        "num_groups": None if num_groups is None else int(num_groups),
        "seed": int(seed),
        "code_version": code_version(),
        "tensorflow": _tf_version(),
        "format": FORMAT_VERSION,
    }


def entry_dir(cache_dir: str | Path, key: dict) -> Path:
    """The folder of ``key``'s entry under ``cache_dir`` (names reduced to safe path components,
    [`compgraph.paths.slug`][compgraph.paths.slug]).

    Raises:
        compgraph.paths.UnsafePath: the folder resolves outside ``cache_dir``.
    """
    from compgraph.paths import named_path

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    k = "auto" if key["num_groups"] is None else key["num_groups"]
    return named_path(cache_dir, "", key["model"], key["size"], key["grouper"], k, f"s{key['seed']}", digest)


# --------------------------------------------------------------------------------------
# to_dict / from_dict: exact round trips (floats as JSON's shortest repr)
# --------------------------------------------------------------------------------------


def op_to_dict(op: Op) -> dict:
    """An [`Op`][compgraph.ir.Op] as a JSON-able dict (shapes as lists)."""
    return {
        "name": op.name,
        "type": op.type,
        "output_shapes": [[int(d) for d in s] for s in op.output_shapes],
        "output_bytes": [int(b) for b in op.output_bytes],
        "flops": float(op.flops),
        "bytes_accessed": float(op.bytes_accessed),
        "alloc_bytes": int(op.alloc_bytes),
        "param_bytes": int(op.param_bytes),
        "gpu_kernel": bool(op.gpu_kernel),
        "colocation": list(op.colocation),
        "dtype": op.dtype,
    }


def op_from_dict(d: dict) -> Op:
    """Inverse of [`op_to_dict`][compgraph.cache.op_to_dict]."""
    return Op(
        name=d["name"],
        type=d["type"],
        output_shapes=[tuple(s) for s in d["output_shapes"]],
        output_bytes=list(d["output_bytes"]),
        flops=float(d["flops"]),
        bytes_accessed=float(d["bytes_accessed"]),
        alloc_bytes=int(d["alloc_bytes"]),
        param_bytes=int(d["param_bytes"]),
        gpu_kernel=bool(d["gpu_kernel"]),
        colocation=list(d["colocation"]),
        dtype=str(d.get("dtype", "float32")),
    )


def edge_to_list(e: Edge) -> list:
    """An [`Edge`][compgraph.ir.Edge] as ``[src, dst, bytes, src_output, control]``."""
    return [int(e.src), int(e.dst), int(e.bytes), int(e.src_output), bool(e.control)]


def edge_from_list(row: list) -> Edge:
    """Inverse of [`edge_to_list`][compgraph.cache.edge_to_list]."""
    src, dst, nbytes, out, control = row
    return Edge(int(src), int(dst), int(nbytes), int(out), bool(control))


def graph_to_dict(graph: OpGraph) -> dict:
    """An [`OpGraph`][compgraph.ir.OpGraph] as a JSON-able dict: ``name``, ``ops``, ``edges`` (rows), ``fetches``."""
    return {
        "name": graph.name,
        "ops": [op_to_dict(op) for op in graph.ops],
        "edges": [edge_to_list(e) for e in graph.edges],
        "fetches": list(graph.fetches),
    }


def graph_from_dict(d: dict) -> OpGraph:
    """Inverse of [`graph_to_dict`][compgraph.cache.graph_to_dict]. Raises ``ValueError`` (``OpGraph``'s checks) for a bad graph."""
    return OpGraph(
        name=d["name"],
        ops=[op_from_dict(o) for o in d["ops"]],
        edges=[edge_from_list(r) for r in d["edges"]],
        fetches=list(d["fetches"]),
    )


def grouping_to_dict(grouping: Grouping) -> dict:
    """A [`Grouping`][compgraph.ir.Grouping] as a JSON-able dict: ``op_group`` (list), ``names``, ``grouper``."""
    return {"op_group": [int(g) for g in grouping.op_group], "names": list(grouping.names), "grouper": grouping.grouper}


def grouping_from_dict(d: dict) -> Grouping:
    """Inverse of [`grouping_to_dict`][compgraph.cache.grouping_to_dict] (``op_group`` as int64)."""
    return Grouping(op_group=np.asarray(d["op_group"], dtype=np.int64), names=list(d["names"]), grouper=d["grouper"])


# --------------------------------------------------------------------------------------
# entries
# --------------------------------------------------------------------------------------


@dataclass
class CacheEntry:
    """What an entry holds: the graph, its grouping, the GraphDef's protobuf bytes (``None``
    if none was stored; parse with ``GraphDef.ParseFromString``, or hand them to
    ``PreparedGraph``, which parses them on first access) and the fetches."""

    graph: OpGraph
    grouping: Grouping
    graph_def_bytes: bytes | None
    fetches: tuple[str, ...]


def save_entry(cache_dir: str | Path, key: dict, graph: OpGraph, grouping: Grouping, graph_def, fetches) -> Path:
    """Write an entry for ``key`` (replacing any entry there); returns its folder.

    Raises:
        OSError: the cache folder cannot be written.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = entry_dir(cache_dir, key)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))
    try:
        body = {"graph": graph_to_dict(graph), "grouping": grouping_to_dict(grouping), "fetches": list(fetches)}
        files = {
            "graph.json": json.dumps(body, separators=(",", ":")).encode(),
            "graph_def.pb": graph_def.SerializeToString(deterministic=True) if graph_def is not None else b"",
        }
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        hashes = file_hashes(tmp, files)
        version = code_version()
        content = {"files": hashes, "code_version": version, "entry_sha256": content_hash(hashes, version)}
        meta = {"key": key, "has_graph_def": graph_def is not None, "content": content}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def file_hashes(folder: Path, files: dict[str, bytes] | None = None) -> dict[str, str]:
    """SHA-256 hex digest of each of [`CONTENT_FILES`][compgraph.cache.CONTENT_FILES] (from ``files`` if given, else read
    from ``folder``)."""
    out = {}
    for name in CONTENT_FILES:
        data = files[name] if files is not None else (folder / name).read_bytes()
        out[name] = hashlib.sha256(data).hexdigest()
    return out


def content_hash(hashes: dict[str, str], version: str) -> str:
    """The entry hash: SHA-256 over the code version and the files' digests, in
    [`CONTENT_FILES`][compgraph.cache.CONTENT_FILES] order (64 hex digits)."""
    h = hashlib.sha256(version.encode() + b"\0")
    for name in CONTENT_FILES:
        h.update(name.encode() + b"\0" + hashes[name].encode() + b"\0")
    return h.hexdigest()


class CacheIntegrityError(ValueError):
    """A cache entry's content does not match the hashes stored with it."""


def verify_entry(folder: Path, meta: dict, files: dict[str, bytes]) -> None:
    """Check ``files`` (name -> bytes) against ``meta``'s hashes and the current code version.

    Raises:
        CacheIntegrityError: a file's digest, the code version or the entry hash differ
            (the message names the first mismatch).
    """
    stored = meta.get("content") or {}
    hashes = file_hashes(folder, files)
    for name in CONTENT_FILES:
        if stored.get("files", {}).get(name) != hashes[name]:
            raise CacheIntegrityError(f"{name} does not match its stored SHA-256")
    version = code_version()
    if stored.get("code_version") != version:
        raise CacheIntegrityError(f"written by code version {stored.get('code_version')!r}, this is {version!r}")
    if stored.get("entry_sha256") != content_hash(hashes, version):
        raise CacheIntegrityError("the entry hash over its files and the code version does not match")


def load_entry(cache_dir: str | Path, key: dict) -> CacheEntry | None:
    """Read ``key``'s entry; ``None`` on a miss: no entry, a different stored key, an entry
    whose content does not match its hashes ([`verify_entry`][compgraph.cache.verify_entry]), or an unreadable entry;
    the last two are logged as one warning line each (``cache entry ...: ...; rebuilding``)."""
    folder = entry_dir(cache_dir, key)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("key") != key:
            return None
        files = {name: (folder / name).read_bytes() for name in CONTENT_FILES}
        try:
            verify_entry(folder, meta, files)
        except CacheIntegrityError as e:
            _log.warning("cache entry %s: %s (tampered or damaged); rebuilding", folder, e)
            return None
        body = json.loads(files["graph.json"].decode())
        graph = graph_from_dict(body["graph"])
        grouping = grouping_from_dict(body["grouping"])
        if grouping.op_group.shape != (graph.num_ops,):
            raise ValueError(f"grouping covers {grouping.op_group.shape[0]} ops, graph has {graph.num_ops}")
        graph_def_bytes = files["graph_def.pb"] if meta.get("has_graph_def") else None
        return CacheEntry(graph, grouping, graph_def_bytes, tuple(body["fetches"]))
    except Exception as e:  # a damaged entry is a miss, rebuilt and rewritten by the caller
        _log.warning("cache entry %s unreadable (%s: %s); rebuilding", folder, type(e).__name__, e)
        return None
