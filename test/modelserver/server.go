// Package modelserver is a scripted model API for tests: it speaks the Anthropic Messages API
// (POST /v1/messages, streaming server-sent events, as Claude Code and OpenCode's Anthropic
// provider call it), the OpenAI Responses API (POST /v1/responses, streaming, as Codex calls
// it) and the Gemini API (POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent, as Gemini CLI calls it), so the real agent CLIs can run against it and
// make real tool calls. It also speaks OpenAI Chat Completions (POST /v1/chat/completions,
// streamed or not), as OpenAI-compatible providers and Aider call it.
//
// A Script is a list of Replies. Every conversational request (one that offers the model tools)
// takes the next Reply: text, one or more tool calls, or an API error to exercise the CLI's own
// retries. Requests the CLIs make on the side (title generation, token counting, model listing,
// telemetry) get a sensible answer and do not take a Reply. Every request is recorded, so a test
// can check what the CLI sent: the prompt, the tool results, the resumed conversation.
package modelserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Reply is the answer to one conversational request. Set Error, or Text and/or ToolCalls.
type Reply struct {
	// Text the model says. With ToolCalls, it comes first.
	Text string `json:"text,omitempty"`
	// ToolCalls the model makes, in order; the CLI runs them and sends the results back in its
	// next request, which takes the next Reply.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// Error answers with an API error instead. The CLI retries the same request, which then
	// takes the next Reply.
	Error *APIError `json:"error,omitempty"`
	// Usage is reported for the reply; zero means DefaultUsage.
	Usage Usage `json:"usage,omitzero"`
	// Repeat, on the last reply of the script, answers every further conversational request
	// the same way until more replies are appended: for an error a CLI retries, or varies its
	// request for, an unknown number of times.
	Repeat bool `json:"repeat,omitempty"`
	// Hold, when set, pauses a streamed reply after its first event until the channel is
	// closed (or the client goes away), so that a test can see that whatever sits between the
	// server and the client passes events on as they come. Not part of JSON scripts.
	Hold <-chan struct{} `json:"-"`
}

// ToolCall is one tool use by the model.
type ToolCall struct {
	// Name of a tool the CLI offered (Claude Code: "Bash", "Write", "Edit"; Codex:
	// "exec_command", "apply_patch"; OpenCode: "bash", "write", "edit").
	Name string `json:"name"`
	// Input is the tool's arguments: a JSON object for a function tool, or for a custom
	// (free-form) tool such as Codex's exec, a string.
	Input any `json:"input"`
	// Unoffered calls a tool the request did not offer, as a model may; otherwise that is
	// recorded as a problem of the script.
	Unoffered bool `json:"unoffered,omitempty"`
}

// APIError is an error answer.
type APIError struct {
	// Status is the HTTP status (429, 500, 529, ...). With InStream the response starts as 200
	// and the error arrives as a stream event instead.
	Status int `json:"status"`
	// Type is the API's error type ("overloaded_error", "rate_limit_error", "api_error"; for
	// the Responses API the error code, such as "server_error"). Empty picks one for Status.
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"`
	// InStream sends the error after the stream started: an Anthropic `error` event, or a
	// Responses `response.failed` event.
	InStream bool `json:"inStream,omitempty"`
	// RetryAfter, when set, is sent as the retry-after header (seconds).
	RetryAfter int `json:"retryAfter,omitempty"`
}

// Usage is what a reply reports it cost, in tokens.
type Usage struct {
	InputTokens     int64 `json:"inputTokens,omitempty"`
	OutputTokens    int64 `json:"outputTokens,omitempty"`
	CacheReadTokens int64 `json:"cacheReadTokens,omitempty"`
}

// DefaultUsage is reported when a Reply sets none.
var DefaultUsage = Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 300}

// Script is the conversation the server plays, one Reply per conversational request.
type Script []Reply

// Text is a Reply that says s and ends the turn.
func Text(s string) Reply { return Reply{Text: s} }

// Tools is a Reply that calls the tools.
func Tools(calls ...ToolCall) Reply { return Reply{ToolCalls: calls} }

// Fail is a Reply that answers with an HTTP error status.
func Fail(status int, message string) Reply {
	return Reply{Error: &APIError{Status: status, Message: message}}
}

