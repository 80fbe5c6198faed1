"""PyTorch front end: a module's whole training step at the ATen level, as an [`OpGraph`][compgraph.ir.OpGraph].

**Capture.** [`capture_training_step`][compgraph.torch_step.capture_training_step] moves the module and its example inputs to the
``meta`` device (shapes and dtypes only: nothing of the model's size is allocated, so a
6.7B-parameter step is captured on a laptop) and traces one training step with
``torch.fx.experimental.proxy_tensor.make_fx``: the forward and the loss
(``torch.func.functional_call``), the backward (``torch.autograd.grad``, traced through the
autograd engine into ATen backward ops) and the optimizer update, written as in-place ATen ops:

* ``sgd``: ``torch.optim.SGD`` at its defaults (no momentum): ``p.add_(g, alpha=-lr)``.
* ``adam``: ``torch.optim.Adam`` at its defaults, its single-tensor update
  (``torch/optim/adam.py`` ``_single_tensor_adam``; Kingma and Ba, ICLR 2015, Algorithm 1):
  ``m.lerp_(g, 1 - b1)``, ``v.mul_(b2).addcmul_(g, g, value=1 - b2)``,
  ``denom = (v.sqrt() / sqrt(bc2)).add_(eps)``, ``p.addcdiv_(m, denom, value=-lr / bc1)``,
  with two state tensors per parameter (``exp_avg``, ``exp_avg_sq``, named ``<param>/Adam`` and
  ``<param>/Adam_1`` as TensorFlow names its slots, [`compgraph.memory.SLOT_MARKERS`][compgraph.memory.SLOT_MARKERS]).

**Module paths.** Forward hooks annotate every forward node with the path of the innermost
module running it (``nn_module_stack``'s last entry, e.g. ``h.3.attn``), and autograd's
sequence numbers (``seq_nr``, the hooks AOTAutograd uses to copy forward metadata to backward
nodes) give each backward node the path of the forward op it differentiates; an update gets
its parameter's module. A backward node is one autograd marks (``autograd_backward``, PyTorch
2.13) or one traced inside the capture's own ``phase: backward`` annotation around
``torch.autograd.grad``: PyTorch 2.11 (the lent GPU machines' image) leaves autograd's mark out,
and without the annotation every backward op was named as the root module's (``mm_3`` for
``gradients/h.11.mlp.2/mm_3``), which moved them all into the last layer of the benchmarks'
expert numbering. With it, 2.11 and 2.13 capture the same op names (checked on a lent H100,
2026-11-26: GPT and ResNet-50 ``small``, the same 415 and 944 names). Op names are ``<module>/<node>`` (forward), ``gradients/<module>/<node>``
(backward, as TensorFlow's ``gradients/`` scope) and ``update/<parameter>/<node>``; parameters,
buffers and optimizer state are the placeholders named after them, inputs ``input/<k>``.

**Per op** ([`compgraph.ir.Op`][compgraph.ir.Op]): ``type`` is the ATen overload packet (``aten.mm``);
output shapes and bytes come from the meta tensors, ``dtype`` from its first floating output; FLOPs from
``torch.utils.flop_counter``'s formulas (matrix products, convolutions, attention; 2 FLOP per
multiply-add), else [`aten_flops`][compgraph.torch_step.aten_flops]'s rules (element-wise ops ``n(out)``, reductions
``n(in)``, softmax ``5 n``, normalization ``5 n`` forward and ``7 n`` backward, pooling
``n(out) kh kw``), else 0 and reported by name ([`step_coverage`][compgraph.torch_step.step_coverage]); bytes accessed are the
tensor inputs plus the outputs; new memory is the outputs that alias no input (0 for an in-place
op); parameters, buffers and optimizer state are resident (``param_bytes``). A view (an op whose
output aliases its input and writes nothing: ``view``, ``t``, ``expand``, ``split``...) and an
element of a tuple output (``getitem``) are not ops: they are folded into the op that holds their
memory, whose readers they become (the edge carries the view's bytes, the largest once per pair of
ops), so a tensor stays live until its last reader through any view. Every op that writes a
parameter, buffer or optimizer state in place (its schema marks the argument written) is
co-located with it, and a write comes after every earlier reader of the tensor it writes (a
control edge), so a placement never splits an update from its state.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

from compgraph.ir import Edge, Op, OpGraph

OPTIMIZERS = ("sgd", "adam")
"""Optimizers a captured step can end with (``--torch-optimizer``)."""
LEARNING_RATE = {"sgd": 1e-3, "adam": 1e-3}
"""``torch.optim``'s default learning rates (the value does not change the graph)."""

