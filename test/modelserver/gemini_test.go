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

// geminiBody is a request as Gemini CLI sends it: its tools as function declarations.
const geminiBody = `{"contents":[{"role":"user","parts":[{"text":"go"}]}],
 "tools":[{"functionDeclarations":[{"name":"run_shell_command","parametersJsonSchema":{"type":"object"}},{"name":"write_file"}]}],
 "generationConfig":{"thinkingConfig":{"includeThoughts":true}}}`

const geminiStream = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"

// readGemini reads a Gemini stream: data-only events, each a whole GenerateContentResponse,
// separated by CR LF CR LF as Google sends them.
func readGemini(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	raw, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	events := strings.Split(string(raw), "\r\n\r\n")
	if last := events[len(events)-1]; last != "" {
		t.Fatalf("the stream does not end with a blank line: %q", last)
	}
	for _, e := range events[:len(events)-1] {
		data, ok := strings.CutPrefix(e, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("not one data line: %q", e)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("data is not JSON: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// parts returns the content parts of a response's first candidate.
func parts(resp map[string]any) []any {
	cand := resp["candidates"].([]any)[0].(map[string]any)
	return cand["content"].(map[string]any)["parts"].([]any)
}

func TestGeminiStream(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{{Text: "I will commit now, with a fairly long sentence.", ToolCalls: []modelserver.ToolCall{
		{Name: "run_shell_command", Input: map[string]any{"command": "git commit -m 'Add hello'"}},
		{Name: "write_file", Input: map[string]any{"file_path": "a.txt", "content": "a"}},
	}, Usage: modelserver.Usage{InputTokens: 100, OutputTokens: 7, CacheReadTokens: 40}}})
	resp := post(t, s, geminiStream, geminiBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
	events := readGemini(t, resp.Body)

	// The text in several pieces, then the function calls in one, which ends the answer.
	g.Expect(len(events)).To(BeNumerically(">=", 3))
	var text strings.Builder
	for i, e := range events {
		g.Expect(e).To(HaveKeyWithValue("modelVersion", "gemini-x"))
		g.Expect(e["responseId"]).To(Equal(events[0]["responseId"]), "one response id for the whole answer")
		cand := e["candidates"].([]any)[0].(map[string]any)
		g.Expect(cand["content"]).To(HaveKeyWithValue("role", "model"))
		usage := e["usageMetadata"].(map[string]any)
		g.Expect(usage).To(HaveKeyWithValue("promptTokenCount", BeNumerically("==", 100)), "every piece repeats the prompt's count")
		g.Expect(usage).To(HaveKeyWithValue("cachedContentTokenCount", BeNumerically("==", 40)))
		if i < len(events)-1 {
			g.Expect(cand).NotTo(HaveKey("finishReason"))
			g.Expect(usage).NotTo(HaveKey("candidatesTokenCount"))
			text.WriteString(parts(e)[0].(map[string]any)["text"].(string))
		}
	}
	g.Expect(text.String()).To(Equal("I will commit now, with a fairly long sentence."))
	last := events[len(events)-1]
	g.Expect(last["candidates"].([]any)[0]).To(HaveKeyWithValue("finishReason", "STOP"))
	g.Expect(last["usageMetadata"]).To(And(HaveKeyWithValue("candidatesTokenCount", BeNumerically("==", 7)),
		HaveKeyWithValue("totalTokenCount", BeNumerically("==", 107))))
	calls := parts(last)
	g.Expect(calls).To(HaveLen(2))
	g.Expect(calls[0]).To(And(HaveKey("thoughtSignature"), HaveKeyWithValue("functionCall",
		map[string]any{"name": "run_shell_command", "args": map[string]any{"command": "git commit -m 'Add hello'"}})))
	g.Expect(calls[1]).NotTo(HaveKey("thoughtSignature"), "only the first call of a step carries the signature")

	turns := s.Turns()
	g.Expect(turns).To(HaveLen(1))
	g.Expect(turns[0].API).To(Equal(modelserver.APIGenerateContent))
	g.Expect(turns[0].Stream).To(BeTrue())
	g.Expect(turns[0].Query).To(Equal("alt=sse"))
	g.Expect(turns[0].Model()).To(Equal("gemini-x"))
	g.Expect(turns[0].ToolNames()).To(ConsistOf("run_shell_command", "write_file"))
	g.Expect(s.Problems()).To(BeEmpty())
}

func TestGeminiNonStreamingAndSideRequests(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{modelserver.Text("Done.")})
	// No tools: a side request (a routing or summary call) does not take the scripted reply.
	resp := post(t, s, "/v1beta/models/gemini-lite:generateContent", `{"contents":[{"role":"user","parts":[{"text":"classify"}]}]}`)
	var side map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&side)).To(Succeed())
	g.Expect(parts(side)).To(ConsistOf(HaveKeyWithValue("text", modelserver.SideText)))
	g.Expect(s.Played()).To(Equal(0))

	resp = post(t, s, "/v1/models/gemini-x:generateContent", geminiBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Type")).To(Equal("application/json"))
	var answer map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&answer)).To(Succeed())
	g.Expect(parts(answer)).To(ConsistOf(HaveKeyWithValue("text", "Done.")))
	g.Expect(answer["candidates"].([]any)[0]).To(HaveKeyWithValue("finishReason", "STOP"))
	u := modelserver.DefaultUsage
	g.Expect(answer["usageMetadata"]).To(And(HaveKeyWithValue("promptTokenCount", BeNumerically("==", u.InputTokens)),
		HaveKeyWithValue("cachedContentTokenCount", BeNumerically("==", u.CacheReadTokens)),
		HaveKeyWithValue("candidatesTokenCount", BeNumerically("==", u.OutputTokens))))
	g.Expect(s.Played()).To(Equal(1))
	g.Expect(s.Turns()[0].Stream).To(BeFalse())

	resp = post(t, s, "/v1beta/models/gemini-x:countTokens", geminiBody)
	var count map[string]any
	g.Expect(json.NewDecoder(resp.Body).Decode(&count)).To(Succeed())
	g.Expect(count["totalTokens"]).To(BeNumerically(">", 0))
	g.Expect(s.Requests()[2].API).To(Equal(modelserver.APIGeminiCountTokens))

	// Methods and paths the server does not serve are problems the test sees.
	g.Expect(post(t, s, "/v1beta/models/gemini-x:embedContent", `{}`).StatusCode).To(Equal(http.StatusNotFound))
	g.Expect(post(t, s, "/v1beta/models/a/b:generateContent", `{}`).StatusCode).To(Equal(http.StatusNotFound))
	g.Expect(s.Problems()).To(HaveLen(2))
}

