package modelproxy

import (
	"bytes"
	"encoding/json"
)

// parser reads one API's usage from an answer: the events of a stream, or a whole JSON body.
// Answers come from the upstream but may be cut, garbled or huge; a parser ignores what it
// cannot read and never panics (see the fuzz tests).
type parser interface {
	// event takes one server-sent event's data.
	event(data []byte)
	// body takes a whole non-streamed answer.
	body(data []byte)
	result() reading
}

// reading is what a parser has found so far.
type reading struct {
	tokens
	// gotInput and gotOutput say the API reported the input counts and the final output count.
	gotInput, gotOutput bool
	// failed says the answer ended with an error the API reported (an error event), after
	// which missing counts are not estimated: the API says what it charges.
	failed bool
}

// maxCount caps a reported count: far above any real answer, far below overflow.
const maxCount = 1 << 40

// count reads a reported count, clamped to [0, maxCount]; nil (absent) is 0.
func count(v *int64) int64 {
	switch {
	case v == nil || *v < 0:
		return 0
	case *v > maxCount:
		return maxCount
	}
	return *v
}

// anthropicUsage is the Messages API's usage object. Its input_tokens exclude cache reads and
// writes (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
type anthropicUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// anthropicParser reads the Messages API. A stream reports usage in message_start
// (message.usage: the input counts and a first output count) and message_delta (usage, whose
// counts are cumulative: the latest value of each field wins, never the sum); message_stop
// ends it, an error event ends it failed. A non-streamed message has usage at the top.
type anthropicParser struct{ r reading }

func newAnthropicParser() parser { return &anthropicParser{} }

func (p *anthropicParser) result() reading { return p.r }

func (p *anthropicParser) event(data []byte) {
	var ev struct {
		Type    string `json:"type"`
		Message *struct {
			Usage *anthropicUsage `json:"usage"`
		} `json:"message"`
		Usage *anthropicUsage `json:"usage"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil && ev.Message.Usage != nil {
			p.apply(ev.Message.Usage, false)
		}
	case "message_delta":
		if ev.Usage != nil {
			p.apply(ev.Usage, true)
		}
	case "error":
		p.r.failed = true
	}
}

func (p *anthropicParser) body(data []byte) {
	var msg struct {
		Type  string          `json:"type"`
		Usage *anthropicUsage `json:"usage"`
	}
	if json.Unmarshal(data, &msg) != nil {
		return
	}
	if msg.Type == "error" {
		p.r.failed = true
	}
	if msg.Usage != nil {
		p.apply(msg.Usage, true)
	}
}

// apply takes the fields u reports; final says its output count is the answer's last.
func (p *anthropicParser) apply(u *anthropicUsage, final bool) {
	if u.InputTokens != nil {
		p.r.input, p.r.gotInput = count(u.InputTokens), true
	}
	if u.CacheCreationInputTokens != nil {
		p.r.cacheWrite = count(u.CacheCreationInputTokens)
	}
	if u.CacheReadInputTokens != nil {
		p.r.cacheRead = count(u.CacheReadInputTokens)
	}
	if u.OutputTokens != nil {
		p.r.output = count(u.OutputTokens)
		p.r.gotOutput = p.r.gotOutput || final
	}
}

// openAIUsage is the usage object of the Responses API (input_tokens, output_tokens,
// input_tokens_details.cached_tokens) and of Chat Completions (prompt_tokens,
// completion_tokens, prompt_tokens_details.cached_tokens). Input counts include the cached
// tokens.
type openAIUsage struct {
	InputTokens         *int64        `json:"input_tokens"`
	OutputTokens        *int64        `json:"output_tokens"`
	InputTokensDetails  *cacheDetails `json:"input_tokens_details"`
	PromptTokens        *int64        `json:"prompt_tokens"`
	CompletionTokens    *int64        `json:"completion_tokens"`
	PromptTokensDetails *cacheDetails `json:"prompt_tokens_details"`
}

type cacheDetails struct {
	CachedTokens *int64 `json:"cached_tokens"`
}

// reading normalises OpenAI's usage: cached tokens move from input to cache reads.
func (u *openAIUsage) reading() reading {
	in, out, details := u.InputTokens, u.OutputTokens, u.InputTokensDetails
	if in == nil && out == nil {
		in, out, details = u.PromptTokens, u.CompletionTokens, u.PromptTokensDetails
	}
	r := reading{gotInput: in != nil, gotOutput: out != nil}
	r.input, r.output = count(in), count(out)
	if details != nil {
		r.cacheRead = min(count(details.CachedTokens), r.input)
		r.input -= r.cacheRead
	}
	return r
}

// responsesParser reads the Responses API. A stream ends with response.completed,
// response.incomplete (cut at max_output_tokens, still charged) or response.failed, each
// carrying the response with its usage; or with an error event. A non-streamed response has
// usage at the top.
type responsesParser struct{ r reading }

func newResponsesParser() parser { return &responsesParser{} }

func (p *responsesParser) result() reading { return p.r }

func (p *responsesParser) event(data []byte) {
	var ev struct {
		Type     string `json:"type"`
		Response *struct {
			Usage *openAIUsage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "response.completed", "response.incomplete", "response.failed":
		if ev.Response != nil && ev.Response.Usage != nil {
			p.r = ev.Response.Usage.reading()
		}
		p.r.failed = ev.Type == "response.failed"
	case "error":
		p.r.failed = true
	}
}

func (p *responsesParser) body(data []byte) {
	var resp struct {
		Usage *openAIUsage    `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &resp) != nil {
		return
	}
	if resp.Usage != nil {
		p.r = resp.Usage.reading()
	} else if present(resp.Error) {
		p.r.failed = true
	}
}

