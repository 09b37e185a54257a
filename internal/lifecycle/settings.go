package lifecycle

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// Default thresholds, used when the Project leaves spec.activity out.
const (
	DefaultIdleAfter         = 5 * time.Minute
	DefaultStuckAfter        = 10 * time.Minute
	DefaultGracePeriod       = 2 * time.Minute
	DefaultGraceObservations = int32(3)
	DefaultSpawnDeadline     = 10 * time.Minute
	DefaultMergeMethod       = agentsv1alpha1.MergeSquash
)

// Triggers lists every reaction trigger in the order the engine evaluates them (and in which
// their actions appear in a decision).
var Triggers = []agentsv1alpha1.ReactionTrigger{
	agentsv1alpha1.TriggerCIFailed,
	agentsv1alpha1.TriggerMergeConflicts,
	agentsv1alpha1.TriggerChangesRequested,
	agentsv1alpha1.TriggerCommented,
	agentsv1alpha1.TriggerApprovedAndGreen,
	agentsv1alpha1.TriggerStuck,
	agentsv1alpha1.TriggerNeedsInput,
	agentsv1alpha1.TriggerExited,
}

// Reaction is one trigger's resolved reaction.
type Reaction struct {
	Action agentsv1alpha1.ReactionAction
	// Retries is how many attempts one episode gets before it escalates; nil means no limit.
	Retries *int32
	// EscalateAfter escalates an episode that lasts this long; 0 means never by time.
	EscalateAfter time.Duration
	// Message is a Go text/template over MessageData; empty uses the built-in message.
	Message string
	// Priority of notifications; empty uses the trigger's default (DefaultPriority).
	Priority agentsv1alpha1.Priority
	// MergeMethod for action Merge; empty means squash.
	MergeMethod agentsv1alpha1.MergeMethod
	// MergeWithoutApproval and MergeWithoutChecks, for action Merge, open the merge gate: a
	// merge then needs no approval at the head, or no checks passed at it.
	MergeWithoutApproval, MergeWithoutChecks bool
}

// Settings are a Project's reactions and thresholds with defaults applied. The zero value is
// the defaults: a trigger missing from Reactions uses DefaultReactions, a zero threshold its
// default.
type Settings struct {
	Reactions         map[agentsv1alpha1.ReactionTrigger]Reaction
	IdleAfter         time.Duration
	StuckAfter        time.Duration
	GracePeriod       time.Duration
	GraceObservations int32
	SpawnDeadline     time.Duration
}

func ptr[T any](v T) *T { return &v }

// DefaultReactions returns the reaction of every trigger a Project leaves out. The controller
// and docs/reactions.md use the same values (a test holds the docs to them).
func DefaultReactions() map[agentsv1alpha1.ReactionTrigger]Reaction {
	return map[agentsv1alpha1.ReactionTrigger]Reaction{
		agentsv1alpha1.TriggerCIFailed:         {Action: agentsv1alpha1.ReactionSendToAgent, Retries: ptr(int32(2))},
		agentsv1alpha1.TriggerChangesRequested: {Action: agentsv1alpha1.ReactionSendToAgent, EscalateAfter: 30 * time.Minute},
		agentsv1alpha1.TriggerCommented:        {Action: agentsv1alpha1.ReactionSendToAgent},
		agentsv1alpha1.TriggerMergeConflicts:   {Action: agentsv1alpha1.ReactionSendToAgent, EscalateAfter: 15 * time.Minute},
		agentsv1alpha1.TriggerApprovedAndGreen: {Action: agentsv1alpha1.ReactionNotify},
		agentsv1alpha1.TriggerStuck:            {Action: agentsv1alpha1.ReactionNotify},
		agentsv1alpha1.TriggerNeedsInput:       {Action: agentsv1alpha1.ReactionNotify},
		agentsv1alpha1.TriggerExited:           {Action: agentsv1alpha1.ReactionNotify},
	}
}

// DefaultPriority is the notification priority of a trigger when its reaction sets none: the
// reference orchestrator's mapping (urgent for stuck and needs input, action for approved,
// warning for CI failures, changes requested and conflicts); a comment is info. An agent that exits with a failure
// is urgent (the session is Errored); a clean exit asks a human to look (action).
func DefaultPriority(t agentsv1alpha1.ReactionTrigger, failed bool) agentsv1alpha1.Priority {
	switch t {
	case agentsv1alpha1.TriggerStuck, agentsv1alpha1.TriggerNeedsInput:
		return agentsv1alpha1.PriorityUrgent
	case agentsv1alpha1.TriggerApprovedAndGreen:
		return agentsv1alpha1.PriorityAction
	case agentsv1alpha1.TriggerCommented:
		return agentsv1alpha1.PriorityInfo
	case agentsv1alpha1.TriggerExited:
		if failed {
			return agentsv1alpha1.PriorityUrgent
		}
		return agentsv1alpha1.PriorityAction
	default:
		return agentsv1alpha1.PriorityWarning
	}
}

