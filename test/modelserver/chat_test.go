package modelserver_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/shepherd-dev/shepherd/test/modelserver"
)

const chatTools = `"tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object"}}}]`

// readChunks reads a Chat Completions stream: data-only events, the last one [DONE].
func readChunks(t *testing.T, r io.Reader) (chunks []map[string]any, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected line %q in a Chat Completions stream", line)
		}
		if done {
			t.Fatalf("data after [DONE]: %q", data)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk is not JSON: %v", err)
		}
		chunks = append(chunks, c)
	}
	return chunks, done
}

func TestChatStream(t *testing.T) {
	for _, tc := range []struct {
		name      string
		options   string
		withUsage bool
	}{
		{name: "with include_usage", options: `"stream_options":{"include_usage":true},`, withUsage: true},
		{name: "without", options: ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := start(t, modelserver.Script{{Text: "Let me look at the files first, then commit.", ToolCalls: []modelserver.ToolCall{
				{Name: "shell", Input: map[string]any{"command": []any{"git", "commit", "-m", "x"}}}},
				Usage: modelserver.Usage{InputTokens: 50, OutputTokens: 7, CacheReadTokens: 20}}})
			resp := post(t, s, "/v1/chat/completions", `{"model":"gpt-x","stream":true,`+tc.options+
				`"messages":[{"role":"user","content":"go"}],`+chatTools+`}`)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			g.Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
			chunks, done := readChunks(t, resp.Body)
			g.Expect(done).To(BeTrue(), "the stream ends with data: [DONE]")

			var text, args strings.Builder
			var calls []map[string]any
			for i, c := range chunks {
				g.Expect(c).To(And(HaveKeyWithValue("object", "chat.completion.chunk"), HaveKeyWithValue("model", "gpt-x")))
				g.Expect(c["id"]).To(Equal(chunks[0]["id"]), "every chunk has the same id")
				if i == len(chunks)-1 && tc.withUsage {
					break
				}
				if tc.withUsage {
					g.Expect(c).To(HaveKeyWithValue("usage", BeNil()))
				} else {
					g.Expect(c).NotTo(HaveKey("usage"))
				}
				choice := c["choices"].([]any)[0].(map[string]any)
				delta := choice["delta"].(map[string]any)
				if i == 0 {
					g.Expect(delta).To(HaveKeyWithValue("role", "assistant"))
				}
				if s, ok := delta["content"].(string); ok {
					text.WriteString(s)
				}
				for _, raw := range asList(delta["tool_calls"]) {
					call := raw.(map[string]any)
					g.Expect(call["index"]).To(BeNumerically("==", 0))
					if _, ok := call["id"]; ok {
						calls = append(calls, call)
					}
					args.WriteString(call["function"].(map[string]any)["arguments"].(string))
				}
			}
			g.Expect(text.String()).To(Equal("Let me look at the files first, then commit."))
			g.Expect(calls).To(ConsistOf(And(HaveKeyWithValue("type", "function"), HaveKeyWithValue("id", HavePrefix("call_")),
				HaveKeyWithValue("function", HaveKeyWithValue("name", "shell")))))
			g.Expect(args.String()).To(MatchJSON(`{"command":["git","commit","-m","x"]}`))

			finishAt := len(chunks) - 1
			if tc.withUsage {
				finishAt--
				last := chunks[len(chunks)-1]
				g.Expect(last["choices"]).To(BeEmpty())
				g.Expect(last["usage"]).To(And(HaveKeyWithValue("prompt_tokens", BeNumerically("==", 50)),
					HaveKeyWithValue("completion_tokens", BeNumerically("==", 7)),
					HaveKeyWithValue("total_tokens", BeNumerically("==", 57)),
					HaveKeyWithValue("prompt_tokens_details", HaveKeyWithValue("cached_tokens", BeNumerically("==", 20)))))
			}
			g.Expect(chunks[finishAt]["choices"]).To(ConsistOf(And(HaveKeyWithValue("finish_reason", "tool_calls"),
				HaveKeyWithValue("delta", BeEmpty()))))
			g.Expect(s.Turns()).To(ConsistOf(HaveField("API", modelserver.APIChatCompletions)))
			g.Expect(s.Problems()).To(BeEmpty())
		})
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func TestChatNonStreamingAndErrors(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{
		modelserver.Text("Done."),
		modelserver.Tools(modelserver.ToolCall{Name: "shell", Input: map[string]any{"command": "ls"}}),
		{Error: &modelserver.APIError{Status: 429, RetryAfter: 2}},
		{Error: &modelserver.APIError{Status: 500, Message: "cut", InStream: true}},
	})
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"go"}],` + chatTools + `}`

	var done map[string]any
	g.Expect(json.NewDecoder(post(t, s, "/v1/chat/completions", body).Body).Decode(&done)).To(Succeed())
	g.Expect(done).To(And(HaveKeyWithValue("object", "chat.completion"), HaveKeyWithValue("model", "gpt-x")))
	g.Expect(done["choices"]).To(ConsistOf(And(HaveKeyWithValue("finish_reason", "stop"),
		HaveKeyWithValue("message", And(HaveKeyWithValue("role", "assistant"), HaveKeyWithValue("content", "Done."))))))
	g.Expect(done["usage"]).To(And(HaveKeyWithValue("prompt_tokens", BeNumerically("==", modelserver.DefaultUsage.InputTokens)),
		HaveKeyWithValue("completion_tokens", BeNumerically("==", modelserver.DefaultUsage.OutputTokens)),
		HaveKeyWithValue("prompt_tokens_details", HaveKeyWithValue("cached_tokens", BeNumerically("==", modelserver.DefaultUsage.CacheReadTokens)))))

	var calls map[string]any
	g.Expect(json.NewDecoder(post(t, s, "/v1/chat/completions", body).Body).Decode(&calls)).To(Succeed())
	choice := calls["choices"].([]any)[0].(map[string]any)
	g.Expect(choice["finish_reason"]).To(Equal("tool_calls"))
	msg := choice["message"].(map[string]any)
	g.Expect(msg["content"]).To(BeNil())
	g.Expect(msg["tool_calls"]).To(ConsistOf(HaveKeyWithValue("function", And(HaveKeyWithValue("name", "shell"),
		HaveKeyWithValue("arguments", MatchJSON(`{"command":"ls"}`))))))

	resp := post(t, s, "/v1/chat/completions", body)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(resp.Header.Get("retry-after")).To(Equal("2"))
	raw, _ := io.ReadAll(resp.Body)
	g.Expect(raw).To(MatchJSON(`{"error":{"message":"rate_limit_exceeded","type":"requests","param":null,"code":"rate_limit_exceeded"}}`))

	// An error after the stream started is a chunk with an error object, and no [DONE].
	resp = post(t, s, "/v1/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"go"}],`+chatTools+`}`)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	chunks, finished := readChunks(t, resp.Body)
	g.Expect(finished).To(BeFalse())
	g.Expect(chunks).To(HaveLen(2))
	g.Expect(chunks[1]).To(HaveKeyWithValue("error", And(HaveKeyWithValue("message", "cut"), HaveKeyWithValue("code", "server_error"))))
	g.Expect(s.Played()).To(Equal(4))
	g.Expect(s.Problems()).To(BeEmpty())
}

