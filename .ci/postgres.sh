# A throwaway PostgreSQL for the tests. Source this file, then:
#
#   pg_start            # install if missing, initdb in a temp dir, start,
#                       # create the test database, export BUDGET_TEST_POSTGRES
#   trap pg_stop EXIT   # stop the server and delete its directory, always
#
# PG_DURABLE=1 keeps the server's default durability (fsync on, for
# benchmarks); by default fsync is off, as the data is thrown away.
#
# The server runs as a non-root user (the postgres user the Debian package
# creates, else nobody; as the current user when not root), listens only on
# a Unix socket inside its own 0700 directory, and requires a password
# (scram-sha-256) that is made up per run.

pg_find_bin() {
  # Debian keeps initdb, pg_ctl and postgres in the versioned lib directory,
  # not on the PATH; take the newest version installed.
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      echo "$d"; return 0
    fi
  done
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    dirname "$(readlink -f "$(command -v initdb)")"; return 0
  fi
  return 1
}

pg_as_user() { # run a command as the server's user, in its directory
  if [ "$PG_USER" = "$(id -un)" ]; then
    (cd "$PG_DIR" && "$@")
  elif command -v runuser >/dev/null; then
    (cd "$PG_DIR" && runuser -u "$PG_USER" -- "$@")
  else
    (cd "$PG_DIR" && su -s /bin/sh "$PG_USER" -c "$(printf '%q ' "$@")")
  fi
}

pg_start() {
  PG_BIN=$(pg_find_bin) || true
  if [ -z "$PG_BIN" ]; then
    echo "postgres: initdb not found; installing the postgresql package"
    if [ "$(id -u)" != 0 ]; then
      echo "postgres: not root, cannot install PostgreSQL" >&2; return 1
    fi
    (export DEBIAN_FRONTEND=noninteractive
     apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql) >/dev/null
    PG_BIN=$(pg_find_bin) || { echo "postgres: no initdb after installing postgresql" >&2; return 1; }
  fi
  if [ "$(id -u)" = 0 ]; then
    if id postgres >/dev/null 2>&1; then PG_USER=postgres; else PG_USER=nobody; fi
  else
    PG_USER=$(id -un)
  fi
  PG_DIR=$(mktemp -d /tmp/tokenbudget-pg.XXXXXX)
  chmod 700 "$PG_DIR"
  local pw; pw=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  printf '%s\n' "$pw" >"$PG_DIR/pwfile"
  [ "$PG_USER" = "$(id -un)" ] || chown -R "$PG_USER" "$PG_DIR"
  echo "postgres: $("$PG_BIN/postgres" --version), as $PG_USER, in $PG_DIR"
  pg_as_user "$PG_BIN/initdb" -D "$PG_DIR/data" -U tokenbudget --pwfile="$PG_DIR/pwfile" \
    -A scram-sha-256 -E UTF8 --locale=C --no-sync >"$PG_DIR/initdb.log" 2>&1 ||
    { cat "$PG_DIR/initdb.log" >&2; return 1; }
  rm -f "$PG_DIR/pwfile"
  # Unix socket only.
  local opts="-c listen_addresses='' -c unix_socket_directories='$PG_DIR' -c max_connections=200"
  if [ "${PG_DURABLE:-0}" != 1 ]; then
    opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  fi
  pg_as_user "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 -o "$opts" \
    start >/dev/null || { cat "$PG_DIR/server.log" >&2; return 1; }
  PGPASSWORD=$pw "$PG_BIN/createdb" -h "$PG_DIR" -U tokenbudget tokenbudget_test ||
    { cat "$PG_DIR/server.log" >&2; return 1; }
  export BUDGET_TEST_POSTGRES="postgres://tokenbudget:$pw@/tokenbudget_test?host=$PG_DIR&sslmode=disable"
  echo "postgres: ready; BUDGET_TEST_POSTGRES=postgres://tokenbudget:xxxxx@/tokenbudget_test?host=$PG_DIR&sslmode=disable"
}

pg_stop() {
  [ -n "${PG_DIR:-}" ] && [ -d "$PG_DIR" ] || return 0
  if [ -f "$PG_DIR/data/postmaster.pid" ]; then
    pg_as_user "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      pg_as_user "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$PG_DIR"
  unset PG_DIR BUDGET_TEST_POSTGRES
}
