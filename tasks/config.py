"""The experiment's configuration: one typed model for the CLI, the flows, the sweep and the tasks.

[`ExperimentConfig`][tasks.config.ExperimentConfig] says everything one experiment needs: the graph (``source``, a
[`compgraph.frontends.GraphSource`][compgraph.frontends.GraphSource]), the machine (``cluster``), where placements are measured
(``env``), the ``methods``, ``budget``, ``seed`` and the end-to-end ``train_steps``, and five
sections: ``grouping``, ``learners`` (each learner's own options, typed by its config in
[`placer.configs`][placer.configs]), ``ray`` (the distributed search), ``real`` (real execution) and
``tracking`` (where results go). Every check of these settings is a validator here, written
once: the ``placement experiment`` CLI builds this model from its flags and shows the first
error in one line (its flags map onto the fields: [`cli.main.EXPERIMENT_FLAGS`][cli.main.EXPERIMENT_FLAGS]), the
``placement-experiment`` flow takes its top-level fields as its parameters (so the Prefect form
shows one section per nested model), and the ``placement-sweep`` flow takes one as its base.

Checks that need the world rather than the settings (a writable out-dir, MLflow and Ray
answering, CUDA present, a user's file importing) stay where the work starts: the CLI's
pre-flight and the flow's stages.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PrivateAttr, create_model, field_validator, model_serializer, model_validator

from compgraph.frontends import BenchmarkSource, GraphSource, environment_problem, form_schema, framework_of, is_user_graph
from placer.configs import CONFIGS
from tasks.choices import ClusterName, Count, EnvName, GrouperName, MethodName, NonNegative, NonNegativeFloat
from tracking import placement_home


class _FormModel(BaseModel):
    """A model the Prefect form shows ([`compgraph.frontends.form_schema`][compgraph.frontends.form_schema]): an optional field
    whose default ``None`` means "unset" is a plain input there, and is left out of the model's dump
    while unset, so the form's defaults hold no ``null`` for it (validating the dump gives the same
    model)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=form_schema)

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler):
        data = handler(self)
        if not isinstance(data, dict):
            return data
        fields = type(self).model_fields
        return {k: v for k, v in data.items() if v is not None or k not in fields or fields[k].default is not None}


class _Section(_FormModel):
    """A section of the config (one section of the form)."""


class GroupingOptions(_Section):
    """How ops are grouped into the co-location groups the group-level methods place."""

    grouper: GrouperName | None = Field(None, description="a grouper of compgraph.grouping.GROUPERS (empty: 2017 for "
                                                          "benchmarks, heuristic for users' graphs)")
    num_groups: Count | None = Field(None, description="target number of groups of metis and fluid (empty: 256)")


class RayOptions(_Section):
    """The distributed search (2017 Sec. 3.4): controllers, workers and a parameter server on Ray."""

    controllers: NonNegative = Field(0, description="with more than 0, every learner searches on Ray with this many "
                                                    "controllers (over its own units); 0: in-process")
    workers: NonNegative = Field(0, description="measuring worker actors, one placement each at a time (0: K per "
                                                "controller)")
    gpus_per_worker: NonNegativeFloat = Field(0, description="GPUs each worker asks Ray for and sees (real execution "
                                                             "on GPU nodes)")
    policy_device: Literal["cpu", "cuda"] = Field("cpu", description="where controllers run the policy (cuda: rl "
                                                                     "only, one GPU each)")
    async_updates: bool = Field(False, description="2017's asynchronous updates instead of synchronous rounds (not "
                                                   "reproducible)")
    address: str | None = Field(None, description="an existing Ray cluster (auto, host:port or ray://host:port); "
                                                   "empty: a local Ray on 127.0.0.1")

    @model_validator(mode="after")
    def _needs_controllers(self):
        if self.controllers == 0:
            for name, given in (("workers", self.workers), ("gpus_per_worker", self.gpus_per_worker),
                                ("policy_device", self.policy_device != "cpu"), ("async_updates", self.async_updates),
                                ("address", self.address is not None)):
                if given:
                    raise ValueError(f"ray.{name} needs ray.controllers 1 or more (the distributed search)")
        return self

    def distributes(self, method: str) -> bool:
        """True if ``method`` searches on Ray: ``controllers > 0`` and it is a learner (every
        learner runs on Ray, over its own units: [`tasks.search.learner_grouping`][tasks.search.learner_grouping])."""
        return self.controllers > 0 and method in LEARNER_OPTIONS


