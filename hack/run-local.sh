#!/usr/bin/env bash
# make run-local: the local cluster with Shepherd in it, from a clean clone.
#   1. the cluster (hack/localcluster up), kept when already running;
#   2. the manager, runner, test-agent and Claude Code agent images built without Docker and loaded
#      into containerd;
#   3. CRDs, RBAC and the manager Deployment from config/default (image shepherd-manager:latest);
#   4. the samples from config/samples;
# The cluster's default StorageClass (shepherd-local) provisions the controllers' claims.
# then it prints what to run next. docs/local-cluster.md explains each step.
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -a lc <<<"${LOCALCLUSTER:-go run ./hack/localcluster}"
step() { echo; echo "=== run-local: $* ($(date +%T))"; }
start=$(date +%s)

step "cluster"
timeout 3600 "${lc[@]}" up --kwok-nodes="${KWOK_NODES:-0}"
eval "$("${lc[@]}" env)"
export KUBECONFIG
kubectl="$(hack/kube-binaries.sh kubectl)/kubectl"
k() { timeout 300 "$kubectl" "$@"; }

step "images"
timeout 1800 "${lc[@]}" images --load

step "CRDs, RBAC and the manager (config/default)"
existed=0
k -n shepherd-system get deployment shepherd-manager >/dev/null 2>&1 && existed=1
# --server-side: the AgentSession CRD is larger than client-side apply's annotation limit.
k apply --server-side --force-conflicts -k config/default
k wait --for=condition=Established --timeout=60s \
  crd/projects.agents.shepherd.dev crd/worktrees.agents.shepherd.dev crd/agentsessions.agents.shepherd.dev
if [ "$existed" = 1 ]; then
  # Same tag, new image: start a new pod so it runs what was just loaded.
  k -n shepherd-system rollout restart deployment/shepherd-manager
fi
k -n shepherd-system rollout status deployment/shepherd-manager --timeout=180s

step "samples (config/samples)"
# The sample Project references Secrets that do not exist here; the CRDs accept it, and the
# controllers report it in the Project's status once they land.
k apply --server-side --force-conflicts -k config/samples

step "done in $(( $(date +%s) - start ))s"
k get crd projects.agents.shepherd.dev worktrees.agents.shepherd.dev agentsessions.agents.shepherd.dev
k -n shepherd-system get deployment,pods -o wide
k get shepherd -A
cat <<EOF

Shepherd runs in the local cluster (namespace shepherd-system, image shepherd-manager:latest).
Next:
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$kubectl
  kubectl get shepherd -A                                   # Projects, Worktrees, AgentSessions
  kubectl -n shepherd-system logs deploy/shepherd-manager -f   # the manager
  kubectl explain agentsession.spec                          # every field
  kubectl get storageclass,pvc,pv -A                         # volumes (StorageClass shepherd-local, the default)
  ls -ln ${KUBECONFIG%/kubeconfig}/volumes/                  # their data on this machine
  make images-local && kubectl -n shepherd-system rollout restart deploy/shepherd-manager   # after a code change
  make cluster-status
  make cluster-down                                          # stop everything
EOF
