# mooring: see README.md. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
BIN := bin
STATICCHECK_VERSION := v0.8.2

# Kubernetes binaries for the test bed live in a cache outside the checkout
# (see docs/development.md); MOORING_CACHE moves it.
KUBE_VERSION := v1.36.3
KUBE_LIB_VERSION := v0.36.3
export KUBE_VERSION

# The -ldflags that stamp the version (hack/ldflags.sh; docs/release.md),
# computed once. Outside a git checkout it is empty and the binaries fall
# back to the version Go recorded in them.
LDFLAGS := $(shell hack/ldflags.sh)

# Commands under test/ (the benchmarks' upstream CCM) and the tests' TPM
# simulator (cloud/tpm/tpmtest, cgo) are built by the tests that run them,
# not into bin/.
MAIN_PKGS = $(shell $(GO) list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./... | grep -v -e '/test/' -e '/tpmtest/')
# mooring-agent is built with grpc's grpcnotrace tag: without it grpc links
# golang.org/x/net/trace, whose debug pages run templates, which keeps every
# exported method of every type in the binary (a third of the agent's peak
# RSS; docs/join.md). No mooring binary turns grpc tracing on. The same tags
# are in hack/release.sh and test/harness (AgentBuildTags).
AGENT_PKG = github.com/mooring-dev/mooring/agent/cmd/mooring-agent
AGENT_TAGS := grpcnotrace
E2E_PKGS = ./test/e2e/... ./test/chaos/...
# hack/release is the release's own test (make release-test).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e '/test/e2e' -e '/test/chaos' -e '/hack/release$$')
# Packages with micro-benchmarks (the scale benchmarks in test/bench run apart).
BENCH_PKGS = $(shell grep -rl --include='*_test.go' '^func Benchmark' . | xargs -rn1 dirname | sort -u | grep -v '/test/bench')