class RealOptions(_Section):
    """Real execution (``env: real``) of the placements."""

    soft_placement: bool = Field(False, description="move ops that have no kernel on their device to the CPU "
                                                    "instead of failing")
    int_bounds: dict[str, Count] | None = Field(None, description="a user's graph: integer input name -> exclusive "
                                                                  "bound of the ids fed to it (default: the size of "
                                                                  "the table it indexes), e.g. {\"tokens\": 32000}")
    repeats: Count | None = Field(None, description="a PyTorch step: timed steps per placement, after the warm-up; "
                                                    "the median is its step time (empty: 5)")
    warmup: NonNegative | None = Field(None, description="steps run and dropped before the timed ones (empty: 1)")
    threads: Count | None = Field(None, description="a PyTorch step: torch.set_num_threads while measuring (empty: "
                                                    "torch's default), recorded either way")
    time_limit_s: PositiveFloat | None = Field(None, description="a PyTorch step: seconds a step may take before the "
                                                                 "placement fails (empty: 300)")
    isolate: bool = Field(False, description="a PyTorch step: measure each placement in a process of its own, so "
                                             "that what ran before in this process (glibc's heap) cannot change it; "
                                             "costs seconds a placement")
    host_memory: Literal["default", "reuse"] = Field("default", description="a PyTorch step: 'reuse' has glibc keep "
                                                     "freed host memory and map nothing anew, so copies to the host "
                                                     "stop paying for new pages after the warm-up (a named option; "
                                                     "default: PyTorch's and glibc's own)")

    def env_options(self) -> dict:
        """The options of [`cluster.factory.make_environment`][cluster.factory.make_environment] for ``env: real`` (only those given)."""
        out: dict = {"soft_placement": True} if self.soft_placement else {}
        if self.isolate:
            out["isolate"] = True
        if self.host_memory != "default":
            out["host_memory"] = self.host_memory
        for name in ("repeats", "warmup", "threads", "time_limit_s"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


class TrackingOptions(_Section):
    """Where the results go: the run folders, the graph cache, MLflow; resuming a run."""

    out_dir: str = Field(default_factory=lambda: str(placement_home()),
                         description="folder of the run folders, the MLflow store (when tracking_uri is empty), the "
                                     "graph cache and the placement logs (default: $PLACEMENT_HOME, else the user "
                                     "data folder: one store for runs started from any folder)")
    tracking_uri: str | None = Field(None, description="MLflow tracking URI; empty: the SQLite file out_dir/mlflow.db")
    cache_dir: str | None = Field(None, description="preprocessed-graph cache (empty: out_dir/graph-cache)")
    spool: bool = Field(False, description="log nothing to MLflow now; `placement log-run DIR` logs the run folder "
                                           "later")
    resume: bool = Field(False, description="continue an interrupted run with the same settings from its placement "
                                            "logs and checkpoints (nothing measured twice)")
    parent_run_id: str | None = Field(None, description="internal, set by the sweep: the MLflow run this experiment's "
                                                        "run nests under; leave empty")

    @property
    def graph_cache(self) -> str:
        """The preprocessed-graph cache folder: ``cache_dir``, else ``<out_dir>/graph-cache``."""
        return self.cache_dir or f"{self.out_dir}/graph-cache"


def _options_model(method: str, config: type[BaseModel]) -> type[BaseModel]:
    """``config``'s fields but ``budget`` and ``seed`` (the experiment's own) and a warm start's resolved
    ``init_ops`` and ``init_source`` (the experiment fills them in), unknown ones refused."""
    warm = ("init", "init_placement", "init_prob")  # the warm start's (placer.warm), listed last
    names = [n for n in config.model_fields if n not in ("budget", "seed", "init_ops", "init_source", *warm)]
    fields = {name: (config.model_fields[name].annotation, config.model_fields[name])
              for name in [*names, *(w for w in warm if w in config.model_fields)]}
    return create_model(f"{config.__name__.removesuffix('Config')}Options", __base__=_Section,
                        __doc__=f"{method}'s options; defaults are its paper's ({config.__module__}.{config.__name__}).",
                        **fields)  # type: ignore[call-overload]


LEARNER_OPTIONS: dict[str, type[BaseModel]] = {m: _options_model(m, c) for m, c in CONFIGS.items()}
"""Learner -> the model of its options (its config without budget and seed)."""


def learner_overrides(options: BaseModel, methods: list[str]) -> dict[str, dict]:
    """Per learner of ``methods``, its fields in ``options`` (a [`LearnerOptions`][tasks.config.LearnerOptions]) that differ
    from the paper defaults (the overrides [`tasks.search.learner_config`][tasks.search.learner_config] applies; learners
    without any left out)."""
    return {m: o for m in methods if m in LEARNER_OPTIONS and (o := getattr(options, m).model_dump(exclude_defaults=True))}


LearnerOptions = create_model(  # type: ignore[call-overload]
    "LearnerOptions", __base__=_Section,
    __doc__="Each learner's options; a field left at its paper default is no override.",
    **{m: (model, Field(default_factory=model, title=m)) for m, model in LEARNER_OPTIONS.items()})


class ExperimentConfig(_FormModel):
    """One experiment: every method on one graph and cluster, measured in one environment.

    Attributes:
        source: the graph ([`compgraph.frontends.GraphSource`][compgraph.frontends.GraphSource]).
        cluster: a preset (``placement clusters``) or the path of a YAML cluster spec.
        env: where placements are measured ([`cluster.environment.ENVIRONMENTS`][cluster.environment.ENVIRONMENTS]).
        methods: baselines and learners; ``None``: every baseline that applies but the optimum,
            then rl and post, then rl_warm and post_warm ([`resolved_methods`][tasks.config.ExperimentConfig.resolved_methods] after validation).
        init_placement: the warm-started learners start from this placement file instead of the best
            baseline ([`placer.warm`][placer.warm]).
        budget: placements each learner samples (>= 1).
        seed: the searches' seed (>= 0).
        train_steps: steps of the end-to-end training evaluation of the best placements (0: none).
        grouping, learners, ray, real, tracking: the sections (see their models).
    Raises:
        pydantic.ValidationError (a ``ValueError``): the first error names the field (a dotted
            path, e.g. ``ray.workers``) and the value.
    """

    _spec: tuple | None = PrivateAttr(None)  # (cluster, its spec), read once

    source: GraphSource = Field(default_factory=BenchmarkSource,
                                description="the graph: a benchmark (model, size) or a user's GraphDef, SavedModel, "
                                            "Keras model or PyTorch step")
    cluster: ClusterName = Field("k80x2", description="a preset cluster (k80x2: 2 K80 GPUs and a CPU, as in 2017) or "
                                                      "the path of a YAML cluster spec")
    env: EnvName = Field("sim", description="where placements are measured: sim (simulator), real (the step run on "
                                            "this machine's devices: TensorFlow, or a PyTorch step on its CPU and "
                                            "GPUs) or grappler (TensorFlow's own cost model)")
    methods: list[MethodName] | None = Field(None, description="baselines and learners (empty: every baseline that "
                                                               "applies but optimum, then rl and post, then rl_warm "
                                                               "and post_warm: the two started from the best "
                                                               "baseline)")
    budget: Count = Field(1000, description="placements each learner samples")
    seed: NonNegative = Field(0, description="seed of the searches")
    init_placement: str | None = Field(None, description="the warm-started learners (rl_warm, post_warm...) start "
                                                         "from this op -> device JSON file (placement export --format "
                                                         "json) instead of the best baseline")
    train_steps: NonNegative = Field(100, description="steps of the end-to-end training evaluation of the best "
                                                      "placements (0: none)")
    grouping: GroupingOptions = Field(default_factory=GroupingOptions, description="how ops are grouped")
    learners: LearnerOptions = Field(default_factory=LearnerOptions,  # type: ignore[valid-type]
                                     description="each learner's options (defaults: its paper's)")
    ray: RayOptions = Field(default_factory=RayOptions, description="the distributed search on Ray")
    real: RealOptions = Field(default_factory=RealOptions, description="real execution (env real)")
    tracking: TrackingOptions = Field(default_factory=TrackingOptions, description="where results go")

    @field_validator("methods")
    @classmethod
    def _methods_not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("empty; give at least one method, or none for the default ones")
        return value

    @model_validator(mode="after")
    def _consistent(self):
        from baselines import BASELINES
        from placer import policy_device_problem

        try:  # the cluster's preset or YAML file, read here once for the whole command (spec())
            spec = self.spec()
        except ValueError as exc:  # unknown preset, missing or invalid file (names the field inside)
            raise ValueError(f"cluster: {exc}") from None
        user = is_user_graph(self.source)
        if not user:
            from compgraph.models import BENCHMARKS

            src = self.source
            if src.model not in BENCHMARKS:
                raise ValueError(f"source.model: unknown model {src.model!r}; valid: {', '.join(BENCHMARKS)}")
            if src.size not in BENCHMARKS[src.model].sizes:
                raise ValueError(f"source.size: unknown size {src.size!r} for {src.model}; "
                                 f"valid: {', '.join(BENCHMARKS[src.model].sizes)}")
            if self.real.int_bounds:
                raise ValueError("real.int_bounds is for a user's graph; a benchmark's integer inputs are bounded by "
                                 "its own tables")
        problem = environment_problem(self.source, self.env)  # the environments its front end supports
        if problem:
            raise ValueError(problem)
        if self.env == "real" and framework_of(self.source) == "torch":  # a spec device this machine lacks: refused now
            from cluster.torch_real import check_devices, torch_devices

            check_devices(spec, torch_devices(spec))
        if framework_of(self.source) == "tf":
            for name in ("repeats", "threads", "time_limit_s"):
                if getattr(self.real, name) is not None:
                    raise ValueError(f"real.{name}: for a PyTorch step; a TensorFlow graph runs its fixed steps "
                                     "(10 steps, the first dropped: 2017 Sec. 3.4)")
            if self.real.isolate:
                raise ValueError("real.isolate: for a PyTorch step; a TensorFlow graph is measured in this process")
            if self.real.host_memory != "default":
                raise ValueError("real.host_memory: for a PyTorch step")
        for m in self.resolved_methods:
            problem = BASELINES[m].problem(spec, user) if m in BASELINES else None
            if problem:
                raise ValueError(f"methods: {problem}; drop it from methods")
        unused = learner_overrides(self.learners, [m for m in LEARNER_OPTIONS if m not in self.resolved_methods])
        if unused:
            m = next(iter(unused))
            raise ValueError(f"learners.{m}: options for learner {m!r}, which is not in methods")
        if self.init_placement is not None:  # a warm start's file: there, and someone to start from it (placer.warm)
            from pathlib import Path

            path = self.init_placement
            if not Path(path).is_file():
                what = f"{path!r} is a folder, not a file" if Path(path).is_dir() else f"no such file {path!r}"
                raise ValueError(f"init_placement: {what} (give the op -> device JSON of `placement export --format "
                                 "json`)")
            from tracking.evaluate import EvaluateError, load_placement_file

            try:  # its shape now; its ops and devices once the graph is prepared (tasks.search.file_start)
                load_placement_file(path)
            except EvaluateError as exc:
                raise ValueError(init_placement_error(exc, path)) from None
            if not self.warm_methods:
                raise ValueError(f"init_placement: no warm-started learner in methods to start from {path!r} (add "
                                 "rl_warm, post_warm...)")
        if self.ray.controllers and (problem := policy_device_problem(self.resolved_methods, self.ray.policy_device)):
            raise ValueError(f"ray.{problem}")
        for m, options in self.learner_options.items():  # before any search runs (placer.distributed refuses it too)
            if self.ray.distributes(m) and options.get("restart_after") is not None:
                raise ValueError(f"learners.{m}.restart_after: {options['restart_after']} restarts one search on its "
                                 "incumbent; on Ray each controller has its own (leave it unset, or run without "
                                 "ray.controllers)")
            if self.ray.distributes(m) and options.get("layer_descent"):
                raise ValueError(f"learners.{m}.layer_descent: {options['layer_descent']:g} descends from one search's "
                                 "incumbent and restarts its policy there; on Ray each controller has its own (leave "
                                 "it unset, or run without ray.controllers)")
        return self

    def spec(self):
        """The [`cluster.spec.ClusterSpec`][cluster.spec.ClusterSpec] of ``cluster`` (read from its preset or file once
        per config)."""
        if self._spec is None or self._spec[0] != self.cluster:
            from cluster.spec import load_cluster

            self._spec = (self.cluster, load_cluster(self.cluster))
        return self._spec[1]

    def mlflow_params(self) -> dict:
        """The config flattened for MLflow, in one call: the parameters known before any work
        (``methods`` resolved, ``budget``, ``k``: rl's K, 2017 Eq. 3, from ``learners`` or the paper
        default, ``seed``, ``env``, ``cluster``: the spec's name, ``learner_options``: compact JSON with
        sorted keys so that runs of equal settings carry equal strings, ``source``: its JSON, so that
        ``placement export`` can prepare the same graph again). The prepared graph's parameters (model,
        size, ops, groups, grouper) are [`tasks.experiment.graph_params`][tasks.experiment.graph_params]'."""
        import json

        options = self.learner_options
        k = options.get("rl", {}).get("k", CONFIGS["rl"].model_fields["k"].default)
        return {"methods": ",".join(self.resolved_methods), "budget": self.budget, "k": k, "seed": self.seed,
                "env": self.env,
                "cluster": self.spec().name,
                "learner_options": json.dumps(options, sort_keys=True, separators=(",", ":"), default=str),
                "source": self.source.model_dump_json()}

    def run_settings(self) -> dict:
        """Every setting that names the run (graph source, cluster, env, methods, budget, seed,
        grouping, learner options, a user graph's integer bounds): runs of equal settings share their
        hash ([`tracking.live.ExperimentRecorder`][tracking.live.ExperimentRecorder]'s ``settings``)."""
        return {"source": self.source.model_dump(), "cluster": self.cluster, "methods": self.resolved_methods,
                "budget": self.budget, "seed": self.seed, "env": self.env, "grouper": self.grouping.grouper,
                "num_groups": self.grouping.num_groups, "learner_options": self.learner_options,
                **({"int_bounds": self.real.int_bounds} if self.real.int_bounds else {})}

    @property
    def env_options(self) -> dict:
        """The options of [`cluster.factory.make_environment`][cluster.factory.make_environment] ([`RealOptions.env_options`][tasks.config.RealOptions.env_options]
        with ``env: real``; none in the other environments)."""
        return self.real.env_options() if self.env == "real" else {}

    def flow_parameters(self) -> dict:
        """This config as the ``placement-experiment`` flow's parameters (its top-level fields), handed
        over: the flow takes this very config back ([`from_flow`][tasks.config.ExperimentConfig.from_flow]) instead of validating its
        fields again (which reads the cluster's file and a warm start's placement file once more)."""
        key = self._handover_key(dict(self))
        if key:  # a config without a key (it did not serialise) is validated again by the flow
            _HANDED[key] = self
        while len(_HANDED) > 8:  # a sweep hands one per run: keep the last few
            _HANDED.pop(next(iter(_HANDED)))
        return dict(self)

    @classmethod
    def from_flow(cls, **fields) -> "ExperimentConfig":
        """The config of the flow's parameters: the config handed over with these very values
        ([`flow_parameters`][tasks.config.ExperimentConfig.flow_parameters], e.g. by the CLI or the sweep, already validated), else one built
        and validated from them (a run from the Prefect UI or a deployment).

        Raises:
            pydantic.ValidationError: settings that do not fit together (built here only).
        """
        key = cls._handover_key(fields)
        handed = _HANDED.get(key) if key else None  # parameters that do not serialise match no config
        return handed if handed is not None else cls(**fields)

    @classmethod
    def _handover_key(cls, fields: dict) -> str:
        try:
            return cls.model_construct(**fields).model_dump_json(warnings=False)
        except Exception:  # parameters of other shapes (dicts from a form): never handed over
            return ""

    @property
    def resolved_methods(self) -> list[str]:
        """``methods``, or the default ones: every baseline that applies to this graph and cluster
        but the optimum ([`baselines.applicable_baselines`][baselines.applicable_baselines]), then [`placer.DEFAULT_LEARNERS`][placer.DEFAULT_LEARNERS]
        (rl and post, then rl_warm and post_warm)."""
        if self.methods is not None:
            return list(self.methods)
        from baselines import applicable_baselines
        from placer import DEFAULT_LEARNERS

        return [*applicable_baselines(self.spec(), is_user_graph(self.source), optimum=False), *DEFAULT_LEARNERS]

    @property
    def learner_options(self) -> dict[str, dict]:
        """Per learner of the methods, its options that differ from the paper defaults
        ([`learner_overrides`][tasks.config.learner_overrides]); with ``init_placement``, each warm-started learner's
        ``init`` is ``placement`` from that file ([`placer.warm`][placer.warm])."""
        out = learner_overrides(self.learners, self.resolved_methods)
        if self.init_placement is not None:
            for m in self.warm_methods:
                out[m] = {**out.get(m, {}), "init": "placement", "init_placement": self.init_placement}
        return out

    @property
    def warm_methods(self) -> list[str]:
        """The learners of the methods that start from a given placement (``init`` ``best_baseline`` or
        ``placement``: [`placer.warm`][placer.warm]), e.g. ``rl_warm``."""
        from placer.warm import WARM_INITS

        options = learner_overrides(self.learners, self.resolved_methods)
        def init(m: str) -> str:
            field = CONFIGS[m].model_fields.get("init")
            return options.get(m, {}).get("init", field.default if field is not None else "uniform")

        return [m for m in self.resolved_methods if m in CONFIGS and init(m) in WARM_INITS]

    @property
    def user_graph(self) -> bool:
        """True for a user's graph (any source but a benchmark)."""
        return is_user_graph(self.source)


_HANDED: dict[str, ExperimentConfig] = {}
"""Configs handed to the flow in this process ([`ExperimentConfig.flow_parameters`][tasks.config.ExperimentConfig.flow_parameters]), by their
JSON: the flow takes them back without validating them again."""


def init_placement_error(exc: Exception, path: str) -> str:
    """A placement file's error ([`tracking.evaluate`][tracking.evaluate], worded for ``--placement``) as the warm
    start's: ``init_placement: '<path>': <what is wrong>``."""
    text = str(exc)
    for prefix in (f"--placement {path}", "--placement"):
        if text.startswith(prefix):
            return f"init_placement: {path!r}{text[len(prefix):]}"
    return f"init_placement: {path!r}: {text}"


def experiment_fields() -> list[str]:
    """Every leaf setting of [`ExperimentConfig`][tasks.config.ExperimentConfig] as a dotted path (``ray.workers``...), the
    sources' fields as ``source.<field>`` (over every kind: ``source.model``, ``source.path``...)
    and the learners' as ``learners.*`` (any learner's field): what the CLI's flags, the flow's form and the
    sweep must all cover."""
    from compgraph.frontends import FRONTENDS

    out: list[str] = []
    for name, info in ExperimentConfig.model_fields.items():
        if name == "source":
            out += dict.fromkeys(f"source.{f}" for fe in FRONTENDS.values() for f in fe.source.model_fields if f != "kind")
        elif name == "learners":
            out.append("learners.*")
        elif isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out += [f"{name}.{f}" for f in info.annotation.model_fields]
        else:
            out.append(name)
    return out
