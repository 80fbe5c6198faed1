"""Prefect tasks: thin wrappers around the stages; the algorithms live in the packages.

This package's ``__init__`` imports nothing, so that [`tasks.config`][tasks.config] (the experiment's
config) and [`tasks.choices`][tasks.choices] (the forms' choices) load without Prefect or torch: the CLI
checks a typo with them before anything heavy loads. The tasks are in [`tasks.stages`][tasks.stages]
(graph, cluster, baselines, references, record), [`tasks.search`][tasks.search], [`tasks.measure`][tasks.measure],
[`tasks.experiment`][tasks.experiment], [`tasks.reproduce`][tasks.reproduce] and [`tasks.publish`][tasks.publish].
"""
