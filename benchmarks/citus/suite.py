"""``make test-citus``: the engine's suites against a local Citus cluster (not part of ``make test``).

Starts a coordinator and two workers from the cached Citus build (building it first when the cache is
empty: the source tarball comes from ``--tarball`` or ``CE_CITUS_TARBALL``), makes ``template1`` a
Citus database on every node so that each database a test creates is one, and runs pytest with
``CE_TEST_DATABASE_URL`` pointing at the coordinator (``tests/conftest.py``). Every database migrates
itself through the Citus overlay (``migrations/citus/``), so the tests run unchanged on the
distributed schema. The cluster is stopped and deleted afterwards, whatever the outcome.

    python benchmarks/citus/suite.py                 # the default selection below
    python benchmarks/citus/suite.py -- -x -k leak   # anything after -- goes to pytest
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster

#: the conformance suite (the three adapters alike), the ACL-leak property test, and the tests of the
#: parts a distributed schema changes: the planner's exact and index plans with the counts behind them,
#: the BM25 statistics, reads as of a revision, and the cluster's own checks
SELECTION = (
    "tests/test_conformance.py",
    "tests/test_acl_leak_property.py",
    "tests/test_acl_planner.py",
    "tests/test_bm25_bounds.py",
    "tests/test_bm25_pruning.py",
    "tests/test_revisions_reads.py",
    "tests/citus_checks.py",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tarball", type=Path, default=cluster.TARBALL)
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest (replace the selection)")
    args = parser.parse_args()
    with cluster.cluster(args.tarball) as nodes:
        cluster.prepare_template(nodes)
        env = {**cluster.engine_environment(), "CE_TEST_DATABASE_URL": nodes[0].url()}
        selection = args.pytest_args or ["-q", *SELECTION]
        print(f"citus cluster up: coordinator {nodes[0].url()}; pytest {' '.join(selection)}", flush=True)
        return subprocess.run([sys.executable, "-m", "pytest", *selection], cwd=cluster.REPO, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
