package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// TLS wire constants (RFC 8446, RFC 6066, draft-ietf-tls-esni).
const (
	recordHeaderLen          = 5
	maxRecordLen             = 1 << 14 // the plaintext limit of a TLS record
	maxHelloLen              = 1 << 15 // generous: post-quantum key shares make hellos ~2 KiB
	recordTypeHandshake      = 22
	handshakeTypeClientHello = 1
	extServerName            = 0
	extEncryptedClientHello  = 0xfe0d
	sniHostName              = 0
)

var (
	errNotTLS   = errors.New("not a TLS handshake")
	errBadHello = errors.New("malformed or unsupported TLS ClientHello")
	errNoSNI    = errors.New("TLS ClientHello names no server")
	errECH      = errors.New("TLS ClientHello is encrypted (ECH): the server name it reaches cannot be checked")
)

// readClientHello reads the TLS records that carry the client's first handshake message, which
// must be a ClientHello, and returns every byte it read (to forward once the name is checked)
// and the server name it carries. The message may span several records. It reads no further
// than the last of them, refuses a record that carries anything after the ClientHello, and
// reads at most maxHelloLen bytes of message, so a hostile client cannot make it buffer more.
func readClientHello(r io.Reader) (raw []byte, serverName string, err error) {
	var msg []byte
	for {
		var hdr [recordHeaderLen]byte
		got, err := io.ReadFull(r, hdr[:])
		raw = append(raw, hdr[:got]...)
		if err != nil {
			return raw, "", notTLSUnlessEOF(err, len(raw))
		}
		if hdr[0] != recordTypeHandshake || hdr[1] != 3 {
			return raw, "", errNotTLS
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		if n == 0 || n > maxRecordLen || len(msg)+n > 4+maxHelloLen {
			return raw, "", errBadHello
		}
		start := len(raw)
		raw = slices.Grow(raw, n)[:start+n]
		if got, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start+got], "", fmt.Errorf("read TLS record: %w", err)
		}
		msg = append(msg, raw[start:]...)
		done, name, err := helloComplete(msg)
		if done || err != nil {
			return raw, name, err
		}
	}
}

// notTLSUnlessEOF keeps a clean EOF before any byte recognizable (the client gave up), and calls
// a partial record header what it is.
func notTLSUnlessEOF(err error, read int) error {
	if errors.Is(err, io.EOF) && read == 0 {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errNotTLS
	}
	return fmt.Errorf("read TLS record: %w", err)
}

// helloComplete looks at the handshake bytes gathered so far: not done while the message is
// incomplete, else the server name of the ClientHello or why it is refused.
func helloComplete(msg []byte) (done bool, name string, err error) {
	if len(msg) < 4 {
		return false, "", nil
	}
	if msg[0] != handshakeTypeClientHello {
		return true, "", errBadHello
	}
	want := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
	switch {
	case want > 4+maxHelloLen:
		return true, "", errBadHello
	case len(msg) < want:
		return false, "", nil
	case len(msg) > want:
		// Nothing may follow a ClientHello in its record: a second hello would be unchecked.
		return true, "", errBadHello
	}
	name, err = parseClientHello(msg[4:])
	return true, name, err
}

// parseClientHello returns the host_name of the server_name extension of a ClientHello body
// (RFC 8446 4.1.2). It refuses duplicate server_name extensions and a second host_name (the
// server could act on the one not checked), and encrypted ClientHellos, whose inner name, the
// one the server acts on, cannot be read.
func parseClientHello(body []byte) (string, error) {
	c := cursor{b: body}
	c.skip(2 + 32)          // legacy_version, random
	if len(c.vec8()) > 32 { // legacy_session_id
		return "", errBadHello
	}
	if suites := c.vec16(); len(suites) < 2 || len(suites)%2 != 0 {
		return "", errBadHello
	}
	if len(c.vec8()) < 1 { // legacy_compression_methods
		return "", errBadHello
	}
	if c.failed {
		return "", errBadHello
	}
	if c.empty() {
		return "", errNoSNI // a TLS 1.2 hello may have no extensions at all
	}
	exts := cursor{b: c.vec16()}
	if c.failed || !c.empty() {
		return "", errBadHello
	}
	return serverNameOf(&exts)
}

// serverNameOf walks the extension list and returns the server name.
func serverNameOf(exts *cursor) (string, error) {
	name, seen := "", false
	for !exts.empty() {
		typ, data := exts.u16(), exts.vec16()
		if exts.failed {
			return "", errBadHello
		}
		switch typ {
		case extEncryptedClientHello:
			return "", errECH
		case extServerName:
			if seen {
				return "", errBadHello
			}
			seen = true
			var err error
			if name, err = hostNameOf(data); err != nil {
				return "", err
			}
		}
	}
	if name == "" {
		return "", errNoSNI
	}
	return name, nil
}

// hostNameOf parses the ServerNameList of a server_name extension (RFC 6066 section 3): it must
// hold exactly one host_name, with no trailing dot; entries of other (unknown) types are
// skipped, as crypto/tls does.
func hostNameOf(data []byte) (string, error) {
	ext := cursor{b: data}
	list := cursor{b: ext.vec16()}
	if ext.failed || !ext.empty() || list.empty() {
		return "", errBadHello
	}
	name := ""
	for !list.empty() {
		typ, n := list.u8(), list.vec16()
		if list.failed {
			return "", errBadHello
		}
		if typ != sniHostName {
			continue
		}
		if name != "" || len(n) == 0 || n[len(n)-1] == '.' {
			return "", errBadHello
		}
		name = string(n)
	}
	if name == "" {
		return "", errNoSNI
	}
	return name, nil
}

// cursor reads big-endian fields from a byte slice; after the first short read it fails every
// further read, so parsers check failed once per step instead of after every field.
type cursor struct {
	b      []byte
	failed bool
}

func (c *cursor) empty() bool { return len(c.b) == 0 }

func (c *cursor) take(n int) []byte {
	if c.failed || n > len(c.b) {
		c.failed, c.b = true, nil
		return nil
	}
	v := c.b[:n]
	c.b = c.b[n:]
	return v
}

func (c *cursor) skip(n int) { c.take(n) }

func (c *cursor) u8() int {
	if v := c.take(1); v != nil {
		return int(v[0])
	}
	return 0
}

func (c *cursor) u16() int {
	if v := c.take(2); v != nil {
		return int(binary.BigEndian.Uint16(v))
	}
	return 0
}

// vec8 and vec16 read a vector with a one- or two-byte length prefix.
func (c *cursor) vec8() []byte  { return c.take(c.u8()) }
func (c *cursor) vec16() []byte { return c.take(c.u16()) }
