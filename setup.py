"""Package list for setuptools (the rest of the metadata is in pyproject.toml).

The sbatch templates stay in the repository's top-level ``slurm/`` folder (users read and copy them
there) and are shipped as the package data ``hpcprof.slurm.templates`` (``package_dir`` maps that
package to ``slurm/``), so a non-editable install renders them too: see
``hpcprof.slurm.sbatch.templates_dir``."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["hpcprof", "hpcprof.*"]) + ["hpcprof.slurm.templates"],
    package_dir={"hpcprof.slurm.templates": "slurm"},
    package_data={"hpcprof.slurm.templates": ["*.sbatch"]},
)