.PHONY: help build release release-test chart-package test unit adversarial fuzz e2e chaos bench bench-tuning lint demo soak clean deps kube-bins docs chart helm-bin images push

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build every binary into bin/ (static, -trimpath, version stamped)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath ./...
	@if [ -n "$(MAIN_PKGS)" ]; then CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ $(filter-out $(AGENT_PKG),$(MAIN_PKGS)); fi
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(AGENT_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/ $(AGENT_PKG)

release: ## tarballs and SBOMs for linux/amd64 and linux/arm64, the Helm chart, the rendered overlays and SHA256SUMS into bin/release (docs/release.md)
	rm -rf $(BIN)/release
	RELEASE_DIR=$(BIN)/release REGISTRY=$(REGISTRY) hack/release.sh

release-test: ## make a release into a temporary directory and check it: checksums, --version, SBOMs, chart, manifests, reproducibility
	$(GO) test -count=1 -timeout 30m ./hack/release/

# Images (docs/images.md): built by hack/images with go-containerregistry, no
# Docker daemon and no base image. REGISTRY/<name>:TAG names them; VERSION and
# REVISION are their labels (VERSION as the binaries have it, hack/version.sh);
# the binaries are built with $(LDFLAGS) and stripped (-s -w), as the
# release's are. SOURCE_DATE_EPOCH (by default the last commit's time) is
# their creation time and their files' time.
REGISTRY ?= ghcr.io/mooring-dev
VERSION ?= $(shell hack/version.sh 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
TAG ?= $(VERSION)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)

images: ## build the images (linux/amd64+arm64) into bin/images: OCI layouts and .tar archives
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/images build --out $(BIN)/images \
	  --registry $(REGISTRY) --tag $(TAG) --version "$(VERSION)" --revision "$(REVISION)" --ldflags "$(LDFLAGS) -s -w"

push: images chart-package ## push the images to REGISTRY (default ghcr.io/mooring-dev) as TAG (default VERSION), and the chart to REGISTRY/charts/mooring:VERSION
	$(GO) run ./hack/images push --out $(BIN)/images --registry $(REGISTRY) --tag $(TAG)
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/chart push --registry $(REGISTRY) $(BIN)/charts/mooring-$(VERSION).tgz

# The Helm chart as make release packages it (hack/chart; docs/release.md):
# version VERSION, appVersion TAG (the images' default tag), images in
# REGISTRY.
chart-package: helm-bin ## package the Helm chart into bin/charts/mooring-VERSION.tgz (appVersion TAG, images in REGISTRY)
	rm -rf $(BIN)/charts
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/chart package --out $(BIN)/charts \
	  --version "$(VERSION)" --app-version "$(TAG)" --registry $(REGISTRY)

docs: ## regenerate the flag references under docs/reference
	$(GO) run ./ccm/cmd/mooring-ccm --help 2>&1 | sed -n '/^Usage:/,$$p' > docs/reference/mooring-ccm-flags.txt
	$(GO) run ./csrapprover/cmd/mooring-csr-approver --help 2>&1 | sed -n '/^Usage:/,$$p' > docs/reference/mooring-csr-approver-flags.txt
	$(GO) run ./agent/cmd/mooring-agent --help 2>&1 | sed -n '/^Usage:/,$$p' > docs/reference/mooring-agent-flags.txt
	$(GO) run ./agent/cmd/mooring-agent user-data --help 2>&1 | sed -n '/^Usage:/,$$p' > docs/reference/mooring-agent-user-data-flags.txt

deps: ## install the Debian packages the tests need (etcd, systemd, cloud-init)
	hack/install-deps.sh

kube-bins: ## build kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl into the cache
	hack/build-k8s.sh >/dev/null

test: unit chart adversarial fuzz release-test e2e ## run all tests: unit, integration, the Helm chart, the adversarial suite, bounded fuzzing, the release and end-to-end

# The Helm CLI at the version hack/install-helm.sh pins, built from the Go
# module proxy into the cache outside the checkout (deploy/chart_test.go, in
# `unit`, uses it too and compares the chart with the kustomize overlays).
CHART := deploy/helm/mooring
# Built before the unit tests, so that its first build (minutes) does not
# count against their timeout.
helm-bin:
	hack/install-helm.sh >/dev/null
chart: ## helm lint --strict and helm template the chart (deploy/helm/mooring) with each of its ci/ values
	@helm=$$(hack/install-helm.sh); \
	  for values in $(CHART)/ci/*-values.yaml; do \
	    echo "chart: $$values"; \
	    "$$helm" lint --strict $(CHART) --kube-version $(KUBE_VERSION) --namespace kube-system --values "$$values" | grep -v "^$$"; \
	    "$$helm" template mooring $(CHART) --kube-version $(KUBE_VERSION) --namespace kube-system --values "$$values" >/dev/null; \
	  done

# deps first: the user-data tests run cloud-init's schema check and the unit
# check systemd-analyze, and skip without them; so they never skip here.
unit: deps helm-bin ## unit and integration tests (no Kubernetes binaries needed)
	$(GO) test -count=1 -timeout 15m $(UNIT_PKGS)

adversarial: ## the join path's adversarial suite (unit cases), with its count of cases and wrong approvals
	$(GO) test -count=1 -run '^TestAdversarial' -v ./csrapprover/ | grep -E '^(--- FAIL|    --- FAIL|adversarial suite|ok|FAIL)'

FUZZ_TIME ?= 20s
fuzz: ## run every fuzz target for FUZZ_TIME (default 20s) each
	@grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | while read -r dir; do \
		for target in $$(grep -h -o '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | cut -d' ' -f2); do \
			echo "fuzz $$dir $$target ($(FUZZ_TIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZ_TIME) $$dir || exit 1; \
		done; \
	done

e2e: deps kube-bins helm-bin ## end-to-end tests on the real test bed, the reliability scenarios at reduced sizes among them (their table: bin/chaos-results-reduced.md)
	@mkdir -p $(BIN)
	MOORING_CHAOS_RESULTS=$(abspath $(BIN))/chaos-results-reduced.md $(GO) test -count=1 -p 1 -timeout 45m $(E2E_PKGS) 2>&1 | tee $(BIN)/e2e.log || \
	  { echo "e2e: the failed tests' own lines (the whole output: $(BIN)/e2e.log)"; hack/failures.sh $(BIN)/e2e.log; exit 1; }
	@cat $(BIN)/chaos-results-reduced.md

# The reliability scenarios (test/chaos, docs/reliability.md) at full size;
# longer than CI allows. The table of invariants and figures goes to
# bin/chaos-results.md.
chaos: deps kube-bins ## the reliability scenarios at full size; table in bin/chaos-results.md
	@mkdir -p $(BIN)
	MOORING_CHAOS=full MOORING_CHAOS_RESULTS=$(abspath $(BIN))/chaos-results.md $(GO) test -count=1 -p 1 -v -timeout 240m ./test/chaos/...

BENCH_NODES ?= 1000
BENCH_RUNS ?= 3
BENCH ?= .
BENCH_TIMEOUT ?= 300m
bench: deps kube-bins ## benchmarks with figures; scale ones at BENCH_NODES (default 1000) nodes, BENCH_RUNS times (default 3; min/median/max), those matching BENCH, within BENCH_TIMEOUT; table in bin/bench-results.md (from 5,000 nodes also result files in docs/scale-results)
	@if [ -n "$(BENCH_PKGS)" ]; then $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem $(BENCH_PKGS); fi
	MOORING_BENCH_NODES=$(BENCH_NODES) $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime=1x -count=$(BENCH_RUNS) -timeout $(BENCH_TIMEOUT) ./test/bench/...

# The tuning matrix of docs/scale.md: node init, the serving-CSR burst and
# the attested-join burst at several settings of --kube-api-qps,
# --concurrent-node-syncs, --csr-approver-workers and
# --csr-approver-max-pending-attested-per-requester, BENCH_RUNS times each (about 45
# minutes on 2 cores).
bench-tuning: deps kube-bins ## the tuning matrix (QPS x workers) of docs/scale.md; table in bin/bench-tuning.md
	BENCH_RUNS=$(BENCH_RUNS) OUT=$(abspath $(BIN))/bench-tuning.md hack/bench-tuning.sh

lint: ## gofmt, one k8s.io library version in what is built, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	@bad=$$($(GO) list -deps -test -f '{{with .Module}}{{.Path}} {{.Version}}{{end}}' ./... | sort -u | awk '$$1 ~ /^k8s\.io\// && $$1 != "k8s.io/cloud-provider-gcp/providers" && $$2 ~ /^v0\.[0-9]+\.[0-9]+$$/ && $$2 != "$(KUBE_LIB_VERSION)"'); \
	  if [ -n "$$bad" ]; then echo "k8s.io modules must all be $(KUBE_LIB_VERSION):"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Built, then run: under `go run` a Ctrl-C made go itself exit 1 after the
# demo had stopped cleanly, and make printed an error line.
demo: ## run mooring end to end on this machine (installs what it needs; Ctrl-C stops it; BOOT=N also boots N machines with systemd and cloud-init; DEMO_ARGS passes more flags)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/demo ./hack/demo
	$(BIN)/demo $(if $(BOOT),--boot=$(BOOT)) $(DEMO_ARGS)

# The demo's join over and over on fresh test beds (hack/soak; issue 42,
# docs/reliability.md): SOAK_JOINS machines in all, each round the demo's
# 3 machines under systemd --user and SOAK_BOOT booted ones, beside
# SOAK_BUSY busy loops.
SOAK_JOINS ?= 300
SOAK_BOOT ?= 1
SOAK_BUSY ?= 0
soak: deps kube-bins ## the demo's join over and over on fresh beds (SOAK_JOINS, SOAK_BOOT, SOAK_BUSY); failure rate and approval-to-Ready p50/p99/max in bin/soak/results.md, with the logs of every slow or failed machine
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/soak-run ./hack/soak
	$(BIN)/soak-run --joins $(SOAK_JOINS) --boot $(SOAK_BOOT) --busy $(SOAK_BUSY)

clean: ## remove build output (not the Kubernetes binary cache)
	rm -rf $(BIN)
	$(GO) clean -testcache
