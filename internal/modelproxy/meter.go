package modelproxy

import (
	"bytes"
	"mime"
)

// maxEventBytes bounds one server-sent event's data, and a non-streamed answer the meter
// reads. The largest real events are a Responses stream's last, which repeats the whole
// output (and the instructions and tools): a few hundred KiB for a long answer. Anything
// larger goes to the client unread, and its tokens are estimated.
const maxEventBytes = 4 << 20

// meter reads an answer's usage as it is relayed to the client, without holding it back:
// a stream event by event, any other answer once it is whole.
type meter struct {
	p      parser
	sse    *sseSplitter
	body   []byte
	over   bool
	served int64
}

func newMeter(p parser, contentType string) *meter {
	m := &meter{p: p}
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt == "text/event-stream" {
		m.sse = &sseSplitter{onEvent: p.event}
	}
	return m
}

func (m *meter) write(b []byte) {
	m.served += int64(len(b))
	switch {
	case m.sse != nil:
		m.sse.write(b)
	case m.over:
	case len(m.body)+len(b) > maxEventBytes:
		m.over, m.body = true, nil
	default:
		m.body = append(m.body, b...)
	}
}

// finish returns the answer's tokens. Counts the API never reported are estimated at a token
// per 4 bytes — of the request body for input, of the answer for output — which overstates
// them (JSON and event framing count too), and the answer is flagged unmetered. An answer
// that ended with an error the API reported is charged what it reported.
func (m *meter) finish(requestBytes int) (tokens, bool) {
	if m.sse == nil && !m.over {
		m.p.body(m.body)
	}
	r := m.p.result()
	if r.failed || r.gotInput && r.gotOutput {
		return r.tokens, false
	}
	if !r.gotInput {
		r.input = int64(requestBytes) / 4
	}
	if !r.gotOutput {
		r.output = max(r.output, m.served/4)
	}
	return r.tokens, true
}

// sseSplitter cuts a server-sent event stream into events
// (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation)
// as bytes arrive, in any pieces. Only data matters: both APIs name an event's type inside
// it. A line or an event's data longer than maxEventBytes is dropped, not buffered.
type sseSplitter struct {
	onEvent func(data []byte)

	line     []byte
	lineOver bool
	data     []byte
	hasData  bool
	dataOver bool
	skipLF   bool
}

func (s *sseSplitter) write(b []byte) {
	for len(b) > 0 {
		if s.skipLF {
			s.skipLF = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			s.appendLine(b)
			return
		}
		s.appendLine(b[:i])
		s.endLine()
		// A line ends at CR, LF or CR LF; the LF of a pair may come in the next piece.
		s.skipLF = b[i] == '\r'
		b = b[i+1:]
	}
}

func (s *sseSplitter) appendLine(b []byte) {
	if s.lineOver {
		return
	}
	if len(s.line)+len(b) > maxEventBytes {
		s.line, s.lineOver = s.line[:0], true
		return
	}
	s.line = append(s.line, b...)
}

func (s *sseSplitter) endLine() {
	line, over := s.line, s.lineOver
	s.line, s.lineOver = s.line[:0], false
	switch {
	case over:
		s.dataOver = true // a line too long to keep: its event, if data, is lost
	case len(line) == 0:
		s.dispatch()
	case line[0] == ':': // a comment, sent to keep the connection alive
	default:
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			return
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if s.hasData {
			value = append([]byte("\n"), value...)
		}
		if len(s.data)+len(value) > maxEventBytes {
			s.dataOver = true
		} else if !s.dataOver {
			s.data = append(s.data, value...)
		}
		s.hasData = true
	}
}

// dispatch hands over the event's data. A stream that ends without the blank line after its
// last event loses that event, as the standard says.
func (s *sseSplitter) dispatch() {
	if s.hasData && !s.dataOver {
		s.onEvent(s.data)
	}
	s.data, s.hasData, s.dataOver = s.data[:0], false, false
}
