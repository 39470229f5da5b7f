#!/bin/sh
# redis-instructions.sh runs the engine's script benchmarks with the Redis
# server under valgrind's callgrind and prints, beside each benchmark's
# Redis CPU time, the instructions Redis ran for it (redis-Ir/op). Unlike
# time, the count hardly moves with the load of a shared machine, so it
# compares two builds of the Lua scripts on one run each.
#
#   scripts/redis-instructions.sh                      # Step, Complete, Poll, CreateRollout
#   scripts/redis-instructions.sh 'BenchmarkComplete'  # a -bench pattern of engine/
#
# Needs valgrind (apt-get install valgrind) and redis-server. Redis runs
# some 50 times slower under it: one iteration of each benchmark.
set -eu
pattern=${1:-'BenchmarkStep$|BenchmarkComplete$|BenchmarkPoll$|BenchmarkCreateRollout$'}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
server=${REDIS_SERVER_BIN:-$(command -v redis-server || echo /usr/bin/redis-server)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cat >"$out/redis-server" <<WRAP
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$out/callgrind.out.%p -q "$server" "\$@"
WRAP
chmod +x "$out/redis-server"
cd "$(dirname "$0")/.."
REDIS_SERVER_BIN="$out/redis-server" REDIS_CALLGRIND_OUT="$out" \
	go test -run '^$' -bench "$pattern" -benchtime 1x -timeout 30m ./engine/
