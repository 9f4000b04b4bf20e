"""Framework adapters: hpcprof's step loop driven by a training framework's own hooks.

    from hpcprof.frameworks.lightning import HpcprofCallback       # Lightning: Trainer(callbacks=[...])
    from hpcprof.frameworks.transformers import HpcprofCallback    # Transformers: Trainer(callbacks=[...])

Each adapter is a thin module over the same session as ``hpcprof.run()`` (hpcprof.rank.session):
one hpcprof step per optimizer step (gradient accumulation counts once), a step record on every
rank, the profiler on every rank, the run directory ``analyze`` reads. Each module imports its
framework itself; importing :mod:`hpcprof` or this package imports none of them (they are the
optional extras ``hpcprof[lightning]`` and ``hpcprof[transformers]``). Plain Accelerate needs no
adapter: its loop is the user's, so ``hpcprof.run()`` and ``run.step()`` go around it (README,
"Your own training script").
"""