// ResolveSettings applies the defaults to a Project's reactions and activity thresholds and
// validates the result. A trigger set in the Project replaces the default's action and message;
// its retries, escalateAfter, priority and merge method are inherited from the default when
// left unset, so that {action: Notify} on ciFailed still escalates after two failures.
func ResolveSettings(reactions *agentsv1alpha1.ReactionsSpec, activity *agentsv1alpha1.ActivitySpec) (Settings, error) {
	s := Settings{Reactions: DefaultReactions()}
	if reactions != nil {
		for t, r := range map[agentsv1alpha1.ReactionTrigger]*agentsv1alpha1.Reaction{
			agentsv1alpha1.TriggerCIFailed:         reactions.CIFailed,
			agentsv1alpha1.TriggerChangesRequested: reactions.ChangesRequested,
			agentsv1alpha1.TriggerCommented:        reactions.Commented,
			agentsv1alpha1.TriggerMergeConflicts:   reactions.MergeConflicts,
			agentsv1alpha1.TriggerApprovedAndGreen: reactions.ApprovedAndGreen,
			agentsv1alpha1.TriggerStuck:            reactions.Stuck,
			agentsv1alpha1.TriggerNeedsInput:       reactions.NeedsInput,
			agentsv1alpha1.TriggerExited:           reactions.Exited,
		} {
			if r == nil {
				continue
			}
			def := s.Reactions[t]
			res := Reaction{
				Action:        r.Action,
				Retries:       def.Retries,
				EscalateAfter: def.EscalateAfter,
				Message:       r.Message,
				Priority:      r.Priority,
				MergeMethod:   r.MergeMethod,

				MergeWithoutApproval: r.MergeWithoutApproval,
				MergeWithoutChecks:   r.MergeWithoutChecks,
			}
			if r.Retries != nil {
				res.Retries = ptr(*r.Retries)
			}
			if r.EscalateAfter != nil {
				res.EscalateAfter = r.EscalateAfter.Duration
			}
			s.Reactions[t] = res
		}
	}
	if activity != nil {
		s.IdleAfter = durationOr0(activity.IdleAfter)
		s.StuckAfter = durationOr0(activity.StuckAfter)
		s.GracePeriod = durationOr0(activity.GracePeriod)
		s.SpawnDeadline = durationOr0(activity.SpawnDeadline)
		if activity.GraceObservations != nil {
			s.GraceObservations = *activity.GraceObservations
		}
	}
	s = s.withDefaults()
	if err := s.Validate(); err != nil {
		return Settings{}, fmt.Errorf("resolve reactions: %w", err)
	}
	return s, nil
}

// durationOr0 is d, or 0 (the default, applied by withDefaults) when it is unset.
func durationOr0(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

// withDefaults fills every zero threshold and every missing trigger.
func (s Settings) withDefaults() Settings {
	out := Settings{
		Reactions:         make(map[agentsv1alpha1.ReactionTrigger]Reaction, len(Triggers)),
		IdleAfter:         s.IdleAfter,
		StuckAfter:        s.StuckAfter,
		GracePeriod:       s.GracePeriod,
		GraceObservations: s.GraceObservations,
		SpawnDeadline:     s.SpawnDeadline,
	}
	if out.SpawnDeadline <= 0 {
		out.SpawnDeadline = DefaultSpawnDeadline
	}
	if out.IdleAfter <= 0 {
		out.IdleAfter = DefaultIdleAfter
	}
	if out.StuckAfter <= 0 {
		out.StuckAfter = DefaultStuckAfter
	}
	if out.GracePeriod <= 0 {
		out.GracePeriod = DefaultGracePeriod
	}
	if out.GraceObservations <= 0 {
		out.GraceObservations = DefaultGraceObservations
	}
	defs := DefaultReactions()
	for _, t := range Triggers {
		r, ok := s.Reactions[t]
		if !ok {
			r = defs[t]
		}
		if r.Action == agentsv1alpha1.ReactionMerge && r.MergeMethod == "" {
			r.MergeMethod = DefaultMergeMethod
		}
		out.Reactions[t] = r
	}
	return out
}

// ErrInvalidReaction is wrapped by every validation error of a reaction.
var ErrInvalidReaction = errors.New("invalid reaction")

// Validate reports settings the engine cannot honour. The CRD's CEL rules refuse most of these
// already; checking again here keeps a stale CRD or a hand-built Settings from turning an
// action into something else at run time.
func (s Settings) Validate() error {
	var errs []error
	s = s.withDefaults()
	if s.IdleAfter >= s.StuckAfter {
		errs = append(errs, fmt.Errorf("idleAfter (%s) must be shorter than stuckAfter (%s)", s.IdleAfter, s.StuckAfter))
	}
	for _, t := range Triggers {
		r := s.Reactions[t]
		switch r.Action {
		case agentsv1alpha1.ReactionSendToAgent, agentsv1alpha1.ReactionNotify, agentsv1alpha1.ReactionNone:
		case agentsv1alpha1.ReactionMerge:
			if t != agentsv1alpha1.TriggerApprovedAndGreen {
				errs = append(errs, fmt.Errorf("%w: %s: action Merge is only valid for approvedAndGreen", ErrInvalidReaction, t))
			}
		default:
			errs = append(errs, fmt.Errorf("%w: %s: unknown action %q", ErrInvalidReaction, t, r.Action))
		}
		if t == agentsv1alpha1.TriggerExited && r.Action == agentsv1alpha1.ReactionSendToAgent {
			// The session ends when its agent exits without a pull request; nobody would read it.
			errs = append(errs, fmt.Errorf("%w: exited: action SendToAgent cannot reach an agent that has exited; use Notify, or set the session Stopped then Running to resume it", ErrInvalidReaction))
		}
		if r.Retries != nil && *r.Retries < 0 {
			errs = append(errs, fmt.Errorf("%w: %s: retries must not be negative", ErrInvalidReaction, t))
		}
		if r.EscalateAfter < 0 {
			errs = append(errs, fmt.Errorf("%w: %s: escalateAfter must not be negative", ErrInvalidReaction, t))
		}
		if r.Message != "" {
			if err := checkTemplate(t, r.Message); err != nil {
				errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalidReaction, t, err))
			}
		}
	}
	return errors.Join(errs...)
}

// reaction returns the resolved reaction of t.
func (s Settings) reaction(t agentsv1alpha1.ReactionTrigger) Reaction {
	return s.Reactions[t]
}
