#!/usr/bin/env bash
# fuzz.sh: run every fuzz target of the module, one at a time (a fuzzing run
# uses every core), for $FUZZTIME each, and print a table
# target -> executions, new corpus entries, result.
#
#   FUZZTIME=60s       time per target (go test -fuzztime: "30s", "5m", or "1000x" executions)
#   FUZZ_MATCH=regexp  only the targets whose name matches (default: all)
#   FUZZ_PKGS="./x/ ./y/"  only these packages (default: ./...)
#   FUZZ_PARALLEL=n    fuzzing workers per target (default: GOMAXPROCS)
#   FUZZ_TIMEOUT=d     go test -timeout (default: twice FUZZTIME plus 10m, 1h for "Nx")
#   GO=go
#
# A failing input is written by go test to <pkg>/testdata/fuzz/<Target>/ and
# the run goes on with the next target; the exit status is 1 if any target
# failed. A run that ends with a bare "context deadline exceeded" and no
# failing input is the race of Go's fuzzing coordinator at the end of
# -fuzztime (go.dev/issue/75804, fixed in Go 1.27; frequent on a loaded
# machine): it is reported as such and not counted as a failure. "execs" 0
# means the time went by gathering the seed corpus' coverage (FUZZTIME too
# short for the target). Logs are kept in $FUZZ_LOGS (default: a temporary
# directory).
# Targets may read their own variables, e.g. FLEETWAVE_FUZZ_STRICT=1 and
# FLEETWAVE_FUZZ_SLOW=10s for reconciler's FuzzTemplate.
#
# `go test ./...` (make test) already runs every seed corpus entry of every
# target once, as a plain test: that is the short run CI does.
set -u -o pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-60s}
FUZZ_MATCH=${FUZZ_MATCH:-.}
FUZZ_PKGS=${FUZZ_PKGS:-./...}
FUZZ_PARALLEL=${FUZZ_PARALLEL:-}
FUZZ_LOGS=${FUZZ_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/fleetwave-fuzz.XXXXXX")}

# seconds of a Go duration made of h, m and s parts ("90s", "1h30m"); empty
# for anything else (an execution count "1000x")
seconds() {
	local d=$1 total=0
	while [[ $d =~ ^([0-9]+)([hms])(.*)$ ]]; do
		case ${BASH_REMATCH[2]} in
		h) total=$((total + BASH_REMATCH[1] * 3600)) ;;
		m) total=$((total + BASH_REMATCH[1] * 60)) ;;
		s) total=$((total + BASH_REMATCH[1])) ;;
		esac
		d=${BASH_REMATCH[3]}
	done
	[ -z "$d" ] && echo "$total"
}
if [ -z "${FUZZ_TIMEOUT:-}" ]; then
	if secs=$(seconds "$FUZZTIME") && [ -n "$secs" ]; then
		FUZZ_TIMEOUT=$((2 * secs + 600))s
	else
		FUZZ_TIMEOUT=1h
	fi
fi
# tests never read the developer's git configuration (as in the Makefile)
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1

cd "$(dirname "$0")/.." || exit 2
mkdir -p "$FUZZ_LOGS"

module=$("$GO" list -m) || exit 2
# go test -list prints a package's matching names, then "ok <pkg> <time>";
# a package that does not build is reported and skipped.
list=$("$GO" test -list '^Fuzz' $FUZZ_PKGS 2>&1)
if [ $? -ne 0 ]; then
	grep -vE '^(Fuzz|ok |\?)' <<<"$list" >&2
	echo "fuzz.sh: some packages could not be listed (above); fuzzing the others" >&2
fi
targets=()
pending=()
while IFS= read -r line; do
	case $line in
	Fuzz*) pending+=("$line") ;;
	"ok "*)
		pkg=$(awk '{print $2}' <<<"$line")
		for t in ${pending[@]+"${pending[@]}"}; do
			if [[ $t =~ $FUZZ_MATCH ]]; then
				targets+=("$pkg $t")
			fi
		done
		pending=()
		;;
	esac
done <<<"$list"

if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz.sh: no fuzz target matches '$FUZZ_MATCH' in $FUZZ_PKGS" >&2
	exit 2
fi

echo "fuzzing ${#targets[@]} targets for $FUZZTIME each (logs in $FUZZ_LOGS)"
parallel=()
if [ -n "$FUZZ_PARALLEL" ]; then
	parallel=(-parallel "$FUZZ_PARALLEL")
fi
rows=()
failed=0
for entry in "${targets[@]}"; do
	pkg=${entry% *}
	target=${entry#* }
	log="$FUZZ_LOGS/$(tr '/' '_' <<<"${pkg#"$module"}")-$target.log"
	start=$(date +%s)
	"$GO" test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" -timeout="$FUZZ_TIMEOUT" ${parallel[@]+"${parallel[@]}"} "$pkg" >"$log" 2>&1
	rc=$?
	took=$(($(date +%s) - start))
	last=$(grep -E '^fuzz: elapsed: .*execs: [0-9]+' "$log" | tail -n 1)
	execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
	interesting=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
	if [ -z "$execs" ]; then
		execs=0 interesting=0
	fi
	if [ "$rc" -eq 0 ]; then
		result=ok
	elif grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
		result="ok (coordinator race at the deadline, go.dev/issue/75804; no failing input)"
	else
		result=FAIL
		failed=1
		if saved=$(grep -oE 'testdata/fuzz/[^ ]+' "$log" | head -n 1) && [ -n "$saved" ]; then
			result="FAIL ($saved)"
		fi
	fi
	rel=${pkg#"$module"}
	rel=.${rel}
	rows+=("$(printf '%-14s %-24s %12s %10s %6ss  %s' "$rel" "$target" "${execs:--}" "${interesting:--}" "$took" "$result")")
	echo "${rows[-1]}"
done

echo
printf '%-14s %-24s %12s %10s %7s  %s\n' package target execs "new inputs" time result
for r in "${rows[@]}"; do
	echo "$r"
done
if [ "$failed" -ne 0 ]; then
	echo
	echo "failures: see the logs in $FUZZ_LOGS; failing inputs were saved under the packages' testdata/fuzz/"
fi
exit "$failed"
