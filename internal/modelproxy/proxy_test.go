package modelproxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
	"github.com/shepherd-dev/shepherd/internal/modelproxy"
	"github.com/shepherd-dev/shepherd/test/modelserver"
)

const (
	realKey     = "sk-ant-real-0123456789abcdef"
	placeholder = "shepherd-placeholder-key"
	anthropic   = agentsv1alpha1.ModelAPIAnthropic
	openAI      = agentsv1alpha1.ModelAPIOpenAI
	gemini      = agentsv1alpha1.ModelAPIGemini

	messagesBody  = `{"model":"claude-x","stream":true,"max_tokens":1024,"messages":[{"role":"user","content":"go <now> & then"}],"tools":[{"name":"Bash","input_schema":{"type":"object"}}]}`
	responsesBody = `{"model":"gpt-x","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}],"tools":[{"type":"function","name":"shell"}]}`
	chatBody      = `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"go <now>"}],"tools":[{"type":"function","function":{"name":"shell"}}]}`
	geminiBody    = `{"contents":[{"role":"user","parts":[{"text":"go <now>"}]}],"tools":[{"functionDeclarations":[{"name":"run_shell_command","parametersJsonSchema":{"type":"object"}}]}]}`
	// geminiStream and geminiGenerate are Gemini CLI's calls; the model is in the path.
	geminiStream   = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
	geminiGenerate = "/v1beta/models/gemini-x:generateContent"
)

// defaultUsage is what modelserver.DefaultUsage comes to through the proxy, for one model:
// Anthropic reports input without the cache reads, OpenAI and Gemini with them.
func defaultUsage(kind agentsv1alpha1.ModelAPIKind, model string, requests int64) modelproxy.Usage {
	u := modelserver.DefaultUsage
	in := u.InputTokens
	if kind != anthropic {
		in -= u.CacheReadTokens
	}
	m := modelproxy.ModelUsage{Requests: requests, InputTokens: in * requests, OutputTokens: u.OutputTokens * requests,
		CacheReadTokens: u.CacheReadTokens * requests}
	return modelproxy.Usage{Requests: m.Requests, InputTokens: m.InputTokens, OutputTokens: m.OutputTokens,
		CacheReadTokens: m.CacheReadTokens, ByModel: map[string]modelproxy.ModelUsage{model: m}}
}

