# fleetwave — build, test, demo.
GO        ?= go
BIN       := bin/fleetwave
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/fleetwave/fleetwave.Version=$(VERSION)
# tests never read the developer's git configuration
GITENV    := GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1

.PHONY: all build test test-short chaos demo bench scale vet fmt verify check clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/fleetwave

## test: every test, with the race detector, against a real redis-server and real git
test:
	$(GITENV) $(GO) test -race -count=1 -timeout 25m ./...

test-short:
	$(GITENV) $(GO) test -count=1 ./...

## chaos: the long chaos suite: every scenario (real hubs, redis-server, agents and git under
## injected faults) CHAOS_RUNS times, then the report; `make test` runs its short mix
## (./internal/chaos, the default there). Reproduce a plan with CHAOS_ARGS=-chaos.seed=N
CHAOS_RUNS ?= 3
chaos:
	$(GITENV) $(GO) test -count=1 -timeout 60m -run TestChaos -v ./internal/chaos/ \
		-args -chaos.long -chaos.runs=$(CHAOS_RUNS) $(CHAOS_ARGS)

## demo: a whole fleet on this machine (embedded Redis, hub, one agent per example node, console
## on :8080; another port with PORT=9090); it prints the console link and the API tokens
demo: build
	./$(BIN) demo $(if $(PORT),--listen 127.0.0.1:$(PORT))

## bench: the benchmark reports (engine, git write-back, reconciler, schema) with their baselines
## (redis-benchmark, the git CLI, cue vet when installed); figures are printed, never asserted
bench:
	FLEETWAVE_BENCH=1 $(GITENV) $(GO) test -p 1 -count=1 -timeout 30m -run 'TestBench|Figure' -v \
		./engine/ ./gitsync/ ./reconciler/ ./schema/ ./hub/ | grep -v -e '^=== ' -e '^--- PASS' -e '^PASS$$' -e 'writer.go:'

## scale: the scale report: a hub process, managed Redis and SCALE_NODES simulated agents per run
## (fleetwave dev scale); prints the table with its targets and writes docs/scale.md (its generated
## section) and docs/scale.svg. 1000 nodes take well under a minute, 100000 many minutes.
SCALE_NODES ?= 1000 10000 100000
scale: build
	$(GITENV) ./$(BIN) dev scale --nodes "$(SCALE_NODES)" --out docs --results docs/scale.json $(SCALE_ARGS)

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

## verify: formatting, vet and a tidy module, with nothing left uncommitted by them
verify: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GO) mod tidy
	git diff --exit-code go.mod go.sum

## check: the import rules of ARCHITECTURE.md (also enforced by TestDeps)
check: verify
	$(GITENV) $(GO) test -run TestDeps -count=1 .

clean:
	rm -rf bin

## fuzz: every fuzz target of the module, one at a time, for FUZZTIME each (default 60s), with a table
## of executions per target; failing inputs are saved under <pkg>/testdata/fuzz/ (scripts/fuzz.sh).
## The short run CI does needs no target of its own: `go test` (make test, make test-short) runs every
## committed seed corpus entry (<pkg>/testdata/fuzz/<Target>/ and the f.Add seeds) as a plain test.
.PHONY: fuzz fuzz-short
FUZZTIME ?= 60s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./scripts/fuzz.sh

## fuzz-short: every fuzz target for 5s, a smoke check that each one starts and fuzzes
fuzz-short:
	FUZZTIME=5s GO=$(GO) ./scripts/fuzz.sh
