# A real 2-node SLURM cluster on this machine (root needed), state under $(SLURM_STATE_DIR).
# Included by the top-level Makefile; the cluster is tools/localslurm.py.
#   make slurm-up                     start slurmctld, slurmdbd + MariaDB, slurmd n1 and n2
#   eval "$(make -s slurm-env)"       export SLURM_CONF for sbatch, srun, sacct, hpcprof.submit
#   make slurm-status / slurm-down    show / stop its daemons (stopped by pid)
SLURM_STATE_DIR ?= .slurm-state
SLURM_NODES ?= 2
SLURM_PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)

.PHONY: slurm-deps slurm-up slurm-down slurm-env slurm-status

slurm-deps:
	scripts/install-debian-deps.sh

slurm-up:
	$(SLURM_PYTHON) tools/localslurm.py up --state-dir $(SLURM_STATE_DIR) --nodes $(SLURM_NODES)
	@echo 'now run: eval "$$($(SLURM_PYTHON) tools/localslurm.py env --state-dir $(SLURM_STATE_DIR))"'

slurm-env:
	@$(SLURM_PYTHON) tools/localslurm.py env --state-dir $(SLURM_STATE_DIR)

slurm-status:
	$(SLURM_PYTHON) tools/localslurm.py status --state-dir $(SLURM_STATE_DIR)

slurm-down:
	$(SLURM_PYTHON) tools/localslurm.py down --state-dir $(SLURM_STATE_DIR)