func startUpstream(t *testing.T, script modelserver.Script) *modelserver.Server {
	t.Helper()
	ms := modelserver.New(script)
	if err := ms.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	return ms
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// config is a proxy of kind in front of upstream, with the real key read as from a file.
func config(t *testing.T, kind agentsv1alpha1.ModelAPIKind, upstream string) modelproxy.Config {
	return modelproxy.Config{Kind: kind, Upstream: mustURL(t, upstream),
		Key: func() (string, error) { return realKey + "\n", nil }}
}

// startProxy serves a proxy on loopback, as the runner does, and returns its base URL.
func startProxy(t *testing.T, cfg modelproxy.Config) (*modelproxy.Proxy, string) {
	t.Helper()
	p, err := modelproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return p, "http://" + l.Addr().String()
}

// client reaches the proxy directly, whatever the environment's proxy settings.
var client = &http.Client{Transport: &http.Transport{}}

// send makes a request with the CLI's placeholder key and returns the answer, read whole.
// The deadline only keeps a broken proxy from hanging the test.
func send(t *testing.T, kind agentsv1alpha1.ModelAPIKind, method, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp := open(context.Background(), t, kind, method, url, body)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

func open(ctx context.Context, t *testing.T, kind agentsv1alpha1.ModelAPIKind, method, url, body string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	t.Cleanup(cancel)
	var r io.Reader = http.NoBody
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	switch kind {
	case anthropic:
		req.Header.Set("X-Api-Key", placeholder)
		req.Header.Set("Anthropic-Version", "2023-06-01")
	case gemini:
		req.Header.Set("X-Goog-Api-Key", placeholder)
		req.Header.Set("X-Goog-Api-Client", "google-genai-sdk/1.30.0 gl-node/v20.20.2")
	default:
		req.Header.Set("Authorization", "Bearer "+placeholder)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// streamEnd is the last event of each API's stream.
func streamEnd(path string) string {
	switch {
	case strings.HasPrefix(path, "/v1/messages"):
		return "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	case path == "/v1/responses":
		return "\"type\":\"response.completed\""
	case strings.HasPrefix(path, "/v1beta/"):
		return "\"finishReason\":\"STOP\""
	}
	return "data: [DONE]\n\n"
}

func TestForwardsToTheUpstreamWithTheRealKey(t *testing.T) {
	for _, tc := range []struct {
		kind  agentsv1alpha1.ModelAPIKind
		path  string
		body  string
		model string
	}{
		{anthropic, "/v1/messages?beta=true", messagesBody, "claude-x"},
		{openAI, "/v1/responses", responsesBody, "gpt-x"},
		{openAI, "/v1/chat/completions", chatBody, "gpt-x"},
		{gemini, geminiStream, geminiBody, "gemini-x"},
		{gemini, geminiGenerate, geminiBody, "gemini-x"},
	} {
		t.Run(string(tc.kind)+tc.path, func(t *testing.T) {
			g := NewWithT(t)
			ms := startUpstream(t, modelserver.Script{modelserver.Text("Done, and here is a sentence long enough to stream in parts.")})
			p, base := startProxy(t, config(t, tc.kind, ms.URL()))

			resp, answer := send(t, tc.kind, http.MethodPost, base+tc.path, tc.body)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			if tc.path == geminiGenerate {
				g.Expect(resp.Header.Get("Content-Type")).To(Equal("application/json"))
				g.Expect(string(answer)).To(ContainSubstring("Done, and here is a sentence long enough"))
			} else {
				g.Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
				g.Expect(string(answer)).To(ContainSubstring("Done, and here is a sent"))
			}
			g.Expect(string(answer)).To(ContainSubstring(streamEnd(strings.Split(tc.path, "?")[0])))

			turns := ms.Turns()
			g.Expect(turns).To(HaveLen(1))
			switch tc.kind {
			case anthropic:
				g.Expect(turns[0].Header.Get("X-Api-Key")).To(Equal(realKey))
				g.Expect(turns[0].Header.Values("Authorization")).To(BeEmpty())
				g.Expect(turns[0].Query).To(Equal("beta=true"))
			case gemini:
				g.Expect(turns[0].Header.Values("X-Goog-Api-Key")).To(Equal([]string{realKey}))
				g.Expect(turns[0].Header.Values("Authorization")).To(BeEmpty())
				g.Expect(turns[0].Header.Get("X-Goog-Api-Client")).To(HavePrefix("google-genai-sdk/"))
				g.Expect(turns[0].Path).To(Equal(strings.Split(tc.path, "?")[0]))
				g.Expect(turns[0].Stream).To(Equal(tc.path == geminiStream))
				if tc.path == geminiStream {
					g.Expect(turns[0].Query).To(Equal("alt=sse"))
				}
			default:
				g.Expect(turns[0].Header.Get("Authorization")).To(Equal("Bearer " + realKey))
				g.Expect(turns[0].Header.Values("X-Api-Key")).To(BeEmpty())
			}
			g.Expect(fmt.Sprint(turns[0].Header)).NotTo(ContainSubstring(placeholder))
			if tc.path != "/v1/chat/completions" {
				g.Expect(string(turns[0].Body)).To(Equal(tc.body), "the body goes upstream as it was sent")
			}
			g.Eventually(p.Usage).Should(Equal(defaultUsage(tc.kind, tc.model, 1)))
			g.Expect(ms.Problems()).To(BeEmpty())
		})
	}
}

// rawRequest sends a request byte for byte, so that the headers are exactly the hostile ones
// (an http.Client would drop or rewrite some), and reads the answer.
func rawRequest(t *testing.T, base, request string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

func TestStripsHostileHeaders(t *testing.T) {
	g := NewWithT(t)
	ms := startUpstream(t, modelserver.Script{modelserver.Text("Done.")})
	_, base := startProxy(t, config(t, anthropic, ms.URL()))
	body := `{"model":"claude-x","messages":[{"role":"user","content":"go"}],"tools":[{"name":"Bash","input_schema":{"type":"object"}}]}`
	resp, _ := rawRequest(t, base, "POST /v1/messages?beta=true&key="+placeholder+" HTTP/1.1\r\n"+
		"Host: api.anthropic.com\r\n"+
		"Content-Type: application/json\r\n"+
		fmt.Sprintf("Content-Length: %d\r\n", len(body))+
		"Authorization: Bearer "+placeholder+"\r\n"+
		"X-Api-Key: "+placeholder+"\r\n"+
		"x-api-key: second-"+placeholder+"\r\n"+
		"Api-Key: "+placeholder+"\r\n"+
		"Proxy-Authorization: Basic "+placeholder+"\r\n"+
		"Cookie: session="+placeholder+"\r\n"+
		"OpenAI-Organization: org-"+placeholder+"\r\n"+
		"Connection: X-Smuggled, close\r\n"+
		"X-Smuggled: "+placeholder+"\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"Te: trailers\r\n"+
		"Upgrade: websocket\r\n"+
		"Anthropic-Version: 2023-06-01\r\n"+
		"Anthropic-Beta: fine-grained-tool-streaming-2025-05-14\r\n"+
		"User-Agent: claude-cli/2.1.332 (external, sdk-cli)\r\n"+
		"X-Claude-Code-Session-Id: 5f0c6a4e\r\n"+
		"\r\n"+body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))

	g.Expect(ms.Turns()).To(HaveLen(1))
	got := ms.Turns()[0]
	g.Expect(got.Header.Values("X-Api-Key")).To(Equal([]string{realKey}))
	for _, name := range []string{"Authorization", "Api-Key", "Proxy-Authorization", "Cookie", "Openai-Organization",
		"X-Smuggled", "Keep-Alive", "Te", "Upgrade"} {
		g.Expect(got.Header.Values(name)).To(BeEmpty(), name)
	}
	g.Expect(got.Header.Get("Anthropic-Version")).To(Equal("2023-06-01"))
	g.Expect(got.Header.Get("Anthropic-Beta")).To(Equal("fine-grained-tool-streaming-2025-05-14"))
	g.Expect(got.Header.Get("User-Agent")).To(Equal("claude-cli/2.1.332 (external, sdk-cli)"))
	g.Expect(got.Header.Get("X-Claude-Code-Session-Id")).To(Equal("5f0c6a4e"))
	g.Expect(fmt.Sprint(got.Header)).NotTo(ContainSubstring(placeholder))
	g.Expect(got.Query).To(Equal("beta=true"), "query parameters the endpoint does not take are dropped")
}

// A Gemini client's key goes in x-goog-api-key, or in the query (?key=); the proxy forwards
// neither, and sends the real key in the header only.
func TestGeminiKeyOnlyInTheHeader(t *testing.T) {
	g := NewWithT(t)
	ms := startUpstream(t, modelserver.Script{modelserver.Text("Done.")})
	_, base := startProxy(t, config(t, gemini, ms.URL()))
	resp, _ := rawRequest(t, base, "POST /v1beta/models/gemini-x:streamGenerateContent?alt=sse&key="+placeholder+"&$fields=candidates HTTP/1.1\r\n"+
		"Host: generativelanguage.googleapis.com\r\n"+
		"Content-Type: application/json\r\n"+
		fmt.Sprintf("Content-Length: %d\r\n", len(geminiBody))+
		"X-Goog-Api-Key: "+placeholder+"\r\n"+
		"x-goog-api-key: second-"+placeholder+"\r\n"+
		"Authorization: Bearer "+placeholder+"\r\n"+
		"X-Goog-User-Project: someone-elses-project\r\n"+
		"X-Goog-Api-Client: google-genai-sdk/1.30.0 gl-node/v20.20.2\r\n"+
		"User-Agent: GeminiCLI/0.61.0/gemini-x (linux; x64; terminal)\r\n"+
		"Connection: close\r\n"+
		"\r\n"+geminiBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(ms.Turns()).To(HaveLen(1))
	got := ms.Turns()[0]
	g.Expect(got.Header.Values("X-Goog-Api-Key")).To(Equal([]string{realKey}))
	g.Expect(got.Header.Values("Authorization")).To(BeEmpty())
	g.Expect(got.Header.Values("X-Goog-User-Project")).To(BeEmpty(), "whom the key bills is not the agent's to choose")
	g.Expect(got.Header.Get("User-Agent")).To(HavePrefix("GeminiCLI/"))
	g.Expect(got.Query).To(Equal("alt=sse"), "the query's key (and any other parameter) is dropped")
	g.Expect(fmt.Sprint(got.Header) + got.Query).NotTo(ContainSubstring(placeholder))
	g.Expect(got.Path).To(Equal("/v1beta/models/gemini-x:streamGenerateContent"))
}

// A held reply stops after its first event until the test lets it go: the client has that
// event before the stream ends only if the proxy passed it on at once.
func TestStreamsEventsAsTheyArrive(t *testing.T) {
	for _, tc := range []struct {
		kind  agentsv1alpha1.ModelAPIKind
		path  string
		body  string
		model string
		first string
	}{
		{anthropic, "/v1/messages", messagesBody, "claude-x", "event: message_start\n"},
		{openAI, "/v1/responses", responsesBody, "gpt-x", "event: response.created\n"},
		{openAI, "/v1/chat/completions", chatBody, "gpt-x", "data: {"},
		{gemini, geminiStream, geminiBody, "gemini-x", "data: {"},
	} {
		t.Run(string(tc.kind)+tc.path, func(t *testing.T) {
			g := NewWithT(t)
			hold := make(chan struct{})
			ms := startUpstream(t, modelserver.Script{{Text: "First words, then the rest.", Hold: hold}})
			p, base := startProxy(t, config(t, tc.kind, ms.URL()))
			resp := open(context.Background(), t, tc.kind, http.MethodPost, base+tc.path, tc.body)
			defer func() { _ = resp.Body.Close() }()
			r := bufio.NewReader(resp.Body)

			first, err := r.ReadString('\n')
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(first).To(HavePrefix(tc.first))
			g.Expect(ms.InFlight()).To(Equal(1), "the upstream is still holding the rest of the stream")
			g.Expect(p.Usage().Requests).To(Equal(int64(1)))

			close(hold)
			rest, err := io.ReadAll(r)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(rest)).To(ContainSubstring(streamEnd(strings.Split(tc.path, "?")[0])))
			g.Eventually(p.Usage).Should(Equal(defaultUsage(tc.kind, tc.model, 1)))
		})
	}
}

func TestClientGoneCancelsTheUpstream(t *testing.T) {
	g := NewWithT(t)
	hold := make(chan struct{})
	defer close(hold)
	ms := startUpstream(t, modelserver.Script{{Text: "never finished", Hold: hold}})
	var mu sync.Mutex
	var reports []modelproxy.Usage
	cfg := config(t, anthropic, ms.URL())
	cfg.OnUsage = func(u modelproxy.Usage) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, u)
	}
	p, base := startProxy(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	resp := open(ctx, t, anthropic, http.MethodPost, base+"/v1/messages", messagesBody)
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first).To(Equal("event: message_start\n"))

	cancel()
	_ = resp.Body.Close()
	// The upstream's handler only ends early when its request is cancelled: hold stays open.
	g.Eventually(ms.InFlight).Should(BeZero())
	g.Eventually(func() int { mu.Lock(); defer mu.Unlock(); return len(reports) }).Should(Equal(1))

	// The input came in message_start; the output never did, and is estimated.
	u := p.Usage()
	g.Expect(u.Requests).To(Equal(int64(1)))
	g.Expect(u.Unmetered).To(Equal(int64(1)))
	g.Expect(u.InputTokens).To(Equal(modelserver.DefaultUsage.InputTokens))
	g.Expect(u.CacheReadTokens).To(Equal(modelserver.DefaultUsage.CacheReadTokens))
	g.Expect(u.OutputTokens).To(BeNumerically(">", 1))
	g.Expect(reports[0]).To(Equal(u))
}

func TestBudgets(t *testing.T) {
	anthropicRefusal := func(limit string) string {
		return `{"type":"error","error":{"type":"permission_error","message":"Shepherd: this session's model budget is used up (` + limit + `)"}}`
	}
	openAIRefusal := func(limit string) string {
		return `{"error":{"message":"Shepherd: this session's model budget is used up (` + limit + `)","type":"insufficient_quota","param":null,"code":"shepherd_budget_exhausted"}}`
	}
	geminiRefusal := func(limit string) string {
		return `{"error":{"code":403,"message":"Shepherd: this session's model budget is used up (` + limit + `)","status":"PERMISSION_DENIED"}}`
	}
	for _, tc := range []struct {
		name      string
		kind      agentsv1alpha1.ModelAPIKind
		path      string
		body      string
		limits    modelproxy.Limits
		initial   modelproxy.Usage
		forwarded int
		refusal   string
	}{
		{name: "maxRequests", kind: anthropic, path: "/v1/messages", body: messagesBody,
			limits: modelproxy.Limits{MaxRequests: 2}, forwarded: 2, refusal: anthropicRefusal("maxRequests 2")},
		{name: "maxTokens, after the request that passed it", kind: anthropic, path: "/v1/messages", body: messagesBody,
			limits: modelproxy.Limits{MaxTokens: 1000}, forwarded: 1, refusal: anthropicRefusal("maxTokens 1000")},
		{name: "usage carried over from before a restart", kind: anthropic, path: "/v1/messages", body: messagesBody,
			limits: modelproxy.Limits{MaxRequests: 5}, initial: modelproxy.Usage{Requests: 5}, forwarded: 0, refusal: anthropicRefusal("maxRequests 5")},
		{name: "OpenAI Responses", kind: openAI, path: "/v1/responses", body: responsesBody,
			limits: modelproxy.Limits{MaxRequests: 1}, forwarded: 1, refusal: openAIRefusal("maxRequests 1")},
		{name: "OpenAI Chat Completions, tokens", kind: openAI, path: "/v1/chat/completions", body: chatBody,
			limits: modelproxy.Limits{MaxTokens: 2560}, forwarded: 2, refusal: openAIRefusal("maxTokens 2560")},
		{name: "Gemini, requests", kind: gemini, path: geminiStream, body: geminiBody,
			limits: modelproxy.Limits{MaxRequests: 2}, forwarded: 2, refusal: geminiRefusal("maxRequests 2")},
		{name: "Gemini, tokens", kind: gemini, path: geminiGenerate, body: geminiBody,
			limits: modelproxy.Limits{MaxTokens: 1280}, forwarded: 1, refusal: geminiRefusal("maxTokens 1280")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ms := startUpstream(t, modelserver.Script{{Text: "ok", Repeat: true}})
			cfg := config(t, tc.kind, ms.URL())
			cfg.Limits, cfg.Initial = tc.limits, tc.initial
			p, base := startProxy(t, cfg)

			for range tc.forwarded {
				resp, _ := send(t, tc.kind, http.MethodPost, base+tc.path, tc.body)
				g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			}
			// The last forwarded request's tokens are charged once its answer has been relayed.
			g.Eventually(func() bool { ok, _ := p.Exhausted(); return ok }).Should(BeTrue())
			_, why := p.Exhausted()
			for range 2 {
				resp, answer := send(t, tc.kind, http.MethodPost, base+tc.path, tc.body)
				g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
				g.Expect(resp.Header.Get("X-Should-Retry")).To(Equal("false"))
				g.Expect(answer).To(MatchJSON(tc.refusal))
				g.Expect(string(answer)).To(ContainSubstring(why))
			}
			g.Expect(ms.Requests()).To(HaveLen(tc.forwarded), "a refused request is not forwarded")
			g.Expect(p.Usage().Requests).To(Equal(tc.initial.Requests+int64(tc.forwarded)), "nor counted")

			// Listing models or counting tokens is not generation: neither counted nor refused.
			if tc.kind == gemini {
				resp, _ := send(t, tc.kind, http.MethodPost, base+"/v1beta/models/gemini-x:countTokens", tc.body)
				g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
				return
			}
			resp, _ := send(t, tc.kind, http.MethodGet, base+"/v1/models", "")
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		})
	}
}

func TestConcurrentRequestsStayWithinMaxRequests(t *testing.T) {
	g := NewWithT(t)
	ms := startUpstream(t, modelserver.Script{{Text: "ok", Repeat: true}})
	cfg := config(t, anthropic, ms.URL())
	cfg.Limits.MaxRequests = 3
	p, base := startProxy(t, cfg)
	statuses := make(chan int, 12)
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			resp, err := client.Post(base+"/v1/messages", "application/json", strings.NewReader(messagesBody))
			if err != nil {
				statuses <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	counts := map[int]int{}
	for s := range statuses {
		counts[s]++
	}
	g.Expect(counts).To(Equal(map[int]int{http.StatusOK: 3, http.StatusForbidden: 9}))
	g.Expect(ms.Turns()).To(HaveLen(3))
	g.Eventually(p.Usage).Should(Equal(defaultUsage(anthropic, "claude-x", 3)))
}

func TestSideEndpointsAreForwardedNotCounted(t *testing.T) {
	g := NewWithT(t)
	ms := startUpstream(t, nil)
	var calls atomic.Int32
	cfg := config(t, anthropic, ms.URL())
	cfg.OnUsage = func(modelproxy.Usage) { calls.Add(1) }
	p, base := startProxy(t, cfg)

	resp, answer := send(t, anthropic, http.MethodPost, base+"/v1/messages/count_tokens?beta=true", `{"model":"claude-x","messages":[{"role":"user","content":"go"}]}`)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(answer).To(ContainSubstring("input_tokens"))
	resp, answer = send(t, anthropic, http.MethodGet, base+"/v1/models?limit=5", "")
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(answer).To(ContainSubstring(modelserver.Model))
	resp, answer = send(t, anthropic, http.MethodGet, base+"/v1/models/claude-haiku-4-5", "")
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(answer).To(ContainSubstring(`"id":"claude-haiku-4-5"`))

	g.Expect(ms.Requests()).To(HaveLen(3))
	g.Expect(ms.Requests()[1].Query).To(Equal("limit=5"))
	g.Expect(ms.Requests()[0].Header.Get("X-Api-Key")).To(Equal(realKey))
	g.Expect(p.Usage()).To(Equal(modelproxy.Usage{}))
	g.Expect(calls.Load()).To(BeZero())

	// Gemini's countTokens, in both API versions.
	gp, gbase := startProxy(t, config(t, gemini, ms.URL()))
	for _, version := range []string{"v1beta", "v1"} {
		resp, answer = send(t, gemini, http.MethodPost, gbase+"/"+version+"/models/gemini-x:countTokens", geminiBody)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Expect(answer).To(ContainSubstring("totalTokens"))
	}
	g.Expect(ms.Requests()).To(HaveLen(5))
	g.Expect(ms.Requests()[4].Header.Get("X-Goog-Api-Key")).To(Equal(realKey))
	g.Expect(ms.Requests()[4].Path).To(Equal("/v1/models/gemini-x:countTokens"))
	g.Expect(gp.Usage()).To(Equal(modelproxy.Usage{}))
}

func TestUnknownEndpointsAre404(t *testing.T) {
	for _, tc := range []struct {
		kind         agentsv1alpha1.ModelAPIKind
		method, path string
	}{
		{anthropic, http.MethodPost, "/v1/complete"},
		{anthropic, http.MethodGet, "/v1/messages"},
		{anthropic, http.MethodPost, "/v1/messages/batches"},
		{anthropic, http.MethodPost, "/v1/messages/"},
		{anthropic, http.MethodPost, "//v1/messages"},
		{anthropic, http.MethodPost, "/anthropic/v1/messages"},
		{anthropic, http.MethodPost, "/v1/responses"},
		{anthropic, http.MethodDelete, "/v1/files/file_1"},
		{anthropic, http.MethodGet, "/v1/models/../organizations"},
		{anthropic, http.MethodGet, "/v1/models/%2e%2e/organizations"},
		{anthropic, http.MethodGet, "/v1/models/a//b"},
		{anthropic, http.MethodGet, "/v1/models/a%0ab"},
		{anthropic, http.MethodGet, "/v1/models/" + strings.Repeat("m", 300)},
		{openAI, http.MethodPost, "/v1/messages"},
		{openAI, http.MethodPost, "/v1/completions"},
		{openAI, http.MethodPost, "/v1/embeddings"},
		{openAI, http.MethodGet, "/v1/responses/resp_1"},
		{openAI, http.MethodPost, "/v1/responses/resp_1/cancel"},
		{openAI, http.MethodGet, "/v1/files"},
		{openAI, http.MethodPost, "/v1/chat/completions/x"},
		{openAI, http.MethodPost, "/v1beta/models/gemini-x:generateContent"},
		{gemini, http.MethodPost, "/v1/messages"},
		{gemini, http.MethodGet, "/v1beta/models"},
		{gemini, http.MethodGet, "/v1beta/models/gemini-x"},
		{gemini, http.MethodGet, "/v1beta/models/gemini-x:generateContent"},
		{gemini, http.MethodPost, "/v1beta/models/gemini-x:embedContent"},
		{gemini, http.MethodPost, "/v1beta/models/gemini-x:batchGenerateContent"},
		{gemini, http.MethodPost, "/v1beta/models/:generateContent"},
		{gemini, http.MethodPost, "/v1beta/models/gemini-x"},
		{gemini, http.MethodPost, "/v1beta/models/a/b:generateContent"},
		{gemini, http.MethodPost, "/v1beta/models/..:generateContent"},
		{gemini, http.MethodPost, "/v1beta/models/%2e%2e:generateContent"},
		{gemini, http.MethodPost, "/v1beta/models/gemini-x:generateContent/extra"},
		{gemini, http.MethodPost, "/v1beta/tunedModels/mine:generateContent"},
		{gemini, http.MethodPost, "/v1beta/cachedContents"},
		{gemini, http.MethodPost, "/upload/v1beta/files"},
		{gemini, http.MethodPost, "/v2/models/gemini-x:generateContent"},
	} {
		t.Run(string(tc.kind)+" "+tc.method+" "+tc.path, func(t *testing.T) {
			g := NewWithT(t)
			ms := startUpstream(t, nil)
			p, base := startProxy(t, config(t, tc.kind, ms.URL()))
			resp, answer := rawRequest(t, base, tc.method+" "+tc.path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
			g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
			var shape map[string]any
			g.Expect(json.Unmarshal(answer, &shape)).To(Succeed())
			switch tc.kind {
			case anthropic:
				g.Expect(shape).To(HaveKeyWithValue("type", "error"))
				g.Expect(shape["error"]).To(HaveKeyWithValue("type", "not_found_error"))
			case gemini:
				g.Expect(shape["error"]).To(And(HaveKeyWithValue("code", BeNumerically("==", 404)), HaveKeyWithValue("status", "NOT_FOUND")))
			default:
				g.Expect(shape["error"]).To(And(HaveKeyWithValue("type", "invalid_request_error"), HaveKey("code")))
			}
			g.Expect(shape["error"]).To(HaveKeyWithValue("message", ContainSubstring("not a model API endpoint")))
			g.Expect(ms.Requests()).To(BeEmpty())
			g.Expect(p.Usage()).To(Equal(modelproxy.Usage{}))
		})
	}
}

// Used as an HTTP proxy, it forwards nothing to the host asked for.
func TestAbsoluteFormRequestsAre404(t *testing.T) {
	g := NewWithT(t)
	ms := startUpstream(t, nil)
	_, base := startProxy(t, config(t, openAI, ms.URL()))
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, base))}, Timeout: 30 * time.Second}
	resp, err := proxied.Get("http://api.openai.com/v1/models")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusNotFound))
	g.Expect(ms.Requests()).To(BeEmpty())
}

