package egress

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// helloConn is the client end of a handshake that never gets an answer: it keeps what the TLS
// client writes (its ClientHello) and reads EOF.
type helloConn struct{ out bytes.Buffer }

func (c *helloConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *helloConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }

// captureClientHello returns the bytes a crypto/tls client sends first with cfg.
func captureClientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c := &helloConn{}
	_ = tls.Client(c, cfg).Handshake() // fails on EOF, after the hello was written
	if c.out.Len() == 0 {
		t.Fatalf("the TLS client wrote nothing")
	}
	return c.out.Bytes()
}

// replayConn is the server end of a handshake: it reads data and discards what is written.
type replayConn struct {
	helloConn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error) { return len(p), nil }

var errStopHandshake = errors.New("stop")

// goServerName is crypto/tls's reading of data as a ClientHello: the server name it saw, and
// whether it parsed the hello at all. It is the oracle the parser must agree with.
func goServerName(data []byte) (name string, parsed bool) {
	srv := tls.Server(&replayConn{r: bytes.NewReader(data)}, &tls.Config{
		GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			name, parsed = chi.ServerName, true
			return nil, errStopHandshake
		},
	})
	_ = srv.Handshake()
	return name, parsed
}

// capturedHello is a ClientHello of a crypto/tls client, with the server name it carries (""
// for none: crypto/tls sends no SNI for an IP address or an empty ServerName).
type capturedHello struct {
	hello []byte
	sni   string
}

// realHellos are ClientHellos of crypto/tls clients in several configurations.
func realHellos(t testing.TB) map[string]capturedHello {
	out := map[string]capturedHello{}
	add := func(name, sni string, cfg *tls.Config) { out[name] = capturedHello{captureClientHello(t, cfg), sni} }
	add("default (TLS 1.3, post-quantum key share)", "example.org", &tls.Config{ServerName: "example.org"})
	add("mixed case, ALPN", "Registry.NPMJS.org", &tls.Config{ServerName: "Registry.NPMJS.org", NextProtos: []string{"h2", "http/1.1"}})
	add("TLS 1.2 only", "a.example.org", &tls.Config{ServerName: "a.example.org", MaxVersion: tls.VersionTLS12})
	add("TLS 1.3 only, X25519", "x.test", &tls.Config{ServerName: "x.test", MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}})
	add("a long name", strings.Repeat("a", 63)+".example.org", &tls.Config{ServerName: strings.Repeat("a", 63) + ".example.org"})
	add("no server name", "", &tls.Config{InsecureSkipVerify: true})
	add("an IP address", "", &tls.Config{ServerName: "127.0.0.1"})
	return out
}

// fragment re-frames the handshake carried by a single-record hello into records of at most
// size bytes, as TLS allows.
func fragment(hello []byte, size int) []byte {
	msg := hello[recordHeaderLen:]
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, hello[0], hello[1], hello[2], byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func u16(n int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(n)) }

func ext(typ int, data []byte) []byte { return append(append(u16(typ), u16(len(data))...), data...) }

// sniData is a server_name extension body with the given (type, name) entries.
func sniData(entries ...any) []byte {
	var list []byte
	for i := 0; i < len(entries); i += 2 {
		name := entries[i+1].(string)
		list = append(list, byte(entries[i].(int)))
		list = append(append(list, u16(len(name))...), name...)
	}
	return append(u16(len(list)), list...)
}

// buildHello frames a minimal ClientHello body with the given extension block (nil: none).
func buildHello(exts []byte) []byte {
	body := append([]byte{3, 3}, make([]byte, 32)...)
	body = append(body, 0)                // session id
	body = append(body, 0, 2, 0x13, 0x01) // one cipher suite
	body = append(body, 1, 0)             // null compression
	if exts != nil {
		body = append(append(body, u16(len(exts))...), exts...)
	}
	return frameHello(body)
}

