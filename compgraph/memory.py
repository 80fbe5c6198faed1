"""Where a training step's memory goes, as TensorFlow allocates it: an audit of an [`OpGraph`][compgraph.ir.OpGraph].

The simulator ([`cluster.simulator`][cluster.simulator], "Memory") charges per device the ``param_bytes`` of
the ops placed there for the whole step (variables: weights and optimizer slots) plus the
``alloc_bytes`` of op outputs while they are live (activations kept for the backward pass
until their last reader, gradients until the optimizer's apply, received copies on the
destination device); the allocator's own overhead (rounding, fragmentation, temporaries
inside kernels that the graph does not show) is [`cluster.spec.Device.allocator_overhead`][cluster.spec.Device.allocator_overhead].
[`memory_breakdown`][compgraph.memory.memory_breakdown] splits a graph's bytes into these categories so that totals can be
checked against a model's parameter count (2017 Sec. 4.1: Adam keeps two slots per weight,
RMSProp with momentum two as well).
"""

from __future__ import annotations

from compgraph.ir import OpGraph

#: name fragments of optimizer state variables: slots (TensorFlow's ``Optimizer._zeros_slot``
#: names) and Adam's two scalar accumulators ``beta1_power`` / ``beta2_power``.
SLOT_MARKERS = ("/Adam", "/RMSProp", "/Momentum", "/Adagrad", "/Ftrl", "beta1_power", "beta2_power")


def memory_breakdown(graph: OpGraph) -> dict[str, int]:
    """Bytes of a step by category (all ``int`` bytes).

    Returns:
        ``weights`` (resident variables that are not slots), ``optimizer_slots`` (resident
        slot variables), ``gradients`` (outputs of ops under ``gradients/``, summed over the
        step: each is live from its op until its last reader), ``forward`` (every other
        op output), ``resident`` (``weights + optimizer_slots``) and ``allocated``
        (``gradients + forward``: the sum of allocations, an upper bound of the live peak).
    """
    out = {"weights": 0, "optimizer_slots": 0, "gradients": 0, "forward": 0}
    for op in graph.ops:
        if op.param_bytes:
            out["optimizer_slots" if any(s in op.name for s in SLOT_MARKERS) else "weights"] += int(op.param_bytes)
        if op.alloc_bytes:
            top = op.name.split("/", 1)[0]
            out["gradients" if top == "gradients" or top.startswith("gradients_") else "forward"] += int(op.alloc_bytes)
    out["resident"] = out["weights"] + out["optimizer_slots"]
    out["allocated"] = out["gradients"] + out["forward"]
    return out
