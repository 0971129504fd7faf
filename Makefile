# derive-env: `make test` and `make demo` build their own virtualenv from a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# Test-only framework pins (Python 3.11 wheels; torch 2.13.0 is the CPU build on disk), and
# SageMaker's training toolkit (a C extension and boto3: the cross-check of
# tests/sources/test_sagemaker.py, marked frameworks).
FRAMEWORKS := torch==2.13.0 tensorflow-cpu==2.21.0 jax==0.10.2 jaxlib==0.10.2 lightning==2.6.6 \
              sagemaker-training==5.1.4
# Determined's harness (tests/sources/test_determined.py runs its launcher on the typed
# rendezvous files), without its dependencies: it pins requests<2.32 and pulls matplotlib,
# boto3 and the cloud SDKs, none of which its launcher and RendezvousInfo import.
DETERMINED := determined==0.38.1 ruamel.yaml==0.19.1 appdirs==1.4.4
STAMP  := $(VENV)/.installed

.PHONY: test demo lint venv clean managers engine

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(FRAMEWORKS)
	$(PIP) install --quiet --no-deps $(DETERMINED)
	$(PIP) install --quiet -e . --group test
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples

# Real cluster managers and sshd for the e2e tests, and the shells the hook is tested in
# (Debian packages, root): only the missing ones.
managers:
	@export PATH="$$PATH:/usr/sbin:/sbin"; missing=""; \
	command -v slurmctld >/dev/null || missing="$$missing slurm-wlm"; \
	command -v munged >/dev/null || missing="$$missing munge"; \
	command -v sshd >/dev/null || missing="$$missing openssh-server"; \
	command -v mpirun.openmpi >/dev/null || missing="$$missing openmpi-bin"; \
	command -v mpiexec.mpich >/dev/null || missing="$$missing mpich"; \
	command -v dash >/dev/null || missing="$$missing dash"; \
	command -v busybox >/dev/null || missing="$$missing busybox"; \
	dpkg -s libpmix-dev >/dev/null 2>&1 || missing="$$missing libpmix-dev"; \
	command -v sge_qmaster >/dev/null || missing="$$missing gridengine-master"; \
	command -v sge_execd >/dev/null || missing="$$missing gridengine-exec"; \
	command -v qsub >/dev/null || missing="$$missing gridengine-client"; \
	[ -e /usr/share/lmod/lmod/init/sh ] || missing="$$missing lmod"; \
	if [ -n "$$missing" ]; then apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi
	@$(MAKE) --no-print-directory engine

# The real container engine of tests/e2e/engine.py (Debian's docker.io: dockerd 20.10,
# containerd, runc, tini, a client with BuildKit), mmdebstrap for the base image and Compose
# v1: only the missing ones. A policy-rc.d that refuses every start (exit 101) is in place
# during the install, so Debian's own dockerd never starts (its default bridge is
# 172.17.0.0/16); any policy-rc.d already there is put back afterwards.
ENGINE_PACKAGES := /usr/sbin/dockerd:docker.io /usr/bin/mmdebstrap:mmdebstrap \
                   /usr/bin/docker-compose:docker-compose
engine:
	@missing=""; for pair in $(ENGINE_PACKAGES); do \
	  [ -x "$${pair%%:*}" ] || missing="$$missing $${pair#*:}"; done; \
	[ -z "$$missing" ] && exit 0; \
	saved=""; if [ -e /usr/sbin/policy-rc.d ]; then \
	  saved=$$(mktemp) && cp -p /usr/sbin/policy-rc.d "$$saved" || exit 1; fi; \
	restore() { if [ -n "$$saved" ]; then mv "$$saved" /usr/sbin/policy-rc.d; \
	  else rm -f /usr/sbin/policy-rc.d; fi; }; \
	trap restore EXIT; trap 'exit 130' INT TERM; \
	printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  -o DPkg::Lock::Timeout=600 --no-install-recommends $$missing

# The unit tests are CPU-bound and independent: pytest-xdist runs them on both cores. The
# end-to-end tests (tests/e2e) run one at a time: they start clusters, daemons and containers
# whose waits have bounds, so they must not compete with each other for the machine.
test: lint managers
	$(PY) -m pytest -q -n 2 --ignore=tests/e2e tests
	$(PY) -m pytest -q tests/e2e
	$(MAKE) --no-print-directory test-pythons

# tests/ on the path, as pyproject.toml gives it to pytest: the e2e harness imports
# tests/helpers.py and tests/support (no test module edits sys.path).
demo: $(STAMP) managers
	PYTHONPATH=tests $(PY) tests/e2e/demo.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
	rm -rf .venv-py* .venv-dist dist wheelhouse torch-wheels

# ---- Other Pythons and packaging (issue 8) ------------------------------------------------
# `make test` also runs the unit and CLI tests on every other supported CPython, in a light
# venv per interpreter (.venv-py3.10 ...: the package and the test tools, no frameworks).
# Interpreters come from pyenv (`$(pyenv root)/versions/3.10.*/bin/python3`, newest patch)
# or from PATH (python3.10). Missing: skipped with a message, but under CI=true it fails.
.PHONY: test-pythons test-lowest dist wheelhouse release
OTHER_PYTHONS  ?= 3.10 3.12 3.13
PYENV_VERSIONS := $(shell pyenv root 2>/dev/null || echo "$(HOME)/.pyenv")/versions
# Everything but the simulated clusters (tests/e2e), the tests that import torch, TensorFlow
# or JAX (only the main venv has them) and the wheel/venv builds (run once, from the main venv).
UNIT_ONLY      := -m "not e2e and not frameworks and not packaging" --ignore=tests/e2e

