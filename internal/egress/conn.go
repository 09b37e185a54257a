package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"
)

// conn is a connection whose every read and write, once a clock is set, pushes back the idle
// deadline of both ends of the exchange.
type conn struct {
	net.Conn
	clock *idleClock
}

func (c *conn) Read(p []byte) (int, error) {
	if c.clock != nil {
		c.clock.touch()
	}
	return c.Conn.Read(p)
}

func (c *conn) Write(p []byte) (int, error) {
	if c.clock != nil {
		c.clock.touch()
	}
	return c.Conn.Write(p)
}

// idleClock keeps two connections alive while bytes move either way: a download must not time
// out the silent upload direction. Deadlines are moved at most every timeout/8, so an exchange
// dies between 7/8 and all of the timeout after its last byte.
type idleClock struct {
	timeout time.Duration
	conns   [2]net.Conn
	next    atomic.Int64 // UnixNano before which the deadlines need not move
}

func newIdleClock(timeout time.Duration, a, b net.Conn) *idleClock {
	k := &idleClock{timeout: timeout, conns: [2]net.Conn{a, b}}
	k.touch()
	return k
}

func (k *idleClock) touch() {
	now := time.Now()
	if now.UnixNano() < k.next.Load() {
		return
	}
	k.next.Store(now.Add(k.timeout / 8).UnixNano())
	deadline := now.Add(k.timeout)
	for _, c := range k.conns {
		_ = c.SetDeadline(deadline)
	}
}

var (
	errHeaderTooLarge    = errors.New("header too large")
	errSwitchedProtocols = errors.New("upstream answered with a protocol switch")
)

// readHead reads the head of a request or response up to and including its blank line, and no
// further: what follows (a pipelined ClientHello, a body) stays in br. At most max bytes.
func readHead(br *bufio.Reader, max int) ([]byte, error) {
	var head []byte
	for start := 0; ; {
		chunk, err := br.ReadSlice('\n')
		head = append(head, chunk...)
		if len(head) > max {
			return head, errHeaderTooLarge
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return head, err
		}
		if line := string(head[start:]); line == "\r\n" || line == "\n" {
			return head, nil
		}
		start = len(head)
	}
}

// requestHead is a parsed request line and header.
type requestHead struct {
	method, target string
	header         textproto.MIMEHeader
}

// parseHead parses the request line and header of an HTTP/1.x request.
func parseHead(head []byte) (*requestHead, *refusal) {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	line, err := tp.ReadLine()
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if err != nil || !ok1 || !ok2 || method == "" || target == "" {
		return nil, refuse(400, ReasonBadRequest, "egress refused: malformed request line")
	}
	if major, _, ok := http.ParseHTTPVersion(proto); !ok || major != 1 {
		return nil, refuse(400, ReasonBadRequest, "egress refused: the proxy speaks HTTP/1.0 and HTTP/1.1")
	}
	header, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, refuse(400, ReasonBadRequest, "egress refused: malformed request header")
	}
	return &requestHead{method: method, target: target, header: header}, nil
}

// lingerClose half-closes c after a refusal and drains what the client is still sending for a
// moment: closing with unread bytes would reset the connection and could destroy the refusal
// before the client reads it.
func lingerClose(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := unwrap(c).(closeWriter); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.CopyN(io.Discard, c, 256<<10)
}

func unwrap(c net.Conn) net.Conn {
	if w, ok := c.(*conn); ok {
		return w.Conn
	}
	return c
}

// standardMethods keeps Decision.Method a bounded label.
var standardMethods = map[string]bool{
	"CONNECT": true, "GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
	"DELETE": true, "OPTIONS": true, "TRACE": true,
}

func methodLabel(m string) string {
	if standardMethods[m] {
		return m
	}
	return "OTHER"
}
