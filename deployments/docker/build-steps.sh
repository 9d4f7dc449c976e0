#!/bin/sh
# The install steps of deployments/docker/Dockerfile, kept in one script so that the image build and
# tests/unit/test_scale_out.py run the same commands (the test runs them here, where no Docker engine is).
#
#   build-steps.sh wheel PYTHON SOURCE_DIR WHEEL_DIR
#       builds the project's wheel (no dependencies) from SOURCE_DIR into WHEEL_DIR
#   build-steps.sh install PYTHON WHEEL_DIR EXTRAS [PACKAGE...]
#       installs that wheel with its extras (comma-separated, may be empty) and its dependencies, plus any
#       further packages (e.g. prefect-kubernetes for an image that also runs the Kubernetes worker)
#
# pip's own environment variables (PIP_NO_DEPS, PIP_TARGET, PIP_INDEX_URL, ...) apply to both steps.
set -eu

step="${1:?usage: build-steps.sh wheel|install PYTHON ...}"
python="${2:?the Python interpreter to run pip with}"
shift 2

case "$step" in
  wheel)
    source_dir="${1:?the folder holding pyproject.toml}"
    wheel_dir="${2:?the folder to write the wheel to}"
    # The project's own wheel only: its dependencies are resolved once, in the install step.
    "$python" -m pip wheel --no-cache-dir --no-deps --wheel-dir "$wheel_dir" "$source_dir"
    ;;
  install)
    wheel_dir="${1:?the folder holding the wheel}"
    extras="${2?the extras, comma-separated (may be empty)}"
    shift 2
    # Exactly one wheel is expected: a stale second one would make the choice silent.
    count=$(find "$wheel_dir" -maxdepth 1 -name 'nl2sql_engine-*.whl' | wc -l)
    if [ "$count" -ne 1 ]; then
      echo "build-steps.sh: expected one nl2sql_engine wheel in $wheel_dir, found $count" >&2
      exit 1
    fi
    wheel=$(find "$wheel_dir" -maxdepth 1 -name 'nl2sql_engine-*.whl')
    if [ -n "$extras" ]; then
      requirement="$wheel[$extras]"
    else
      requirement="$wheel"
    fi
    "$python" -m pip install --no-cache-dir "$requirement" "$@"
    ;;
  *)
    echo "build-steps.sh: unknown step '$step' (wheel or install)" >&2
    exit 2
    ;;
esac
