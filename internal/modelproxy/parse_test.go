package modelproxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// The samples in testdata are answers of test/modelserver (anthropic-stream.sse,
// anthropic.json, responses-stream.sse, chat-stream.sse, chat.json) and the APIs' documented
// examples (anthropic-cache-stream.sse with CR LF line ends, keep-alive comments and a
// message_delta repeating the input counts; responses.json; responses-incomplete-stream.sse;
// chat-docs-stream.sse).

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