func TestOversizedBodiesAre413(t *testing.T) {
	for _, kind := range []agentsv1alpha1.ModelAPIKind{anthropic, openAI, gemini} {
		t.Run(string(kind), func(t *testing.T) {
			g := NewWithT(t)
			ms := startUpstream(t, modelserver.Script{{Text: "ok", Repeat: true}})
			cfg := config(t, kind, ms.URL())
			cfg.MaxRequestBody = 1024
			p, base := startProxy(t, cfg)
			path := map[agentsv1alpha1.ModelAPIKind]string{anthropic: "/v1/messages", openAI: "/v1/responses", gemini: geminiStream}[kind]
			body := func(size int) string {
				head := `{"model":"m","stream":true,"input":"go","messages":[{"role":"user","content":"go"}],"contents":[{"role":"user","parts":[{"text":"go"}]}],"pad":"`
				return head + strings.Repeat("x", size-len(head)-2) + `"}`
			}

			resp, answer := send(t, kind, http.MethodPost, base+path, body(1025))
			g.Expect(resp.StatusCode).To(Equal(http.StatusRequestEntityTooLarge))
			g.Expect(string(answer)).To(ContainSubstring("larger than the proxy's limit of 1024 bytes"))
			switch kind {
			case anthropic:
				g.Expect(answer).To(MatchJSON(`{"type":"error","error":{"type":"request_too_large","message":"Shepherd: the request body is larger than the proxy's limit of 1024 bytes"}}`))
			case gemini:
				g.Expect(answer).To(MatchJSON(`{"error":{"code":413,"message":"Shepherd: the request body is larger than the proxy's limit of 1024 bytes","status":"INVALID_ARGUMENT"}}`))
			}
			g.Expect(ms.Requests()).To(BeEmpty())
			g.Expect(p.Usage().Requests).To(BeZero())

			resp, _ = send(t, kind, http.MethodPost, base+path, body(1024))
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "a body at the limit is forwarded")
			g.Expect(ms.Requests()).To(HaveLen(1))
		})
	}
}