_REDUCTIONS = frozenset("""sum mean amax amin max min var var_mean std std_mean prod argmax argmin norm
    linalg_vector_norm logsumexp nll_loss_forward nll_loss_backward nll_loss2d_forward nll_loss2d_backward
    _adaptive_avg_pool2d adaptive_avg_pool2d mse_loss""".split())
_SOFTMAX = frozenset("_softmax _log_softmax _softmax_backward_data _log_softmax_backward_data".split())
_NORM_FORWARD = frozenset("""native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_functional
    _native_batch_norm_legit_no_training native_layer_norm native_group_norm""".split())
_NORM_BACKWARD = frozenset("native_batch_norm_backward native_layer_norm_backward native_group_norm_backward".split())
_POOL = frozenset("max_pool2d_with_indices avg_pool2d".split())
_POOL_BACKWARD = frozenset("max_pool2d_with_indices_backward avg_pool2d_backward _adaptive_avg_pool2d_backward".split())
_ZERO_FLOP = frozenset("""empty empty_like zeros zeros_like ones ones_like full full_like new_zeros new_ones new_empty
    new_full scalar_tensor arange copy_ clone _to_copy cat stack index_select gather embedding slice select
    slice_scatter select_scatter constant_pad_nd split split_with_sizes unbind lift_fresh_copy
    _unsafe_view alias detach view t transpose permute expand unsqueeze squeeze reshape as_strided
    _reshape_alias index scatter_ scatter index_put_ index_put masked_fill_ fill_ zero_ bernoulli_
    native_dropout native_dropout_backward rand_like randn_like sym_size sym_numel""".split())


class TorchStepError(ValueError):
    """A module or its example inputs cannot be captured as a training step (the message says why)."""


@dataclass
class CapturedStep:
    """A captured training step: the graph and what its costs miss.

    Attributes:
        graph: the step as an [`OpGraph`][compgraph.ir.OpGraph] (ops in the traced order, which is topological).
        info: ``format`` (``torch``), ``optimizer``, ``parameters`` (count), ``parameter_bytes``,
            ``ops_unknown_shape``, ``ops_without_flops_rule`` and ``op_types_without_flops_rule``
            ([`step_coverage`][compgraph.torch_step.step_coverage]).
        gm: the traced ``torch.fx.GraphModule`` (ATen ops on meta tensors; [`placed_module`][compgraph.torch_step.placed_module]).
        holder: fx node name -> the name of the op holding its memory (itself, or for a folded
            view or tuple element the op that allocated it).
    """

    graph: OpGraph
    info: dict = field(default_factory=dict)
    gm: Any = None
    holder: dict[str, str] = field(default_factory=dict)


DENSE_TYPES = frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm",
                         "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
                         "aten._scaled_dot_product_flash_attention_backward",
                         "aten._scaled_dot_product_efficient_attention_backward"})
"""ATen's matrix products and attention kernels: the compute term uses a GPU's ``dense_efficiency``."""
CONV_PREFIXES = ("aten.convolution", "aten.cudnn_convolution")
"""ATen op type prefixes whose compute term uses ``conv_efficiency``."""


def torch_op_class(op_type: str) -> str:
    """The PyTorch front end's compute class of ``op_type``: ``dense``, ``conv`` or ``other``."""
    if op_type in DENSE_TYPES:
        return "dense"
    return "conv" if op_type.startswith(CONV_PREFIXES) else "other"