func TestChatConversation(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{modelserver.Text("a")})
	post(t, s, "/v1/chat/completions", `{"model":"m","messages":[
		{"role":"system","content":"be brief"},
		{"role":"user","content":[{"type":"text","text":"prompt"}]},
		{"role":"assistant","content":"earlier answer"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"[main abc] Add hello"},
		{"role":"user","content":"follow-up"}],`+chatTools+`}`)
	turns := s.Turns()
	g.Expect(turns).To(HaveLen(1))
	g.Expect(turns[0].UserTexts()).To(Equal([]string{"prompt", "follow-up"}))
	g.Expect(turns[0].AssistantTexts()).To(Equal([]string{"earlier answer"}))
	g.Expect(turns[0].ToolResults()).To(Equal([]string{"[main abc] Add hello"}))
	g.Expect(turns[0].ToolNames()).To(ConsistOf("shell"))
	g.Expect(turns[0].Model()).To(Equal("m"))
}

// A held reply sends its first event, then waits: what the client has read by then came
// through before the stream ended.
func TestHoldPausesAStream(t *testing.T) {
	g := NewWithT(t)
	hold := make(chan struct{})
	s := start(t, modelserver.Script{{Text: "held", Hold: hold}})
	resp := post(t, s, "/v1/messages", `{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}],`+anthropicTools+`}`)
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first).To(Equal("event: message_start\n"))
	g.Expect(s.InFlight()).To(Equal(1), "the stream is still being served")
	close(hold)
	rest, err := io.ReadAll(r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(rest)).To(HaveSuffix("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	g.Eventually(s.InFlight).Should(BeZero())
}