func TestUpstreamErrorsPassThrough(t *testing.T) {
	for _, tc := range []struct {
		kind              agentsv1alpha1.ModelAPIKind
		path, body, model string
		status            int
		requestHeader     string
	}{
		{anthropic, "/v1/messages", messagesBody, "claude-x", 529, "Request-Id"},
		{openAI, "/v1/responses", responsesBody, "gpt-x", 500, "X-Request-Id"},
		{openAI, "/v1/chat/completions", chatBody, "gpt-x", 429, "X-Request-Id"},
	} {
		t.Run(string(tc.kind)+tc.path, func(t *testing.T) {
			g := NewWithT(t)
			ms := startUpstream(t, modelserver.Script{{Error: &modelserver.APIError{Status: tc.status, Message: "busy", RetryAfter: 3}}})
			p, base := startProxy(t, config(t, tc.kind, ms.URL()))
			resp, answer := send(t, tc.kind, http.MethodPost, base+tc.path, tc.body)
			g.Expect(resp.StatusCode).To(Equal(tc.status))
			g.Expect(resp.Header.Get("Retry-After")).To(Equal("3"))
			g.Expect(resp.Header.Get(tc.requestHeader)).To(HavePrefix("req_"))
			g.Expect(resp.Header.Get("X-Should-Retry")).To(BeEmpty(), "the upstream's answer, not the proxy's")
			g.Expect(string(answer)).To(ContainSubstring(`"message":"busy"`))
			// The request reached the upstream, so it counts; an error answer has no tokens.
			g.Eventually(p.Usage).Should(Equal(modelproxy.Usage{Requests: 1, ByModel: map[string]modelproxy.ModelUsage{tc.model: {Requests: 1}}}))
		})
	}
}

