"""The sbatch templates, installed as the package data ``hpcprof.slurm.templates``.

This folder stays at the top of the repository, where users read and copy the templates; setup.py
maps it into the package so that an installed hpcprof (editable or from a wheel) renders them with
``python -m hpcprof.sbatch --template NAME``. This file only makes the folder an importable package;
it holds no code."""
