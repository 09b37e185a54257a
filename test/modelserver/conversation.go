package modelserver

import (
	"encoding/json"
)

// What a recorded request carried, read from each API's body: the Messages API's messages
// (role user/assistant, content a string or blocks of text, tool_use and tool_result), the
// Responses API's input (a string, or items: messages with input_text/output_text parts,
// function_call_output and custom_tool_call_output), Chat Completions' messages (role
// system/user/assistant/tool, content a string or text parts; tool results are role tool), or
// the Gemini API's contents (role user/model, parts: text, functionCall, functionResponse).

// Model is the model the request named (for the Gemini API, in its path).
func (r Request) Model() string {
	if r.API == APIGenerateContent || r.API == APIGeminiCountTokens {
		model, _, _ := geminiPath(r.Path)
		return model
	}
	var b struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Model
}

// UserTexts are the text parts of the user's messages, in order: the prompt, follow-ups, and
// the context the CLI adds to them. Tool results are not included.
func (r Request) UserTexts() []string { return r.texts("user") }

// AssistantTexts are the text parts of the model's earlier answers the request replays: a
// resumed conversation carries the previous turns here.
func (r Request) AssistantTexts() []string { return r.texts("assistant") }

// ToolResults are the outputs of tool calls the CLI sends back, in order.
func (r Request) ToolResults() []string {
	var out []string
	switch r.API {
	case APIMessages:
		for _, m := range r.messages() {
			for _, b := range m.blocks() {
				if b.Type == "tool_result" {
					out = append(out, contentText(b.Content)...)
				}
			}
		}
	case APIResponses:
		for _, it := range r.items() {
			if it.Type == "function_call_output" || it.Type == "custom_tool_call_output" {
				out = append(out, contentText(it.Output)...)
			}
		}
	case APIChatCompletions:
		for _, m := range r.messages() {
			if m.Role == "tool" {
				out = append(out, contentText(m.Content)...)
			}
		}
	case APIGenerateContent:
		for _, c := range r.contents() {
			for _, p := range c.Parts {
				if p.FunctionResponse != nil {
					out = append(out, p.FunctionResponse.text())
				}
			}
		}
	}
	return out
}

// ToolNames are the names of the tools the request offers (namespaces flattened).
func (r Request) ToolNames() []string {
	var req request
	if json.Unmarshal(r.Body, &req) != nil {
		return nil
	}
	var names []string
	for name := range offeredTools(req.tools()) {
		names = append(names, name)
	}
	return names
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"`
}

func (m message) blocks() []block {
	if isNull(m.Content) {
		return nil // an assistant message of only tool calls (Chat Completions)
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []block{{Type: "text", Text: s}}
	}
	var bs []block
	_ = json.Unmarshal(m.Content, &bs)
	return bs
}

func (r Request) messages() []message {
	var b struct {
		Messages []message `json:"messages"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Messages
}

type item struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"`
}

func (r Request) items() []item {
	var b struct {
		Input json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(r.Body, &b)
	var s string
	if json.Unmarshal(b.Input, &s) == nil {
		raw, _ := json.Marshal(s)
		return []item{{Type: "message", Role: "user", Content: raw}}
	}
	var items []item
	_ = json.Unmarshal(b.Input, &items)
	return items
}

func (r Request) texts(role string) []string {
	var out []string
	switch r.API {
	case APIMessages, APIChatCompletions:
		for _, m := range r.messages() {
			if m.Role != role {
				continue
			}
			for _, b := range m.blocks() {
				if b.Type == "text" {
					out = append(out, b.Text)
				}
			}
		}
	case APIResponses:
		for _, it := range r.items() {
			if (it.Type == "message" || it.Type == "") && it.Role == role {
				out = append(out, contentText(it.Content)...)
			}
		}
	case APIGenerateContent:
		if role == "assistant" {
			role = "model"
		}
		for _, c := range r.contents() {
			if c.Role != role {
				continue
			}
			for _, p := range c.Parts {
				if p.Text != "" && !p.Thought {
					out = append(out, p.Text)
				}
			}
		}
	}
	return out
}

// geminiContent is one turn of a Gemini request's contents.
type geminiContent struct {
	Role  string `json:"role"`
	Parts []struct {
		Text             string                  `json:"text"`
		Thought          bool                    `json:"thought"`
		FunctionResponse *geminiFunctionResponse `json:"functionResponse"`
	} `json:"parts"`
}

// geminiFunctionResponse is a tool's result as the client sends it back: a response object
// holding its output (Gemini CLI: {"output": ...}, or {"error": ...} for a failed call).
type geminiFunctionResponse struct {
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

func (f geminiFunctionResponse) text() string {
	var r struct {
		Output json.RawMessage `json:"output"`
		Error  json.RawMessage `json:"error"`
	}
	_ = json.Unmarshal(f.Response, &r)
	for _, v := range []json.RawMessage{r.Output, r.Error} {
		if isNull(v) {
			continue
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
		return string(v)
	}
	return string(f.Response)
}

func (r Request) contents() []geminiContent {
	var b struct {
		Contents []geminiContent `json:"contents"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return b.Contents
}

// contentText reads a content value that is a string or a list of parts with text.
func contentText(raw json.RawMessage) []string {
	if isNull(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return out
}

// isNull says a JSON value is absent or null, which decodes into a string without error.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