// Google's error shape passes through as it came, with its retry advice in the body.
func TestGeminiUpstreamErrorsPassThrough(t *testing.T) {
	g := NewWithT(t)
	ms := startUpstream(t, modelserver.Script{{Error: &modelserver.APIError{Status: 429, Message: "Resource has been exhausted", RetryAfter: 3}}})
	p, base := startProxy(t, config(t, gemini, ms.URL()))
	resp, answer := send(t, gemini, http.MethodPost, base+geminiStream, geminiBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get("X-Should-Retry")).To(BeEmpty(), "the upstream's answer, not the proxy's")
	g.Expect(answer).To(MatchJSON(`{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED",
		"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3s"}]}}`))
	g.Eventually(p.Usage).Should(Equal(modelproxy.Usage{Requests: 1, ByModel: map[string]modelproxy.ModelUsage{"gemini-x": {Requests: 1}}}))
}

func TestUnreachableUpstreamIs502(t *testing.T) {
	g := NewWithT(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	closed := "http://" + l.Addr().String()
	g.Expect(l.Close()).To(Succeed())
	for kind, want := range map[agentsv1alpha1.ModelAPIKind]string{
		anthropic: `{"type":"error","error":{"type":"api_error","message":"Shepherd: the model API could not be reached"}}`,
		openAI:    `{"error":{"message":"Shepherd: the model API could not be reached","type":"server_error","param":null,"code":null}}`,
		gemini:    `{"error":{"code":502,"message":"Shepherd: the model API could not be reached","status":"UNAVAILABLE"}}`,
	} {
		_, base := startProxy(t, config(t, kind, closed))
		path := map[agentsv1alpha1.ModelAPIKind]string{anthropic: "/v1/messages", openAI: "/v1/responses", gemini: geminiGenerate}[kind]
		resp, answer := send(t, kind, http.MethodPost, base+path, `{"model":"m"}`)
		g.Expect(resp.StatusCode).To(Equal(http.StatusBadGateway))
		g.Expect(answer).To(MatchJSON(want))
	}
}

func TestUpstreamPathPrefixIsKept(t *testing.T) {
	g := NewWithT(t)
	ms := modelserver.New(modelserver.Script{modelserver.Text("ok")})
	// A gateway serving the API under /gw/anthropic: anything outside it is a 404.
	gw := &http.Server{Handler: http.StripPrefix("/gw/anthropic", ms), ReadHeaderTimeout: 10 * time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = gw.Serve(l) }()
	t.Cleanup(func() { _ = gw.Close() })

	_, base := startProxy(t, config(t, anthropic, "http://"+l.Addr().String()+"/gw/anthropic/"))
	resp, _ := send(t, anthropic, http.MethodPost, base+"/v1/messages?beta=true", messagesBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	resp, answer := send(t, anthropic, http.MethodGet, base+"/v1/models/anthropic/claude-opus-4.6", "")
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(answer).To(ContainSubstring(`"id":"anthropic/claude-opus-4.6"`))
	g.Expect(ms.Requests()).To(HaveExactElements(
		And(HaveField("Path", "/v1/messages"), HaveField("Query", "beta=true")),
		HaveField("Path", "/v1/models/anthropic/claude-opus-4.6")))
}

func TestGeminiUpstreamPathPrefixIsKept(t *testing.T) {
	g := NewWithT(t)
	ms := modelserver.New(modelserver.Script{modelserver.Text("ok")})
	gw := &http.Server{Handler: http.StripPrefix("/gw/google", ms), ReadHeaderTimeout: 10 * time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = gw.Serve(l) }()
	t.Cleanup(func() { _ = gw.Close() })

	p, base := startProxy(t, config(t, gemini, "http://"+l.Addr().String()+"/gw/google"))
	resp, _ := send(t, gemini, http.MethodPost, base+geminiStream, geminiBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(ms.Requests()).To(HaveExactElements(And(HaveField("Path", "/v1beta/models/gemini-x:streamGenerateContent"), HaveField("Query", "alt=sse"))))
	g.Eventually(p.Usage).Should(Equal(defaultUsage(gemini, "gemini-x", 1)))
}

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key        func() (string, error)
		wantStatus int
		wantHeader string
	}{
		{name: "no key function sends no credential", key: nil, wantStatus: http.StatusOK},
		{name: "an empty key sends no credential", key: func() (string, error) { return "", nil }, wantStatus: http.StatusOK},
		{name: "the key file's newline is trimmed", key: func() (string, error) { return " k1 \n", nil }, wantStatus: http.StatusOK, wantHeader: "Bearer k1"},
		{name: "an unreadable key is a 500, nothing forwarded", key: func() (string, error) { return "", errors.New("open /var/run/key: permission denied") },
			wantStatus: http.StatusInternalServerError},
		{name: "a key with control characters is refused", key: func() (string, error) { return "k1\r\nX-Evil: 1", nil },
			wantStatus: http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ms := startUpstream(t, modelserver.Script{modelserver.Text("ok")})
			cfg := config(t, openAI, ms.URL())
			cfg.Key = tc.key
			p, base := startProxy(t, cfg)
			resp, answer := send(t, openAI, http.MethodPost, base+"/v1/responses", responsesBody)
			g.Expect(resp.StatusCode).To(Equal(tc.wantStatus))
			if tc.wantStatus != http.StatusOK {
				g.Expect(answer).To(MatchJSON(`{"error":{"message":"Shepherd: the model API key could not be read","type":"server_error","param":null,"code":null}}`))
				g.Expect(ms.Requests()).To(BeEmpty())
				g.Expect(p.Usage().Requests).To(BeZero())
				return
			}
			g.Expect(ms.Requests()).To(HaveLen(1))
			h := ms.Requests()[0].Header
			g.Expect(h.Get("Authorization")).To(Equal(tc.wantHeader))
			g.Expect(fmt.Sprint(h)).NotTo(ContainSubstring(placeholder))
		})
	}
}