func frameHello(body []byte) []byte {
	msg := append([]byte{handshakeTypeClientHello, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{recordTypeHandshake, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// withExtension appends an extension to a single-record ClientHello, fixing every length.
func withExtension(hello, extension []byte) []byte {
	body := bytes.Clone(hello[recordHeaderLen+4:])
	c := cursor{b: body}
	c.skip(34)
	c.vec8()
	c.vec16()
	c.vec8()
	at := len(body) - len(c.b) // the extensions' length field
	n := int(binary.BigEndian.Uint16(body[at:]))
	binary.BigEndian.PutUint16(body[at:], uint16(n+len(extension)))
	return frameHello(append(body, extension...))
}

func TestReadClientHelloOfRealClients(t *testing.T) {
	for name, h := range realHellos(t) {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			wantErr := error(nil)
			if h.sni == "" {
				wantErr = errNoSNI
			}
			for _, framing := range []struct {
				name string
				data []byte
			}{{"one record", h.hello}, {"1-byte records", fragment(h.hello, 1)}, {"7-byte records", fragment(h.hello, 7)}, {"300-byte records", fragment(h.hello, 300)}} {
				// What follows the hello (early data, the rest of the stream) is not read.
				r := bytes.NewReader(append(bytes.Clone(framing.data), 23, 3, 3, 0, 1, 'x'))
				raw, sni, err := readClientHello(r)
				if wantErr != nil {
					g.Expect(err).To(MatchError(wantErr), framing.name)
					continue
				}
				g.Expect(err).NotTo(HaveOccurred(), framing.name)
				g.Expect(sni).To(Equal(h.sni), framing.name)
				g.Expect(raw).To(Equal(framing.data), framing.name)
				g.Expect(r.Len()).To(Equal(6), framing.name)
				goName, parsed := goServerName(framing.data)
				g.Expect(parsed).To(BeTrue(), "crypto/tls reads the same hello")
				g.Expect(goName).To(Equal(h.sni))
			}
		})
	}
}

func TestReadClientHelloRefuses(t *testing.T) {
	real := captureClientHello(t, &tls.Config{ServerName: "allowed.test"})
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"plain HTTP", []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), errNotTLS},
		{"SSH", []byte("SSH-2.0-OpenSSH_9.6\r\n"), errNotTLS},
		{"a partial record header", []byte{22, 3, 1}, errNotTLS},
		{"application data first", []byte{23, 3, 3, 0, 1, 0}, errNotTLS},
		{"an SSLv2-style hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00}, errNotTLS},
		{"an empty record", []byte{22, 3, 1, 0, 0}, errBadHello},
		{"a record over 16 KiB", []byte{22, 3, 1, 0x40, 0x01}, errBadHello},
		{"a truncated record", []byte{22, 3, 1, 0, 10, 1, 0}, io.ErrUnexpectedEOF},
		{"a ServerHello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, errBadHello},
		{"a hello longer than the bound", []byte{22, 3, 1, 0, 4, 1, 0x01, 0x00, 0x00}, errBadHello},
		{"bytes after the hello in its record", append(real[:3:3], append(u16(len(real)-5+1), append(bytes.Clone(real[5:]), 0)...)...), errBadHello},
		{"no extensions at all", buildHello(nil), errNoSNI},
		{"an empty extension block", buildHello([]byte{}), errNoSNI},
		{"garbage after the extensions", frameHello(append(buildHello(ext(0, sniData(0, "a.test")))[9:], 0)), errBadHello},
		{"a truncated extension", buildHello([]byte{0, 0, 0, 9, 0}), errBadHello},
		{"a second server_name extension", withExtension(real, ext(0, sniData(0, "evil.test"))), errBadHello},
		{"two host names in one extension", buildHello(ext(0, sniData(0, "allowed.test", 0, "evil.test"))), errBadHello},
		{"an empty server name list", buildHello(ext(0, u16(0))), errBadHello},
		{"an empty host name", buildHello(ext(0, sniData(0, ""))), errBadHello},
		{"a trailing dot", buildHello(ext(0, sniData(0, "allowed.test."))), errBadHello},
		{"only a name of an unknown type", buildHello(ext(0, sniData(7, "allowed.test"))), errNoSNI},
		{"an encrypted ClientHello", withExtension(real, ext(extEncryptedClientHello, []byte{0, 0, 1, 0, 1, 0, 0, 0, 0, 0})), errECH},
		{"a session id over 32 bytes", frameHello(append(append(append([]byte{3, 3}, make([]byte, 32)...), 33), make([]byte, 33+6)...)), errBadHello},
		{"an odd cipher suite list", frameHello(append(append([]byte{3, 3}, make([]byte, 33)...), 0, 1, 0x13, 1, 0)), errBadHello},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, sni, err := readClientHello(bytes.NewReader(tc.data))
			g.Expect(err).To(MatchError(tc.want))
			g.Expect(sni).To(BeEmpty())
		})
	}
}

func TestReadClientHelloAcceptsWhatTLSAllows(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"a minimal hello", buildHello(ext(0, sniData(0, "allowed.test"))), "allowed.test"},
		{"a name of an unknown type beside the host name", buildHello(ext(0, sniData(7, "x", 0, "allowed.test"))), "allowed.test"},
		{"other extensions around it", buildHello(append(append(ext(10, []byte{0, 2, 0, 29}), ext(0, sniData(0, "allowed.test"))...), ext(16, []byte{0, 3, 2, 'h', '2'})...)), "allowed.test"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			raw, sni, err := readClientHello(bytes.NewReader(tc.data))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sni).To(Equal(tc.want))
			g.Expect(raw).To(Equal(tc.data))
			goName, parsed := goServerName(tc.data)
			g.Expect(parsed).To(BeTrue())
			g.Expect(goName).To(Equal(tc.want))
		})
	}
}

// FuzzReadClientHello checks that the parser stays within its bounds on any input and never
// reads a server name crypto/tls would read differently: the name checked must be the name the
// destination's TLS stack acts on.
func FuzzReadClientHello(f *testing.F) {
	for _, h := range realHellos(f) {
		f.Add(h.hello)
		f.Add(fragment(h.hello, 5))
	}
	real := captureClientHello(f, &tls.Config{ServerName: "allowed.test"})
	f.Add(withExtension(real, ext(0, sniData(0, "evil.test"))))
	f.Add(withExtension(real, ext(extEncryptedClientHello, []byte{0, 0, 1, 0, 1, 0, 0, 0, 0, 0})))
	f.Add(buildHello(ext(0, sniData(7, "x", 0, "allowed.test"))))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		raw, sni, err := readClientHello(r)
		if !bytes.Equal(raw, data[:len(raw)]) || len(data)-r.Len() != len(raw) {
			t.Fatalf("returned %d bytes that are not the %d it read", len(raw), len(data)-r.Len())
		}
		if len(raw) > 4+maxHelloLen+recordHeaderLen*(4+maxHelloLen) {
			t.Fatalf("read %d bytes, over the bound", len(raw))
		}
		if err != nil {
			if sni != "" {
				t.Fatalf("a refusal returned a name")
			}
			return
		}
		if sni == "" {
			t.Fatalf("an accepted hello without a name")
		}
		if goName, parsed := goServerName(raw); parsed && !strings.EqualFold(goName, sni) {
			t.Fatalf("the proxy reads server name %q, crypto/tls reads %q", sni, goName)
		}
	})
}
