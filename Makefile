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
# Debian's python3-torch is installed for this interpreter, which need not
# be the first python3 on PATH.
PYTHON    ?= /usr/bin/python3

# How long one package's tests may take: cmd/brandrt's, which run jobs
# under mpirun, take about 10 minutes here (go test's default limit).
TEST_TIMEOUT ?= 30m

# Scratch space for make bench-storage, on the disk to measure.
BENCH_DIR ?= /var/tmp/brandrt-bench
DEMO_DIR  ?= /tmp/brandrt-demo

# The virtual environment of the loader benchmark (.ci/deps makes it):
# Debian's torch plus the pinned peers of examples/bench/requirements.txt.
VENV_PY   := .venv/bin/python
# What make bench-loaders runs; LOADERS_FLAGS adds to it (--input DIR for
# your own data, --repeat 3, …; see examples/bench/loaders.py --help).
LOADERS_FLAGS ?=

.PHONY: all deps build wheel test race lint fuzz bench bench-proto bench-storage bench-serve bench-loaders bench-loaders-sweep bench-cluster bench-train-nas bench-convergence check demo clean

all: build

deps:
	@bash .ci/deps

build: deps
	$(GO) build -o $(BIN) ./cmd/brandrt

# The Python package as a wheel, in dist/: pip install dist/brandrt-*.whl
# (its dependency, crc32c, from the package registry, or offline with
# --no-index --find-links .venv/wheels).
wheel: deps
	rm -rf dist
	$(VENV_PY) -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w dist ./python

# Every test, with the protocol's internal invariants checked after every
# step, then again under the race detector (shorter randomized runs).
test: build
	$(PYTHON) -m unittest discover -s python/tests -p 'test_*.py'
	$(VENV_PY) -m unittest discover -s examples/bench -p 'test_*.py'
	$(GO) test -tags invariants -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -race -short -count=1 -timeout $(TEST_TIMEOUT) ./...

race: deps
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

lint: deps
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...
	$(GO) test -count=1 -run 'TestProtoImports|TestProtoDepends' ./proto
	$(GO) test -count=1 ./internal/codesize

fuzz: deps
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./proto
	$(GO) test -run '^$$' -fuzz FuzzSchedule -fuzztime $(FUZZTIME) ./proto/prototest
	$(GO) test -run '^$$' -fuzz FuzzHostilePeer -fuzztime $(FUZZTIME) ./proto/prototest
	$(GO) test -run '^$$' -fuzz FuzzAttach -fuzztime $(FUZZTIME) ./rt/shm
	$(GO) test -run '^$$' -fuzz FuzzDecodeFrame -fuzztime $(FUZZTIME) ./rt

bench: bench-proto bench-storage bench-serve

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

# Serving: 30,000 files of ~110 KB, the budget holding every rank's shard
# (epoch 1 reads the chunks, later epochs serve from memory); one rank,
# then two against MPI's own point-to-point bandwidth; then two ranks
# idle for 3 s at the start of each epoch, to show what an idle rank costs.
bench-serve: build
	@test -d $(BENCH_DIR)/serve-input || $(GO) run ./examples/gendata --out $(BENCH_DIR)/serve-input --files 30000 --classes 100 --mean-size 110KB
	@for n in 1 2; do test -f $(BENCH_DIR)/serve-$$n/manifest.json || \
		$(BIN) pack --input $(BENCH_DIR)/serve-input --out $(BENCH_DIR)/serve-$$n --chunk-files 64 --ranks $$n --force; done
	$(MPIRUN) -np 1 $(BIN) bench serve --chunks $(BENCH_DIR)/serve-1 --mem 100% --consume 4 --epochs 4
	$(MPIRUN) -np 2 $(BIN) bench serve --allow-shared-node --chunks $(BENCH_DIR)/serve-2 --mem 100% --consume 4 --epochs 4
	$(MPIRUN) -np 2 $(BIN) serve --allow-shared-node --chunks $(BENCH_DIR)/serve-2 --mem 25% --consume 4 --epochs 2 --pause 3s

# Every loader against brandrt, the same memory cgroup for each, cold page
# cache, 30,000 files of ~110 KB (3.1 GiB, generated and kept in
# BENCH_DIR/loaders with each system's format): the local disk, then the
# emulated NAS (examples/bench/nas.sh), a quarter of the dataset in memory.
bench-loaders: build
	@bash .ci/deps nas
	$(VENV_PY) examples/bench/loaders.py --work $(BENCH_DIR)/loaders --storage local,nas $(LOADERS_FLAGS)