func TestChatCompletionsAsksForUsage(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		wantSent   string
	}{
		{name: "streamed without stream_options", body: chatBody,
			wantSent: `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"go <now>"}],"tools":[{"type":"function","function":{"name":"shell"}}]}`},
		{name: "other stream options are kept", body: strings.Replace(chatBody, `"stream":true,`, `"stream":true,"stream_options":{"include_obfuscation":false,"include_usage":false},`, 1),
			wantSent: `{"model":"gpt-x","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true},"messages":[{"role":"user","content":"go <now>"}],"tools":[{"type":"function","function":{"name":"shell"}}]}`},
		{name: "not streamed: sent as it is", body: strings.Replace(chatBody, `"stream":true`, `"stream":false`, 1)},
		{name: "already asked: sent as it is", body: strings.Replace(chatBody, `"stream":true,`, `"stream":true, "stream_options": {"include_usage": true},`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ms := startUpstream(t, modelserver.Script{modelserver.Text("ok")})
			p, base := startProxy(t, config(t, openAI, ms.URL()))
			resp, _ := send(t, openAI, http.MethodPost, base+"/v1/chat/completions", tc.body)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			sent := string(ms.Requests()[0].Body)
			if tc.wantSent == "" {
				g.Expect(sent).To(Equal(tc.body))
			} else {
				g.Expect(sent).To(MatchJSON(tc.wantSent))
				g.Expect(sent).To(ContainSubstring("<now>"), "the prompt is not HTML-escaped on the way")
			}
			g.Eventually(p.Usage).Should(Equal(defaultUsage(openAI, "gpt-x", 1)))
		})
	}
}

