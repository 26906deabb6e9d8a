"""pytest plugin for scripts/bench_mutation.py: the ``ci`` Hypothesis profile without shrinking.

Loaded with ``-p scripts.mutation_profile``. The examples generated are exactly the ``ci``
profile's (same derandomized seed, same max_examples, no database), so a mutant is killed or
survives exactly as under ``ci``; only the shrinking of a failure, which can take minutes and
tells the benchmark nothing, is skipped.
"""
from hypothesis import Phase, settings


def pytest_configure(config):
    settings.register_profile("mutation", parent=settings.get_profile("ci"),
                              phases=(Phase.explicit, Phase.reuse, Phase.generate))
    settings.load_profile("mutation")
