# Shepherd — make help lists the targets.

# Images.
IMG ?= shepherd-manager:latest
RUNNER_IMG ?= shepherd-runner:latest

# Pinned tools, installed into ./bin from the Go module proxy on first use.
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)

# Kubernetes binaries (kube-apiserver, etcd, kubectl, ...) are built from the Go module proxy
# and cached outside the repository by hack/kube-binaries.sh; see docs/operations.md.
KUBE_BINARIES := $(CURDIR)/hack/kube-binaries.sh

# Packages `make test` runs: everything except the e2e suite, which needs a real cluster, and
# test/bench, which holds only benchmarks (`make bench`; `go vet` still compiles it).
TEST_PKGS = $(shell go list ./... | grep -v -e /test/e2e -e /test/bench/)
# Packages with integration tests: test files tagged `//go:build integration`, which need a real
# Gitea (built into the shared cache) or the real agent CLIs (installed from npm). `make test`
# leaves them out so that it stays fast; `make test-integration` and .ci/run run them.
INTEGRATION_PKGS = $(shell grep -rl --include='*_test.go' '^//go:build integration' . | xargs -n1 dirname | sort -u)
GO_TEST_FLAGS ?=
# Test binaries are linked without DWARF (-w): -race binaries of the Kubernetes libraries are
# large, and linking ~45 of them was measured at 3m29s with DWARF and 1m58s without. Stack traces
# and race reports use the Go symbol table, which stays; only debuggers need DWARF.
TEST_LDFLAGS ?= -w
# go test's own vet pass is off (-vet=off): `make vet` (in `make verify`, and so in .ci/run) runs
# every vet analyzer over the same packages, with and without the integration tag, and lint runs
# them again. go test's pass computes vet facts for every dependency, ~105 s of CPU on a cold
# cache (measured with -debug-actiongraph), for a subset of what `make vet` already checks.
TEST_VET ?= -vet=off
# The compiler and linker of the test builds run with GOGC=400 (hack/toolexec-gogc.sh says why);
# BUILD_GOGC is the same setting for the other builds.
BUILD_GOGC ?= 400
TEST_TOOLEXEC ?= -toolexec=$(CURDIR)/hack/toolexec-gogc.sh

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs and the manager's ClusterRole.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths="./internal/controller/..." output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

CODEGEN_STAMP := hack/codegen.sha256

.PHONY: codegen
codegen: generate manifests ## generate + manifests, and record the hash of their inputs (hack/codegen.sha256).
	@hack/codegen-stamp.sh $(CONTROLLER_TOOLS_VERSION) > $(CODEGEN_STAMP)

# generated: regenerate only when the inputs changed since the recorded hash. A fresh clone's
# generated files are committed and current, so `make test` skips building controller-gen (~2 of
# its cold minutes); an edited API type or RBAC marker changes the hash and regenerates.
.PHONY: generated
generated:
	@if [ "$$(hack/codegen-stamp.sh $(CONTROLLER_TOOLS_VERSION))" = "$$(cat $(CODEGEN_STAMP) 2>/dev/null)" ]; then \
	  echo "generated code and manifests are current ($(CODEGEN_STAMP))"; \
	else $(MAKE) --no-print-directory codegen; fi

.PHONY: fmt
fmt: ## go fmt.
	go fmt ./...

.PHONY: vet
vet: ## go vet (with and without the integration tests' build tag).
	go vet ./...
	go vet -tags integration ./...

.PHONY: tidy
tidy: ## go mod tidy.
	go mod tidy

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint with .golangci.yml.
	$(GOLANGCI_LINT) run ./...

.PHONY: lint-fix
lint-fix: $(GOLANGCI_LINT) ## Run golangci-lint and apply its fixes.
	$(GOLANGCI_LINT) run --fix ./...

.PHONY: fuzz
fuzz: ## Run every native fuzz test for FUZZTIME each (default 10s; CI runs 5s).
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

FUZZTIME ?= 10s

