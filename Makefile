# brandrt — see README.md. `make test` runs every test, `make demo` the demo;
# both install what is missing first.

# gompi v0.3.0 needs Go 1.27; go.mod names the toolchain and this lets the
# go command fetch it (the machine's go.env says GOTOOLCHAIN=local).
export GOTOOLCHAIN := auto
GO        ?= go
GOBIN     := $(shell $(GO) env GOPATH)/bin
BIN       := bin/brandrt
STATICCHECK_VERSION := v0.8.2
FUZZTIME  ?= 30s
# mpirun on this kind of machine: root, more ranks than cores, no binding
# (a bound rank gets a single core).
MPIRUN    ?= mpirun --allow-run-as-root --oversubscribe --bind-to none

# Scratch space for make bench-storage, on the disk to measure.
BENCH_DIR ?= /var/tmp/brandrt-bench
DEMO_DIR  ?= /tmp/brandrt-demo

.PHONY: all deps build test race lint fuzz bench bench-proto bench-storage check demo clean

all: build

deps:
	@bash .ci/deps

build: deps
	$(GO) build -o $(BIN) ./cmd/brandrt

# Every test, with the protocol's internal invariants checked after every
# step, then again under the race detector (shorter randomized runs).
test: deps
	$(GO) test -tags invariants -count=1 ./...
	$(GO) test -race -short -count=1 ./...

race: deps
	$(GO) test -race -count=1 ./...

lint: deps
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...
	$(GO) test -count=1 -run 'TestProtoImports|TestProtoDepends' ./proto

fuzz: deps
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./proto
	$(GO) test -run '^$$' -fuzz FuzzSchedule -fuzztime $(FUZZTIME) ./proto/prototest
	$(GO) test -run '^$$' -fuzz FuzzHostilePeer -fuzztime $(FUZZTIME) ./proto/prototest

bench: bench-proto bench-storage

# The protocol at ImageNet-1k scale, all four variants on the same traces.
bench-proto: build
	/usr/bin/time -f 'wall %es, max RSS %MkB' $(BIN) simulate --compare \
		--files 1281167 --ranks 3 --chunk-files 64 --mem-fraction 0.25

# The chunk store against the disk: index open for 1.28 M entries, then
# pack and whole-chunk reads against fio (40,000 files of ~110 KB, kept in
# BENCH_DIR between runs; needs root and fio, installed here).
bench-storage: build
	@bash .ci/deps bench
	$(GO) test -run '^$$' -bench IndexOpen -benchtime 10x ./chunk
	$(BIN) bench storage --dir $(BENCH_DIR)

check: lint test

demo: build
	@echo "== the machine, as every rank of a 3-rank mpirun job sees it"
	$(MPIRUN) -np 3 $(BIN) info
	@echo
	@echo "== a generated ImageFolder dataset, packed by 3 ranks under mpirun, verified, inspected"
	rm -rf $(DEMO_DIR)
	$(GO) run ./examples/gendata --out $(DEMO_DIR)/input --files 6000 --classes 20 --mean-size 40KB
	$(MPIRUN) -np 3 $(BIN) pack --input $(DEMO_DIR)/input --out $(DEMO_DIR)/chunks --chunk-files 64
	$(BIN) verify --chunks $(DEMO_DIR)/chunks
	$(BIN) inspect --chunks $(DEMO_DIR)/chunks
	rm -rf $(DEMO_DIR)
	@echo
	@echo "== the protocol on a small generated dataset: 3 ranks, 120,000 files, a quarter in memory"
	$(BIN) simulate --compare --files 120k --ranks 3 --chunk-files 64 --mem-fraction 0.25 --epochs 2

clean:
	rm -rf bin
