# derive-env: `make test` and `make demo` build their own virtualenv from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# Test-only framework pins (Python 3.11 wheels; torch 2.13.0 is the CPU build on disk).
FRAMEWORKS := torch==2.13.0 tensorflow-cpu==2.21.0 jax==0.10.2 jaxlib==0.10.2 lightning==2.6.6
STAMP  := $(VENV)/.installed

.PHONY: test demo lint venv clean system-packages

# Debian packages the e2e tests run for real, "program:package": each is installed (one
# apt-get update, then apt-get install) only when its program is missing.
SYSTEM_PACKAGES += /usr/sbin/sshd:openssh-server
SYSTEM_PACKAGES += /usr/bin/mpirun.openmpi:openmpi-bin

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(FRAMEWORKS)
	$(PIP) install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

system-packages:
	@missing=; for t in $(SYSTEM_PACKAGES); do test -x "$${t%%:*}" || missing="$$missing $${t#*:}"; done; \
	if [ -n "$$missing" ]; then apt-get update && apt-get install -y --no-install-recommends $$missing; fi

test: lint system-packages
	$(VENV)/bin/pytest -q tests

demo: $(STAMP) system-packages
	$(PY) tests/e2e/demo.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
