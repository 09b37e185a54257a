package modelproxy

import (
	"net/http"
	"net/url"
	"strings"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// endpoint is one model API call the proxy forwards. Everything else is answered 404: the
// agent is not trusted to reach the rest of an API with the real key (batches, files, fine
// tuning, admin).
type endpoint struct {
	name   string
	method string
	path   string
	// withID: the path continues with /{id} (GET /v1/models/{id}).
	withID bool
	// verb: the path continues with /{model}:{verb} (Gemini's POST
	// /v1beta/models/{model}:generateContent); the model is the {id}.
	verb string
	// generation endpoints make the model generate: they count as requests, are metered and
	// are refused once the budget is used up.
	generation bool
	// parser reads the usage of a generation endpoint's answer.
	parser func() parser
	// chat asks a streamed Chat Completions request for its usage chunk.
	chat bool
	// query names the query parameters forwarded; others are dropped.
	query []string
}

// The paths are what the CLIs append to their base URL: Claude Code adds /v1/messages to
// ANTHROPIC_BASE_URL, Codex's base_url ends in /v1 and it adds /responses, Gemini CLI adds
// /v1beta/models/{model}:{verb} to GOOGLE_GEMINI_BASE_URL (v1 when told to use that version).
var endpoints = map[agentsv1alpha1.ModelAPIKind][]endpoint{
	agentsv1alpha1.ModelAPIAnthropic: {
		{name: "messages", method: http.MethodPost, path: "/v1/messages", generation: true, parser: newAnthropicParser, query: []string{"beta"}},
		{name: "count_tokens", method: http.MethodPost, path: "/v1/messages/count_tokens", query: []string{"beta"}},
		{name: "models", method: http.MethodGet, path: "/v1/models", query: []string{"beta", "limit", "after_id", "before_id"}},
		{name: "model", method: http.MethodGet, path: "/v1/models", withID: true, query: []string{"beta"}},
	},
	agentsv1alpha1.ModelAPIOpenAI: {
		{name: "responses", method: http.MethodPost, path: "/v1/responses", generation: true, parser: newResponsesParser},
		{name: "chat_completions", method: http.MethodPost, path: "/v1/chat/completions", generation: true, parser: newChatParser, chat: true},
		{name: "models", method: http.MethodGet, path: "/v1/models"},
		{name: "model", method: http.MethodGet, path: "/v1/models", withID: true},
	},
	agentsv1alpha1.ModelAPIGemini: geminiEndpoints("/v1beta/models", "/v1/models"),
}

// geminiEndpoints are the Gemini API's generation and token counting methods under each
// version's models path. Only alt (sse, for a stream) is forwarded from the query: a key there
// (?key=) is the agent's, and the proxy's own goes in x-goog-api-key.
func geminiEndpoints(paths ...string) []endpoint {
	var out []endpoint
	for _, p := range paths {
		out = append(out,
			endpoint{name: "generateContent", method: http.MethodPost, path: p, verb: "generateContent", generation: true, parser: newGeminiParser, query: []string{"alt"}},
			endpoint{name: "streamGenerateContent", method: http.MethodPost, path: p, verb: "streamGenerateContent", generation: true, parser: newGeminiParser, query: []string{"alt"}},
			endpoint{name: "countTokens", method: http.MethodPost, path: p, verb: "countTokens", query: []string{"alt"}},
		)
	}
	return out
}

// maxModelID caps the {id} of GET /v1/models/{id}.
const maxModelID = 256

// route finds the endpoint of a request, and the {id} it names.
func route(kind agentsv1alpha1.ModelAPIKind, r *http.Request) (endpoint, string, bool) {
	// An absolute-form or CONNECT request is the agent using the proxy as an HTTP proxy.
	if r.URL.IsAbs() || r.URL.Host != "" {
		return endpoint{}, "", false
	}
	for _, ep := range endpoints[kind] {
		if r.Method != ep.method {
			continue
		}
		if ep.verb != "" {
			rest, ok := strings.CutPrefix(r.URL.Path, ep.path+"/")
			if i := strings.LastIndexByte(rest, ':'); ok && i >= 0 && rest[i+1:] == ep.verb && validID(rest[:i]) && !strings.Contains(rest[:i], "/") {
				return ep, rest[:i], true
			}
			continue
		}
		if !ep.withID {
			if r.URL.Path == ep.path {
				return ep, "", true
			}
			continue
		}
		if id, ok := strings.CutPrefix(r.URL.Path, ep.path+"/"); ok && validID(id) {
			return ep, id, true
		}
	}
	return endpoint{}, "", false
}

// validID accepts model ids, gateway ones with slashes included ("anthropic/claude-x"), in
// characters that need no escaping, and no empty, "." or ".." segment that an upstream
// could resolve to another path.
func validID(id string) bool {
	if id == "" || len(id) > maxModelID {
		return false
	}
	for seg := range strings.SplitSeq(id, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
			if !alnum && !strings.ContainsRune("-_.:@+", rune(c)) {
				return false
			}
		}
	}
	return true
}

// target is the upstream URL for an endpoint: the upstream's path prefix, the endpoint's path
// and id, and the query parameters the endpoint allows.
func target(upstream *url.URL, ep endpoint, id string, query url.Values) *url.URL {
	u := *upstream
	suffix := ep.path
	switch {
	case ep.verb != "":
		suffix += "/" + id + ":" + ep.verb
	case ep.withID:
		suffix += "/" + id
	}
	// suffix holds only characters that need no escaping, so it joins the decoded and the
	// encoded form of the prefix alike.
	u.Path = strings.TrimSuffix(upstream.Path, "/") + suffix
	if upstream.RawPath != "" {
		u.RawPath = strings.TrimSuffix(upstream.RawPath, "/") + suffix
	}
	kept := url.Values{}
	for _, k := range ep.query {
		if v, ok := query[k]; ok {
			kept[k] = v
		}
	}
	u.RawQuery = kept.Encode()
	return &u
}
