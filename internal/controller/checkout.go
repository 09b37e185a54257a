package controller

import (
	"encoding/json"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/workspace"
)

// checkoutResult is what one prepare run left in its container's termination message: the
// runner writes workspace.Result as JSON, or {"error": "..."} when no usable checkout came out.
type checkoutResult struct {
	// Pod and Container it came from.
	Pod, Container string
	// Finished is when the container ended.
	Finished time.Time
	// OK is true when a usable checkout came out (setup may still have failed).
	OK     bool
	Error  string
	Result workspace.Result
	// Generation and reconcile request of the Worktree the run was made for, when the pod says
	// (worktree pods do; agent pods prepare whatever their session needs).
	Generation int64
	Request    string
	fromAgent  bool
}

// current reports whether a result answers the Worktree as it is now: a failed prepare is retried
// when the spec changes or the user sets the reconcile-request annotation.
func (r checkoutResult) current(wt *agentsv1alpha1.Worktree) bool {
	if r.fromAgent {
		return true
	}
	return r.Generation == wt.Generation && r.Request == wt.Annotations[agentsv1alpha1.ReconcileRequestAnnotation]
}

// prepareResult reads the result of the container named name in pod, if it finished.
func prepareResult(pod *corev1.Pod, name string, statuses []corev1.ContainerStatus) (checkoutResult, bool) {
	for _, cs := range statuses {
		if cs.Name != name || cs.State.Terminated == nil {
			continue
		}
		t := cs.State.Terminated
		r := checkoutResult{Pod: pod.Name, Container: name, Finished: t.FinishedAt.Time}
		if g, err := strconv.ParseInt(pod.Annotations[annotationGeneration], 10, 64); err == nil {
			r.Generation = g
		}
		r.Request = pod.Annotations[agentsv1alpha1.ReconcileRequestAnnotation]
		r.fromAgent = pod.Labels[componentLabel] == componentAgent
		var body struct {
			workspace.Result
			Error string `json:"error"`
		}
		switch err := json.Unmarshal([]byte(t.Message), &body); {
		case err == nil && body.Error == "" && body.Path != "":
			r.OK, r.Result = true, body.Result
		case err == nil && body.Error != "":
			r.Error = body.Error
		case t.ExitCode == 0:
			// Exit 0 without a readable result: an older runner, or the message was cut.
			r.OK = true
		default:
			r.Error = "prepare exited with code " + strconv.Itoa(int(t.ExitCode))
			if t.Message != "" {
				r.Error += ": " + t.Message
			}
		}
		return r, true
	}
	return checkoutResult{}, false
}

// agentPrepareResult reads an agent pod's checkout step: a container beside the agent's, or an
// init container in pods made before that.
func agentPrepareResult(pod *corev1.Pod) (checkoutResult, bool) {
	if r, ok := prepareResult(pod, containerPrepare, pod.Status.ContainerStatuses); ok {
		return r, true
	}
	return prepareResult(pod, containerPrepare, pod.Status.InitContainerStatuses)
}

// latestResult is the most recent finished prepare among the pods: worktree pods' main
// container, agent pods' checkout step.
func latestResult(pods []corev1.Pod) (checkoutResult, bool) {
	var best checkoutResult
	found := false
	for i := range pods {
		p := &pods[i]
		var r checkoutResult
		var ok bool
		switch {
		case p.Labels[componentLabel] == componentWorktree && p.Annotations[annotationOperation] == operationPrepare:
			r, ok = prepareResult(p, operationPrepare, p.Status.ContainerStatuses)
		case p.Labels[componentLabel] == componentAgent:
			r, ok = agentPrepareResult(p)
		}
		if ok && (!found || r.Finished.After(best.Finished)) {
			best, found = r, true
		}
	}
	return best, found
}