func TestGeminiErrors(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{
		{Error: &modelserver.APIError{Status: 429, Message: "Resource has been exhausted", RetryAfter: 2}},
		{Error: &modelserver.APIError{Status: 503}},
		{Error: &modelserver.APIError{Status: 500, Message: "cut", InStream: true}},
		{Error: &modelserver.APIError{Status: 403, Message: "no"}, Repeat: true},
	})
	resp := post(t, s, geminiStream, geminiBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	raw, _ := io.ReadAll(resp.Body)
	g.Expect(raw).To(MatchJSON(`{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED",
		"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"2s"}]}}`))

	resp = post(t, s, geminiStream, geminiBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
	raw, _ = io.ReadAll(resp.Body)
	g.Expect(raw).To(MatchJSON(`{"error":{"code":503,"message":"UNAVAILABLE","status":"UNAVAILABLE"}}`))

	// In the stream: a first piece, then the error as a bare JSON object, which is how
	// google-genai's stream reader recognises one.
	resp = post(t, s, geminiStream, geminiBody)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first).To(HavePrefix("data: {"))
	rest, _ := io.ReadAll(r)
	g.Expect(strings.TrimPrefix(string(rest), "\r\n")).To(MatchJSON(`{"error":{"code":500,"message":"cut","status":"INTERNAL"}}`))

	for range 2 {
		g.Expect(post(t, s, "/v1beta/models/gemini-x:generateContent", geminiBody).StatusCode).To(Equal(http.StatusForbidden))
	}
	g.Expect(s.Played()).To(Equal(4))
	g.Expect(s.Problems()).To(BeEmpty())
}

func TestGeminiConversation(t *testing.T) {
	g := NewWithT(t)
	s := start(t, modelserver.Script{modelserver.Text("a")})
	post(t, s, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", `{"contents":[
		{"role":"user","parts":[{"text":"<session_context>...</session_context>"},{"text":"prompt"}]},
		{"role":"model","parts":[{"text":"thinking it over","thought":true},{"text":"earlier answer"},
		  {"functionCall":{"name":"run_shell_command","args":{"command":"git commit"}},"thoughtSignature":"x"}]},
		{"role":"user","parts":[{"functionResponse":{"name":"run_shell_command","response":{"output":"[main abc] Add hello"}}},
		  {"functionResponse":{"name":"read_file","response":{"error":"no such file"}}},
		  {"functionResponse":{"name":"glob","response":{"files":["a"]}}}]},
		{"role":"user","parts":[{"text":"follow-up"}]}],
		"tools":[{"functionDeclarations":[{"name":"run_shell_command"}]}]}`)
	turns := s.Turns()
	g.Expect(turns).To(HaveLen(1))
	g.Expect(turns[0].UserTexts()).To(Equal([]string{"<session_context>...</session_context>", "prompt", "follow-up"}))
	g.Expect(turns[0].AssistantTexts()).To(Equal([]string{"earlier answer"}), "thoughts are not what the model said")
	g.Expect(turns[0].ToolResults()).To(Equal([]string{"[main abc] Add hello", "no such file", `{"files":["a"]}`}))
}
