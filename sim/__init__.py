"""Everything the core is checked with, one sub-package per concern.

- ``models``:  the tiny MTP and target models, the paged KV cache, the block allocator.
- ``oracle``:  the from-scratch references, comparison, plain-list cases, weak-spot coverage,
               the tiny model's sensitivity: what "right" means, with no serving or ranks.
- ``serving``: the serving-runner simulation: scenarios, the serving loop, whole runs.
- ``ranks``:   worker processes on real ``torch.distributed`` groups (PCP).
- ``impls``:   the implementations under test, by name: the core, vLLM, ...
- ``cli``:     ``python -m sim``.

Imports run one way: ``models`` imports no other part of ``sim``; ``oracle``
only ``models``; ``serving`` may use both; ``ranks`` and ``impls`` sit on top
(import-linter enforces it: ``[tool.importlinter]`` in pyproject.toml).
"""