def _tensor_bytes(t) -> int:
    return int(t.numel()) * int(t.element_size())


def _tensors(val) -> list:
    """The tensors of a node's value, flattened (``None`` and non-tensors dropped)."""
    import torch

    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)):
        return [t for v in val for t in _tensors(v)]
    return []


def _numel(val) -> int:
    return sum(int(t.numel()) for t in _tensors(val))


def aten_flops(packet_name: str, args: list, out) -> float | None:
    """FLOPs of one ATen op outside ``torch.utils.flop_counter``'s registry, by its rules (module
    docstring); ``None`` when no rule applies.

    Args:
        packet_name: the overload packet's name (``relu``, ``native_layer_norm``...).
        args: the op's positional arguments, tensors as meta tensors.
        out: its output value (a tensor or a tuple of tensors).
    """
    import torch

    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if packet_name in _ZERO_FLOP:
        return 0.0
    if packet_name in _SOFTMAX:
        return 5.0 * _numel(out)
    if packet_name in _NORM_FORWARD:
        return 5.0 * (first.numel() if first is not None else _numel(out))
    if packet_name in _NORM_BACKWARD:
        return 7.0 * (first.numel() if first is not None else _numel(out))
    if packet_name in _REDUCTIONS:
        return float(first.numel()) if first is not None else float(_numel(out))
    if packet_name in _POOL or packet_name in _POOL_BACKWARD:
        ks = next((a for a in args if isinstance(a, (list, tuple)) and a and all(isinstance(k, int) for k in a)), [1])
        window = math.prod(ks) if len(ks) > 1 else ks[0] ** 2
        n = _numel(out) if packet_name in _POOL else (first.numel() if first is not None else 0)
        return float(n * window)
    if packet_name == "embedding_dense_backward":
        return float(first.numel()) if first is not None else 0.0
    return None


def _op_flops(target, args: list, kwargs: dict, out) -> float | None:
    import torch
    from torch.utils.flop_counter import flop_registry

    packet = target.overloadpacket
    if packet in flop_registry:
        try:
            return float(flop_registry[packet](*args, out_val=out, **kwargs))
        except Exception:  # a formula that cannot read these arguments: fall back to the rules
            pass
    rule = aten_flops(packet.__name__, args, out)
    if rule is not None:
        return rule
    if torch.Tag.pointwise in target.tags:
        return float(_numel(out))
    return None


def _module_hooks(module, paths: dict):
    """Forward pre/post hooks on every submodule that annotate the nodes traced inside it with its path."""
    import torch.fx.traceback as fxt

    stack: list = []

    def pre(mod, args):
        cm = fxt.annotate({"module": paths[mod]})
        cm.__enter__()
        stack.append(cm)

    def post(mod, args, out):
        stack.pop().__exit__(None, None, None)

    handles = []
    for mod in paths:
        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post))
    return handles, stack


