package modelproxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// The samples in testdata are answers of test/modelserver (anthropic-stream.sse,
// anthropic.json, responses-stream.sse, chat-stream.sse, chat.json, gemini-stream.sse with CR
// LF line ends as Google sends them, gemini.json) and the APIs' documented examples
// (anthropic-cache-stream.sse with CR LF line ends, keep-alive comments and a message_delta
// repeating the input counts; responses.json; responses-incomplete-stream.sse;
// chat-docs-stream.sse); gemini-thinking-stream.sse is shaped as the Gemini API reference
// documents a thinking model's stream (thoughts, a function call with its signature, cached and
// tool-use prompt tokens), with counts of our own.

func sample(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// readAnswer meters a whole answer, as the proxy does while relaying it.
func readAnswer(newParser func() parser, contentType string, answer []byte, requestBytes int) (tokens, bool) {
	m := newMeter(newParser(), contentType)
	m.write(answer)
	return m.finish(requestBytes)
}

const sse, js = "text/event-stream", "application/json"

func TestParsersReadDocumentedAnswers(t *testing.T) {
	for _, tc := range []struct {
		file        string
		parser      func() parser
		contentType string
		want        tokens
	}{
		// Anthropic's input_tokens already exclude the cache; the last output count wins.
		{"anthropic-stream.sse", newAnthropicParser, sse, tokens{input: 1200, output: 80, cacheRead: 300}},
		{"anthropic-cache-stream.sse", newAnthropicParser, "text/event-stream; charset=utf-8", tokens{input: 12, output: 503, cacheRead: 10240, cacheWrite: 2048}},
		{"anthropic.json", newAnthropicParser, js, tokens{input: 1200, output: 80, cacheRead: 300}},
		// OpenAI's input counts include the cached tokens, which move to cacheRead.
		{"responses-stream.sse", newResponsesParser, sse, tokens{input: 900, output: 80, cacheRead: 300}},
		{"responses-incomplete-stream.sse", newResponsesParser, sse, tokens{input: 416, output: 256, cacheRead: 3584}},
		{"responses.json", newResponsesParser, js, tokens{input: 200, output: 52, cacheRead: 128}},
		{"chat-stream.sse", newChatParser, sse, tokens{input: 900, output: 80, cacheRead: 300}},
		{"chat-docs-stream.sse", newChatParser, sse, tokens{input: 93, output: 46, cacheRead: 1024}},
		{"chat.json", newChatParser, js, tokens{input: 900, output: 80, cacheRead: 300}},
		// Gemini's promptTokenCount includes the cached tokens too; the last piece's usage wins.
		{"gemini-stream.sse", newGeminiParser, sse, tokens{input: 900, output: 80, cacheRead: 300}},
		{"gemini.json", newGeminiParser, js, tokens{input: 900, output: 80, cacheRead: 300}},
		// Input: 4096 prompt + 100 tool-use prompt - 2048 cached; output: 35 candidates + 335
		// thoughts.
		{"gemini-thinking-stream.sse", newGeminiParser, sse, tokens{input: 2148, output: 370, cacheRead: 2048}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			g := NewWithT(t)
			answer := sample(t, tc.file)
			got, unmetered := readAnswer(tc.parser, tc.contentType, answer, 1000)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(unmetered).To(BeFalse())

			// Pieces of any size, a byte at a time at worst, read the same.
			m := newMeter(tc.parser(), tc.contentType)
			for i := range answer {
				m.write(answer[i : i+1])
			}
			got, _ = m.finish(1000)
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestParsersEndings(t *testing.T) {
	// estimated stands for the output estimate: a token per 4 bytes of the answer.
	const requestBytes, estimated = 4000, -1
	anthropicStart := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":50,\"output_tokens\":1}}}\n\n"
	for _, tc := range []struct {
		name          string
		parser        func() parser
		contentType   string
		answer        string
		want          tokens
		wantUnmetered bool
	}{{
		name: "Anthropic stream cut before message_delta: the output is estimated from the bytes relayed", parser: newAnthropicParser,
		contentType: sse, answer: anthropicStart + strings.Repeat("x", 400-len(anthropicStart)),
		want: tokens{input: 100, cacheRead: 50, output: 100}, wantUnmetered: true,
	}, {
		name: "Anthropic error event: what was reported, no estimate", parser: newAnthropicParser, contentType: sse,
		answer: anthropicStart + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
		want:   tokens{input: 100, cacheRead: 50, output: 1},
	}, {
		name: "Responses stream cut before response.completed: all estimated", parser: newResponsesParser, contentType: sse,
		answer: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n",
		want:   tokens{input: requestBytes / 4, output: estimated}, wantUnmetered: true,
	}, {
		name: "Responses failed without usage: nothing charged", parser: newResponsesParser, contentType: sse,
		answer: "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\"},\"usage\":null}}\n\n",
	}, {
		name: "Responses error event", parser: newResponsesParser, contentType: sse,
		answer: "event: error\ndata: {\"type\":\"error\",\"code\":\"ERR_SOMETHING\",\"message\":\"Something went wrong\"}\n\n",
	}, {
		name: "Chat stream without a usage chunk: estimated", parser: newChatParser, contentType: sse,
		answer: "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n",
		want:   tokens{input: requestBytes / 4, output: estimated}, wantUnmetered: true,
	}, {
		name: "Chat error chunk", parser: newChatParser, contentType: sse,
		answer: "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"error\":{\"message\":\"cut\",\"type\":\"server_error\"}}\n\n",
	}, {
		name: "Garbage instead of JSON: estimated", parser: newAnthropicParser, contentType: js,
		answer: "<html>gateway timeout</html>", want: tokens{input: requestBytes / 4, output: 7}, wantUnmetered: true,
	}, {
		name: "Gemini stream cut before its last piece: input as reported, output estimated", parser: newGeminiParser, contentType: sse,
		answer: geminiPiece + geminiPiece,
		want:   tokens{input: 90, cacheRead: 10, output: estimated}, wantUnmetered: true,
	}, {
		name: "Gemini error event: what was reported, no estimate", parser: newGeminiParser, contentType: sse,
		answer: geminiPiece + "data: {\"error\":{\"code\":500,\"message\":\"Internal error encountered.\",\"status\":\"INTERNAL\"}}\r\n\r\n",
		want:   tokens{input: 90, cacheRead: 10},
	}, {
		name: "Gemini error answer", parser: newGeminiParser, contentType: js,
		answer: `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}`,
	}, {
		name: "Gemini stream without alt=sse: a JSON array of the pieces", parser: newGeminiParser, contentType: js,
		answer: `[{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"usageMetadata":{"promptTokenCount":100,"cachedContentTokenCount":10}},` +
			`{"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":100,"cachedContentTokenCount":10,"candidatesTokenCount":7}}]`,
		want: tokens{input: 90, cacheRead: 10, output: 7},
	}, {
		name: "Gemini array without its last piece: output estimated", parser: newGeminiParser, contentType: js,
		answer: `[{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"usageMetadata":{"promptTokenCount":100,"cachedContentTokenCount":10}}]`,
		want:   tokens{input: 90, cacheRead: 10, output: estimated}, wantUnmetered: true,
	}, {
		name: "Gemini prompt blocked: no candidate, the usage is final", parser: newGeminiParser, contentType: sse,
		answer: "data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":12,\"totalTokenCount\":12}}\n\n",
		want:   tokens{input: 12},
	}, {
		name: "Gemini hostile counts: cached above the prompt is all cache", parser: newGeminiParser, contentType: js,
		answer: `{"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":10,"cachedContentTokenCount":50,"candidatesTokenCount":-3,"thoughtsTokenCount":9999999999999999}}`,
		want:   tokens{cacheRead: 10, output: maxCount},
	}, {
		name: "Hostile counts: negative is zero, huge is capped", parser: newChatParser, contentType: js,
		answer: `{"usage":{"prompt_tokens":-5,"completion_tokens":9999999999999999,"prompt_tokens_details":{"cached_tokens":7}}}`,
		want:   tokens{output: maxCount},
	}, {
		name: "Cached above input: the input is all cache", parser: newResponsesParser, contentType: js,
		answer: `{"usage":{"input_tokens":10,"output_tokens":1,"input_tokens_details":{"cached_tokens":50}}}`,
		want:   tokens{output: 1, cacheRead: 10},
	}, {
		name: "A count of the wrong type spoils its event", parser: newAnthropicParser, contentType: sse,
		answer: anthropicStart + "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\"many\"}}\n\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n",
		want:   tokens{input: 100, cacheRead: 50, output: 7},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, unmetered := readAnswer(tc.parser, tc.contentType, []byte(tc.answer), requestBytes)
			if tc.want.output == estimated {
				tc.want.output = int64(len(tc.answer)) / 4
			}
			g.Expect(got).To(Equal(tc.want))
			g.Expect(unmetered).To(Equal(tc.wantUnmetered))
		})
	}
}

// geminiPiece is a Gemini stream's piece before the last: the prompt's counts, no finishReason.
const geminiPiece = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}],\"role\":\"model\"},\"index\":0}]," +
	"\"usageMetadata\":{\"promptTokenCount\":100,\"cachedContentTokenCount\":10,\"totalTokenCount\":100}}\r\n\r\n"

func TestSSESplitter(t *testing.T) {
	big := strings.Repeat("a", maxEventBytes+1)
	for _, tc := range []struct {
		name   string
		stream string
		want   []string
	}{
		{"LF", "data: a\n\ndata: b\n\n", []string{"a", "b"}},
		{"CR LF and bare CR", "data: a\r\n\r\ndata: b\r\rdata:c\r\n\r\n", []string{"a", "b", "c"}},
		{"several data lines join with LF", "data: a\ndata:  b\n\n", []string{"a\n b"}},
		{"comments, other fields and events without data are skipped", ": hi\nevent: x\nid: 1\nretry: 5\n\nevent: y\n\n", nil},
		{"a field without a colon", "data\n\n", []string{""}},
		{"an event without its blank line at the end is lost", "data: a\n\ndata: b\n", []string{"a"}},
		{"an overlong line is dropped with its event", "data: " + big + "\ndata: tail\n\ndata: next\n\n", []string{"next"}},
		{"overlong data over several lines is dropped", "data: " + big[:maxEventBytes/2] + "\ndata: " + big[:maxEventBytes/2] + "\n\ndata: next\n\n", []string{"next"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			for _, piece := range []int{len(tc.stream), 1, 3} {
				var got []string
				s := &sseSplitter{onEvent: func(d []byte) { got = append(got, string(d)) }}
				for b := []byte(tc.stream); len(b) > 0; {
					n := min(piece, len(b))
					s.write(b[:n])
					b = b[n:]
				}
				g.Expect(got).To(Equal(tc.want), "in pieces of %d bytes", piece)
			}
		})
	}
}
