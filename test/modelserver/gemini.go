package modelserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The Gemini API (https://ai.google.dev/api/generate-content), as Gemini CLI calls it through
// google-genai: POST /v1beta/models/{model}:generateContent answers one GenerateContentResponse,
// :streamGenerateContent?alt=sse answers server-sent events, each a whole GenerateContentResponse
// holding the next piece (data: {...} and a blank line, CR LF as Google sends them). A response
// has candidates[0].content (role "model", parts: text, or functionCall {name, args}; a thinking
// model's first functionCall part carries a thoughtSignature, which the client sends back),
// finishReason STOP on the last piece (also after function calls), usageMetadata (every piece
// repeats promptTokenCount; the last adds candidatesTokenCount: the counts are totals so far,
// never to be summed), modelVersion and responseId. POST ...:countTokens answers totalTokens.
// Errors are {"error": {"code", "message", "status", "details"}}, with a google.rpc.RetryInfo
// detail when the client should wait; the API version is v1beta (v1 is served the same).

// geminiThoughtSignature is what the server sends as a functionCall's thoughtSignature: opaque
// to the client, which replays it with the call in its next request.
const geminiThoughtSignature = "c2hlcGhlcmQtbW9kZWxzZXJ2ZXI="

// geminiPath splits /v1beta/models/{model}:{method} (or /v1/...) into the model and the method.
func geminiPath(path string) (model, method string, ok bool) {
	for _, version := range []string{"/v1beta/models/", "/v1/models/"} {
		rest, found := strings.CutPrefix(path, version)
		if !found {
			continue
		}
		model, method, ok = strings.Cut(rest, ":")
		return model, method, ok && model != "" && !strings.Contains(model, "/")
	}
	return "", "", false
}

// geminiStatus is the canonical status name of an HTTP status in Google's error shape
// (https://ai.google.dev/gemini-api/docs/troubleshooting#error-codes).
func geminiStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	return "INTERNAL"
}

// geminiError is the API's error object for e. Type, when it is a canonical code (upper case),
// is its status; another API's type (the server's own "invalid_request_error") is not.
func geminiError(e *APIError) map[string]any {
	status := e.Type
	if status == "" || status != strings.ToUpper(status) {
		status = geminiStatus(e.Status)
	}
	msg := e.Message
	if msg == "" {
		msg = status
	}
	body := map[string]any{"code": e.Status, "message": msg, "status": status}
	if e.RetryAfter > 0 {
		body["details"] = []any{map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo",
			"retryDelay": fmt.Sprintf("%ds", e.RetryAfter)}}
	}
	return map[string]any{"error": body}
}

// geminiUsage is usageMetadata: promptTokenCount includes the cached tokens
// (cachedContentTokenCount), as the API reports them. final adds the candidates' count.
func geminiUsage(u Usage, final bool) map[string]any {
	m := map[string]any{"promptTokenCount": u.InputTokens, "totalTokenCount": u.InputTokens,
		"promptTokensDetails": []any{map[string]any{"modality": "TEXT", "tokenCount": u.InputTokens}}}
	if u.CacheReadTokens > 0 {
		m["cachedContentTokenCount"] = u.CacheReadTokens
		m["cacheTokensDetails"] = []any{map[string]any{"modality": "TEXT", "tokenCount": u.CacheReadTokens}}
	}
	if final {
		m["candidatesTokenCount"] = u.OutputTokens
		m["totalTokenCount"] = u.InputTokens + u.OutputTokens
	}
	return m
}

// geminiParts is a reply's content parts: its text, then its function calls.
func (s *Server) geminiParts(tools []json.RawMessage, reply Reply, idx int) (text []string, calls []map[string]any) {
	text = chunks(reply.Text, 24)
	offered := offeredTools(tools)
	for i, tc := range reply.ToolCalls {
		if _, ok := offered[tc.Name]; !ok && !tc.Unoffered {
			s.problemf("reply %d: tool %q was not offered in the request", idx, tc.Name)
		}
		args, ok := tc.Input.(map[string]any)
		if !ok {
			raw, err := json.Marshal(tc.Input)
			if err != nil || json.Unmarshal(raw, &args) != nil || args == nil {
				s.problemf("reply %d: tool %q: a functionCall takes a JSON object as args, got %T", idx, tc.Name, tc.Input)
				args = map[string]any{}
			}
		}
		part := map[string]any{"functionCall": map[string]any{"name": tc.Name, "args": args}}
		if i == 0 {
			part["thoughtSignature"] = geminiThoughtSignature
		}
		calls = append(calls, part)
	}
	return text, calls
}

func (s *Server) serveGemini(w http.ResponseWriter, req request, model, method string, body []byte, reply Reply, idx int) {
	if method == "countTokens" {
		writeJSON(w, http.StatusOK, map[string]any{"totalTokens": estimateTokens(body),
			"promptTokensDetails": []any{map[string]any{"modality": "TEXT", "tokenCount": estimateTokens(body)}}})
		return
	}
	stream := method == "streamGenerateContent"
	if e := reply.Error; e != nil && (!e.InStream || !stream) {
		writeJSON(w, e.Status, geminiError(e))
		return
	}
	responseID := s.newID("resp")
	response := func(parts []map[string]any, final bool, u Usage) map[string]any {
		cand := map[string]any{"content": map[string]any{"parts": parts, "role": "model"}, "index": 0}
		if final {
			cand["finishReason"] = "STOP"
		}
		return map[string]any{"candidates": []any{cand}, "usageMetadata": geminiUsage(u, final),
			"modelVersion": model, "responseId": responseID}
	}
	usage := reply.Usage.orDefault()
	text, calls := s.geminiParts(req.tools(), reply, idx)

	if !stream {
		var parts []map[string]any
		if reply.Text != "" {
			parts = append(parts, map[string]any{"text": reply.Text})
		}
		parts = append(parts, calls...)
		if len(parts) == 0 {
			parts = []map[string]any{{"text": ""}}
		}
		writeJSON(w, http.StatusOK, response(parts, true, usage))
		return
	}

	events := newSSE(w).holdAfterFirst(req.ctx, reply.Hold)
	send := func(v any) {
		raw, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("modelserver: marshal a Gemini chunk: %v", err))
		}
		events.write("data: " + string(raw) + "\r\n\r\n")
	}
	if e := reply.Error; e != nil {
		// After a first piece, the error arrives as a bare JSON object: the form google-genai's
		// stream reader checks each chunk it reads for (an "error" member with a code of 400-599).
		send(response([]map[string]any{{"text": ""}}, false, usage))
		events.write(mustJSON(geminiError(e)))
		return
	}
	var pieces [][]map[string]any
	for _, t := range text {
		pieces = append(pieces, []map[string]any{{"text": t}})
	}
	if len(calls) > 0 {
		pieces = append(pieces, calls)
	}
	if len(pieces) == 0 {
		pieces = [][]map[string]any{{{"text": ""}}}
	}
	for i, p := range pieces {
		send(response(p, i == len(pieces)-1, usage))
	}
}

func mustJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("modelserver: marshal: %v", err))
	}
	return string(raw)
}
