package modelserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// The OpenAI Chat Completions API (https://platform.openai.com/docs/api-reference/chat), as
// OpenAI-compatible providers and Aider call it. Not streamed, the answer is a chat.completion
// with choices[0].message (content, tool_calls), finish_reason and usage. Streamed, it is
// data-only server-sent events of chat.completion.chunk objects: a first delta with the role,
// the content in pieces, each tool call (by index) first with its id, type and name then its
// arguments in pieces, a last choice chunk with the finish_reason; with
// stream_options.include_usage one more chunk with empty choices and the usage (every earlier
// chunk then carries "usage": null); and data: [DONE]. An error after the stream started is a
// chunk holding an error object, as OpenAI's SDKs read it, and the stream ends there.

// fingerprint is the system_fingerprint the API reports for its backend configuration.
const fingerprint = "fp_modelserver"

// chatError is the API's error object for an APIError.
func chatError(e *APIError) map[string]any {
	typ, code := responsesErrorCode(e.Status)
	if e.Type != "" {
		code = e.Type
	}
	msg := e.Message
	if msg == "" {
		msg = code
	}
	return map[string]any{"message": msg, "type": typ, "param": nil, "code": code}
}

// chatToolCall is one tool call of a reply in the API's shape, its arguments encoded.
type chatToolCall struct {
	id, name, args string
}

func (s *Server) chatToolCalls(req request, reply Reply, idx int) []chatToolCall {
	offered := offeredTools(req.tools())
	var out []chatToolCall
	for _, tc := range reply.ToolCalls {
		if _, known := offered[tc.Name]; !known && !tc.Unoffered {
			s.problemf("reply %d: tool %q was not offered in the request", idx, tc.Name)
		}
		args, err := json.Marshal(tc.Input)
		if err != nil || len(args) == 0 || args[0] != '{' {
			s.problemf("reply %d: tool %q: Chat Completions takes a JSON object as tool arguments, got %T", idx, tc.Name, tc.Input)
			args = []byte("{}")
		}
		out = append(out, chatToolCall{id: s.newID("call"), name: tc.Name, args: string(args)})
	}
	return out
}

func chatUsage(u Usage) map[string]any {
	return map[string]any{
		"prompt_tokens":             u.InputTokens,
		"completion_tokens":         u.OutputTokens,
		"total_tokens":              u.InputTokens + u.OutputTokens,
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.CacheReadTokens, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0},
	}
}

// chatAnswer is what a reply comes to in the API's terms.
type chatAnswer struct {
	id, model, text, finish string
	created                 int64
	calls                   []chatToolCall
	usage                   Usage
}

func (s *Server) serveChat(w http.ResponseWriter, req request, reply Reply, idx int) {
	if e := reply.Error; e != nil && (!e.InStream || !req.Stream) {
		if e.RetryAfter > 0 {
			w.Header().Set("retry-after", strconv.Itoa(e.RetryAfter))
		}
		w.Header().Set("x-request-id", s.newID("req"))
		writeJSON(w, e.Status, map[string]any{"error": chatError(e)})
		return
	}
	a := chatAnswer{id: s.newID("chatcmpl"), model: req.Model, text: reply.Text, finish: "stop",
		created: time.Now().Unix(), calls: s.chatToolCalls(req, reply, idx), usage: reply.Usage.orDefault()}
	if a.model == "" {
		a.model = "gpt-5-codex"
	}
	if len(a.calls) > 0 {
		a.finish = "tool_calls"
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": a.id, "object": "chat.completion", "created": a.created, "model": a.model,
			"choices":            []any{map[string]any{"index": 0, "message": chatMessage(a.text, a.calls), "logprobs": nil, "finish_reason": a.finish}},
			"usage":              chatUsage(a.usage),
			"service_tier":       "default",
			"system_fingerprint": fingerprint,
		})
		return
	}
	streamChat(newSSE(w).holdAfterFirst(req.ctx, reply.Hold), a, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, reply.Error)
}

// streamChat sends a as chunks; failure, if set, cuts the stream after the first.
func streamChat(stream *sse, a chatAnswer, withUsage bool, failure *APIError) {
	chunk := func(choices []any) map[string]any {
		c := map[string]any{"id": a.id, "object": "chat.completion.chunk", "created": a.created, "model": a.model,
			"system_fingerprint": fingerprint, "choices": choices}
		if withUsage {
			c["usage"] = nil
		}
		return c
	}
	delta := func(d map[string]any, finish any) map[string]any {
		return chunk([]any{map[string]any{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}})
	}
	stream.data(delta(map[string]any{"role": "assistant", "content": ""}, nil))
	if failure != nil {
		stream.data(map[string]any{"error": chatError(failure)})
		return
	}
	for _, part := range chunks(a.text, 24) {
		stream.data(delta(map[string]any{"content": part}, nil))
	}
	for i, tc := range a.calls {
		stream.data(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": tc.id, "type": "function",
			"function": map[string]any{"name": tc.name, "arguments": ""}}}}, nil))
		for _, part := range chunks(tc.args, 32) {
			stream.data(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i,
				"function": map[string]any{"arguments": part}}}}, nil))
		}
	}
	stream.data(delta(map[string]any{}, a.finish))
	if withUsage {
		last := chunk([]any{})
		last["usage"] = chatUsage(a.usage)
		stream.data(last)
	}
	stream.data("[DONE]")
}

// chatMessage is a non-streamed answer's message: content null when there is only tool calls.
func chatMessage(text string, calls []chatToolCall) map[string]any {
	message := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
	if text != "" {
		message["content"] = text
	}
	if len(calls) > 0 {
		var tcs []any
		for _, tc := range calls {
			tcs = append(tcs, map[string]any{"id": tc.id, "type": "function",
				"function": map[string]any{"name": tc.name, "arguments": tc.args}})
		}
		message["tool_calls"] = tcs
	}
	return message
}
