"""Prefect tasks: thin wrappers around the stages; the algorithms live in the packages.

This package's ``__init__`` imports nothing, so that :mod:`tasks.config` (the experiment's
config) and :mod:`tasks.choices` (the forms' choices) load without Prefect or torch: the CLI
checks a typo with them before anything heavy loads. The tasks are in :mod:`tasks.stages`
(graph, cluster, baselines, references, record), :mod:`tasks.search`, :mod:`tasks.measure`,
:mod:`tasks.experiment`, :mod:`tasks.reproduce` and :mod:`tasks.publish`.
"""