// chatParser reads Chat Completions. A stream is data-only chunks ending with data: [DONE];
// asked with stream_options.include_usage, the last chunk before it has empty choices and
// the usage, while the others carry "usage": null. A chunk with an error object is how the
// API (and OpenAI's SDKs reading it) report a failure mid-stream. A non-streamed completion
// has usage at the top.
type chatParser struct{ r reading }

func newChatParser() parser { return &chatParser{} }

func (p *chatParser) result() reading { return p.r }

func (p *chatParser) event(data []byte) { p.body(data) }

func (p *chatParser) body(data []byte) {
	var chunk struct {
		Usage *openAIUsage    `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &chunk) != nil {
		return // also data: [DONE]
	}
	failed := p.r.failed || present(chunk.Error)
	if chunk.Usage != nil {
		p.r = chunk.Usage.reading()
	}
	p.r.failed = failed
}

// present says a JSON member was there and not null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// geminiUsage is the Gemini API's usageMetadata
// (https://ai.google.dev/api/generate-content#UsageMetadata). promptTokenCount includes the
// cached tokens (cachedContentTokenCount); toolUsePromptTokenCount (the results of the API's
// own tools, such as Google Search, fed back to the model) is billed as input beside it; the
// thinking tokens (thoughtsTokenCount) are billed as output beside candidatesTokenCount
// (https://ai.google.dev/gemini-api/docs/pricing: "Output price (including thinking tokens)").
type geminiUsage struct {
	PromptTokenCount        *int64 `json:"promptTokenCount"`
	CachedContentTokenCount *int64 `json:"cachedContentTokenCount"`
	CandidatesTokenCount    *int64 `json:"candidatesTokenCount"`
	ThoughtsTokenCount      *int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount *int64 `json:"toolUsePromptTokenCount"`
}

// tokens normalises Gemini's usage: input is the prompt and tool-use prompt tokens less the
// cached ones, which are cache reads; output is the candidates' and the thoughts' tokens. The
// API reports no cache writes (explicit caches are created, and billed, apart).
func (u *geminiUsage) tokens() tokens {
	in := add(count(u.PromptTokenCount), count(u.ToolUsePromptTokenCount))
	cached := min(count(u.CachedContentTokenCount), in)
	return tokens{input: in - cached, cacheRead: cached,
		output: add(count(u.CandidatesTokenCount), count(u.ThoughtsTokenCount))}
}

// geminiResponse is the part of a GenerateContentResponse the parser reads.
type geminiResponse struct {
	Candidates []struct {
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *geminiUsage    `json:"usageMetadata"`
	Error         json.RawMessage `json:"error"`
}

// geminiParser reads the Gemini API. A stream (streamGenerateContent?alt=sse) is data-only
// events, each a GenerateContentResponse with the next piece; every piece's usageMetadata is
// the answer's usage so far (promptTokenCount from the first, candidatesTokenCount growing),
// so the latest wins, never the sum. The answer is whole once a candidate has its finishReason
// (or the prompt was blocked, promptFeedback.blockReason, with no candidate at all). An event
// holding an error object ends it failed. A non-streamed answer is one GenerateContentResponse,
// or {"error": {...}}; streamGenerateContent without alt=sse answers a JSON array of the pieces.
type geminiParser struct{ r reading }

func newGeminiParser() parser { return &geminiParser{} }

func (p *geminiParser) result() reading { return p.r }

func (p *geminiParser) event(data []byte) { p.read(data, false) }

func (p *geminiParser) body(data []byte) {
	var pieces []json.RawMessage
	if json.Unmarshal(data, &pieces) != nil {
		p.read(data, true)
		return
	}
	for _, piece := range pieces {
		p.read(piece, false)
	}
}

func (p *geminiParser) read(data []byte, whole bool) {
	var resp geminiResponse
	if json.Unmarshal(data, &resp) != nil {
		return
	}
	if present(resp.Error) {
		p.r.failed = true
	}
	final := whole
	for _, c := range resp.Candidates {
		final = final || c.FinishReason != ""
	}
	if resp.PromptFeedback != nil && resp.PromptFeedback.BlockReason != "" {
		final = true
	}
	if u := resp.UsageMetadata; u != nil {
		p.r.tokens = u.tokens()
		p.r.gotInput = p.r.gotInput || u.PromptTokenCount != nil
		p.r.gotOutput = p.r.gotOutput || final
	}
}
