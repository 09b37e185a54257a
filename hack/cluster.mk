# Local cluster, images without Docker and the e2e suite (docs/local-cluster.md).
# Included by the Makefile (`-include hack/*.mk`). Needs root on Debian 12; no Docker engine.

# The cluster tool (hack/localcluster). `go run` caches the built program.
LOCALCLUSTER ?= go run ./hack/localcluster
# Fake KWOK nodes next to the real node (scale work): make cluster-up KWOK_NODES=100
KWOK_NODES ?= 0
E2E_TIMEOUT ?= 40m
# Images `make images-local` builds (localcluster images --only): empty for the default set
# (manager, runner, test-agent, claude-code); e.g. IMAGES=all, IMAGES=codex,opencode.
IMAGES ?=
E2E_FLAGS ?=
# The demo `make run-local` ends with (hack/demo): github (the in-repo fake GitHub), gitea (a real
# Gitea, built from the Go module proxy on first use) or none; DEMO_FLAGS passes flags, e.g.
# DEMO_FLAGS=--keep-serving keeps its forge and model server up after the merge until Ctrl-C.
DEMO ?= github
DEMO_FLAGS ?=

##@ Local cluster

.PHONY: install-deps
install-deps: ## Install the Debian packages the local cluster needs (only the missing ones).
	hack/install-deps.sh

.PHONY: cluster-up
cluster-up: install-deps ## Bring up the local cluster (KWOK_NODES=N adds fake nodes); kept when already up.
	$(LOCALCLUSTER) up --kwok-nodes=$(KWOK_NODES)

.PHONY: cluster-down
cluster-down: ## Stop the local cluster: no process, mount or pod left; logs kept.
	$(LOCALCLUSTER) down

.PHONY: cluster-status
cluster-status: ## Show each component of the local cluster and the node.
	$(LOCALCLUSTER) status

.PHONY: images-local
images-local: install-deps ## Build the images without Docker (IMAGES=all adds the Codex and OpenCode agents); load them when the cluster runs.
	$(LOCALCLUSTER) images --load-if-running $(if $(IMAGES),--only=$(IMAGES))

# dashboard-screenshot: the demo with its metrics recorded, drawn into docs/images/dashboard.png
# (config/monitoring/grafana-dashboard.json's queries on them; hack/dashboard).
.PHONY: dashboard-screenshot
dashboard-screenshot: ## run-local's demo, recording the manager's metrics, drawn as the Grafana dashboard into docs/images/dashboard.png.
	mkdir -p docs/images
	$(MAKE) --no-print-directory run-local DEMO_FLAGS="--dashboard=$(CURDIR)/docs/images/dashboard.png --chromium=$$(hack/chromium.sh)"

.PHONY: run-local
run-local: install-deps generated ## Cluster up, images loaded, the manager deployed, then a whole session offline (DEMO=github|gitea|none).
	LOCALCLUSTER="$(LOCALCLUSTER)" KWOK_NODES=$(KWOK_NODES) DEMO="$(DEMO)" DEMO_FLAGS="$(DEMO_FLAGS)" hack/run-local.sh

.PHONY: test-e2e
test-e2e: install-deps generated ## Run the e2e suite on the local cluster (brings it up; tears it down at the end).
	SHEPHERD_CHROMIUM="$$(hack/chromium.sh)" go test ./test/e2e -count=1 -timeout $(E2E_TIMEOUT) -v $(E2E_FLAGS) -args -ginkgo.v
