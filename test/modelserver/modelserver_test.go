package modelserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/test/modelserver"
)

type event struct {
	name string
	data map[string]any
}

func start(t *testing.T, script modelserver.Script) *modelserver.Server {
	s := modelserver.New(script)
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func post(t *testing.T, s *modelserver.Server, path, body string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// readSSE reads server-sent events, checking that each event's name is its data's type.
func readSSE(t *testing.T, r io.Reader) []event {
	t.Helper()
	var out []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var data map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				t.Fatalf("event %s: data is not JSON: %v", name, err)
			}
			if data["type"] != name {
				t.Fatalf("event %q carries type %q", name, data["type"])
			}
			out = append(out, event{name, data})
		case line == "":
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

func names(events []event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.name)
	}
	return out
}

const anthropicTools = `"tools":[{"name":"Bash","input_schema":{"type":"object"}},{"name":"Write","input_schema":{"type":"object"}}]`

func TestMessagesStream(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{{Text: "I will commit now, with a fairly long sentence.", ToolCalls: []modelserver.ToolCall{
		{Name: "Bash", Input: map[string]any{"command": "git commit -m 'Add hello'", "description": "Commit"}}}}})
	resp := post(t, s, "/v1/messages?beta=true", `{"model":"claude-x","stream":true,"messages":[{"role":"user","content":"go"}],`+anthropicTools+`}`)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
	events := readSSE(t, resp.Body)

	// The documented order, with the text and the tool input streamed in several deltas.
	seq := strings.Join(names(events), " ")
	g.Expect(seq).To(MatchRegexp(`^message_start ping content_block_start (content_block_delta ){2,}content_block_stop ` +
		`content_block_start (content_block_delta ){3,}content_block_stop message_delta message_stop$`))
	msg := events[0].data["message"].(map[string]any)
	g.Expect(msg["model"]).To(Equal("claude-x"))
	g.Expect(msg["role"]).To(Equal("assistant"))
	g.Expect(msg["content"]).To(BeEmpty())
	g.Expect(msg["usage"]).To(HaveKeyWithValue("input_tokens", BeNumerically("==", modelserver.DefaultUsage.InputTokens)))

	var text, input strings.Builder
	var tool map[string]any
	for _, e := range events {
		switch e.name {
		case "content_block_start":
			if b := e.data["content_block"].(map[string]any); b["type"] == "tool_use" {
				tool = b
				g.Expect(e.data["index"]).To(BeNumerically("==", 1))
			}
		case "content_block_delta":
			d := e.data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				text.WriteString(d["text"].(string))
			case "input_json_delta":
				input.WriteString(d["partial_json"].(string))
			}
		}
	}
	g.Expect(text.String()).To(Equal("I will commit now, with a fairly long sentence."))
	g.Expect(tool).To(HaveKeyWithValue("name", "Bash"))
	g.Expect(tool["id"]).To(HavePrefix("toolu_"))
	g.Expect(input.String()).To(MatchJSON(`{"command":"git commit -m 'Add hello'","description":"Commit"}`))
	delta := events[len(events)-2].data
	g.Expect(delta["delta"]).To(HaveKeyWithValue("stop_reason", "tool_use"))
	g.Expect(delta["usage"]).To(HaveKeyWithValue("output_tokens", BeNumerically("==", modelserver.DefaultUsage.OutputTokens)))

	g.Expect(s.Turns()).To(HaveLen(1))
	g.Expect(s.Turns()[0].Query).To(Equal("beta=true"))
	g.Expect(s.Problems()).To(BeEmpty())
}

func TestMessagesNonStreamingAndSideRequests(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{modelserver.Text("Done.")})
	// No tools: a side request (a title, a summary) does not take the scripted reply.
	resp := post(t, s, "/v1/messages", `{"model":"claude-haiku","messages":[{"role":"user","content":"title?"}]}`)
	var side map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&side)).To(Succeed())
	g.Expect(side["content"]).To(ConsistOf(HaveKeyWithValue("text", modelserver.SideText)))
	g.Expect(side["stop_reason"]).To(Equal("end_turn"))
	g.Expect(s.Played()).To(Equal(0))

	resp = post(t, s, "/v1/messages", `{"model":"claude-x","messages":[{"role":"user","content":"go"}],`+anthropicTools+`}`)
	var msg map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&msg)).To(Succeed())
	g.Expect(msg["content"]).To(ConsistOf(And(HaveKeyWithValue("type", "text"), HaveKeyWithValue("text", "Done."))))
	g.Expect(s.Played()).To(Equal(1))

	resp = post(t, s, "/v1/messages/count_tokens", `{"model":"claude-x","messages":[{"role":"user","content":"go"}]}`)
	var count map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&count)).To(Succeed())
	g.Expect(count["input_tokens"]).To(BeNumerically(">", 0))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/v1/models", nil)
	models, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = models.Body.Close() }()
	var list map[string]any
	g.Expect(json.NewDecoder(models.Body).Decode(&list)).To(Succeed())
	g.Expect(list["data"]).To(ContainElement(HaveKeyWithValue("id", modelserver.Model)))

	// Anything else is a problem the test sees, answered 404.
	g.Expect(post(t, s, "/v1/telemetry", `{}`).StatusCode).To(Equal(http.StatusNotFound))
	g.Expect(s.Problems()).To(ConsistOf(ContainSubstring("/v1/telemetry")))
}

