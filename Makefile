# lull — see README.md. `make run` brings up the local cluster, `make test`
# runs every test layer.
include hack/versions.env

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
BIN := _output/bin
# Static Go builds everywhere (binaries, images, tests): one build
# configuration, so the Kubernetes packages compile once (hack/build-binaries.sh).
export CGO_ENABLED ?= 0
# Modules of their own inside the repository (`./...` stops at their
# go.mod) that make verify vets and tidies and hack/test.sh unit tests: the
# lease library other tools import, and the image assembler.
NESTED_MODULES := $(shell cat hack/nested-modules.txt)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build binaries test test-unit test-integration test-e2e verify lint generate update-deps fuzz \
        bench bench-scheduler bench-drain bench-plan bench-wave soak run demo cluster-up cluster-down clean
.PHONY: release
.PHONY: images

all: build

## build: compile every package and lull's commands into _output/bin
build:
	go build ./...
	@mkdir -p $(BIN)
	@for c in $$(ls cmd 2>/dev/null); do \
	  echo "go build -o $(BIN)/$$c ./cmd/$$c"; \
	  go build -ldflags "-X lull.dev/lull/internal/version.Version=$(VERSION)" -o $(BIN)/$$c ./cmd/$$c; \
	done

## binaries: build the pinned etcd, kube-*, kubectl, kwok, controller-gen (cached by version)
binaries:
	hack/build-binaries.sh

## test: verify + unit + integration + e2e
test: verify binaries
	hack/test.sh unit
	hack/test.sh integration
	hack/test.sh e2e

test-unit:
	hack/test.sh unit

test-integration: binaries
	hack/test.sh integration

test-e2e: binaries build
	hack/test.sh e2e

## fuzz: the window engine's property tests at length (docs/windows.md, "How it is tested"):
## TestReferenceEvaluator over LULL_REFERENCE_SPECS random specs (20000) from a new seed, printed
## (LULL_REFERENCE_SEED=S replays one), then Go's fuzzer on FuzzReference, FuzzRRule and FuzzCompile
## for FUZZTIME each (60s); about 5 minutes with the builds. FUZZFLAGS adds go test flags (-parallel=1)
FUZZTIME ?= 60s
fuzz:
	@seed=$${LULL_REFERENCE_SEED:-$$(date +%s)}; specs=$${LULL_REFERENCE_SPECS:-20000}; \
	  echo "LULL_REFERENCE_SEED=$$seed LULL_REFERENCE_SPECS=$$specs go test ./internal/window/ -run '^TestReferenceEvaluator\$$'"; \
	  LULL_REFERENCE_SEED=$$seed LULL_REFERENCE_SPECS=$$specs go test ./internal/window/ -count=1 -v -timeout 60m $(FUZZFLAGS) -run '^TestReferenceEvaluator$$'
	@for f in FuzzReference FuzzRRule FuzzCompile; do \
	  echo "go test ./internal/window/ -run '^\$$' -fuzz '^$$f\$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS)"; \
	  go test ./internal/window/ -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) || exit 1; \
	done

## verify: formatting, vet, lint, import direction, go.mod pins, generated code
verify:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './_output/*')); \
	  if [[ -n "$$out" ]]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi; echo "gofmt: ok"
	go vet ./...
	@for m in $(NESTED_MODULES); do echo "(cd $$m && go vet ./...)"; (cd $$m && go vet ./...) || exit 1; done
	go test -count=1 ./test/imports/ # import arrows point down (cmd → the components → internal/ → api/), no aliases
	@go mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy; run 'go mod tidy'"; go mod tidy -diff; exit 1; }; echo "go mod tidy: ok"
	@for m in $(NESTED_MODULES); do \
	  (cd $$m && go mod tidy -diff >/dev/null) || { echo "$$m: go.mod/go.sum are not tidy; run 'cd $$m && go mod tidy'"; exit 1; }; \
	  echo "go mod tidy ($$m): ok"; \
	done
	hack/update-k8s-deps.sh --verify
	hack/update-codegen.sh --verify
	hack/lint.sh

## lint: golangci-lint (.golangci.yaml) on every module, shellcheck on the scripts (hack/lint.sh)
lint:
	hack/lint.sh

## generate: conversion, defaulting and deepcopy functions (plugins/, api/), CRD manifests (hack/update-codegen.sh)
generate:
	hack/update-codegen.sh

## release: kubectl-lull archives, krew manifest, images, install YAML, Helm chart
## and checksums into dist/ (make release VERSION=vX.Y.Z; see hack/release.sh)
release:
	VERSION=$(VERSION) hack/release.sh

## images: OCI image archives of lull-scheduler, lull-drainer, pause and e2e-graceful
## into _output/images (IMAGES="pause lull-drainer" for some; see docs/images.md)
images:
	VERSION=$(VERSION) hack/images.sh $(IMAGES)

## update-deps: rewrite go.mod's k8s.io pins from hack/versions.env
update-deps:
	hack/update-k8s-deps.sh

## bench: benchmarks with ratios against the baseline measured in the same run
bench:
	hack/bench.sh

## soak: crash-anywhere with 200 kills of the leading lull-drainer (LULL_CRASH_KILLS=N for
## another count, LULL_CRASH_SEED=S to replay a printed seed); about 25 minutes
soak: binaries build
	LULL_CRASH_KILLS=$${LULL_CRASH_KILLS:-200} go test ./test/e2e -count=1 -run '^TestSystemCrashAnywhere$$' -v -timeout 90m

## bench-drain: drain one kwok node of 110 pods with lull and with kubectl drain (same run)
bench-drain: binaries build
	go test ./test/e2e -run '^$$' -bench BenchmarkDrainNode -benchtime 1x -timeout 30m

## bench-plan: kubectl lull plan vs kubectl drain --dry-run=client of the same 2 nodes (same run)
bench-plan: binaries build
	go test ./test/e2e -run '^$$' -bench BenchmarkPlan -benchtime 1x -timeout 30m

## bench-wave: maintenance requested on every node of a 1000-node kwok fleet at once, four windows
## with different budgets, the operator simulated (LULL_WAVE_NODES=N for another size)
bench-wave: binaries build
	go test ./test/e2e -run '^$$' -bench BenchmarkFleetWave -benchtime 1x -timeout 60m

## bench-scheduler: scheduler_perf, NodeDisruption vs the default profile, plain and with the same
## nodes tainted (1,000 and 5,000 nodes, 5 rounds, each run its own process in shuffled order, runs under other load
## rejected and repeated; hours on 2 cores; --short: hack/bench-scheduler.sh --short)
bench-scheduler:
	hack/bench-scheduler.sh

## run: local cluster with simulated nodes (NODES=10)
run: cluster-up

## demo: the guided tour on nodes, windows, a policy and a workload of its own (lull-demo-*),
## against the cluster from `make run`; removes what it made and touches nothing else
demo:
	hack/demo.sh

cluster-up: binaries build
	hack/local-up.sh --nodes $${NODES:-10}

cluster-down:
	hack/local-down.sh

clean: cluster-down
	rm -rf _output
