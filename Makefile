# The two commands of the README. Both prepare the host first (idempotent).
#   make venv    only the host venv .venv (and the signer's .venv-signer): build.py's other commands, unit tests
#   make image   build and validate the default image (2.9-cu128)
#   make test    run the test suite: unit + image tests (Docker, no GPU)
# Longer work, for the release workflow or by hand:
#   make matrix  build and prove every line this host can build, one after another
#                (LINES="2.4-cu121 2.15-cu132" for some; each image removed after its proof)
#   make lines   the other lines CI leaves out (the CUDA 12.1 line through `--cuda 12.1 --push`, the
#                newest torch line) and the default image pushed whole with zstd; weekly (lines.yml)
#   make reproduce  two cold builds of the default line (CUDA= for another), caches emptied in between:
#                fails unless they are one image (scripts/reproduce.sh; weekly, lines.yml)
#   make arm64   the first multi-arch line for amd64 and arm64 (arm64 under qemu), proven,
#                pushed to the test registry as one index, and checked (tests/image/test_arm64.py;
#                about an hour on 2 cores, so not in `make test`)

# CUDA= picks another line (CUDA=13.0); empty: the matrix's default_cuda.
CUDA ?=
PYTHON := .venv/bin/python
# On hosts behind a TLS-intercepting proxy pip inside the build must trust its
# CA; the host's system bundle holds it. Passed as a BuildKit secret, never a layer.
CA_CERT ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
CA_FLAG := $(if $(CA_CERT),--ca-cert $(CA_CERT))
PYTEST_ARGS ?=

SHELL_FILES := container/start.sh container/profile.sh container/proof container/desktop/start-desktop.sh scripts/*.sh .ci/run

LINES ?=

.PHONY: venv image test unit lint bench-build matrix lines reproduce arm64

venv:
	bash scripts/host-venv.sh

image:
	bash scripts/prepare-host.sh
	$(PYTHON) build.py $(if $(CUDA),--cuda $(CUDA)) $(CA_FLAG)

test:
	bash scripts/prepare-host.sh --test-tools
	BUILD_CA_CERT=$(CA_CERT) REQUIRE_DOCKER=1 bash scripts/run-tests.sh $(PYTEST_ARGS)

unit:
	$(PYTHON) -m pytest -m "unit and not process" $(PYTEST_ARGS)

lint:
	$(PYTHON) build.py render --check
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy
	.venv/bin/shellcheck $(SHELL_FILES)
	.venv/bin/actionlint
	.venv/bin/zizmor --offline --no-progress .github/workflows
	$(PYTHON) -m pytest -m unit tests/unit/test_dockerfile_lint.py tests/unit/test_lint.py

matrix:
	bash scripts/prepare-host.sh
	$(PYTHON) build.py matrix $(foreach l,$(LINES),--line $(l)) $(CA_FLAG)

lines:
	bash scripts/prepare-host.sh --test-tools
	BUILD_CA_CERT=$(CA_CERT) REQUIRE_DOCKER=1 $(PYTHON) -m pytest -m lines $(PYTEST_ARGS)

reproduce:
	bash scripts/prepare-host.sh
	CA_CERT=$(CA_CERT) CUDA=$(CUDA) bash scripts/reproduce.sh

arm64:
	bash scripts/prepare-host.sh --test-tools --arm64
	BUILD_CA_CERT=$(CA_CERT) REQUIRE_DOCKER=1 $(PYTHON) -m pytest -m arm64 tests/image/test_arm64.py $(PYTEST_ARGS)

bench-build:
	bash scripts/bench-build.sh