.PHONY: verify
verify: codegen chart fmt vet tidy ## Fail when generate/manifests/chart/fmt/vet/tidy leave a diff.
	@if [ -n "$$(git status --porcelain -- . ':!bin')" ]; then \
	  echo "verify: the tree is not clean after generate/manifests/fmt/tidy; commit these changes:"; \
	  git status --porcelain -- . ':!bin'; git --no-pager diff --stat; exit 1; \
	fi

.PHONY: envtest-assets
envtest-assets: ## Build (once) and print the envtest assets directory (etcd, kube-apiserver, kubectl).
	@$(KUBE_BINARIES) envtest

.PHONY: test
# On a fresh machine the envtest assets take ~7 of its ~15 cold minutes (kube-apiserver ~5.7).
# Building them while controller-gen is installed was measured and saved nothing: both are
# CPU-bound on 2 cores; `generated` now skips controller-gen when nothing it reads changed.
# -timeout 20m: go test's default 10 minutes per package is within reach of hack/release, whose
# apply tests wait up to 6 minutes for an API server's CRD cleanup under this load.
# SHEPHERD_CHROMIUM: internal/ui drives the dashboard in Debian's Chromium (hack/chromium.sh
# installs it once).
test: generated ## Run the unit and envtest (real kube-apiserver) tests.
	KUBEBUILDER_ASSETS="$$($(KUBE_BINARIES) envtest)" SHEPHERD_CHROMIUM="$$(hack/chromium.sh)" go test -race -timeout=20m $(TEST_VET) $(TEST_TOOLEXEC) -ldflags='$(TEST_LDFLAGS)' $(GO_TEST_FLAGS) $(TEST_PKGS)

.PHONY: test-integration
test-integration: gitea agent-clis ## Run the integration tests: a real Gitea, the real agent CLIs (npm).
	go test -race -tags integration $(TEST_VET) $(TEST_TOOLEXEC) -ldflags='$(TEST_LDFLAGS)' $(GO_TEST_FLAGS) $(INTEGRATION_PKGS)

##@ Build

.PHONY: build
build: generated ## Build the manager, runner and kubectl-shepherd binaries into ./bin.
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/runner ./cmd/runner
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/kubectl-shepherd ./cmd/kubectl-shepherd

.PHONY: run
run: generated ## Run the manager on this machine against the current kubeconfig.
	go run ./cmd/manager --metrics-bind-address=127.0.0.1:8080 --metrics-secure=false --health-probe-bind-address=:8081

.PHONY: docker-build
docker-build: ## Build the manager image with a Docker engine (the production recipe).
	docker build --target manager -t $(IMG) .
	docker build --target runner -t $(RUNNER_IMG) .

##@ Deployment

.PHONY: install
install: generated ## Install the CRDs into the cluster of the current kubeconfig.
	"$$($(KUBE_BINARIES) kubectl)/kubectl" apply --server-side -k config/crd

.PHONY: uninstall
uninstall: generated ## Remove the CRDs (and every Shepherd object) from the cluster.
	"$$($(KUBE_BINARIES) kubectl)/kubectl" delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: generated ## Deploy the manager (config/default) with image $(IMG).
	hack/deploy.sh "$(IMG)"

.PHONY: undeploy
undeploy: ## Remove the manager and the CRDs.
	"$$($(KUBE_BINARIES) kubectl)/kubectl" delete --ignore-not-found -k config/default

# Local cluster, images without Docker, e2e and benchmarks live in their own fragments.
-include hack/*.mk

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

$(CONTROLLER_GEN): | $(LOCALBIN)
	GOGC=$(BUILD_GOGC) GOBIN=$(LOCALBIN) GOFLAGS= go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/controller-gen $(CONTROLLER_GEN)

$(GOLANGCI_LINT): | $(LOCALBIN)
	GOGC=$(BUILD_GOGC) GOBIN=$(LOCALBIN) GOFLAGS= go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/golangci-lint $(GOLANGCI_LINT)
