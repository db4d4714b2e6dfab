# Sourced by scripts: installs PostgreSQL 15 (the SQL oracle and OLTP peer) from Debian when
# its server binaries are absent. Each test starts its own throwaway server (initdb in a
# temporary directory, 127.0.0.1 only): see python/sqlcheck/engines.py.
postgres_install() {
  if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >/dev/null; }
  fi
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
    || { echo "error: PostgreSQL 15 is needed as the SQL oracle; install postgresql-15" >&2; return 1; }
}
