#!/usr/bin/env bash
# The whole test suite in two passes (what `make test` runs after the install):
#   1. every test not marked `alone`, on TEST_WORKERS pytest-xdist workers (default 2), the tests of
#      one file on one worker (--dist loadfile), so that a module's fixture (a job several tests
#      read) runs once; a worker that runs SLURM tests starts its own local cluster, whose job ids
#      (and so rendezvous ports) are apart from the other worker's (tests/slurm/conftest.py);
#   2. the tests marked `alone`, one at a time in one process: their truth is a timing of their own
#      run (a drill's in-run cost, a ladder's throughputs, a trigger), which another test's load on
#      the same cores would distort.
# Both passes always run; the exit status is the first pass's failure, else the second's. A pass
# that selects no test (PYTEST_ARGS naming only tests of the other pass) counts as passed, unless
# neither selects any. TEST_WORKERS=0 runs the first pass in one process too.
#
# Usage: scripts/run-tests.sh PYTHON [pytest arguments...]
set -uo pipefail
py=$1
shift
workers=${TEST_WORKERS:-2}

"$py" -m pytest -n "$workers" --dist loadfile -m "not alone" "$@"
first=$?
"$py" -m pytest -p no:xdist -m alone "$@"
second=$?

if [ "$first" -eq 5 ] && [ "$second" -eq 5 ]; then exit 5; fi
for rc in "$first" "$second"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