// API names what protocol a request used.
type API string

const (
	// APIMessages is POST /v1/messages (Anthropic).
	APIMessages API = "messages"
	// APICountTokens is POST /v1/messages/count_tokens (Anthropic).
	APICountTokens API = "count_tokens"
	// APIResponses is POST /v1/responses (OpenAI).
	APIResponses API = "responses"
	// APIChatCompletions is POST /v1/chat/completions (OpenAI).
	APIChatCompletions API = "chat_completions"
	// APIModels is GET /v1/models (both).
	APIModels API = "models"
	// APIGenerateContent is POST /v1beta/models/{model}:generateContent and
	// :streamGenerateContent (Gemini; Request.Stream tells them apart).
	APIGenerateContent API = "generate_content"
	// APIGeminiCountTokens is POST /v1beta/models/{model}:countTokens (Gemini).
	APIGeminiCountTokens API = "gemini_count_tokens"
	// APIOther is anything else; it is answered 404.
	APIOther API = "other"
)

// Request is one recorded request.
type Request struct {
	// Seq counts requests from 0 in arrival order.
	Seq    int
	API    API
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	// Reply is the index of the script Reply it took, or -1 for a side request.
	Reply int
	// Stream says the client asked for a streamed answer.
	Stream bool
}

// Server is a running scripted model server.
type Server struct {
	mu       sync.Mutex
	script   Script
	next     int
	requests []Request
	problems []string

	listener net.Listener
	srv      *http.Server
	ids      int
	inFlight atomic.Int64
}

// New returns a server that plays script. Start it with Start.
func New(script Script) *Server {
	return &Server{script: slices.Clone(script)}
}

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves until Close.
func (s *Server) Start(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.listener = l
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return nil
}

// URL is the server's base URL, http://host:port, without /v1.
func (s *Server) URL() string { return "http://" + s.listener.Addr().String() }

// Close stops the server, ending open streams.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

// Append adds replies to the end of the script (for the next turn of a conversation).
func (s *Server) Append(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, replies...)
}

// Script returns the replies scripted so far (Request.Reply indexes it).
func (s *Server) Script() Script {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.script)
}

// Requests returns every request received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Turns returns the conversational requests (those that took a Reply), in order.
func (s *Server) Turns() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Reply >= 0 {
			out = append(out, r)
		}
	}
	return out
}

// Played is how many replies of the script were used (a repeated reply counts once).
func (s *Server) Played() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// InFlight is how many requests the server is answering right now: a test can see that a
// stream was abandoned once its client went away.
func (s *Server) InFlight() int { return int(s.inFlight.Load()) }

// Problems lists what the server could not answer as scripted: requests past the end of the
// script, unknown paths, unreadable bodies. A test should expect it to be empty.
func (s *Server) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.problems)
}

func (s *Server) problemf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
}

func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return fmt.Sprintf("%s_%024d", prefix, s.ids)
}

// request is the part of a request body the server looks at.
type request struct {
	Model  string            `json:"model"`
	Stream bool              `json:"stream"`
	Tools  []json.RawMessage `json:"tools"`
	// StreamOptions is Chat Completions' stream_options; include_usage asks for a last chunk
	// with the usage.
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// Input is the Responses API's conversation. Codex offers its tools there, in an
	// additional_tools item, rather than in Tools.
	Input json.RawMessage `json:"input"`
	// ctx is the request's, for a held stream to notice the client going away.
	ctx context.Context
}

// tools returns every tool the request offers, flattening namespaces.
func (r request) tools() []json.RawMessage {
	out := slices.Clone(r.Tools)
	var items []struct {
		Type  string            `json:"type"`
		Tools []json.RawMessage `json:"tools"`
	}
	if len(r.Input) > 0 && r.Input[0] == '[' && json.Unmarshal(r.Input, &items) == nil {
		for _, it := range items {
			if it.Type == "additional_tools" {
				out = append(out, it.Tools...)
			}
		}
	}
	return flattenTools(out)
}