def _to_meta(x):
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().to("meta")
    if isinstance(x, (tuple, list)):
        return type(x)(_to_meta(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_meta(v) for k, v in x.items()}
    return x


def capture_training_step(module, example_args, optimizer: str = "adam", name: str = "torch") -> CapturedStep:
    """Capture one training step of ``module`` (forward, loss, backward, optimizer update) as an
    [`OpGraph`][compgraph.ir.OpGraph] (module docstring).

    Args:
        module: a ``torch.nn.Module`` whose ``module(*example_args)`` returns the scalar training
            loss. It is moved to the ``meta`` device (build a large one under
            ``torch.device("meta")`` so that it is never allocated).
        example_args: a tuple of example inputs (tensors at the training batch's shapes and dtypes).
        optimizer: ``sgd`` or ``adam`` ([`OPTIMIZERS`][compgraph.torch_step.OPTIMIZERS]).
        name: the graph's name.
    Returns:
        A [`CapturedStep`][compgraph.torch_step.CapturedStep].
    Raises:
        TorchStepError: not a module, an unknown optimizer, no trainable parameter, the loss is
            not a scalar tensor, or the trace failed (the message names the error).
    """
    import torch
    import torch.fx.traceback as fxt
    from torch.fx.experimental.proxy_tensor import make_fx

    if not isinstance(module, torch.nn.Module):
        raise TorchStepError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    if optimizer not in OPTIMIZERS:
        raise TorchStepError(f"optimizer: unknown {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    if not isinstance(example_args, (tuple, list)):
        example_args = (example_args,)
    module = module.to("meta")
    module.train()
    args = tuple(_to_meta(a) for a in example_args)
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if not named:
        raise TorchStepError(f"{name}: the module has no trainable parameter")
    pnames = [n for n, _ in named]
    bnames = [n for n, _ in module.named_buffers()]
    params = [p.detach().requires_grad_(True) for _, p in named]
    buffers = [b.detach() for _, b in module.named_buffers()]
    slots = [torch.zeros_like(p) for p in params for _ in range(2)] if optimizer == "adam" else []
    paths = {mod: path for path, mod in module.named_modules()}
    lr = LEARNING_RATE[optimizer]

    def step(params, buffers, slots, args):
        from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks

        loss = torch.func.functional_call(module, {**dict(zip(pnames, params)), **dict(zip(bnames, buffers))},
                                           tuple(args))
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.requires_grad:
            got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise TorchStepError(f"{name}: module(*example_args) must return the scalar training loss "
                                 f"(a 0-dim tensor that needs grad); got {got}")
        if loss.grad_fn is not None:
            setup_stacktrace_preservation_hooks([loss.grad_fn])
        with fxt.annotate({"phase": "backward"}):  # marks the backward pass where autograd's own marks are missing
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        with torch.no_grad():
            b1, b2, eps = 0.9, 0.999, 1e-8
            bc1, bc2 = 1 - b1, 1 - b2  # bias corrections at step 1
            for i, (pname, p, g) in enumerate(zip(pnames, params, grads)):
                if g is None:
                    continue
                with fxt.annotate({"update": pname}):
                    if optimizer == "sgd":
                        p.add_(g, alpha=-lr)
                    else:
                        m, v = slots[2 * i], slots[2 * i + 1]
                        m.lerp_(g, 1 - b1)
                        v.mul_(b2).addcmul_(g, g, value=1 - b2)
                        denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
                        p.addcdiv_(m, denom, value=-lr / bc1)
        return loss

    handles, open_annotations = _module_hooks(module, paths)
    try:
        with fxt.preserve_node_meta():
            gm = make_fx(step)(params, buffers, slots, list(args))
    except TorchStepError:
        raise
    except Exception as e:
        raise TorchStepError(f"{name}: capture failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from e
    finally:
        for h in handles:
            h.remove()
        while open_annotations:  # a module whose forward raised
            open_annotations.pop().__exit__(None, None, None)
    resident_names = pnames + bnames + [f"{pnames[i // 2]}/Adam" + ("_1" if i % 2 else "") for i in range(len(slots))]
    graph, uncosted, holder = _to_op_graph(gm, resident_names, name)
    info = {"format": "torch", "optimizer": optimizer, "parameters": int(sum(p.numel() for p in params)),
            "parameter_bytes": int(sum(_tensor_bytes(p) for p in params)), **step_coverage(graph, uncosted)}
    return CapturedStep(graph, info, gm, holder)


def _to_op_graph(gm, resident_names: list[str], name: str) -> tuple[OpGraph, set[str], dict[str, str]]:
    """The traced ``GraphModule`` as an [`OpGraph`][compgraph.ir.OpGraph] (module docstring), with the op types that
    no FLOPs rule covers and fx node name -> the op holding its memory ([`CapturedStep.holder`][compgraph.torch_step.CapturedStep.holder]).
    ``resident_names``: the names of the first placeholders (parameters, buffers, optimizer state);
    the rest are the inputs. An op's module path is in its name
    ([`compgraph.torch_models.module_path`][compgraph.torch_models.module_path])."""
    import torch

    resident = len(resident_names)
    uncosted: set[str] = set()
    nodes = [n for n in gm.graph.nodes if n.op != "output"]
    # the forward op of each autograd sequence number, for the module of its backward nodes
    fwd_module: dict[int, str] = {}
    for n in nodes:
        custom = n.meta.get("custom") or {}
        if n.op == "call_function" and not n.meta.get("autograd_backward") and "module" in custom:
            fwd_module.setdefault(n.meta.get("seq_nr", -1), custom["module"])
    ops: list[Op] = []
    index: dict[Any, int] = {}
    base: dict[Any, Any] = {}  # node -> the node whose storage it aliases (itself if none)
    readers: dict[Any, list[int]] = {}  # base node -> ops that read it so far
    folded: dict[Any, tuple[int, int]] = {}  # a view or tuple element -> (the op holding its memory, its output)
    edges: list[Edge] = []
    ph = 0
    for n in nodes:
        val = n.meta.get("val")
        outs = _tensors(val)
        shapes = [tuple(int(d) for d in t.shape) for t in outs]
        nbytes = [_tensor_bytes(t) for t in outs]
        op_type, flops, accessed, alloc, param_bytes, colocate = n.op, 0.0, 0.0, 0, 0, []
        if n.op == "placeholder":
            op_name = resident_names[ph] if ph < resident else f"input/{ph - resident}"
            op_type = "Parameter" if ph < resident else "Input"
            param_bytes = sum(nbytes) if ph < resident else 0
            alloc = 0 if ph < resident else sum(nbytes)
            ph += 1
            base[n] = n
        else:
            custom = n.meta.get("custom") or {}
            if "update" in custom:
                op_name = f"update/{custom['update']}/{n.name}"
            elif n.meta.get("autograd_backward") or custom.get("phase") == "backward":
                module = fwd_module.get(n.meta.get("seq_nr", -1), custom.get("module", ""))
                op_name = f"gradients/{module}/{n.name}" if module else f"gradients/{n.name}"
            else:
                module = custom.get("module", "")
                op_name = f"{module}/{n.name}" if module else n.name
            target = n.target
            if target is operator.getitem:  # an element of a tuple: folded into the op that made it
                base[n] = n
                if n.args[0] in folded:  # an element of a view's list (split): a view of that view's base
                    folded[n] = folded[n.args[0]]
                else:  # its position among the op's tensor outputs (a tuple may hold None: convolution_backward)
                    elements = list(n.args[0].meta.get("val") or ())
                    folded[n] = (index[n.args[0]], len(_tensors(elements[: int(n.args[1])])))
                continue
            elif isinstance(target, torch._ops.OpOverload):
                op_type = f"aten.{target.overloadpacket.__name__}"
                schema = target._schema
                written = node_writes(n)
                aliased_out = bool(schema.returns) and schema.returns[0].alias_info is not None
                first = n.args[0] if n.args else None
                base[n] = base.get(first, first) if aliased_out and first in base else n
                if aliased_out and not written and first in base:  # a view: folded into the op holding its memory
                    folded[n] = _source(first, index, folded)
                    continue
                f = _op_flops(target, [_meta_of(a) for a in n.args], {k: _meta_of(v) for k, v in n.kwargs.items()}, val)
                flops = 0.0 if f is None else f
                if f is None:
                    uncosted.add(op_type)
                in_bytes = sum(_tensor_bytes(t) for a in n.all_input_nodes for t in _tensors(a.meta.get("val")))
                accessed = float(in_bytes + sum(nbytes))
                alloc = 0 if aliased_out else sum(nbytes)
                for arg in written:
                    b = base.get(arg)
                    if b is not None and b.op == "placeholder" and ops[index[b]].param_bytes > 0:
                        colocate.append(ops[index[b]].name)
                    if b is not None:  # a write after every earlier reader of the tensor it writes
                        for r in readers.get(b, []):
                            edges.append(Edge(r, len(ops), 0, control=True))
            else:
                raise TorchStepError(f"{name}: node {n.name}: unsupported call {n.target!r}")
        i_op = len(ops)
        floats = [t.dtype for t in outs if t.dtype.is_floating_point]
        dtype = str(floats[0]).removeprefix("torch.") if floats else "float32"
        ops.append(Op(name=op_name, type=op_type, output_shapes=shapes, output_bytes=nbytes, flops=flops,
                      bytes_accessed=accessed, alloc_bytes=int(alloc), param_bytes=int(param_bytes),
                      gpu_kernel=True, colocation=sorted(set(colocate)), dtype=dtype))
        index[n] = i_op
        for a in n.all_input_nodes:  # the bytes of what it reads: a tensor, a view of one, one element of a tuple
            src, k = _source(a, index, folded)
            edges.append(Edge(src, i_op, sum(_tensor_bytes(t) for t in _tensors(a.meta.get("val"))), src_output=k))
            readers.setdefault(base.get(a, a), []).append(i_op)
    # one edge per (src, dst, kind): several views of one tensor read by one op move it once (the largest
    # view's bytes); a control edge from an op to itself (it read what it writes) is dropped
    merged: dict[tuple[int, int, bool], Edge] = {}
    for e in edges:
        key = (e.src, e.dst, e.control)
        if e.src != e.dst and (key not in merged or e.bytes > merged[key].bytes):
            merged[key] = e
    unique = list(merged.values())
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise TorchStepError(f"{name}: two ops share a name")
    holder = {n.name: ops[_source(n, index, folded)[0]].name for n in nodes}
    return OpGraph(name=name, ops=ops, edges=unique, fetches=[]), uncosted, holder


def _source(node, index: dict, folded: dict) -> tuple[int, int]:
    """``(op index, output)`` holding the memory that ``node`` reads: its own op, or for a folded view
    or tuple element the op that allocated it."""
    return folded[node] if node in folded else (index[node], 0)


def _meta_of(a):
    """An fx argument with its nodes replaced by their meta values."""
    import torch.fx

    if isinstance(a, torch.fx.Node):
        return a.meta.get("val")
    if isinstance(a, (list, tuple)):
        return type(a)(_meta_of(v) for v in a)
    return a


def step_coverage(graph: OpGraph, uncosted_types: set[str]) -> dict:
    """What the cost rules miss in a captured step: ``ops_unknown_shape`` (0: every shape is
    known on meta tensors), ``ops_without_flops_rule`` (ops of ``uncosted_types``) and
    ``op_types_without_flops_rule`` (comma-separated, at most 240 characters)."""
    uncosted = [op.type for op in graph.ops if op.type in uncosted_types]
    return {"ops_unknown_shape": 0, "ops_without_flops_rule": len(uncosted),
            "op_types_without_flops_rule": ",".join(sorted(set(uncosted)))[:240]}


def load_torch_step(spec: str, optimizer: str = "adam") -> CapturedStep:
    """Capture the training step of a user's PyTorch model named by ``spec``.

    ``spec`` is ``"module:function"``, the module imported with the current folder first on
    ``sys.path`` (as ``--keras``). ``function()`` returns ``(module, example_args)``, where
    ``module(*example_args)`` returns the scalar training loss; the step adds the backward
    and ``optimizer``'s update ([`capture_training_step`][compgraph.torch_step.capture_training_step]). Example::

        # mymodel.py; then: placement experiment --torch mymodel:step
        import torch
        from torch import nn

        def step():
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
                def forward(self, x, y):
                    return nn.functional.cross_entropy(self.body(x), y)
            return Net(), (torch.randn(16, 32), torch.randint(0, 10, (16,)))

    Raises:
        compgraph.user_graph.UserGraphError: the spec, the import, the function, what it
            returns, or the capture ([`TorchStepError`][compgraph.torch_step.TorchStepError]) fails; the message names the spec.
    """
    from compgraph.user_graph import UserGraphError, resolve_user_function

    fn, func_name = resolve_user_function(spec, "torch")
    try:
        result = fn()
    except Exception as e:
        raise UserGraphError(f"torch {spec!r}: {func_name}() failed: {type(e).__name__}: {e}") from e
    except SystemExit as e:
        raise UserGraphError(f"torch {spec!r}: {func_name}() called sys.exit({e.code!r})") from None
    if not (isinstance(result, tuple) and len(result) == 2):
        raise UserGraphError(f"torch {spec!r}: {func_name}() must return (module, example_args); "
                             f"got {type(result).__name__}")
    try:
        return capture_training_step(result[0], result[1], optimizer, name=spec)
    except TorchStepError as e:
        text = str(e)
        raise UserGraphError(f"torch {spec!r}: {text.removeprefix(f'{spec}: ')}") from e


def has_aten_rule(op_type: str) -> bool:
    """True if a captured step's op type (``aten.<packet>``, ``Parameter``, ``Input``, ``getitem``)
    has a FLOPs rule: ``torch.utils.flop_counter``'s registry, [`aten_flops`][compgraph.torch_step.aten_flops]' rules, or the
    pointwise tag of the packet's overloads."""
    if not op_type.startswith("aten."):
        return op_type in ("Parameter", "Input", "getitem")
    import torch
    from torch.utils.flop_counter import flop_registry

    name = op_type[len("aten."):]
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return False
    if packet in flop_registry or aten_flops(name, [], ()) is not None:
        return True
    return any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())


def placed_module(step: CapturedStep, devices: dict[str, str]):
    """The captured step as a ``torch.fx.GraphModule`` that runs placed: each op on its device, a
    copy (``aten._to_copy``) inserted wherever an op reads a tensor that lives on another device.

    Args:
        step: a [`CapturedStep`][compgraph.torch_step.CapturedStep] (with its ``gm``).
        devices: op name -> torch device string (``cuda:1``, ``cpu``) for every op of ``step.graph``.
    Returns:
        ``(module, inputs)``: the module, called with the step's tensors flattened in order
        (parameters, buffers, optimizer state, inputs; see ``inputs``), returns ``[loss]`` and
        updates the parameters, buffers and optimizer state in place; ``inputs`` is
        ``[(op name, device)]``, where each of them must be. A view or a tuple element runs with the
        op holding its memory; an op that writes a tensor in place runs where that tensor lives;
        a tensor factory (``empty``, ``arange``...) makes its tensor on its op's device.
    Raises:
        KeyError: an op without a device in ``devices``.
    """
    import torch
    import torch.fx

    if step.gm is None:
        raise ValueError("placed_module: the step was captured without its GraphModule")
    graph = torch.fx.Graph()  # plain positional inputs, a list of outputs (no pytree codegen)
    graph.output(graph.graph_copy(step.gm.graph, {}))
    where: dict = {}
    for n in graph.nodes:
        if n.op == "output":
            continue
        dev = devices[step.holder[n.name]]
        for arg in node_writes(n):
            if arg in where:
                dev = where[arg]  # an in-place write runs where the tensor it writes lives
                break
        where[n] = dev
    copies: dict = {}
    for n in list(graph.nodes):
        if n.op != "call_function":
            continue
        dev = where[n]
        for a in list(n.all_input_nodes):
            if where.get(a, dev) == dev or not _holds_tensor(a):
                continue
            key = (a, dev)
            if key not in copies:
                with graph.inserting_before(n):
                    copies[key] = graph.call_function(torch.ops.aten._to_copy.default, (a,), {"device": torch.device(dev)})
                where[copies[key]] = dev
            n.replace_input_with(a, copies[key])
        if any(isinstance(v, torch.device) for v in n.kwargs.values()):
            n.kwargs = {k: (torch.device(dev) if isinstance(v, torch.device) else v) for k, v in n.kwargs.items()}
    graph.lint()
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    inputs = [(step.holder[n.name], where[n]) for n in graph.nodes if n.op == "placeholder"]
    return module, inputs


#: ATen ops that write an input in place although their schema does not mark it written
#: (``Tensor(a!)``): op overload packet -> (names of the arguments written, the argument that must be
#: true for the write, or ``None`` if always). Found by running every op of the benchmarks' steps on
#: real tensors and comparing each unmarked tensor argument before and after
#: (``tests/test_torch_placed.py``): batch norm in training mode updates its running statistics
#: in place (``running_mean``, ``running_var``: ``aten/src/ATen/native/Normalization.cpp``), yet
#: ``native_batch_norm``'s schema declares them ``Tensor?`` (PyTorch 2.x).
UNMARKED_WRITES: dict[str, tuple[tuple[str, ...], str | None]] = {
    name: (("running_mean", "running_var"), "training")
    for name in ("native_batch_norm", "batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm",
                 "miopen_batch_norm", "_native_batch_norm_legit")
}


def written_args(target) -> list[int]:
    """Positions of the arguments an ATen op overload writes in place: those its schema marks
    written, plus [`UNMARKED_WRITES`][compgraph.torch_step.UNMARKED_WRITES]' (whether the condition argument is true is decided per
    call by [`node_writes`][compgraph.torch_step.node_writes])."""
    schema = target._schema
    out = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    extra = UNMARKED_WRITES.get(target.overloadpacket.__name__)
    if extra is not None:
        out += [i for i, a in enumerate(schema.arguments) if a.name in extra[0] and i not in out]
    return out


def node_writes(node) -> list:
    """The fx argument nodes an fx node of an ATen op writes in place ([`written_args`][compgraph.torch_step.written_args]; an
    unmarked write counted only when its condition argument, e.g. batch norm's ``training``, is
    true), in schema order; a ``None`` or constant argument is left out."""
    import torch
    import torch.fx

    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return []
    schema = target._schema

    def arg(i: int):
        return node.args[i] if i < len(node.args) else node.kwargs.get(schema.arguments[i].name)

    extra = UNMARKED_WRITES.get(target.overloadpacket.__name__)
    if extra is not None and extra[1] is not None:
        cond = next((i for i, a in enumerate(schema.arguments) if a.name == extra[1]), None)
        if cond is not None and not arg(cond):
            marked = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
            return [a for a in (arg(i) for i in marked) if isinstance(a, torch.fx.Node)]
    return [a for a in (arg(i) for i in written_args(target)) if isinstance(a, torch.fx.Node)]


def _holds_tensor(node) -> bool:
    """True when an fx node's value is a tensor (not a tuple, a list or ``None``)."""
    import torch

    return isinstance(node.meta.get("val"), torch.Tensor)


def module_source(module, inputs: list[tuple[str, str]], header: str = "") -> str:
    """A standalone Python file defining ``PlacedStep`` (the [`placed_module`][compgraph.torch_step.placed_module] ``module``'s code)
    and ``INPUTS`` (``[(op name, device)]``, the order of its arguments); ``header`` is put first
    as comments."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += ["import torch", "from torch import device  # noqa: F401 (the devices of the transfers)",
              "from math import inf, nan  # noqa: F401", "NoneType = type(None)", "", "",
              "class PlacedStep(torch.nn.Module):",
              '    """One training step, placed: call it with INPUTS\' tensors on their devices; it returns',
              '    [loss] and updates the parameters, buffers and optimizer state in place."""', ""]
    lines += ["    " + line if line.strip() else "" for line in module.code.strip("\n").splitlines()]
    lines += ["", "", "INPUTS = ["] + [f"    ({name!r}, {dev!r})," for name, dev in inputs] + ["]", ""]
    return "\n".join(lines)