# The sweep of BENCHMARKS.md: memory 10/25/50%, brandrt at K=16 and 64.
bench-loaders-sweep: build
	@bash .ci/deps nas
	$(VENV_PY) examples/bench/loaders.py --work $(BENCH_DIR)/loaders --storage local,nas \
		--mem 10%,25%,50% --chunk-files 16,64 $(LOADERS_FLAGS)

# The same systems on an emulated cluster of 3 nodes (examples/cluster), all
# reading one emulated NAS (3 Gbit/s), each node in a cgroup of the same
# memory: the nodes' memory together holding the dataset, then a quarter.
bench-cluster: build
	@bash .ci/deps nas
	$(VENV_PY) examples/bench/loaders.py --work $(BENCH_DIR)/loaders --storage nas --nodes 3 --mem 100%,25% $(LOADERS_FLAGS)

# examples/pytorch/train.py on the emulated NAS, from the original JPEGs
# (--baseline) and through brandrt, the same memory cgroup for each, cold.
bench-train-nas: build
	@bash .ci/deps nas
	$(VENV_PY) examples/bench/train_nas.py --work $(BENCH_DIR)/train

# Convergence on Fashion-MNIST: train.py's CNN for 4 epochs, 5 seeds, through
# the window and paper policies at K=64 and 256 with 10 % and 25 % of the
# data in memory, and from the original files (a true shuffle). About two
# hours on 2 cores; interrupted, it goes on where it stopped. The report
# (tables, verdicts, simulate's figures) and the plot follow.
CONVERGENCE_FLAGS ?= --chunk-files 64,256 --mem 10%,25% --seeds 1-5 --epochs 4
bench-convergence: build
	@bash .ci/deps fashion
	test -d $(BENCH_DIR)/fashion-mnist || /usr/bin/python3 examples/pytorch/fashion_mnist.py --out $(BENCH_DIR)/fashion-mnist
	/usr/bin/python3 examples/pytorch/convergence.py --data $(BENCH_DIR)/fashion-mnist $(CONVERGENCE_FLAGS) \
		--out $(BENCH_DIR)/convergence.jsonl
	$(VENV_PY) examples/pytorch/convergence.py --data $(BENCH_DIR)/fashion-mnist --report \
		--out $(BENCH_DIR)/convergence.jsonl --plot $(BENCH_DIR)/convergence.png

check: lint test

demo: build
	@echo "== the machine, as every rank of a 3-rank mpirun job sees it"
	$(MPIRUN) -np 3 $(BIN) info
	@echo
	@echo "== a generated JPEG dataset (2,000 images, 10 classes), packed by 2 ranks under mpirun, verified, inspected"
	rm -rf $(DEMO_DIR)
	$(PYTHON) examples/pytorch/make_jpegs.py --out $(DEMO_DIR)/jpegs --classes 10 --images 2000
	$(MPIRUN) -np 2 $(BIN) pack --input $(DEMO_DIR)/jpegs --out $(DEMO_DIR)/chunks --chunk-files 32
	$(BIN) verify --chunks $(DEMO_DIR)/chunks
	$(BIN) inspect --chunks $(DEMO_DIR)/chunks
	@echo
	@echo "== served by 2 ranks to in-process readers that check every file, a quarter of each shard in memory"
	$(MPIRUN) -np 2 $(BIN) serve --allow-shared-node --chunks $(DEMO_DIR)/chunks --mem 25% --consume 2 --epochs 1
	@echo
	@echo "== training examples/pytorch/train.py through brandrt: 2 ranks, a training process beside each (2 DataLoader workers), one model (DDP)"
	examples/pytorch/demo.sh $(BIN) $(DEMO_DIR)/chunks 2 10 2 --mem 25%
	@echo
	@echo "== the same training reading the original files: one process, ImageFolder, shuffled DataLoader, the same global batch (2 × 32)"
	$(PYTHON) -W ignore examples/pytorch/train.py --baseline --data $(DEMO_DIR)/jpegs --epochs 2 --batch-size 64
	rm -rf $(DEMO_DIR)
	@echo
	@echo "== the protocol on a small generated dataset: 3 ranks, 120,000 files, a quarter in memory"
	$(BIN) simulate --compare --files 120k --ranks 3 --chunk-files 64 --mem-fraction 0.25 --epochs 2

clean:
	rm -rf bin dist python/build python/*.egg-info
