"""Package list for setuptools (the rest of the metadata is in pyproject.toml).

The sbatch templates stay in the repository's top-level ``slurm/`` folder (users read and copy them
there) and are shipped as the package data ``hpcprof.slurm.templates`` (``package_dir`` maps that
package to ``slurm/``), so a non-editable install renders them too: see
``hpcprof.slurm.sbatch.templates_dir``."""

from setuptools import Extension, find_packages, setup

setup(
    packages=find_packages(include=["hpcprof", "hpcprof.*"]) + ["hpcprof.slurm.templates"],
    package_dir={"hpcprof.slurm.templates": "slurm"},
    package_data={"hpcprof.slurm.templates": ["*.sbatch"]},
    # the analysis' C helpers (hpcprof/analysis/cext.py: the decode's columns, the operator walk, the timeline's text);
    # optional: without a C compiler the install goes on and the Python twins run (same results, slower)
    ext_modules=[Extension("hpcprof.analysis._native", ["hpcprof/analysis/_native.c", "hpcprof/analysis/_native_walk.c",
                                                            "hpcprof/analysis/_native_text.c"],
                           depends=["hpcprof/analysis/_native.h"], optional=True,
                           extra_compile_args=["-O2"])],
)
