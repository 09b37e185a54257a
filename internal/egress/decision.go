package egress

import (
	"fmt"
	"net/http"
)

// Reason says why a request was allowed or refused. The set is closed, so it can label metrics.
type Reason string

const (
	// ReasonAllowed: the name is on the client's list, resolves outside Denied, and (for
	// CONNECT) the TLS server name is the same name.
	ReasonAllowed Reason = "allowed"
	// ReasonProxyAuthRequired: the client sent no credentials and the Resolver needs them (407).
	ReasonProxyAuthRequired Reason = "proxy_auth_required"
	// ReasonUnknownClient: the Resolver does not know the client (403).
	ReasonUnknownClient Reason = "unknown_client"
	// ReasonResolverError: the Resolver failed; the proxy fails closed (503).
	ReasonResolverError Reason = "resolver_error"
	// ReasonTooManyConnections: the client, or the proxy as a whole, is at its connection limit.
	ReasonTooManyConnections Reason = "too_many_connections"
	// ReasonBadRequest: not a proxy request (a relative URI, an https:// URI without CONNECT, a
	// Host header that disagrees with the URI) or not HTTP/1.x (400).
	ReasonBadRequest Reason = "bad_request"
	// ReasonHeaderTooLarge: the request header exceeded the limit (431).
	ReasonHeaderTooLarge Reason = "header_too_large"
	// ReasonHeaderTimeout: the request header did not arrive in time (408).
	ReasonHeaderTimeout Reason = "header_timeout"
	// ReasonInvalidHost: the target is not a DNS name (400).
	ReasonInvalidHost Reason = "invalid_host"
	// ReasonIPLiteral: the target is an address, not a name: no name, no exit (403).
	ReasonIPLiteral Reason = "ip_literal"
	// ReasonHostNotAllowed: the name or port is not on the client's list (403).
	ReasonHostNotAllowed Reason = "host_not_allowed"
	// ReasonDeniedAddress: the name resolves to a denied address (403).
	ReasonDeniedAddress Reason = "denied_address"
	// ReasonLookupFailed: the name does not resolve (502).
	ReasonLookupFailed Reason = "lookup_failed"
	// ReasonDialFailed: no resolved address accepted a connection (502).
	ReasonDialFailed Reason = "dial_failed"
	// ReasonNotTLS: the bytes after CONNECT were not a TLS ClientHello the proxy could read.
	ReasonNotTLS Reason = "not_tls"
	// ReasonNoSNI: the ClientHello named no server.
	ReasonNoSNI Reason = "no_sni"
	// ReasonSNIMismatch: the ClientHello named another server than the CONNECT request.
	ReasonSNIMismatch Reason = "sni_mismatch"
	// ReasonEncryptedClientHello: the ClientHello used ECH, which hides the name it reaches.
	ReasonEncryptedClientHello Reason = "encrypted_client_hello"
)

// Decision is one allowed or refused request, reported through Config.OnDecision.
type Decision struct {
	// Identity is the client's Policy.Identity; empty when the client is not known.
	Identity string
	// Target is the host:port asked for, empty when none was read. It is chosen by the client:
	// log it, never use it as a metric label.
	Target string
	// Method is CONNECT or the method of a plain HTTP request, OTHER for a non-standard one,
	// so that it too can label metrics.
	Method  string
	Allowed bool
	Reason  Reason
}

// refusal is an answer to a request the proxy will not carry.
type refusal struct {
	status int
	reason Reason
	msg    string
}

func refuse(status int, reason Reason, format string, args ...any) *refusal {
	return &refusal{status: status, reason: reason, msg: fmt.Sprintf(format, args...)}
}

// bytes renders the refusal as a small HTTP response that closes the connection. The body is one
// line of text saying why and what to do, for the agent (and its human) to read.
func (r *refusal) bytes() []byte {
	body := r.msg + "\n"
	extra := ""
	if r.status == http.StatusProxyAuthRequired {
		extra = "Proxy-Authenticate: Basic realm=\"shepherd-egress\"\r\n"
	}
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		r.status, http.StatusText(r.status), extra, len(body), body)
}
