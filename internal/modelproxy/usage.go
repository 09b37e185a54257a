package modelproxy

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
)

// Usage is what a session has used of the model API.
//
// The four token counts are disjoint, so their sum (Tokens) is every token the session used:
// InputTokens are input tokens neither read from nor written to the prompt cache,
// CacheReadTokens were read from it and CacheWriteTokens written to it. Anthropic reports
// input that way already; OpenAI's input_tokens (Chat Completions: prompt_tokens) and Gemini's
// promptTokenCount include the cached tokens, which the proxy subtracts. OpenAI and Gemini
// report no cache writes.
type Usage struct {
	// Requests counts the generation requests forwarded upstream (messages, responses,
	// chat/completions, generateContent and streamGenerateContent), whatever their answer: a
	// retried request counts again.
	Requests         int64 `json:"requests,omitempty"`
	InputTokens      int64 `json:"inputTokens,omitempty"`
	OutputTokens     int64 `json:"outputTokens,omitempty"`
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	// Unmetered counts successful answers whose usage never arrived in full (a stream cut
	// short, an answer too large or malformed to read). Their missing counts are estimated
	// from the bytes sent and received, which overstates them: cutting a stream before its
	// usage event must not get tokens past the budget.
	Unmetered int64 `json:"unmetered,omitempty"`
	// ByModel splits the counts by the model the request named. Model names come from the
	// agent, so they are sanitized and capped in length, and past MaxModels distinct names the
	// rest are counted under OtherModel.
	ByModel map[string]ModelUsage `json:"byModel,omitempty"`
}

// ModelUsage is one model's share of a Usage.
type ModelUsage struct {
	Requests         int64 `json:"requests,omitempty"`
	InputTokens      int64 `json:"inputTokens,omitempty"`
	OutputTokens     int64 `json:"outputTokens,omitempty"`
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
}

// Limits cut a session off. Zero means no limit.
type Limits struct {
	// MaxRequests is the most generation requests the session may make.
	MaxRequests int64
	// MaxTokens is the most tokens (input, output, cache reads and writes) the session may
	// use. A request's tokens are known only once it is answered, so requests already under
	// way when the budget runs out still finish: the total can pass MaxTokens by their usage.
	MaxTokens int64
}

const (
	// MaxModels is how many distinct model names Usage.ByModel keeps apart.
	MaxModels = 32
	// OtherModel counts the models past MaxModels.
	OtherModel = "other"
	// UnknownModel counts requests that named no model.
	UnknownModel = "unknown"
	// maxModelName caps a model name's length (gateway names such as
	// "accounts/fireworks/models/llama-v3p1-405b-instruct" run to about 50).
	maxModelName = 128
)

// Tokens is every token used: input, output, cache reads and cache writes.
func (u Usage) Tokens() int64 {
	return add(add(u.InputTokens, u.OutputTokens), add(u.CacheReadTokens, u.CacheWriteTokens))
}

// Tokens is every token the model used: input, output, cache reads and cache writes.
func (m ModelUsage) Tokens() int64 {
	return add(add(m.InputTokens, m.OutputTokens), add(m.CacheReadTokens, m.CacheWriteTokens))
}

func (u Usage) clone() Usage {
	u.ByModel = maps.Clone(u.ByModel)
	return u
}

// tokens is one answer's usage, normalised to Usage's meaning.
type tokens struct {
	input, output, cacheRead, cacheWrite int64
}

func (m *ModelUsage) addTokens(t tokens) {
	m.InputTokens = add(m.InputTokens, t.input)
	m.OutputTokens = add(m.OutputTokens, t.output)
	m.CacheReadTokens = add(m.CacheReadTokens, t.cacheRead)
	m.CacheWriteTokens = add(m.CacheWriteTokens, t.cacheWrite)
}

