package modelproxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// The proxy's own answers are in the error shape of the API the CLI speaks, so the CLI shows
// the message instead of failing to parse it:
//   - Anthropic: {"type":"error","error":{"type":"<type>","message":"..."}}
//     (https://docs.anthropic.com/en/api/errors)
//   - OpenAI: {"error":{"message":"...","type":"<type>","param":null,"code":<code>}}
//     (https://platform.openai.com/docs/guides/error-codes)
//   - Gemini: {"error":{"code":<HTTP status>,"message":"...","status":"<canonical code>"}}
//     (https://ai.google.dev/gemini-api/docs/troubleshooting#error-codes)

// budgetCode is the OpenAI error code of a refusal for a used-up budget.
const budgetCode = "shepherd_budget_exhausted"

// anthropicErrorType is the documented error type for a status the proxy answers with.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	}
	return "api_error"
}

// openAIErrorType is the error type and code for a status the proxy answers with. A 403 is
// only ever the budget: insufficient_quota is what OpenAI answers when the money runs out.
func openAIErrorType(status int) (typ string, code any) {
	switch status {
	case http.StatusForbidden:
		return "insufficient_quota", budgetCode
	case http.StatusRequestEntityTooLarge:
		return "invalid_request_error", "request_too_large"
	case http.StatusBadRequest, http.StatusNotFound:
		return "invalid_request_error", nil
	}
	return "server_error", nil
}

// geminiStatus is the canonical code Google's APIs name a status the proxy answers with by.
func geminiStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusRequestEntityTooLarge:
		return "INVALID_ARGUMENT" // the request cannot succeed as it is
	case http.StatusBadGateway:
		return "UNAVAILABLE"
	}
	return "INTERNAL"
}

// writeError answers with the proxy's own error. Client errors are marked not to be retried:
// the Anthropic and OpenAI SDKs (so Claude Code, OpenCode, Aider) honour x-should-retry, and
// resending the same request cannot succeed.
func writeError(w http.ResponseWriter, kind agentsv1alpha1.ModelAPIKind, status int, message string) {
	var body any
	switch kind {
	case agentsv1alpha1.ModelAPIAnthropic:
		body = map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": message}}
	case agentsv1alpha1.ModelAPIGemini:
		body = map[string]any{"error": map[string]any{"code": status, "message": message, "status": geminiStatus(status)}}
	default:
		typ, code := openAIErrorType(status)
		body = map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		raw = []byte(`{"error":"internal"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(raw)))
	if status >= 400 && status < 500 {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}