// flattenTools replaces namespace entries ({"type":"namespace","tools":[...]}) by their tools,
// and a Gemini Tool ({"functionDeclarations":[...]}) by its function declarations.
func flattenTools(tools []json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, raw := range tools {
		var ns struct {
			Type                 string            `json:"type"`
			Tools                []json.RawMessage `json:"tools"`
			FunctionDeclarations []json.RawMessage `json:"functionDeclarations"`
		}
		if json.Unmarshal(raw, &ns) != nil {
			out = append(out, raw)
			continue
		}
		switch {
		case ns.Type == "namespace":
			out = append(out, flattenTools(ns.Tools)...)
		case ns.FunctionDeclarations != nil:
			out = append(out, ns.FunctionDeclarations...)
		default:
			out = append(out, raw)
		}
	}
	return out
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		s.problemf("%s %s: reading the body: %v", r.Method, r.URL.Path, err)
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	rec := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body, Reply: -1}
	if s.foreign(r) {
		// Used as the CLI's HTTP(S) proxy, the server sees what the CLI tries to reach beyond
		// the model API, and refuses it.
		rec.API, rec.Path = APIOther, r.RequestURI
		s.record(&rec)
		s.problemf("%s %s: the CLI tried to reach another host through the proxy", r.Method, r.RequestURI)
		http.Error(w, "modelserver: only the model API is reachable", http.StatusForbidden)
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	var req request
	if len(bytes.TrimSpace(body)) > 0 && r.Method == http.MethodPost {
		if err := json.Unmarshal(body, &req); err != nil {
			s.record(&rec)
			s.problemf("%s %s: body is not JSON: %v", r.Method, path, err)
			writeJSON(w, http.StatusBadRequest, map[string]any{"type": "error",
				"error": map[string]any{"type": "invalid_request_error", "message": "body is not JSON"}})
			return
		}
	}
	rec.Stream = req.Stream
	req.ctx = r.Context()
	switch {
	case r.Method == http.MethodPost && path == "/v1/messages":
		rec.API = APIMessages
		reply, idx := s.take(len(req.tools()) > 0)
		rec.Reply = idx
		s.record(&rec)
		s.serveMessages(w, req, reply, idx)
	case r.Method == http.MethodPost && path == "/v1/messages/count_tokens":
		rec.API = APICountTokens
		s.record(&rec)
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": estimateTokens(body)})
	case r.Method == http.MethodPost && path == "/v1/responses":
		rec.API = APIResponses
		reply, idx := s.take(len(req.tools()) > 0)
		rec.Reply = idx
		s.record(&rec)
		s.serveResponses(w, req, reply, idx)
	case r.Method == http.MethodPost && path == "/v1/chat/completions":
		rec.API = APIChatCompletions
		reply, idx := s.take(len(req.tools()) > 0)
		rec.Reply = idx
		s.record(&rec)
		s.serveChat(w, req, reply, idx)
	case r.Method == http.MethodPost && isGemini(path):
		model, method, _ := geminiPath(path)
		switch method {
		case "generateContent", "streamGenerateContent":
			rec.API, rec.Stream = APIGenerateContent, method == "streamGenerateContent"
			reply, idx := s.take(len(req.tools()) > 0)
			rec.Reply = idx
			s.record(&rec)
			s.serveGemini(w, req, model, method, body, reply, idx)
		default:
			rec.API = APIGeminiCountTokens
			s.record(&rec)
			s.serveGemini(w, req, model, method, body, Reply{}, -1)
		}
	case r.Method == http.MethodGet && (path == "/v1/models" || strings.HasPrefix(path, "/v1/models/")):
		rec.API = APIModels
		s.record(&rec)
		s.serveModels(w, strings.TrimPrefix(path, "/v1/models"))
	default:
		rec.API = APIOther
		s.record(&rec)
		s.problemf("%s %s: not a model API path this server knows", r.Method, r.URL.Path)
		writeJSON(w, http.StatusNotFound, map[string]any{"type": "error",
			"error": map[string]any{"type": "not_found_error", "message": "modelserver: no such endpoint " + r.URL.Path}})
	}
}

// isGemini says path is a Gemini API method the server serves.
func isGemini(path string) bool {
	_, method, ok := geminiPath(path)
	return ok && (method == "generateContent" || method == "streamGenerateContent" || method == "countTokens")
}

