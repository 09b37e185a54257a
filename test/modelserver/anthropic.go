package modelserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// The Anthropic Messages API, streamed as documented
// (https://docs.anthropic.com/en/docs/build-with-claude/streaming): message_start; per content
// block content_block_start, content_block_delta (text_delta or input_json_delta),
// content_block_stop; message_delta with stop_reason and usage; message_stop. A ping follows
// message_start as the API sends one.

// anthropicErrorType is the documented error type for an HTTP status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func (s *Server) anthropicError(w http.ResponseWriter, e *APIError) {
	typ := e.Type
	if typ == "" {
		typ = anthropicErrorType(e.Status)
	}
	msg := e.Message
	if msg == "" {
		msg = typ
	}
	body := map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}, "request_id": s.newID("req")}
	if e.InStream {
		stream := newSSE(w)
		stream.event("error", body)
		return
	}
	w.Header().Set("request-id", body["request_id"].(string))
	if e.RetryAfter > 0 {
		w.Header().Set("retry-after", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, body)
}

func (s *Server) serveMessages(w http.ResponseWriter, req request, reply Reply, idx int) {
	if reply.Error != nil {
		s.anthropicError(w, reply.Error)
		return
	}
	model := req.Model
	if model == "" {
		model = Model
	}
	usage := reply.Usage.orDefault()
	id := s.newID("msg")
	type block struct {
		start map[string]any
		json  string // tool input, streamed as input_json_delta
		text  string // streamed as text_delta
	}
	var blocks []block
	offered := offeredTools(req.tools())
	if reply.Text != "" {
		blocks = append(blocks, block{start: map[string]any{"type": "text", "text": ""}, text: reply.Text})
	}
	for i, tc := range reply.ToolCalls {
		if _, ok := offered[tc.Name]; !ok && !tc.Unoffered {
			s.problemf("reply %d: tool %q was not offered in the request", idx, tc.Name)
		}
		input, err := json.Marshal(tc.Input)
		if err != nil || len(input) == 0 || input[0] != '{' {
			s.problemf("reply %d: tool %s: the Messages API takes a JSON object as tool input, got %T", idx, tc.Name, tc.Input)
			input = []byte("{}")
		}
		blocks = append(blocks, block{start: map[string]any{"type": "tool_use", "id": s.newID(fmt.Sprintf("toolu_%d", i)), "name": tc.Name, "input": map[string]any{}},
			json: string(input)})
	}
	stop := "end_turn"
	if len(reply.ToolCalls) > 0 {
		stop = "tool_use"
	}

	if !req.Stream {
		content := make([]map[string]any, 0, len(blocks))
		for _, b := range blocks {
			c := map[string]any{}
			for k, v := range b.start {
				c[k] = v
			}
			if c["type"] == "text" {
				c["text"] = b.text
			} else {
				c["input"] = json.RawMessage(b.json)
			}
			content = append(content, c)
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": anthropicUsage(usage, usage.OutputTokens)})
		return
	}

	stream := newSSE(w).holdAfterFirst(req.ctx, reply.Hold)
	stream.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": anthropicUsage(usage, 1)}})
	stream.event("ping", map[string]any{"type": "ping"})
	for i, b := range blocks {
		stream.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": b.start})
		if b.start["type"] == "text" {
			for _, part := range chunks(b.text, 24) {
				stream.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": part}})
			}
		} else {
			// The API opens a tool input with an empty partial_json, then streams the JSON.
			parts := append([]string{""}, chunks(b.json, 32)...)
			for _, part := range parts {
				stream.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
			}
		}
		stream.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	stream.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": usage.OutputTokens}})
	stream.event("message_stop", map[string]any{"type": "message_stop"})
}

func anthropicUsage(u Usage, output int64) map[string]any {
	return map[string]any{"input_tokens": u.InputTokens, "cache_creation_input_tokens": 0,
		"cache_read_input_tokens": u.CacheReadTokens, "output_tokens": output}
}
