#!/usr/bin/env bash
# Run the test suite (--extended: with its extended tier, tests/conftest.py): create/update the
# venv (with test extras), then pytest
# on 2 workers with the bounded Hypothesis `ci` profile (tests marked with one xdist_group run
# on one worker: they share work measured once per process). Extra args go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
workers="${MCF_TEST_WORKERS:-2}"
exec .venv/bin/python -m pytest -n "$workers" --dist loadgroup --durations=15 "$@"