func TestOnUsageGetsEachNewTotal(t *testing.T) {
	g := NewWithT(t)
	ms := startUpstream(t, modelserver.Script{modelserver.Text("a"), modelserver.Text("b")})
	var mu sync.Mutex
	var reports []modelproxy.Usage
	got := func() []modelproxy.Usage { mu.Lock(); defer mu.Unlock(); return slices.Clone(reports) }
	cfg := config(t, anthropic, ms.URL())
	cfg.Initial = modelproxy.Usage{Requests: 7, OutputTokens: 10, ByModel: map[string]modelproxy.ModelUsage{"claude-x": {Requests: 7, OutputTokens: 10}}}
	cfg.OnUsage = func(u modelproxy.Usage) { mu.Lock(); defer mu.Unlock(); reports = append(reports, u) }
	p, base := startProxy(t, cfg)
	for i := range 2 {
		resp, _ := send(t, anthropic, http.MethodPost, base+"/v1/messages", messagesBody)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Eventually(got).Should(HaveLen(i + 1))
	}
	g.Expect(got()[0].Requests).To(Equal(int64(8)))
	g.Expect(got()[1]).To(Equal(p.Usage()))
	want := defaultUsage(anthropic, "claude-x", 2)
	want.Requests += 7
	want.OutputTokens += 10
	want.ByModel["claude-x"] = modelproxy.ModelUsage{Requests: 9, InputTokens: want.InputTokens, OutputTokens: want.OutputTokens, CacheReadTokens: want.CacheReadTokens}
	g.Expect(p.Usage()).To(Equal(want))
}

func TestNewRefusesBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  modelproxy.Config
	}{
		{"unknown kind", modelproxy.Config{Kind: "Cohere", Upstream: mustURL(t, "https://x")}},
		{"no upstream", modelproxy.Config{Kind: anthropic}},
		{"not http", modelproxy.Config{Kind: anthropic, Upstream: mustURL(t, "ftp://x")}},
		{"no host", modelproxy.Config{Kind: anthropic, Upstream: mustURL(t, "https:///v1")}},
		{"credentials in the URL", modelproxy.Config{Kind: anthropic, Upstream: mustURL(t, "https://user:secret@x")}},
		{"a query", modelproxy.Config{Kind: anthropic, Upstream: mustURL(t, "https://x/?key=1")}},
		{"negative limit", modelproxy.Config{Kind: openAI, Upstream: mustURL(t, "https://x"), Limits: modelproxy.Limits{MaxTokens: -1}}},
		{"negative initial usage", modelproxy.Config{Kind: openAI, Upstream: mustURL(t, "https://x"), Initial: modelproxy.Usage{InputTokens: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := modelproxy.New(tc.cfg)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).NotTo(ContainSubstring("secret"))
		})
	}
}

// TestCarryContinuesTheTotals: a runner's proxy takes over the totals its session's earlier pods
// reported before it forwards anything, and the budget counts them; once a request went through
// it refuses (the counts would mix).
func TestCarryContinuesTheTotals(t *testing.T) {
	g := NewWithT(t)
	ms := startUpstream(t, modelserver.Script{{Text: "ok", Repeat: true}})
	cfg := config(t, anthropic, ms.URL())
	cfg.Limits.MaxRequests = 3
	p, base := startProxy(t, cfg)
	g.Expect(p.Carry(modelproxy.Usage{Requests: -1})).To(MatchError(ContainSubstring("negative")))
	prior := modelproxy.Usage{Requests: 2, InputTokens: 100, OutputTokens: 10,
		ByModel: map[string]modelproxy.ModelUsage{"claude-sonnet-4-5": {Requests: 2, InputTokens: 100, OutputTokens: 10}}}
	g.Expect(p.Carry(prior)).To(Succeed())
	g.Expect(p.Usage().ByModel).To(HaveKeyWithValue("claude-sonnet-4-5", HaveField("Requests", int64(2))))
	resp, _ := send(t, anthropic, http.MethodPost, base+"/v1/messages", messagesBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Eventually(func() int64 { return p.Usage().Requests }).Should(Equal(int64(3)))
	g.Expect(p.Usage().InputTokens).To(BeNumerically(">", 100))
	resp, _ = send(t, anthropic, http.MethodPost, base+"/v1/messages", messagesBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden), "the carried requests count against maxRequests")
	g.Expect(p.Carry(prior)).To(MatchError(ContainSubstring("before the first request")))
}
