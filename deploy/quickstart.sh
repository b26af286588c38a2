#!/usr/bin/env bash
# Quickstart: a private MariaDB with the binlog settings outbox-relay needs,
# under ./.quickstart (nothing else on the machine is touched), an outbox
# table, the relay with the stdout sink, and a few events inserted so you see
# them flow. Ctrl-C (or the end of the demo) stops everything.
#
#   ./deploy/quickstart.sh            # run the demo and stop
#   KEEP=1 ./deploy/quickstart.sh     # keep the relay and MariaDB running; insert more rows yourself
#
# PORT (MariaDB, default 23306: below Linux's ephemeral ports, 32768–60999,
# so that no outgoing connection of a busy machine holds it) and METRICS_PORT (the relay's /metrics,
# default 9108) move them when those ports are taken: the script stops at
# once, before touching anything, when one is in use. OUTBOX_RELAY_BIN runs
# that binary (a release's, e.g. one unpacked from the image) instead of
# building one, and needs no Go.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)/.quickstart # physical: compared with the server's @@datadir
port=${PORT:-23306}
metrics_port=${METRICS_PORT:-9108}

# in_use PORT: something accepts connections on 127.0.0.1:PORT (bash's
# /dev/tcp: no other tool needed).
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# free_or_stop PORT VAR WHAT: stop, naming the variable that moves it, when
# PORT is taken. Another server on the quickstart's port would otherwise be
# the one the demo writes to and the relay reads.
free_or_stop() {
  if in_use "$1"; then
    echo "port $1 ($3) is in use by another program: run again with $2 set to a free port, e.g. $2=$(( $1 + 1 )) ./deploy/quickstart.sh" >&2
    exit 1
  fi
}
for p in "$port" "$metrics_port"; do
  case $p in ''|*[!0-9]*) echo "PORT and METRICS_PORT must be port numbers (got PORT=$port METRICS_PORT=$metrics_port)" >&2; exit 1 ;; esac
done
if [ "$port" = "$metrics_port" ]; then
  echo "PORT and METRICS_PORT are both $port: give them different ports" >&2
  exit 1
fi
# With KEEP=1 a previous run may still be running here: that is our own
# server and relay, not a stranger's, but a second copy could not start.
if [ -f "$root/mysqld.pid" ] && kill -0 "$(cat "$root/mysqld.pid" 2>/dev/null)" 2>/dev/null; then
  echo "the quickstart's MariaDB is still running (pid $(cat "$root/mysqld.pid"), from a KEEP=1 run): stop it first (kill $(cat "$root/mysqld.pid")), then run this again" >&2
  exit 1
fi
free_or_stop "$port" PORT "MariaDB"
free_or_stop "$metrics_port" METRICS_PORT "the relay's /metrics"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need mariadbd && [ ! -x /usr/sbin/mariadbd ]; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    echo "== installing mariadb-server (Debian package)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
  else
    echo "mariadbd not found: install MariaDB (Debian/Ubuntu: sudo apt-get install mariadb-server) and run this again" >&2
    exit 1
  fi
fi
mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)
if [ -n "${OUTBOX_RELAY_BIN:-}" ]; then
  [ -x "$OUTBOX_RELAY_BIN" ] || { echo "OUTBOX_RELAY_BIN=$OUTBOX_RELAY_BIN is not an executable file" >&2; exit 1; }
else
  need go || { echo "go not found: install Go 1.26 or newer, or set OUTBOX_RELAY_BIN to a release binary" >&2; exit 1; }
fi

mkdir -p "$root"
relay=${OUTBOX_RELAY_BIN:-$root/outbox-relay}
if [ -z "${OUTBOX_RELAY_BIN:-}" ]; then
  echo "== building outbox-relay"
  go build -o "$relay" ./cmd/outbox-relay
fi
echo "== $("$relay" version)"

if [ ! -d "$root/data/mysql" ]; then
  echo "== creating a MariaDB data directory in $root/data"
  mariadb-install-db --no-defaults --datadir="$root/data" --user="$(id -un)" \
    --auth-root-authentication-method=normal --skip-test-db >/dev/null
fi

echo "== starting MariaDB on 127.0.0.1:$port with log-bin, ROW format, FULL row image and metadata"
"$mariadbd" --no-defaults --user="$(id -un)" --datadir="$root/data" --bind-address=127.0.0.1 --port="$port" \
  --socket="$root/mysqld.sock" --pid-file="$root/mysqld.pid" --log-error="$root/mariadb.log" \
  --server-id=1 --log-bin="$root/data/binlog" --binlog-format=ROW --binlog-row-image=FULL \
  --binlog-row-metadata=FULL --gtid-strict-mode=ON --binlog-expire-logs-seconds=604800 \
  --innodb-buffer-pool-size=64M &
