package modelproxy

import (
	"net/http"
	"net/textproto"
	"strings"

	agentsv1alpha1 "github.com/shepherd-dev/shepherd/api/v1alpha1"
)

// hopHeaders concern one connection, not the request (RFC 9110 section 7.6.1), and are never
// forwarded either way.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// dropRequestHeaders are removed from what the agent sends:
//   - credentials (its placeholder key, or anything it hopes the upstream takes), since the
//     proxy alone decides how the upstream is authenticated;
//   - OpenAI-Organization, OpenAI-Project and X-Goog-User-Project, which choose whom a key
//     bills: that belongs to whoever holds the key, not to the agent;
//   - what the proxy's own transport sets: the body is re-sent whole (Content-Length, Expect),
//     and Accept-Encoding is left to the transport, which then decompresses the answer so that
//     its usage can be read.
var dropRequestHeaders = []string{
	"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Proxy-Authorization", "Cookie",
	"Openai-Organization", "Openai-Project", "X-Goog-User-Project",
	"Host", "Content-Length", "Expect", "Accept-Encoding",
}

// outgoingHeader is the header sent upstream: the agent's, minus hop-by-hop and credential
// headers, plus the real key (none when key is empty).
func outgoingHeader(in http.Header, kind agentsv1alpha1.ModelAPIKind, key string) http.Header {
	h := in.Clone()
	if h == nil {
		h = http.Header{}
	}
	removeHopHeaders(h)
	for _, k := range dropRequestHeaders {
		h.Del(k)
	}
	if key == "" {
		return h
	}
	switch kind {
	case agentsv1alpha1.ModelAPIAnthropic:
		h.Set("X-Api-Key", key)
	case agentsv1alpha1.ModelAPIGemini:
		// Google's header for an API key (https://ai.google.dev/gemini-api/docs/api-key); never
		// the ?key= query parameter, which would put the key in URLs that get logged.
		h.Set("X-Goog-Api-Key", key)
	default:
		h.Set("Authorization", "Bearer "+key)
	}
	return h
}

// copyResponseHeader passes the upstream's answer headers on, minus hop-by-hop ones.
func copyResponseHeader(dst, src http.Header) {
	h := src.Clone()
	removeHopHeaders(h)
	for k, v := range h {
		dst[k] = v
	}
}

// removeHopHeaders deletes the hop-by-hop headers, including those Connection names.
func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// validKey refuses a key that cannot go in a header, rather than let the transport fail on it.
func validKey(key string) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
