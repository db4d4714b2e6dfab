#!/usr/bin/env bash
# Installs MinIO when absent and starts it on 127.0.0.1 on a free port over a temporary
# directory. Source it: it defines minio_start and minio_stop and exports AWS_* and
# TIERDB_TEST_S3_URL for the tests.
#   MINIO_BIN   where the binary lives (default: $HOME/.cache/tierdb/bin/minio)
set -euo pipefail

MINIO_BIN=${MINIO_BIN:-$HOME/.cache/tierdb/bin/minio}

minio_install() {
  if [ -x "$MINIO_BIN" ]; then return 0; fi
  command -v go >/dev/null || { echo "error: Go is needed to build MinIO (go install); install Go first" >&2; return 1; }
  echo "== building MinIO with go install (about 2 minutes, once) into $(dirname "$MINIO_BIN")"
  mkdir -p "$(dirname "$MINIO_BIN")"
  (cd /tmp && GOBIN="$(dirname "$MINIO_BIN")" go install github.com/minio/minio@latest)
}

minio_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

minio_start() {
  minio_install
  MINIO_DIR=$(mktemp -d -t tierdb-minio.XXXXXX)
  local port console
  port=$(minio_free_port); console=$(minio_free_port)
  export MINIO_ROOT_USER=tierdbtest MINIO_ROOT_PASSWORD=tierdbtest-secret
  "$MINIO_BIN" server "$MINIO_DIR/data" --address "127.0.0.1:$port" --console-address "127.0.0.1:$console" \
    >"$MINIO_DIR/minio.log" 2>&1 &
  MINIO_PID=$!
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER \
    AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1
  for _ in $(seq 1 100); do
    if curl -sf "$AWS_ENDPOINT_URL/minio/health/live" >/dev/null; then break; fi
    if ! kill -0 "$MINIO_PID" 2>/dev/null; then cat "$MINIO_DIR/minio.log" >&2; echo "error: MinIO exited" >&2; return 1; fi
    sleep 0.2
  done
  # CreateBucket, signed with SigV4 by curl itself.
  curl -sf -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    "$AWS_ENDPOINT_URL/tierdb-test" >/dev/null
  export TIERDB_TEST_S3_URL="s3://tierdb-test/ci"
  echo "== MinIO $AWS_ENDPOINT_URL (pid $MINIO_PID, data $MINIO_DIR)"
}

minio_stop() {
  if [ -n "${MINIO_PID:-}" ]; then kill "$MINIO_PID" 2>/dev/null || true; wait "$MINIO_PID" 2>/dev/null || true; fi
  if [ -n "${MINIO_DIR:-}" ]; then rm -rf "$MINIO_DIR"; fi
  MINIO_PID=; MINIO_DIR=
}
