# derive-env: `make test` and `make demo` build their own virtualenv from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# Test-only framework pins (Python 3.11 wheels; torch 2.13.0 is the CPU build on disk).
FRAMEWORKS := torch==2.13.0 tensorflow-cpu==2.21.0 jax==0.10.2 jaxlib==0.10.2 lightning==2.6.6
STAMP  := $(VENV)/.installed

.PHONY: test demo lint venv clean managers

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(FRAMEWORKS)
	$(PIP) install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# Real cluster managers for the e2e tests (Debian packages, root): only the missing ones.
managers:
	@export PATH="$$PATH:/usr/sbin:/sbin"; missing=""; \
	command -v slurmctld >/dev/null || missing="$$missing slurm-wlm"; \
	command -v munged >/dev/null || missing="$$missing munge"; \
	command -v mpirun.openmpi >/dev/null || missing="$$missing openmpi-bin"; \
	command -v mpiexec.mpich >/dev/null || missing="$$missing mpich"; \
	dpkg -s libpmix-dev >/dev/null 2>&1 || missing="$$missing libpmix-dev"; \
	if [ -n "$$missing" ]; then apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

test: lint managers
	$(VENV)/bin/pytest -q tests

demo: $(STAMP)
	$(PY) tests/e2e/demo.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