db_pid=$!
relay_pid=
cleanup() {
  [ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null && wait "$relay_pid" 2>/dev/null || true
  kill "$db_pid" 2>/dev/null && wait "$db_pid" 2>/dev/null || true
}
if [ -z "${KEEP:-}" ]; then trap cleanup EXIT; fi

# utf8mb4 on the connection too: the client's default (utf8mb3) cannot carry 4-byte UTF-8.
sql() { mariadb --no-defaults --default-character-set=utf8mb4 -h127.0.0.1 -P"$port" -uroot "$@"; }
# Ready when the server on the port is this one (its data directory), not
# merely some server: another one may have taken the port since the check.
ours() { [ "$(sql -N -e 'SELECT @@datadir' 2>/dev/null)" = "$root/data/" ]; }
for _ in $(seq 1 150); do
  ours && break
  kill -0 "$db_pid" 2>/dev/null || break
  sleep 0.2
done
if ! ours; then
  cleanup
  echo "the quickstart's MariaDB did not start on 127.0.0.1:$port; the end of its log ($root/mariadb.log):" >&2
  tail -n 5 "$root/mariadb.log" >&2 || true
  if grep -q 'Bind on TCP/IP port' "$root/mariadb.log" 2>/dev/null; then
    echo "port $port is in use by another program: run again with PORT set to a free port" >&2
  fi
  exit 1
fi

echo "== creating shop.outbox (Debezium's outbox columns)"
sql <<'SQL'
CREATE DATABASE IF NOT EXISTS shop DEFAULT CHARSET = utf8mb4;
CREATE TABLE IF NOT EXISTS shop.orders (id VARCHAR(36) PRIMARY KEY, total_cents INT NOT NULL) DEFAULT CHARSET = utf8mb4;
CREATE TABLE IF NOT EXISTS shop.outbox (
  id            CHAR(36)     NOT NULL PRIMARY KEY,
  aggregatetype VARCHAR(64)  NOT NULL,
  aggregateid   VARCHAR(64)  NOT NULL,
  type          VARCHAR(64)  NOT NULL,
  payload       JSON         NOT NULL,
  created_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) DEFAULT CHARSET = utf8mb4;  -- 4-byte UTF-8 (emoji) in text columns; latin1 would reject it
SQL

cat > "$root/config.yaml" <<YAML
# Written by deploy/quickstart.sh; the commented reference is deploy/config.example.yaml.
source: {host: 127.0.0.1, port: $port, user: root}
tables:
  - name: shop.outbox
checkpoint:
  path: $root/checkpoints.json
sinks:
  - name: console
    type: stdout
http:
  listen: 127.0.0.1:$metrics_port   # /metrics, /healthz, /readyz
YAML

echo "== starting the relay (events appear below as JSON lines)"
"$relay" run --config "$root/config.yaml" &
relay_pid=$!
# relay_running: stop the demo, saying so, when the relay is no longer
# running (its error is in its log above: a checkpoint it refuses, a taken
# port).
relay_running() {
  kill -0 "$relay_pid" 2>/dev/null && return 0
  wait "$relay_pid" || true
  relay_pid=
  cleanup
  echo "the relay stopped (its error is above; if it says the address is in use, run again with METRICS_PORT set to a free port)" >&2
  exit 1
}
# Ready when this relay, still running, says so on /readyz (its sink's
# pipeline has started: a checkpoint was resumed, or the start saved).
ready() {
  if need curl; then curl -sf "127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1; else [ -f "$root/checkpoints.json" ]; fi
}
for _ in $(seq 1 150); do
  kill -0 "$relay_pid" 2>/dev/null || break
  ready && break
  sleep 0.1
done
relay_running

echo "== inserting 3 orders, each with its outbox event in the same transaction"
for n in 1 2 3; do
  sql shop -e "START TRANSACTION;
    SET @id = UUID();
    INSERT INTO orders VALUES (@id, $n * 1000);
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
      VALUES (UUID(), 'order', @id, 'order.created', JSON_OBJECT('order_id', @id, 'total_cents', $n * 1000));
    COMMIT;"
done
sleep 2
echo "== a few of the relay's metrics (http://127.0.0.1:$metrics_port/metrics)"
curl -s "127.0.0.1:$metrics_port/metrics" 2>/dev/null | grep -E '^outbox_relay_(events_delivered_total|replication_lag_seconds|delivery_latency_seconds_count|checkpoint_saves_total)' || true

relay_running

if [ -n "${KEEP:-}" ]; then
  cat <<EOF
== running: the relay (pid $relay_pid) prints each event here; MariaDB (pid $db_pid) on 127.0.0.1:$port
   connect:  mariadb --no-defaults --default-character-set=utf8mb4 -h127.0.0.1 -P$port -uroot shop
   insert:   mariadb --no-defaults --default-character-set=utf8mb4 -h127.0.0.1 -P$port -uroot shop -e "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (UUID(), 'order', 'o-1', 'order.created', '{\"total_cents\": 4200, \"note\": \"😀\"}')"
   metrics:  curl -s 127.0.0.1:$metrics_port/metrics | grep outbox_relay_
   stop:     kill $relay_pid $db_pid   (the relay saves its checkpoint; run this script again to resume)
   ports:    PORT=<mariadb port> METRICS_PORT=<metrics port> KEEP=1 ./deploy/quickstart.sh (now $port and $metrics_port)
   data:     $root (remove it to start afresh)
EOF
  wait "$relay_pid"
else
  echo "== done: checkpoint saved in $root/checkpoints.json; run again and the relay resumes there"
fi