// foreign says the request was sent to the server as a proxy, for another host: a CONNECT, or
// an absolute-form request naming a host other than the server.
func (s *Server) foreign(r *http.Request) bool {
	if r.Method == http.MethodConnect {
		return true
	}
	if r.URL.Host == "" {
		return false
	}
	_, port, _ := net.SplitHostPort(s.listener.Addr().String())
	host, reqPort, err := net.SplitHostPort(r.URL.Host)
	if err != nil || reqPort != port {
		return true
	}
	ip := net.ParseIP(host)
	return host != "localhost" && (ip == nil || !ip.IsLoopback())
}

func (s *Server) record(rec *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec.Seq = len(s.requests)
	s.requests = append(s.requests, *rec)
}

// take returns the next Reply for a conversational request, or a side reply (index -1). A
// conversational request past the end of the script gets a non-retryable error, and a problem
// is recorded.
func (s *Server) take(conversational bool) (Reply, int) {
	if !conversational {
		return Reply{Text: SideText}, -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := s.next
	if idx >= len(s.script) && idx > 0 && s.script[idx-1].Repeat {
		return s.script[idx-1], idx - 1
	}
	s.next++
	if idx >= len(s.script) {
		s.problems = append(s.problems, fmt.Sprintf("conversational request %d is past the end of the script (%d replies)", idx, len(s.script)))
		return Reply{Error: &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: "modelserver: the script has no reply left"}}, idx
	}
	return s.script[idx], idx
}

// SideText answers requests that offer no tools: title generation, summaries, quota checks.
const SideText = "Scripted side answer"

// Model is the model id reported when a request names none.
const Model = "claude-sonnet-4-5"

func (s *Server) serveModels(w http.ResponseWriter, one string) {
	models := []string{Model, "claude-haiku-4-5", "gpt-5-codex"}
	entry := func(id string) map[string]any {
		return map[string]any{"type": "model", "id": id, "display_name": id, "created_at": "2025-09-29T00:00:00Z",
			"object": "model", "created": 1759104000, "owned_by": "modelserver"}
	}
	if one = strings.TrimPrefix(one, "/"); one != "" {
		writeJSON(w, http.StatusOK, entry(one))
		return
	}
	data := make([]map[string]any, 0, len(models))
	for _, m := range models {
		data = append(data, entry(m))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "has_more": false,
		"first_id": models[0], "last_id": models[len(models)-1]})
}

func (u Usage) orDefault() Usage {
	if u == (Usage{}) {
		return DefaultUsage
	}
	return u
}

// estimateTokens is a deterministic stand-in for a tokenizer: one token per four bytes.
func estimateTokens(body []byte) int { return len(body)/4 + 1 }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes server-sent events and flushes each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
	// hold, when set, pauses the stream after its first event (Reply.Hold).
	hold <-chan struct{}
	ctx  context.Context
	sent int
}

// holdAfterFirst pauses the stream after its first event until hold is closed or the client
// goes away.
func (e *sse) holdAfterFirst(ctx context.Context, hold <-chan struct{}) *sse {
	e.hold, e.ctx = hold, ctx
	if e.ctx == nil {
		e.ctx = context.Background()
	}
	return e
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (e *sse) event(name string, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("modelserver: marshal %s: %v", name, err))
	}
	e.write(fmt.Sprintf("event: %s\ndata: %s\n\n", name, raw))
}

// data writes a data-only event, as Chat Completions streams are: a JSON chunk, or a literal
// such as [DONE].
func (e *sse) data(v any) {
	raw, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("modelserver: marshal chunk: %v", err))
		}
		raw = string(b)
	}
	e.write("data: " + raw + "\n\n")
}

func (e *sse) write(event string) {
	_, _ = io.WriteString(e.w, event)
	if e.f != nil {
		e.f.Flush()
	}
	e.sent++
	if e.sent == 1 && e.hold != nil {
		select {
		case <-e.hold:
		case <-e.ctx.Done():
		}
	}
}

// chunks splits s into pieces of about n bytes on rune boundaries, so deltas are really
// streamed in parts.
func chunks(s string, n int) []string {
	if s == "" {
		return nil
	}
	var out []string
	for len(s) > n {
		cut := n
		for cut < len(s) && !isRuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