# $(call python_of,3.10): path of that interpreter, or nothing.
python_of = $$( { ls -d $(PYENV_VERSIONS)/$(1).*/bin/python3 2>/dev/null | sort -V | tail -n 1; \
	command -v python$(1); } | head -n 1)

test-pythons: $(addprefix test-py,$(OTHER_PYTHONS)) test-lowest

test-py%:
	@interp=$(call python_of,$*); \
	if [ -z "$$interp" ]; then \
	  case "$(CI)" in [Tt][Rr][Uu][Ee]) \
	    echo "make: CPython $* not found (looked in $(PYENV_VERSIONS)/$*.* and for python$* on PATH); under CI=true every supported Python must be tested" >&2; exit 1;; \
	  esac; \
	  echo "make: skipping the tests on CPython $*: no interpreter found (looked in $(PYENV_VERSIONS)/$*.* and for python$* on PATH)"; exit 0; \
	fi; \
	$(MAKE) --no-print-directory .venv-py$*/.installed INTERP="$$interp" \
	&& echo "== unit and CLI tests on $$(.venv-py$*/bin/python -VV | head -n 1)" \
	&& .venv-py$*/bin/python -m pytest -q -p no:cacheprovider -n 2 $(UNIT_ONLY) tests

.venv-py%/.installed: pyproject.toml Makefile
	rm -rf .venv-py$*
	$(INTERP) -m venv .venv-py$*
	.venv-py$*/bin/python -m pip install --quiet --upgrade pip
	.venv-py$*/bin/python -m pip install --quiet -e . --group test
	touch $@

# The lowest versions pyproject.toml allows (tests/test_packaging.py checks that they are
# its lower bounds), on the oldest supported Python: the ranges must hold what they promise.
LOWEST_DEPS := pydantic==2.6.0 click==8.4.0 tomli-w==1.0.0
test-lowest:
	@interp=$(call python_of,3.10); \
	if [ -z "$$interp" ]; then \
	  case "$(CI)" in [Tt][Rr][Uu][Ee]) echo "make: CPython 3.10 not found, needed for the lowest dependency versions" >&2; exit 1;; esac; \
	  echo "make: skipping the lowest dependency versions: no CPython 3.10"; exit 0; \
	fi; \
	$(MAKE) --no-print-directory .venv-py3.10-lowest/.installed INTERP="$$interp" \
	&& echo "== unit and CLI tests on CPython 3.10 with $(LOWEST_DEPS)" \
	&& .venv-py3.10-lowest/bin/python -m pytest -q -p no:cacheprovider -n 2 $(UNIT_ONLY) tests

.venv-py3.10-lowest/.installed: pyproject.toml Makefile
	rm -rf .venv-py3.10-lowest
	$(INTERP) -m venv .venv-py3.10-lowest
	.venv-py3.10-lowest/bin/python -m pip install --quiet --upgrade pip
	.venv-py3.10-lowest/bin/python -m pip install --quiet -e . --group test $(LOWEST_DEPS)
	touch $@

# Wheel and sdist into dist/, checked by twine. A light venv of its own (.venv-dist): building
# the wheel must not need the 3 GB test venv.
DIST_STAMP := .venv-dist/.installed
$(DIST_STAMP): Makefile
	$(PYTHON) -m venv .venv-dist
	.venv-dist/bin/python -m pip install --quiet --upgrade pip
	.venv-dist/bin/python -m pip install --quiet 'build>=1.2' 'twine>=5' 'towncrier>=24'
	touch $@

dist: $(DIST_STAMP)
	rm -rf dist
	.venv-dist/bin/python -m build --outdir dist .
	.venv-dist/bin/twine check --strict dist/*

# A release (docs/architecture.md, section 7): the changelog entry of __version__ from the
# fragments in changes/ (towncrier writes docs/CHANGELOG.md and `git rm`s the fragments it
# used), then the wheel and sdist. The version is passed explicitly: towncrier's own lookup
# imports derive_env, which may be another checkout's editable install. Stops before writing
# anything when the changelog has an entry for this version already or no fragment is left.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' src/derive_env/__init__.py)
release: $(DIST_STAMP)
	@test -n "$(VERSION)" || { echo "make: no __version__ in src/derive_env/__init__.py" >&2; exit 1; }
	@! grep -q '^## $(VERSION) ' docs/CHANGELOG.md || { \
	  echo "make: docs/CHANGELOG.md has an entry for $(VERSION) already: set the new version in src/derive_env/__init__.py first" >&2; exit 1; }
	@ls changes/*.md >/dev/null 2>&1 || { echo "make: no fragment in changes/: nothing to release" >&2; exit 1; }
	.venv-dist/bin/towncrier build --yes --version $(VERSION)
	$(MAKE) --no-print-directory dist

# An offline install for images built without internet: the wheel and every dependency, for
# one target Python and platform, in wheelhouse/ (`COPY wheelhouse/` + `pip install --no-index`;
# see docs/integration.md). E.g. make wheelhouse WHEELHOUSE_PYTHON=3.10
WHEELHOUSE_PYTHON   ?= 3.11
WHEELHOUSE_PLATFORM ?= manylinux2014_x86_64
wheelhouse: dist
	rm -rf wheelhouse
	.venv-dist/bin/python -m pip download --quiet --dest wheelhouse --only-binary=:all: \
	  --python-version $(WHEELHOUSE_PYTHON) --implementation cp \
	  --platform $(WHEELHOUSE_PLATFORM) dist/*.whl
	@ls wheelhouse