// add saturates instead of wrapping: a hostile or broken count must not turn a budget negative.
func add(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// exceeded names the limit u has reached, or returns "".
func (l Limits) exceeded(u Usage) string {
	if l.MaxRequests > 0 && u.Requests >= l.MaxRequests {
		return fmt.Sprintf("maxRequests %d", l.MaxRequests)
	}
	if l.MaxTokens > 0 && u.Tokens() >= l.MaxTokens {
		return fmt.Sprintf("maxTokens %d", l.MaxTokens)
	}
	return ""
}

func budgetMessage(limit string) string {
	return "Shepherd: this session's model budget is used up (" + limit + ")"
}

// ledger holds a session's usage. Requests are reserved before they are forwarded, so
// concurrent requests cannot pass MaxRequests.
type ledger struct {
	limits  Limits
	onUsage func(Usage)

	mu sync.Mutex
	u  Usage

	// notifyMu keeps OnUsage calls in order, each with totals at least as new as the last,
	// without holding mu (which new requests need) while the callback runs.
	notifyMu sync.Mutex
}

func newLedger(limits Limits, initial Usage, onUsage func(Usage)) *ledger {
	u := initial
	u.ByModel = nil
	// In name order, so that which names a restart folds into OtherModel does not vary.
	for _, name := range slices.Sorted(maps.Keys(initial.ByModel)) {
		m := initial.ByModel[name]
		bucket := bucketFor(u.ByModel, sanitizeModel(name))
		if u.ByModel == nil {
			u.ByModel = map[string]ModelUsage{}
		}
		prev := u.ByModel[bucket]
		prev.Requests = add(prev.Requests, m.Requests)
		prev.addTokens(tokens{m.InputTokens, m.OutputTokens, m.CacheReadTokens, m.CacheWriteTokens})
		u.ByModel[bucket] = prev
	}
	return &ledger{limits: limits, onUsage: onUsage, u: u}
}

func (l *ledger) carry(prior Usage) error {
	if prior.Requests < 0 || prior.InputTokens < 0 || prior.OutputTokens < 0 || prior.CacheReadTokens < 0 || prior.CacheWriteTokens < 0 {
		return fmt.Errorf("carried usage has a negative count: %+v", prior)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.u.Requests != 0 {
		return fmt.Errorf("usage can only be carried before the first request (%d forwarded)", l.u.Requests)
	}
	l.u = newLedger(l.limits, prior, nil).u
	return nil
}

func (l *ledger) usage() Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.u.clone()
}

func (l *ledger) exhausted() (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit := l.limits.exceeded(l.u); limit != "" {
		return true, budgetMessage(limit)
	}
	return false, ""
}

// reserve counts a generation request for model before it is forwarded and returns the
// ByModel bucket to charge its tokens to; or, when the budget is used up, the refusal.
func (l *ledger) reserve(model string) (bucket, refusal string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit := l.limits.exceeded(l.u); limit != "" {
		return "", budgetMessage(limit)
	}
	if l.u.ByModel == nil {
		l.u.ByModel = map[string]ModelUsage{}
	}
	bucket = bucketFor(l.u.ByModel, model)
	m := l.u.ByModel[bucket]
	m.Requests++
	l.u.ByModel[bucket] = m
	l.u.Requests++
	return bucket, ""
}

// settle charges a reserved request's tokens, then tells OnUsage.
func (l *ledger) settle(bucket string, t tokens, unmetered bool) {
	l.mu.Lock()
	l.u.InputTokens = add(l.u.InputTokens, t.input)
	l.u.OutputTokens = add(l.u.OutputTokens, t.output)
	l.u.CacheReadTokens = add(l.u.CacheReadTokens, t.cacheRead)
	l.u.CacheWriteTokens = add(l.u.CacheWriteTokens, t.cacheWrite)
	if unmetered {
		l.u.Unmetered++
	}
	m := l.u.ByModel[bucket]
	m.addTokens(t)
	l.u.ByModel[bucket] = m
	l.mu.Unlock()

	if l.onUsage == nil {
		return
	}
	l.notifyMu.Lock()
	defer l.notifyMu.Unlock()
	l.onUsage(l.usage())
}

// bucketFor is the ByModel key for model: itself while there is room, else OtherModel.
func bucketFor(byModel map[string]ModelUsage, model string) string {
	if _, ok := byModel[model]; ok || model == OtherModel {
		return model
	}
	named := len(byModel)
	if _, ok := byModel[OtherModel]; ok {
		named--
	}
	if named >= MaxModels {
		return OtherModel
	}
	return model
}

// sanitizeModel makes an agent-chosen model name safe to keep, log and report: printable
// ASCII of the kinds model ids use, capped in length.
func sanitizeModel(name string) string {
	if name == "" {
		return UnknownModel
	}
	if len(name) > maxModelName {
		name = name[:maxModelName]
	}
	b := []byte(name)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '/', c == '@', c == '+':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}
