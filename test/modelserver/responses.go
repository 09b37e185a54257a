package modelserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// The OpenAI Responses API, streamed as documented
// (https://platform.openai.com/docs/api-reference/responses-streaming): response.created,
// response.in_progress; per output item response.output_item.added, then for a message
// response.content_part.added, response.output_text.delta..., response.output_text.done,
// response.content_part.done; for a function call response.function_call_arguments.delta...,
// response.function_call_arguments.done; for a custom (free-form) tool call
// response.custom_tool_call_input.delta..., response.custom_tool_call_input.done; then
// response.output_item.done; and finally response.completed with usage (or response.failed).
// Every event carries a sequence_number.

func responsesErrorCode(status int) (typ, code string) {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error", "invalid_request"
	case http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case http.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded"
	}
	return "server_error", "server_error"
}

type responsesStream struct {
	*sse
	seq int
}

func (r *responsesStream) send(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = r.seq
	r.seq++
	r.event(typ, fields)
}

func (s *Server) serveResponses(w http.ResponseWriter, req request, reply Reply, idx int) {
	model := req.Model
	if model == "" {
		model = "gpt-5-codex"
	}
	respID := s.newID("resp")
	created := time.Now().Unix()
	response := func(status string, output []any, usage, errObj any) map[string]any {
		return map[string]any{"id": respID, "object": "response", "created_at": created, "status": status,
			"error": errObj, "incomplete_details": nil, "model": model, "output": output, "parallel_tool_calls": true,
			"previous_response_id": nil, "tool_choice": "auto", "tools": []any{}, "usage": usage, "metadata": map[string]any{}}
	}

	if e := reply.Error; e != nil && !e.InStream {
		typ, code := responsesErrorCode(e.Status)
		if e.Type != "" {
			code = e.Type
		}
		msg := e.Message
		if msg == "" {
			msg = code
		}
		if e.RetryAfter > 0 {
			w.Header().Set("retry-after", strconv.Itoa(e.RetryAfter))
		}
		w.Header().Set("x-request-id", s.newID("req"))
		writeJSON(w, e.Status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
		return
	}
	if !req.Stream {
		s.problemf("reply %d: a non-streaming Responses request; only streaming is scripted", idx)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": "modelserver: stream must be true",
			"type": "invalid_request_error", "param": "stream", "code": "invalid_request"}})
		return
	}

	stream := &responsesStream{sse: newSSE(w).holdAfterFirst(req.ctx, reply.Hold)}
	stream.send("response.created", map[string]any{"response": response("in_progress", []any{}, nil, nil)})
	stream.send("response.in_progress", map[string]any{"response": response("in_progress", []any{}, nil, nil)})
	if e := reply.Error; e != nil {
		_, code := responsesErrorCode(e.Status)
		if e.Type != "" {
			code = e.Type
		}
		msg := e.Message
		if msg == "" {
			msg = code
		}
		stream.send("response.failed", map[string]any{"response": response("failed", []any{}, nil,
			map[string]any{"code": code, "message": msg})})
		return
	}

	offered := offeredTools(req.tools())
	var output []any
	if reply.Text != "" {
		i := len(output)
		itemID := s.newID("msg")
		stream.send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
			"id": itemID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
		stream.send("response.content_part.added", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		for _, part := range chunks(reply.Text, 24) {
			stream.send("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
				"delta": part, "logprobs": []any{}})
		}
		stream.send("response.output_text.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
			"text": reply.Text, "logprobs": []any{}})
		part := map[string]any{"type": "output_text", "text": reply.Text, "annotations": []any{}}
		stream.send("response.content_part.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "part": part})
		item := map[string]any{"id": itemID, "type": "message", "status": "completed", "role": "assistant", "content": []any{part}}
		stream.send("response.output_item.done", map[string]any{"output_index": i, "item": item})
		output = append(output, item)
	}
	for _, tc := range reply.ToolCalls {
		i := len(output)
		callID := s.newID("call")
		kind, known := offered[tc.Name]
		if !known && !tc.Unoffered {
			s.problemf("reply %d: tool %q was not offered in the request", idx, tc.Name)
		}
		if in, ok := tc.Input.(string); ok || kind == "custom" {
			if !ok {
				s.problemf("reply %d: tool %q is a custom tool and takes a string input, got %T", idx, tc.Name, tc.Input)
			}
			itemID := s.newID("ctc")
			stream.send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"id": itemID, "type": "custom_tool_call", "status": "in_progress", "call_id": callID, "name": tc.Name, "input": ""}})
			for _, part := range chunks(in, 32) {
				stream.send("response.custom_tool_call_input.delta", map[string]any{"item_id": itemID, "output_index": i, "delta": part})
			}
			stream.send("response.custom_tool_call_input.done", map[string]any{"item_id": itemID, "output_index": i, "input": in})
			item := map[string]any{"id": itemID, "type": "custom_tool_call", "status": "completed", "call_id": callID, "name": tc.Name, "input": in}
			stream.send("response.output_item.done", map[string]any{"output_index": i, "item": item})
			output = append(output, item)
			continue
		}
		args, err := json.Marshal(tc.Input)
		if err != nil || len(args) == 0 || args[0] != '{' {
			s.problemf("reply %d: tool %q: a function tool takes a JSON object, got %T", idx, tc.Name, tc.Input)
			args = []byte("{}")
		}
		itemID := s.newID("fc")
		stream.send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
			"id": itemID, "type": "function_call", "status": "in_progress", "call_id": callID, "name": tc.Name, "arguments": ""}})
		for _, part := range chunks(string(args), 32) {
			stream.send("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": i, "delta": part})
		}
		stream.send("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": i, "arguments": string(args)})
		item := map[string]any{"id": itemID, "type": "function_call", "status": "completed", "call_id": callID, "name": tc.Name, "arguments": string(args)}
		stream.send("response.output_item.done", map[string]any{"output_index": i, "item": item})
		output = append(output, item)
	}
	u := reply.Usage.orDefault()
	usage := map[string]any{"input_tokens": u.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": u.CacheReadTokens},
		"output_tokens": u.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": u.InputTokens + u.OutputTokens}
	if output == nil {
		output = []any{}
	}
	stream.send("response.completed", map[string]any{"response": response("completed", output, usage, nil)})
}

// offeredTools maps the names of the tools in a request to their type ("function", "custom",
// ...). Anthropic tools have no type for client tools; they count as "function".
func offeredTools(tools []json.RawMessage) map[string]string {
	out := map[string]string{}
	for _, raw := range tools {
		var t struct {
			Type     string `json:"type"`
			Name     string `json:"name"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		name := t.Name
		if name == "" && t.Function != nil {
			name = t.Function.Name
		}
		typ := t.Type
		if typ == "" {
			typ = "function"
		}
		if name != "" {
			out[name] = typ
		}
	}
	return out
}