func TestMessagesErrors(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{
		{Error: &modelserver.APIError{Status: 529, RetryAfter: 1}},
		{Error: &modelserver.APIError{Status: 500, Message: "boom", InStream: true}},
		{Error: &modelserver.APIError{Status: 403, Message: "no"}, Repeat: true},
	})
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}],` + anthropicTools + `}`

	resp := post(t, s, "/v1/messages", body)
	g.Expect(resp.StatusCode).To(Equal(529))
	g.Expect(resp.Header.Get("retry-after")).To(Equal("1"))
	g.Expect(resp.Header.Get("request-id")).To(HavePrefix("req_"))
	raw, _ := io.ReadAll(resp.Body)
	g.Expect(raw).To(MatchJSON(`{"type":"error","error":{"type":"overloaded_error","message":"overloaded_error"},"request_id":"` + resp.Header.Get("request-id") + `"}`))

	resp = post(t, s, "/v1/messages", body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	events := readSSE(t, resp.Body)
	g.Expect(names(events)).To(Equal([]string{"error"}))
	g.Expect(events[0].data["error"]).To(Equal(map[string]any{"type": "api_error", "message": "boom"}))

	// A repeated reply answers every later request, and counts once.
	for range 3 {
		g.Expect(post(t, s, "/v1/messages", body).StatusCode).To(Equal(http.StatusForbidden))
	}
	g.Expect(s.Played()).To(Equal(3))
	s.Append(modelserver.Text("back"))
	g.Expect(post(t, s, "/v1/messages", body).StatusCode).To(Equal(http.StatusOK))
	g.Expect(s.Played()).To(Equal(4))
	g.Expect(s.Problems()).To(BeEmpty())

	// Past the end of the script: a refusal the CLI does not retry, and a problem.
	g.Expect(post(t, s, "/v1/messages", body).StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(s.Problems()).To(ConsistOf(ContainSubstring("past the end of the script")))
}

// Codex offers its tools in an additional_tools input item, some in namespaces, some custom.
const responsesBody = `{"model":"gpt-x","stream":true,"input":[
 {"type":"additional_tools","tools":[{"type":"namespace","name":"functions","tools":[{"type":"custom","name":"exec"},{"type":"function","name":"request_user_input"}]}]},
 {"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}]}`

func TestResponsesStream(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{{Text: "Running it now, in a moment or two.", ToolCalls: []modelserver.ToolCall{
		{Name: "exec", Input: "const r = await tools.exec_command({cmd: 'git commit -m x'});\ntext(r.output);"},
		{Name: "request_user_input", Input: map[string]any{"questions": []any{}}},
	}, Usage: modelserver.Usage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: 2}}})
	resp := post(t, s, "/v1/responses", responsesBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	events := readSSE(t, resp.Body)
	for i, e := range events {
		g.Expect(e.data["sequence_number"]).To(BeNumerically("==", i))
	}
	seq := strings.Join(names(events), " ")
	g.Expect(seq).To(MatchRegexp(`^response\.created response\.in_progress ` +
		`response\.output_item\.added response\.content_part\.added (response\.output_text\.delta ){2,}response\.output_text\.done response\.content_part\.done response\.output_item\.done ` +
		`response\.output_item\.added (response\.custom_tool_call_input\.delta ){2,}response\.custom_tool_call_input\.done response\.output_item\.done ` +
		`response\.output_item\.added (response\.function_call_arguments\.delta )+response\.function_call_arguments\.done response\.output_item\.done ` +
		`response\.completed$`))
	done := events[len(events)-1].data["response"].(map[string]any)
	g.Expect(done["status"]).To(Equal("completed"))
	g.Expect(done["output"]).To(HaveLen(3))
	g.Expect(done["usage"]).To(And(HaveKeyWithValue("input_tokens", BeNumerically("==", 10)), HaveKeyWithValue("output_tokens", BeNumerically("==", 5)),
		HaveKeyWithValue("input_tokens_details", HaveKeyWithValue("cached_tokens", BeNumerically("==", 2)))))
	var args strings.Builder
	for _, e := range events {
		if e.name == "response.function_call_arguments.delta" {
			args.WriteString(e.data["delta"].(string))
		}
	}
	g.Expect(args.String()).To(MatchJSON(`{"questions":[]}`))
	g.Expect(s.Turns()).To(HaveLen(1), "tools offered through additional_tools make a conversational request")
	g.Expect(s.Turns()[0].ToolNames()).To(ConsistOf("exec", "request_user_input"))
	g.Expect(s.Problems()).To(BeEmpty())
}

func TestResponsesErrors(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{
		{Error: &modelserver.APIError{Status: 500, Message: "boom"}},
		{Error: &modelserver.APIError{Status: 500, Message: "cut", InStream: true}},
		{ToolCalls: []modelserver.ToolCall{{Name: "shell", Input: map[string]any{}}}},
	})
	resp := post(t, s, "/v1/responses", responsesBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusInternalServerError))
	raw, _ := io.ReadAll(resp.Body)
	g.Expect(raw).To(MatchJSON(`{"error":{"message":"boom","type":"server_error","param":null,"code":"server_error"}}`))

	events := readSSE(t, post(t, s, "/v1/responses", responsesBody).Body)
	g.Expect(names(events)).To(Equal([]string{"response.created", "response.in_progress", "response.failed"}))
	g.Expect(events[2].data["response"]).To(HaveKeyWithValue("error", map[string]any{"code": "server_error", "message": "cut"}))

	// A tool the request did not offer is the script's mistake.
	readSSE(t, post(t, s, "/v1/responses", responsesBody).Body)
	g.Expect(s.Problems()).To(ConsistOf(ContainSubstring(`tool "shell" was not offered`)))
}

