# Benchmarks (docs/performance.md). Each prints its setup and ratios against a baseline measured
# in the same run; none is asserted in tests. Included by the Makefile.

##@ Benchmarks

.PHONY: bench
bench: bench-scm bench-poller-plan bench-restmapper bench-report-store bench-scm-manager bench-workspace bench-session-start bench-fanout bench-webhooks bench-stream bench-proxy ## Run every benchmark.

.PHONY: bench-scm
bench-scm: ## 1000 open PRs on the fake GitHub for a simulated hour: naive REST vs Shepherd polling vs webhooks.
	go test ./internal/scm/ -run '^$$' -bench BenchmarkSCMEconomy -benchtime 1x -timeout 30m

# BENCH_SESSIONS=50 for a quick run.
BENCH_SESSIONS ?= 1000

.PHONY: bench-scm-manager
bench-scm-manager: ## The same hour through the manager (envtest, real controllers): BENCH_SESSIONS sessions with open PRs, polling vs webhooks.
	KUBEBUILDER_ASSETS="$$($(KUBE_BINARIES) envtest)" go test ./test/bench/scmmanager/ -run '^$$' \
		-bench BenchmarkSCMEconomyManager -benchtime 1x -timeout 45m -sessions $(BENCH_SESSIONS)

.PHONY: bench-workspace
bench-workspace: ## Time and disk to a ready checkout on a generated 50k-file repository: clone, blob:none, reference, worktree.
	hack/bench-workspace.sh

.PHONY: bench-session-start
bench-session-start: ## Session start on the local cluster's node, 50k-file repository: cold and warm p50/p99 against bare pods (brings the cluster up, leaves it up).
	go run ./hack/bench/sessionstart $(BENCH_SESSION_START_FLAGS)

# FANOUT_FLAGS: e.g. --sessions=1000 for one size, --qps=100 --burst=200 for the manager's defaults.
FANOUT_FLAGS ?= --sessions=1000,5000,10000 --qps=1000 --burst=2000 --timeout=45m

.PHONY: bench-fanout
bench-fanout: install-deps ## N AgentSessions at once on KWOK nodes (runners simulated) against N bare pods, same client settings (brings the cluster up with KWOK nodes, leaves it up).
	go run ./hack/bench/fanout $(FANOUT_FLAGS)

.PHONY: bench-webhooks
bench-webhooks: ## The webhook receiver on loopback: signed deliveries per second and peak heap, alone and under an unauthenticated flood (ratios in the same run).
	go run ./hack/bench/webhooks $(BENCH_WEBHOOKS_FLAGS)

# BENCH_STREAM_FLAGS: e.g. --sessions=20 --duration=10s for a quick run.
.PHONY: bench-stream
bench-stream: ## 100 sessions streaming transcripts at once through the runner channel, the manager and the real API server's aggregation layer: p50/p99 to kubectl shepherd logs -f and to Chromium, against one session alone; the windows' memory.
	KUBEBUILDER_ASSETS="$$($(KUBE_BINARIES) envtest)" go run ./hack/bench/stream --chromium="$$(hack/chromium.sh)" $(BENCH_STREAM_FLAGS)

# BENCH_PROXY_REQUESTS: 100 to 20000 each way; BENCH_PROXY_CONCURRENCY: 1 to 16 requests in flight.
BENCH_PROXY_REQUESTS ?= 2000
BENCH_PROXY_CONCURRENCY ?= 1

.PHONY: bench-proxy
bench-proxy: ## The model proxy on loopback: p50/p99 latency it adds to a streamed Claude Code request and its CPU per 1000 requests, against the model server called directly (same run); checks its metering.
	go test ./test/bench/modelproxy/ -run '^$$' -bench BenchmarkModelProxy -benchtime 1x -timeout 10m \
		-requests $(BENCH_PROXY_REQUESTS) -concurrency $(BENCH_PROXY_CONCURRENCY)

.PHONY: bench-poller-plan
bench-poller-plan: ## One plan of the SCM Poller over 1000, 10,000 and 50,000 followed items: time and bytes against sorting every candidate (same run).
	go test ./internal/scm/ -run '^$$' -bench BenchmarkPollerPlan -benchtime 1x -timeout 10m

.PHONY: bench-restmapper
bench-restmapper: ## One Get from the manager's multi-namespace cache of a real API server (envtest): the remembered REST mappings against controller-runtime's dynamic mapper (same run).
	KUBEBUILDER_ASSETS="$$($(KUBE_BINARIES) envtest)" go test ./internal/restmapcache/ -run '^$$' -bench BenchmarkCachedGet -benchtime 1x -timeout 10m

.PHONY: bench-report-store
bench-report-store: ## The runner reports' Worktree lookup (every Worktree reconcile) among 1000, 10,000 and 50,000 sessions: the index against a scan of every session (same run).
	go test ./internal/controller/ -run '^$$' -bench BenchmarkReportStoreWorktree -benchtime 1x -timeout 10m
