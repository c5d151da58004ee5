#!/usr/bin/env bash
# Start a local PostgreSQL for the store tests (CI and developers), idempotently:
# install Debian's postgresql if missing, start the newest cluster, create the test role and
# database, and print the URL to export as LARKGATE_TEST_POSTGRES_URL.
#
#   export LARKGATE_TEST_POSTGRES_URL="$(bash scripts/start_postgres.sh | tail -n 1)"
#
# It also creates a superuser test role: the SQL connector's tests use it to create (and
# drop) roles with chosen privileges and to check that a privileged role is refused. With
# --superuser-url the last line printed is that role's URL instead:
#
#   export LARKGATE_TEST_POSTGRES_SUPERUSER_URL="$(bash scripts/start_postgres.sh --superuser-url | tail -n 1)"
#
# Its password is a known test password: run this only on a test machine (the server listens
# on 127.0.0.1 only, as Debian's cluster does by default).
#
# Needs root (or sudo) for apt-get and for acting as the postgres system user.
set -euo pipefail

PG_ROLE="${PG_ROLE:-larkgate}"
PG_PASSWORD="${PG_PASSWORD:-larkgate}"
PG_DATABASE="${PG_DATABASE:-larkgate_test}"
PG_SUPER_ROLE="${PG_SUPER_ROLE:-larkgate_super}"
PG_SUPER_PASSWORD="${PG_SUPER_PASSWORD:-larkgate_super}"

print_superuser_url=false
case "${1:-}" in
    "") ;;
    --superuser-url) print_superuser_url=true ;;
    *) echo "usage: $0 [--superuser-url]" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

log() { echo "start_postgres: $*" >&2; }

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing postgresql"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi

version="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$version main"; then
    log "creating cluster $version/main"
    $SUDO pg_createcluster "$version" main >&2
fi

# The socket directory lives on tmpfs on many machines and is gone after a reboot.
$SUDO install -d -o postgres -g postgres -m 2775 /var/run/postgresql
status="$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}')"
if [ "$status" != "online" ]; then
    log "starting cluster $version/main"
    $SUDO pg_ctlcluster "$version" main start >&2
fi
port="$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')"

for _ in $(seq 1 60); do
    if pg_isready -q -h 127.0.0.1 -p "$port"; then break; fi
    sleep 0.5
done
pg_isready -q -h 127.0.0.1 -p "$port" || { log "PostgreSQL did not become ready"; exit 1; }

psql_admin() { $SUDO runuser -u postgres -- psql -p "$port" -v ON_ERROR_STOP=1 -qtA "$@"; }

if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$PG_ROLE'")" != "1" ]; then
    log "creating role $PG_ROLE"
    # CREATEDB: the tests create (and drop) one database per test.
    psql_admin -c "CREATE ROLE \"$PG_ROLE\" LOGIN CREATEDB PASSWORD '$PG_PASSWORD'"
fi
if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$PG_DATABASE'")" != "1" ]; then
    log "creating database $PG_DATABASE"
    psql_admin -c "CREATE DATABASE \"$PG_DATABASE\" OWNER \"$PG_ROLE\""
fi
# Created, or brought back to LOGIN SUPERUSER with the expected password if it exists.
if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$PG_SUPER_ROLE'")" != "1" ]; then
    log "creating superuser role $PG_SUPER_ROLE"
    psql_admin -c "CREATE ROLE \"$PG_SUPER_ROLE\" LOGIN SUPERUSER PASSWORD '$PG_SUPER_PASSWORD'"
else
    psql_admin -c "ALTER ROLE \"$PG_SUPER_ROLE\" LOGIN SUPERUSER PASSWORD '$PG_SUPER_PASSWORD'"
fi

if $print_superuser_url; then
    echo "postgresql+asyncpg://$PG_SUPER_ROLE:$PG_SUPER_PASSWORD@127.0.0.1:$port/$PG_DATABASE"
else
    echo "postgresql+asyncpg://$PG_ROLE:$PG_PASSWORD@127.0.0.1:$port/$PG_DATABASE"
fi
