"""The loop every method's trainer shares, whatever the engine: the trainer base
(:mod:`.trainer`: steps, intervals, evaluation, checkpoints, resume), deterministic batching
(:mod:`.batching`), evaluation and its sweeps (:mod:`.evaluation`) and the offline methods'
pass over a fixed store (:mod:`.offline`). Run management (folders, checkpoint files, signals,
metrics, the report) is :mod:`rlkit_methods.run`."""
