# shellcheck shell=bash
# The pytest-xdist options scripts/test and scripts/test-django6 share: XDIST=(-n N --dist loadfile).
# Most tests wait on real servers, TTLs and worker processes rather than on the CPU, so two workers
# halve the wall time even on two cores. --dist loadfile keeps every test module on one worker, in
# file order, so a module's fixtures (its Celery worker, its gunicorn) start once and its
# timing-sensitive tests never share the machine with a second copy of themselves. Each worker
# starts its own session servers (redis, etcd, ZooKeeper, PostgreSQL) on free ports.
# LOCKKIT_TEST_WORKERS sets the number (0: no xdist, one process, as plain pytest runs).
XDIST=(-n "${LOCKKIT_TEST_WORKERS:-2}" --dist loadfile)
