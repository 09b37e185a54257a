package modelproxy

import (
	"testing"
)

// The usage parsers read answers the proxy does not control. Each fuzz test feeds one parser
// arbitrary bytes, as a stream and as a whole body, and checks that it never panics, that
// every count stays within [0, maxCount], and that a stream reads the same however it is cut
// into pieces. Run one for longer with, for example:
//
//	go test ./internal/modelproxy/ -run '^$' -fuzz FuzzAnthropicUsage -fuzztime 60s

func FuzzAnthropicUsage(f *testing.F) {
	fuzzParser(f, newAnthropicParser, "anthropic-stream.sse", "anthropic-cache-stream.sse", "anthropic.json")
}

func FuzzResponsesUsage(f *testing.F) {
	fuzzParser(f, newResponsesParser, "responses-stream.sse", "responses-incomplete-stream.sse", "responses.json")
}

func FuzzChatUsage(f *testing.F) {
	fuzzParser(f, newChatParser, "chat-stream.sse", "chat-docs-stream.sse", "chat.json")
}

func FuzzGeminiUsage(f *testing.F) {
	fuzzParser(f, newGeminiParser, "gemini-stream.sse", "gemini-thinking-stream.sse", "gemini.json")
}

func fuzzParser(f *testing.F, newParser func() parser, samples ...string) {
	for _, name := range samples {
		f.Add(sample(f, name), uint8(7))
	}
	f.Add([]byte("data: {\"usage\":{\"input_tokens\":-1,\"output_tokens\":1e400}}\r\n\r"), uint8(1))
	f.Add([]byte("data: {\"type\":\"message_delta\",\"usage\":null}\n\ndata: {\"usage\":{\"prompt_tokens\":9223372036854775807}}\n\n"), uint8(2))
	f.Fuzz(func(t *testing.T, answer []byte, piece uint8) {
		whole, _ := readAnswer(newParser, sse, answer, len(answer))
		checkCounts(t, whole)

		m := newMeter(newParser(), sse)
		step := int(piece%64) + 1
		for b := answer; len(b) > 0; {
			n := min(step, len(b))
			m.write(b[:n])
			b = b[n:]
		}
		pieces, _ := m.finish(len(answer))
		if pieces != whole {
			t.Fatalf("read whole %+v, in pieces of %d %+v", whole, step, pieces)
		}

		body, _ := readAnswer(newParser, js, answer, len(answer))
		checkCounts(t, body)
	})
}

func checkCounts(t *testing.T, got tokens) {
	t.Helper()
	for _, c := range []int64{got.input, got.output, got.cacheRead, got.cacheWrite} {
		// An estimate counts bytes, not reported tokens, so it may pass maxCount only for an
		// answer as large, which a fuzz input is not.
		if c < 0 || c > maxCount {
			t.Fatalf("count out of range: %+v", got)
		}
	}
}
