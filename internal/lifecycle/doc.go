// Package lifecycle decides what an AgentSession is doing and what Shepherd does about it.
//
// It is a pure function of evidence: Decide takes an Input (the spec, the Project's resolved
// settings, what was observed of the Worktree, the pod, the runner and the pull request, the
// previous status and an injected clock) and returns a Decision (the phase, the conditions, the
// events, the actions and the bookkeeping to persist). It holds no Kubernetes client and does no
// I/O, so every rule is pinned by table tests and fuzzing; Apply writes a Decision onto a status.
//
// The controller calls it on every reconcile:
//
//	d := lifecycle.Decide(in)            // in.Previous = the status as read
//	lifecycle.Apply(&session.Status, d)  // then patch the status once
//	// after the patch succeeded: record d.Events, run d.Actions, requeue after d.RequeueAfter
//
// Everything the engine needs to remember (phase, reaction attempts per episode, the grace of a
// missing signal, the pull request and activity as last seen, queued messages) lives in the
// status, so a manager restart neither resets attempts nor repeats an action: feeding a
// decision back as the previous status with the same evidence yields no events and no actions.
//
// docs/lifecycle.md has the state diagram (checked against Transitions by a test) and
// docs/reactions.md the triggers, defaults, episodes and escalation.
package lifecycle
