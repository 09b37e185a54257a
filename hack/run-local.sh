#!/usr/bin/env bash
# make run-local: the local cluster with Shepherd in it, from a clean clone, and one whole session
# offline, from an issue to its merged pull request.
#   1. the cluster (hack/localcluster up), kept when already running;
#   2. the manager, runner, test-agent and Claude Code agent images built without Docker and loaded
#      into containerd;
#   3. CRDs, RBAC and the manager Deployment from config/default (image shepherd-manager:latest);
#   4. the demo (hack/demo): a forge (the fake GitHub; DEMO=gitea: a real Gitea) and the scripted
#      model server on the node's IP, config/samples/demo applied in the namespace shepherd-demo,
#      the real Claude Code in a pod, CI and a reviewer played until the Merge reaction merges;
#      it prints the phases as they pass and what to run next. DEMO=none skips it; DEMO_FLAGS
#      passes flags (--keep-serving keeps the forge up after the merge until Ctrl-C).
# The cluster's default StorageClass (shepherd-local) provisions the controllers' claims.
# docs/local-cluster.md explains each step.
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -a lc <<<"${LOCALCLUSTER:-go run ./hack/localcluster}"
read -r -a demo_flags <<<"${DEMO_FLAGS:-}"
demo="${DEMO:-github}"
case "$demo" in
  github | gitea | none) ;;
  *) echo "run-local: DEMO must be github, gitea or none, not '$demo'" >&2; exit 2 ;;
esac
times=()
last=$(date +%s)
start=$last
# step NAME DESCRIPTION: starts a step; the summary gives each step's time by NAME.
step() {
  local now; now=$(date +%s)
  if [ -n "${current:-}" ]; then times+=("$current $((now - last))s,"); fi
  current=$1; last=$now
  echo; echo "=== run-local: $2 ($(date +%T))"
}

step cluster "cluster"
timeout 3600 "${lc[@]}" up --kwok-nodes="${KWOK_NODES:-0}"
eval "$("${lc[@]}" env)"
export KUBECONFIG
kubectl="$(hack/kube-binaries.sh kubectl)/kubectl"
k() { timeout 300 "$kubectl" "$@"; }

step images "images"
timeout 1800 "${lc[@]}" images --load

step manager "CRDs, RBAC, the manager Deployment (config/default) and the UI's APIService (config/ui)"
existed=0
k -n shepherd-system get deployment shepherd-manager >/dev/null 2>&1 && existed=1
# --server-side: the AgentSession CRD is larger than client-side apply's annotation limit.
k apply --server-side --force-conflicts -k config/default
k apply --server-side --force-conflicts -k config/ui
k wait --for=condition=Established --timeout=60s \
  crd/projects.agents.shepherd.dev crd/worktrees.agents.shepherd.dev crd/agentsessions.agents.shepherd.dev crd/budgetpolicies.agents.shepherd.dev
if [ "$existed" = 1 ]; then
  # Same tag, new image: start a new pod so it runs what was just loaded.
  k -n shepherd-system rollout restart deployment/shepherd-manager
fi
k -n shepherd-system rollout status deployment/shepherd-manager --timeout=180s

# The plugin, for watching the demo's session (kubectl shepherd logs -f, kubectl shepherd dashboard).
go build -o bin/kubectl-shepherd ./cmd/kubectl-shepherd

if [ "$demo" != none ]; then
  step demo "demo: a whole session offline (hack/demo --forge $demo)"
  # No outer timeout: the demo bounds itself (--timeout), and --keep-serving waits for Ctrl-C.
  go run ./hack/demo --forge "$demo" --kubeconfig "$KUBECONFIG" --kubectl "$kubectl" ${demo_flags[@]+"${demo_flags[@]}"}
fi

step done "done"
echo "run-local: ${times[*]} total $(( $(date +%s) - start ))s"
k -n shepherd-system get deployment,pods -o wide
cat <<EOF

Shepherd runs in the local cluster (namespace shepherd-system, image shepherd-manager:latest).
Next:
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$kubectl
  kubectl get shepherd -A                                   # Projects, Worktrees, AgentSessions
  bin/kubectl-shepherd get -A                                # sessions with PR, CI, review, cost
  bin/kubectl-shepherd -n NAMESPACE logs -f SESSION          # a session's live transcript
  bin/kubectl-shepherd dashboard                             # the web dashboard: http://127.0.0.1:8001/apis/ui.agents.shepherd.dev/v1alpha1/dashboard
  kubectl -n shepherd-system logs deploy/shepherd-manager -f   # the manager
  kubectl explain agentsession.spec                          # every field
  kubectl get storageclass,pvc,pv -A                         # volumes (StorageClass shepherd-local, the default)
  ls -ln ${KUBECONFIG%/kubeconfig}/volumes/                  # their data on this machine
  config/samples/                                            # production-shaped Project, Worktree, AgentSession
  make images-local && kubectl -n shepherd-system rollout restart deploy/shepherd-manager   # after a code change
  make run-local DEMO=gitea                                  # the same session on a real Gitea
  make cluster-status
  make cluster-down                                          # stop everything
EOF