func TestRequestConversation(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{modelserver.Text("a"), modelserver.Text("b")})
	post(t, s, "/v1/messages", `{"model":"m","messages":[
		{"role":"user","content":[{"type":"text","text":"prompt"}]},
		{"role":"assistant","content":[{"type":"text","text":"earlier answer"},{"type":"tool_use","id":"t1","name":"Bash","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"[main abc] Add hello"},{"type":"text","text":"follow-up"}]}],`+anthropicTools+`}`)
	post(t, s, "/v1/responses", `{"model":"m","stream":true,"tools":[{"type":"function","name":"f"}],"input":[
		{"type":"message","role":"user","content":[{"type":"input_text","text":"prompt"}]},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"earlier answer"}]},
		{"type":"custom_tool_call_output","call_id":"c","output":[{"type":"input_text","text":"Script completed"},{"type":"input_text","text":"[main abc] Add hello"}]},
		{"type":"function_call_output","call_id":"d","output":"ok"}]}`)
	turns := s.Turns()
	g.Expect(turns).To(HaveLen(2))
	g.Expect(turns[0].UserTexts()).To(Equal([]string{"prompt", "follow-up"}))
	g.Expect(turns[0].AssistantTexts()).To(Equal([]string{"earlier answer"}))
	g.Expect(turns[0].ToolResults()).To(Equal([]string{"[main abc] Add hello"}))
	g.Expect(turns[0].Model()).To(Equal("m"))
	g.Expect(turns[1].UserTexts()).To(Equal([]string{"prompt"}))
	g.Expect(turns[1].AssistantTexts()).To(Equal([]string{"earlier answer"}))
	g.Expect(turns[1].ToolResults()).To(Equal([]string{"Script completed", "[main abc] Add hello", "ok"}))
	g.Expect(bytes.Contains(turns[1].Body, []byte("custom_tool_call_output"))).To(BeTrue())
}

// Used as the CLIs' HTTP(S) proxy, the server refuses and records every other host.
func TestProxyRefusesOtherHosts(t *testing.T) {
	g := NewWithT(t)
	s := start(t, nil)
	proxy, err := url.Parse(s.URL())
	g.Expect(err).NotTo(HaveOccurred())
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	resp, err := client.Get("http://telemetry.example.invalid/v1/events")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
	_, err = client.Get("https://registry.example.invalid/")
	g.Expect(err).To(HaveOccurred(), "the CONNECT is refused")
	// The model API itself, reached through the proxy, is served.
	resp, err = client.Get(s.URL() + "/v1/models")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(s.Problems()).To(ConsistOf(ContainSubstring("GET http://telemetry.example.invalid/v1/events"),
		ContainSubstring("CONNECT registry.example.invalid:443")))
}
