package modelproxy

import (
	"fmt"
	"math"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestSanitizeModel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5-20250929"},
		{"us.anthropic.claude-3-5-sonnet-20241022-v2:0", "us.anthropic.claude-3-5-sonnet-20241022-v2:0"},
		{"accounts/fireworks/models/llama-v3p1-405b-instruct", "accounts/fireworks/models/llama-v3p1-405b-instruct"},
		{"", UnknownModel},
		{"evil\nINFO forged log line", "evil_INFO_forged_log_line"},
		{"mødel\x00", "m__del_"},
		{strings.Repeat("m", 1000), strings.Repeat("m", maxModelName)},
	} {
		NewWithT(t).Expect(sanitizeModel(tc.in)).To(Equal(tc.want), "%q", tc.in)
	}
}

func TestLedgerBoundsModelNames(t *testing.T) {
	g := NewWithT(t)
	l := newLedger(Limits{}, Usage{}, nil)
	for i := range MaxModels + 10 {
		bucket, refusal := l.reserve(fmt.Sprintf("model-%d", i))
		g.Expect(refusal).To(BeEmpty())
		l.settle(bucket, tokens{input: 1}, false)
	}
	// A name seen before keeps its own bucket, even once the others overflow.
	bucket, _ := l.reserve("model-0")
	l.settle(bucket, tokens{output: 5}, false)

	u := l.usage()
	g.Expect(u.ByModel).To(HaveLen(MaxModels + 1))
	g.Expect(u.ByModel[OtherModel]).To(Equal(ModelUsage{Requests: 10, InputTokens: 10}))
	g.Expect(u.ByModel["model-0"]).To(Equal(ModelUsage{Requests: 2, InputTokens: 1, OutputTokens: 5}))
	g.Expect(u.Requests).To(Equal(int64(MaxModels + 11)))
	g.Expect(u.InputTokens).To(Equal(int64(MaxModels + 10)))

	// What Usage returns is a copy.
	u.ByModel["model-0"] = ModelUsage{}
	g.Expect(l.usage().ByModel["model-0"].Requests).To(Equal(int64(2)))
}

func TestLedgerInitialUsage(t *testing.T) {
	g := NewWithT(t)
	initial := Usage{Requests: 40, InputTokens: 40, ByModel: map[string]ModelUsage{}}
	for i := range 40 {
		initial.ByModel[fmt.Sprintf("m\n%d", i)] = ModelUsage{Requests: 1, InputTokens: 1}
	}
	l := newLedger(Limits{MaxRequests: 41}, initial, nil)
	u := l.usage()
	g.Expect(u.ByModel).To(HaveLen(MaxModels+1), "carried-over names are bounded and sanitized too")
	for name := range u.ByModel {
		g.Expect(name).To(Or(Equal(OtherModel), MatchRegexp(`^m_\d+$`)))
	}
	var sum int64
	for _, m := range u.ByModel {
		sum += m.Requests
	}
	g.Expect(sum).To(Equal(int64(40)))
	g.Expect(initial.ByModel).To(HaveLen(40), "the caller's map is left alone")

	_, refusal := l.reserve("m")
	g.Expect(refusal).To(BeEmpty())
	_, refusal = l.reserve("m")
	g.Expect(refusal).To(Equal("Shepherd: this session's model budget is used up (maxRequests 41)"))
}

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		limits Limits
		usage  Usage
		want   string
	}{
		{Limits{}, Usage{Requests: math.MaxInt64, OutputTokens: math.MaxInt64}, ""},
		{Limits{MaxRequests: 3}, Usage{Requests: 2}, ""},
		{Limits{MaxRequests: 3}, Usage{Requests: 3}, "maxRequests 3"},
		{Limits{MaxTokens: 100}, Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 30, CacheWriteTokens: 39}, ""},
		{Limits{MaxTokens: 100}, Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 30, CacheWriteTokens: 40}, "maxTokens 100"},
		// Counts near the top saturate rather than wrap to a negative total under the limit.
		{Limits{MaxTokens: 100}, Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, "maxTokens 100"},
		{Limits{MaxRequests: 1, MaxTokens: 1}, Usage{Requests: 1, InputTokens: 1}, "maxRequests 1"},
	} {
		NewWithT(t).Expect(tc.limits.exceeded(tc.usage)).To(Equal(tc.want), "%+v %+v", tc.limits, tc.usage)
	}
}
