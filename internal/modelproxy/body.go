package modelproxy

import (
	"bytes"
	"encoding/json"
)

// inspect reads what the proxy needs from a request body: the model it names (a Gemini request
// names it in its path, id), for accounting only (the upstream decides what runs and bills), and
// for a streamed Chat Completions request the body to send instead. A body that is not JSON is
// forwarded as it is: the upstream refuses it, in its own words.
func inspect(ep endpoint, id string, body []byte) (model string, out []byte) {
	if ep.verb != "" {
		return sanitizeModel(id), body
	}
	if !ep.chat {
		var b struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(body, &b)
		return sanitizeModel(b.Model), body
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return UnknownModel, body
	}
	var m string
	_ = json.Unmarshal(fields["model"], &m)
	return sanitizeModel(m), askForUsage(fields, body)
}

// askForUsage sets stream_options.include_usage on a streamed Chat Completions request, for
// without it a streamed answer reports no usage at all. That is safe for the client: the API
// then adds one documented chunk before data: [DONE], with empty choices and the usage, and
// gives every other chunk "usage": null — the shape OpenAI's SDKs, the AI SDK (OpenCode) and
// litellm (Aider) read, and ask for themselves. Other members of stream_options are kept.
func askForUsage(fields map[string]json.RawMessage, body []byte) []byte {
	var stream bool
	if json.Unmarshal(fields["stream"], &stream) != nil || !stream {
		return body
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := fields["stream_options"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if json.Unmarshal(raw, &opts) != nil {
			return body // not an object: the upstream refuses it anyway
		}
	}
	var include bool
	if json.Unmarshal(opts["include_usage"], &include) == nil && include {
		return body
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, err := marshal(opts)
	if err != nil {
		return body
	}
	fields["stream_options"] = raw
	out, err := marshal(fields)
	if err != nil {
		return body
	}
	return out
}

// marshal is json.Marshal without HTML escaping, so that the prompt's text reaches the
// upstream as the agent wrote it.
func marshal(v map[string]json.RawMessage) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
