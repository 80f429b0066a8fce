# audioproof: the two commands a newcomer needs are `make serve` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := serve

BIN      := bin/audioproof-server
DEPS     := .deps
ARGS     ?=
BASE     ?= origin/main
GOTEST   := go test -race -timeout 20m
GO_BUILD := CGO_ENABLED=0 go build -trimpath

.PHONY: deps build serve test test-go fuzz bench parity boundaries clean

## deps: fetch Debian packages, ggml libraries, weights and Go modules (once)
deps:
	@bash scripts/deps.sh

## build: the server binary, without cgo
build: deps
	$(GO_BUILD) -o $(BIN) ./server

## serve: set up once, then run the server on 127.0.0.1:8080 (ARGS="--parallel-jobs" etc.)
serve: build
	./$(BIN) $(ARGS)

## test: everything CI runs: vet, unit and integration tests under -race,
## short fuzzing, the boundary check (where a base exists) and the parity run
test: deps
	go vet ./...
	$(GOTEST) ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=5s
	$(MAKE) --no-print-directory boundaries
	$(MAKE) --no-print-directory parity

## fuzz: run every fuzz target for FUZZTIME each
FUZZTIME ?= 30s
fuzz:
	@bash scripts/fuzz.sh $(FUZZTIME)

## bench: speed against references measured in the same run
bench: build
	@bash scripts/bench.sh

## parity: checkpoint parity of the four variants on every backend, with an evidence archive
parity: build
	@bash scripts/parity.sh $(BASE)

## boundaries: prove the protected files are unchanged against BASE
boundaries:
	@bash scripts/boundaries.sh $(BASE)

clean:
	rm -rf bin out
