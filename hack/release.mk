# Release: images as OCI archives and the install manifests (docs/operations.md#install).
# Included by the Makefile (`-include hack/*.mk`). No Docker engine: the images are built by
# hack/localcluster, like `make images-local`.

# The registry and path the manifests pull from, and the images' tag (default: git describe).
REGISTRY ?= ghcr.io/shepherd-dev
VERSION ?=

##@ Release

# hack/helm.sh builds Helm from the Go module proxy once (cached under ~/.cache/shepherd).
HELM_SH := hack/helm.sh

# The chart's objects are config/'s, rendered and templated by hack/release/chart.go; `make
# verify` runs this and fails on a diff, TestChartIsCurrent too (docs/operations.md#helm).
.PHONY: chart
chart: generated ## Regenerate charts/shepherd's templates/generated/ and crds/ from config/.
	go run ./hack/release/chartgen --kubectl="$$($(KUBE_BINARIES) kubectl)/kubectl"

.PHONY: helm
helm: ## Build (once) and print the cached Helm's directory.
	@$(HELM_SH)

.PHONY: release
release: install-deps generated ## Build every image as an OCI archive (dist/images/), write dist/install.yaml, dist/install-namespaced.yaml and the chart dist/shepherd-<version>.tgz with them pinned (REGISTRY, VERSION).
	$(LOCALCLUSTER) release --kubectl="$$($(KUBE_BINARIES) kubectl)/kubectl" --helm="$$($(HELM_SH))/helm" --registry=$(REGISTRY) $(if $(VERSION),--version=$(VERSION))

# push sends the images to the registry the release pinned; REGISTRY on the command line pushes
# to another (a mirror: the manifests still name the release's). INSECURE=1: plain HTTP.
.PHONY: push
push: ## Push the release's images with their digests (make release first); REGISTRY=... to push elsewhere, INSECURE=1 for plain HTTP.
	$(LOCALCLUSTER) push $(if $(filter command line,$(origin REGISTRY)),--registry=$(REGISTRY)) $(if $(INSECURE),--insecure)
