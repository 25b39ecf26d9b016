#!/usr/bin/env bash
# Start the Debian PostgreSQL cluster on 127.0.0.1 and create the test role and database (idempotent).
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
version="$(ls /usr/lib/postgresql | sort -n | tail -1)"
if ! pg_lsclusters -h | grep -q "^$version main"; then
    $SUDO pg_createcluster "$version" main >/dev/null
fi
pg_lsclusters -h | grep -q "^$version main .* online" || $SUDO pg_ctlcluster "$version" main start
as_postgres() { $SUDO runuser -u postgres -- "$@"; }
for _ in $(seq 30); do as_postgres pg_isready -q -h 127.0.0.1 && break; sleep 1; done
as_postgres psql -qtAc "SELECT 1 FROM pg_roles WHERE rolname='judgetune'" | grep -q 1 ||
    as_postgres psql -qc "CREATE USER judgetune PASSWORD 'judgetune' CREATEDB"
as_postgres psql -qtAc "SELECT 1 FROM pg_database WHERE datname='judgetune_test'" | grep -q 1 ||
    as_postgres createdb -O judgetune judgetune_test
