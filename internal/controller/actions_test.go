package controller

import (
	"context"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/lifecycle"
	"github.com/shepherd-dev/shepherd/internal/scm"
)

func TestActionTableRunsEveryAction(t *testing.T) {
	g := NewWithT(t)
	table := (&AgentSessionReconciler{}).actionTable()
	for _, at := range lifecycle.ActionTypes {
		g.Expect(table).To(HaveKey(at), "no runner for %s", at)
	}
	g.Expect(table).To(HaveLen(len(lifecycle.ActionTypes)))
}

// TestCrashPointsCoverEveryAction keeps the crash-point harness whole: every action type has a
// spec that stops the manager at its crash points (crashAt names the type).
func TestCrashPointsCoverEveryAction(t *testing.T) {
	g := NewWithT(t)
	src, err := os.ReadFile("crashpoints_test.go")
	g.Expect(err).NotTo(HaveOccurred())
	for _, at := range lifecycle.ActionTypes {
		g.Expect(regexp.MustCompile(`crashAt\(lifecycle\.Action`+string(at)+`\b|lifecycle\.Action`+string(at)+`[,}]`).Match(src)).
			To(BeTrue(), "no crash-point spec for %s", at)
	}
}

func TestMergeOutcome(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	rec := func(attempts int32) lifecycle.MergeEvidence {
		return lifecycle.MergeEvidence{PullRequestNumber: 7, HeadSHA: "abc", Outcome: lifecycle.MergeInFlight, Attempts: attempts}
	}
	unavailable := &scm.APIError{Kind: scm.ErrUnavailable, Status: 502}
	for _, tc := range []struct {
		name     string
		attempts int32
		err      error
		want     lifecycle.MergeOutcome
		retryIn  time.Duration
	}{
		{"merged", 1, nil, lifecycle.MergeSucceeded, 0},
		{"a 502 the first time: 2 s", 1, unavailable, lifecycle.MergeRetrying, 2 * time.Second},
		{"a 502 the third time: 8 s", 3, unavailable, lifecycle.MergeRetrying, 8 * time.Second},
		{"a 502 the 40th time: at most 5 minutes", 40, unavailable, lifecycle.MergeRetrying, 5 * time.Minute},
		{"a timeout", 1, context.DeadlineExceeded, lifecycle.MergeRetrying, 2 * time.Second},
		{"a rate limit: its reset, when later", 1, &scm.RateLimitError{Resource: "core", Reset: now.Add(time.Hour)}, lifecycle.MergeRetrying, time.Hour},
		{"the head moved", 1, &scm.HeadChangedError{Expected: "abc", Actual: "def"}, lifecycle.MergeHeadMoved, 0},
		{"not mergeable", 1, &scm.APIError{Kind: scm.ErrNotMergeable, Status: 405}, lifecycle.MergeRefused, 0},
		{"permission denied", 1, &scm.APIError{Kind: scm.ErrPermissionDenied, Status: 403}, lifecycle.MergeRefused, 0},
		{"anything else", 1, errors.New("boom"), lifecycle.MergeRefused, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := mergeOutcome(rec(tc.attempts), scm.MergeResult{SHA: "m1"}, tc.err, now)
			g.Expect(got.Outcome).To(Equal(tc.want))
			g.Expect(got.PullRequestNumber).To(Equal(int64(7)))
			if tc.retryIn > 0 {
				g.Expect(got.RetryAt).To(Equal(now.Add(tc.retryIn)))
			}
			if tc.err == nil {
				g.Expect(got.MergeCommitSHA).To(Equal("m1"))
			} else {
				g.Expect(got.Error).NotTo(BeEmpty())
			}
		})
	}
}

func TestForgeErrorReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&scm.RateLimitError{Resource: "core", Reset: time.Now().Add(time.Minute)}, agentsv1alpha1.ReasonRateLimited},
		{&scm.APIError{Kind: scm.ErrRateLimited, Status: 429}, agentsv1alpha1.ReasonRateLimited},
		{&scm.APIError{Kind: scm.ErrTokenRejected, Status: 401}, agentsv1alpha1.ReasonTokenRejected},
		{&scm.APIError{Kind: scm.ErrPermissionDenied, Status: 403}, agentsv1alpha1.ReasonTokenRejected},
		{&scm.APIError{Kind: scm.ErrRepositoryNotFound, Status: 404}, agentsv1alpha1.ReasonRepositoryNotFound},
		{&scm.APIError{Kind: scm.ErrUnavailable, Status: 502}, agentsv1alpha1.ReasonForgeUnavailable},
		{errors.New("connection reset"), agentsv1alpha1.ReasonForgeUnavailable},
	} {
		if got := forgeErrorReason(tc.err); got != tc.want {
			t.Errorf("forgeErrorReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
