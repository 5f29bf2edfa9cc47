#!/usr/bin/env bash
# Runs the hpo systems benchmark: ftune on a SQLite file and on a scratch PostgreSQL server
# (initdb in a temporary directory, as user nobody when run as root; fsync off like the tests),
# then Optuna on SQLite (pip install optuna). Usage: bench/run_hpo_systems.sh [BUILD_DIR] [TRIALS]
set -euo pipefail
build=${1:-build}
trials=${2:-500}
work=$(mktemp -d /tmp/hpo_systems_XXXXXX)
as=""
if [ "$(id -u)" -eq 0 ]; then chown nobody "$work"; as="runuser -u nobody --"; fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() { $as "$bin/pg_ctl" -D "$work/pg" -m immediate stop > /dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
$as "$bin/initdb" -D "$work/pg" -A trust -U ftune --no-sync > /dev/null
$as "$bin/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
  -o "-p $port -k $work -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100" start > /dev/null

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/hpo_systems" --storage "$work/ftune.db" --trials "$trials"
echo
"$build/bench/hpo_systems" --storage "postgresql://ftune@127.0.0.1:$port/postgres" --trials "$trials"
echo
if python3 -c 'import optuna' 2> /dev/null; then
  python3 "$(dirname "$0")/optuna_systems.py" --storage "sqlite:///$work/optuna.db" --trials "$trials"
else
  echo "optuna not installed (pip install optuna): peer skipped"
fi
